//! What is installed is the product (issue 15): the product crates depend on nothing of the test
//! bed, and `freeride sim` / `freeride demo` reach the test bed as a program beside `freeride`
//! (`freeride-sim`, agent/src/testbed.rs): its own help and errors, and, for a `freeride` built
//! from the source tree, a workspace build first when it is missing.
use freeride_abi::scratch::ScratchDir;
use freeride_tests::built;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The crates outside `tests/` (the agent, the interposer and its formats, the SDK) depend on no
/// crate under `tests/`, as cargo resolves their manifests (normal, build and dev dependencies).
#[test]
fn the_product_crates_depend_on_nothing_under_tests() {
    let root = workspace();
    let out = Command::new(option_env!("CARGO").unwrap_or("cargo"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tests = root.join("tests");
    let mut product = vec![];
    let mut wrong = vec![];
    for p in meta["packages"].as_array().unwrap() {
        let manifest = PathBuf::from(p["manifest_path"].as_str().unwrap());
        if manifest.starts_with(&tests) {
            continue;
        }
        let name = p["name"].as_str().unwrap().to_string();
        for d in p["dependencies"].as_array().unwrap() {
            if let Some(path) = d["path"].as_str() {
                if Path::new(path).starts_with(&tests) {
                    wrong.push(format!("{name} -> {} ({path})", d["name"]));
                }
            }
        }
        product.push(name);
    }
    product.sort();
    assert_eq!(
        product,
        [
            "freeride-abi",
            "freeride-agent",
            "freeride-interpose",
            "freeride-sidetask-sdk"
        ]
    );
    assert!(
        wrong.is_empty(),
        "product crates on the test bed: {wrong:?}"
    );
}

/// `freeride sim --help` is the test bed's own help (its options, usage naming `freeride sim`),
/// and its usage errors are the test bed's (exit status 2).
#[test]
fn sim_and_demo_pass_everything_to_the_test_bed() {
    for (cmd, option) in [("sim", "--sidetask-kind"), ("demo", "--iterations")] {
        let out = Command::new(built("freeride"))
            .args([cmd, "--help"])
            .output()
            .unwrap();
        let help = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(
            help.contains(option) && help.contains(&format!("Usage: freeride {cmd} ")),
            "{cmd}: {help}"
        );
    }
    let out = Command::new(built("freeride"))
        .args(["sim", "--bogus"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("'--bogus'") && err.contains("Usage: freeride sim"),
        "{err}"
    );
}

/// A `freeride` built from the source tree (here: a copy run as `cargo run -p freeride-agent`
/// runs it, with the agent's `CARGO_MANIFEST_DIR`) whose test bed is missing builds the workspace
/// with its profile, then runs the test bed's program (here the stand-in cargo only puts
/// `freeride-sim` beside it).
#[test]
fn a_source_build_without_the_test_bed_builds_the_workspace_then_runs_it() {
    let d = ScratchDir::new("freeride-tb-build").unwrap();
    let release = d.join("release");
    std::fs::create_dir(&release).unwrap();
    let exe = release.join("freeride");
    std::fs::copy(built("freeride"), &exe).unwrap();
    let args = d.join("cargo-args");
    let cargo = freeride_tests::stand_in_cargo(
        &d,
        &format!(
            "echo \"$@\" > '{}'\ncp '{}' '{}'",
            args.display(),
            built("freeride-sim").display(),
            release.join("freeride-sim").display()
        ),
    );
    let out = freeride_tests::output_of_new_exe(
        Command::new(&exe)
            .args(["sim", "--help"])
            .env("CARGO", &cargo)
            .env("CARGO_MANIFEST_DIR", workspace().join("agent")),
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("building the test bed first"), "{err}");
    assert!(text(&out.stdout).contains("--sidetask-kind"), "{err}");
    let argv = std::fs::read_to_string(&args).unwrap();
    let words: Vec<&str> = argv.split_whitespace().collect();
    assert_eq!(
        words[..3],
        ["build", "--workspace", "--all-targets"],
        "{argv}"
    );
    assert_eq!(words.last(), Some(&"--release"), "{argv}");
    let manifest = words
        .iter()
        .position(|w| *w == "--manifest-path")
        .map(|i| Path::new(words[i + 1]).canonicalize().unwrap());
    assert_eq!(manifest, Some(workspace().join("Cargo.toml")), "{argv}");
}
