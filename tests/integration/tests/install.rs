//! Install layouts (agent/src/layout.rs, agent/src/bundled.rs) and the metrics address: a
//! `freeride` binary copied alone (as `cargo install` leaves it) runs `freeride run` with the
//! `libfreeride.so` it carries; one in `<prefix>/bin/` takes `<prefix>/lib/freeride/`'s;
//! `freeride agent --metrics-addr` serves where it is told.
use freeride_tests::{built, release_dir};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn scratch(tag: &str) -> PathBuf {
    let d = Path::new("/dev/shm").join(format!("freeride-install-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    // Removed at exit also when a failing test skips its own removal.
    freeride_abi::scratch::remove_at_exit(&d);
    d
}

fn copy_exe(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(from, to).unwrap();
}

/// `freeride run -- sh -c 'echo $LD_PRELOAD'` with `exe`: what it preloads, and stderr.
fn preloaded(exe: &Path, root: &Path, envs: &[(&str, &Path)]) -> (Option<i32>, String, String) {
    let mut c = Command::new(exe);
    c.args(["run", "--", "sh", "-c", "echo \"$LD_PRELOAD\""])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", root.join("home"))
        .env("FREERIDE_DIR", root.join("session"));
    for (k, v) in envs {
        c.env(k, v);
    }
    let o = freeride_tests::output_of_new_exe(&mut c);
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).trim().to_string(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_binary_copied_alone_preloads_the_library_it_carries() {
    let root = scratch("alone");
    let exe = root.join("bin/freeride");
    copy_exe(&built("freeride"), &exe);
    let cache = root.join("cache");
    let (code, first, err) = preloaded(&exe, &root, &[("XDG_CACHE_HOME", &cache)]);
    assert_eq!(code, Some(0), "{err}");
    let lib = PathBuf::from(&first);
    assert!(lib.starts_with(cache.join("freeride")), "{first}");
    let name = lib.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("libfreeride-") && name.ends_with(".so"),
        "{name}"
    );
    // An ELF shared object (the workspace's interposer, built without debug information).
    let bytes = std::fs::read(&lib).unwrap();
    assert_eq!(&bytes[..4], b"\x7fELF");
    // A second run preloads the same file, written once.
    let mtime = std::fs::metadata(&lib).unwrap().modified().unwrap();
    let (_, second, _) = preloaded(&exe, &root, &[("XDG_CACHE_HOME", &cache)]);
    assert_eq!(second, first);
    assert_eq!(std::fs::metadata(&lib).unwrap().modified().unwrap(), mtime);
    // A damaged copy is replaced.
    std::fs::write(&lib, b"garbage").unwrap();
    let (_, third, _) = preloaded(&exe, &root, &[("XDG_CACHE_HOME", &cache)]);
    assert_eq!(third, first);
    assert_eq!(std::fs::read(&lib).unwrap(), bytes);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn the_carried_library_records_a_trainer() {
    let root = scratch("carried");
    let exe = root.join("bin/freeride");
    copy_exe(&built("freeride"), &exe);
    let trace = root.join("trace.jsonl");
    let o = freeride_tests::output_of_new_exe(
        Command::new(&exe)
            .args(["run", "--role", "trainer", "--trace"])
            .arg(&trace)
            .arg("--")
            .arg(built("pipesim"))
            .args(["--stages", "2", "--microbatches", "2", "--iterations", "1"])
            .args(["--f", "1", "--b", "1", "--w", "1"])
            .env("XDG_CACHE_HOME", root.join("cache"))
            .env("FREERIDE_DIR", root.join("session"))
            .env("FREERIDE_SIM_DIR", root.join("sim"))
            .stdout(Stdio::null()),
    );
    let text = std::fs::read_to_string(&trace).unwrap_or_default();
    std::fs::remove_dir_all(&root).unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        text.contains("\"kind\":\"launch\""),
        "no launch in the trace:\n{text}"
    );
}

#[test]
fn a_prefix_install_takes_lib_freeride() {
    let root = scratch("prefix");
    let exe = root.join("bin/freeride");
    copy_exe(&built("freeride"), &exe);
    let lib = root.join("lib/freeride/libfreeride.so");
    copy_exe(&release_dir().join("libfreeride.so"), &lib);
    let (code, out, err) = preloaded(&exe, &root, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(PathBuf::from(out), lib.canonicalize().unwrap());
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn freeride_lib_names_the_library_or_fails_clearly() {
    let root = scratch("env");
    let (code, _, err) = preloaded(
        &built("freeride"),
        &root,
        &[("FREERIDE_LIB", Path::new("/nonexistent/libfreeride.so"))],
    );
    std::fs::remove_dir_all(&root).unwrap();
    assert_eq!(code, Some(2));
    assert!(
        err.contains("FREERIDE_LIB=/nonexistent/libfreeride.so is not a file"),
        "{err}"
    );
}

/// Starts `freeride agent` with `args`; returns it and the address it says it serves metrics on.
fn agent_with(root: &Path, args: &[&str]) -> (std::process::Child, Option<String>, String) {
    let mut c = Command::new(built("freeride"))
        .arg("agent")
        .arg("--dir")
        .arg(root.join("session"))
        .args(args)
        .args(["--duration", "3"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = c.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        let mut text = String::new();
        while let Ok(n) = err.read(&mut buf) {
            if n == 0 {
                break;
            }
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
            let _ = tx.send(text.clone());
        }
    });
    let t0 = Instant::now();
    let mut text = String::new();
    while t0.elapsed() < Duration::from_secs(20) {
        if let Ok(t) = rx.recv_timeout(Duration::from_millis(100)) {
            text = t;
        }
        if text.contains("serving") {
            break;
        }
    }
    let addr = text
        .split("metrics on http://")
        .nth(1)
        .and_then(|r| r.split("/metrics").next())
        .map(str::to_string);
    (c, addr, text)
}

#[test]
fn metrics_addr_serves_where_it_is_told() {
    let root = scratch("metrics");
    let (mut c, addr, text) = agent_with(&root, &["--metrics-addr", "127.0.0.1:0"]);
    let addr = addr.unwrap_or_else(|| panic!("no metrics line:\n{text}"));
    assert!(
        addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"),
        "{addr}"
    );
    // The first publish is within 100 ms of the start.
    std::thread::sleep(Duration::from_millis(400));
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    let _ = c.kill();
    let _ = c.wait();
    assert!(body.starts_with("HTTP/1.0 200 OK"), "{body}");
    assert!(
        body.contains("# TYPE freeride_sidetasks_lost_total counter"),
        "{body}"
    );

    let (mut c, addr, text) = agent_with(&root, &["--metrics-addr", "off"]);
    let _ = c.kill();
    let _ = c.wait();
    assert_eq!(addr, None, "{text}");
    std::fs::remove_dir_all(&root).unwrap();
}
