//! One pacing per side task: an SDK (iterative) task started under the interposer's gate as well
//! (`freeride run --role sidetask`) refuses to start with a message saying what to do, instead of
//! being held twice; with `FREERIDE_GATE=off` (the interposer only observing) it runs.
use freeride_tests::{built, release_dir, SIDETASK_NICE_FOR_TESTS};
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn train_loop_under_run(root: &Path, gate: Option<&str>) -> Output {
    let standins = pipesim::standins::ensure_dir_in(&release_dir()).unwrap();
    let mut c = Command::new(built("freeride"));
    c.args(["run", "--role", "sidetask", "--nice", "0", "--"])
        .arg(built("examples/train_loop"))
        .args(["--device", "0", "--standalone", "--steps", "3"])
        .env("FREERIDE_DIR", root.join("session"))
        .env("FREERIDE_SIM_DIR", root.join("sim"))
        .env("LD_LIBRARY_PATH", &standins)
        .env(SIDETASK_NICE_FOR_TESTS.0, SIDETASK_NICE_FOR_TESTS.1)
        .env_remove("FREERIDE_GATE")
        .stdin(Stdio::null());
    if let Some(g) = gate {
        c.env("FREERIDE_GATE", g);
    }
    c.output().unwrap()
}

#[test]
fn an_sdk_task_is_not_gated_twice() {
    let root = Path::new("/dev/shm").join(format!("freeride-gated-twice-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let refused = train_loop_under_run(&root, None);
    let observed = train_loop_under_run(&root, Some("off"));
    std::fs::remove_dir_all(&root).unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(
        err.contains("gate would hold its launches a second time")
            && err.contains("without `freeride run --role sidetask`")
            && err.contains("FREERIDE_GATE=off"),
        "{err}"
    );
    let out = String::from_utf8_lossy(&observed.stdout);
    assert!(
        observed.status.success(),
        "{}",
        String::from_utf8_lossy(&observed.stderr)
    );
    assert!(out.contains("\"state\":\"finished\""), "{out}");
}
