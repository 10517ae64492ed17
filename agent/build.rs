//! Embeds `libfreeride.so` into the `freeride` binary (see `src/bundled.rs`), so that an install
//! of the binary alone (`cargo install --path agent`) can still run `freeride run`.
//!
//! The interposer crate is built by a nested `cargo build --release` in a target folder of its own
//! (cargo cannot hand a cdylib of another package to a build script); it is built once and then
//! again only when the interposer's sources change. `FREERIDE_BUNDLE_INTERPOSER=0` skips it (the
//! binary then carries no library and needs `libfreeride.so` installed beside it or
//! `FREERIDE_LIB`).
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let dest = out.join("libfreeride.so");
    println!("cargo:rerun-if-env-changed=FREERIDE_BUNDLE_INTERPOSER");
    if std::env::var("FREERIDE_BUNDLE_INTERPOSER").is_ok_and(|v| v == "0") {
        std::fs::write(&dest, b"").expect("write OUT_DIR/libfreeride.so");
        return;
    }
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("dir"));
    let interpose = manifest_dir.join("../interpose");
    for p in ["src", "abi/src", "Cargo.toml", "abi/Cargo.toml", "build.rs"] {
        let p = interpose.join(p);
        if p.exists() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
    let target = std::env::var("TARGET").expect("TARGET");
    let target_dir = out.join("interposer");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "--release",
        "--locked",
        "-p",
        "freeride-interpose",
        "--lib",
    ])
    .arg("--manifest-path")
    .arg(interpose.join("Cargo.toml"))
    .arg("--target")
    .arg(&target)
    .arg("--target-dir")
    .arg(&target_dir)
    // Only the library's exported symbols matter here: no debug info in the embedded copy.
    .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
    .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo");
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        // The outer build's per-package variables and target folder are not the nested build's.
        if k.starts_with("CARGO_PKG_")
            || k.starts_with("CARGO_CFG_")
            || k.starts_with("CARGO_FEATURE_")
            || k.starts_with("CARGO_MANIFEST_")
            || k == "CARGO_TARGET_DIR"
            || k == "CARGO_BUILD_TARGET_DIR"
            || k == "CARGO_PRIMARY_PACKAGE"
        {
            cmd.env_remove(k.as_ref());
        }
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo to build the interposer to embed: {e}"));
    assert!(
        status.success(),
        "building the interposer to embed failed ({status}); FREERIDE_BUNDLE_INTERPOSER=0 builds freeride without it"
    );
    let built = Path::new(&target_dir)
        .join(&target)
        .join("release/libfreeride.so");
    std::fs::copy(&built, &dest).unwrap_or_else(|e| panic!("cannot copy {}: {e}", built.display()));
}
