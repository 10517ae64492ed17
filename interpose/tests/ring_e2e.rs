//! The agent-side reader on a ring written by libfreeride.so in a real process.
use freeride_abi::event::Event;
use freeride_abi::reader::RingReader;
use freeride_abi::{session, Api, Kind};
use std::path::{Path, PathBuf};
use std::process::Command;

fn target_dir() -> PathBuf {
    std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf()
}

#[test]
fn reader_sees_every_launch_of_a_preloaded_process() {
    let so = target_dir().join("libfreeride.so");
    if !so.exists() {
        eprintln!("skip: {} not built", so.display());
        return;
    }
    let work = std::env::temp_dir().join(format!("freeride-ring-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let lib = work.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    freeride_abi::scratch::remove_at_exit(&work);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/cprogs");
    let cc = |args: &[&str]| {
        let o = Command::new("cc").args(args).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let s = |n: &str| src.join(n).to_str().unwrap().to_string();
    let l = |n: &str| lib.join(n).to_str().unwrap().to_string();
    cc(&[
        "-shared",
        "-fPIC",
        "-o",
        &l("libcuda.so.1"),
        "-Wl,-soname,libcuda.so.1",
        &s("fake_cuda.c"),
        "-lpthread",
    ]);
    cc(&[
        "-shared",
        "-fPIC",
        "-o",
        &l("libcudart.so.13"),
        "-Wl,-soname,libcudart.so.13",
        &s("fake_cudart.c"),
        "-ldl",
        "-lpthread",
    ]);
    std::os::unix::fs::symlink("libcudart.so.13", lib.join("libcudart.so")).unwrap();
    let prog = work.join("threads");
    cc(&[
        "-o",
        prog.to_str().unwrap(),
        &s("prog_threads.c"),
        &format!("-L{}", lib.display()),
        "-lcudart",
        "-lpthread",
    ]);
    let sess = work.join("session");
    session::ensure_dir(&sess).unwrap();
    let st = Command::new(&prog)
        .env("LD_LIBRARY_PATH", &lib)
        .env("LD_PRELOAD", &so)
        .env("FREERIDE_DIR", &sess)
        .env("FREERIDE_ROLE", "sidetask")
        // This test is about the ring, not the gate: without an agent the gate holds a side task.
        .env("FREERIDE_GATE", "off")
        .env_remove("FREERIDE_TRACE")
        .status()
        .unwrap();
    assert!(st.success());
    let rings = session::list_rings(&sess).unwrap();
    assert_eq!(rings.len(), 1);
    let mut r = RingReader::open(&rings[0]).unwrap();
    let info = r.info();
    assert!(info.exited);
    assert_eq!(info.role, Some(freeride_abi::Role::Sidetask));
    // The fake driver's device 0 is at bus 0x20: the ring names the GPU by its bus id.
    assert_eq!(
        freeride_abi::GpuId::from_field(info.device),
        freeride_abi::GpuId::parse("0000:20:00.0").unwrap()
    );
    let mut out = vec![];
    let stats = r.poll(1 << 20, &mut out);
    assert_eq!(stats.invalid + stats.skipped, 0);
    // One DeviceInfo for the one GPU, before any record names it.
    let infos: Vec<_> = out.iter().filter(|e| e.kind == Kind::DeviceInfo).collect();
    assert_eq!(infos.len(), 1, "one DeviceInfo per GPU");
    assert!(matches!(
        infos[0].event,
        Event::DeviceInfo { ordinal: 0, .. }
    ));
    let first_named = out.iter().position(|e| e.device != -1).unwrap();
    assert_eq!(out[first_named].kind, Kind::DeviceInfo);
    let launches = out
        .iter()
        .filter(|e| e.kind == Kind::Launch && e.api == Api::CudaLaunchKernelStub)
        .count();
    assert_eq!(launches, 16000);
    assert!(matches!(
        out.first().unwrap().event,
        Event::ProcessStart { .. }
    ));
    assert!(matches!(
        out.last().unwrap().event,
        Event::ProcessExit { dropped: 0 }
    ));
    std::fs::remove_dir_all(&work).unwrap();
}
