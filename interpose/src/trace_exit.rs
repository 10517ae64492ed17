//! With `FREERIDE_TRACE` set (a debugging view: `freeride run --trace`), a process the interposer
//! is loaded into but that never calls a hooked function, and so never initializes it (a program
//! without CUDA, a shell, a launcher), still writes its `process_start` and `process_exit` lines:
//! at its exit, both at once, so that the trace shows the interposer was there. Nothing else
//! happens at load time: no ring, no thread (a thread at load time changes which thread gets a
//! process's signals, which programs such as `timeout` rely on), only the load time noted and an
//! exit handler registered. A process that initializes writes its lines as before (`rt`); a
//! forked child that never initializes, or a process that ends by `exec` or a fatal signal,
//! writes none.
use freeride_abi::{env, json, now_ns, Api, Kind, Record, Role};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

static LOAD_NS: AtomicU64 = AtomicU64::new(0);
static LOAD_PID: AtomicU32 = AtomicU32::new(0);
static LOAD_PPID: AtomicU32 = AtomicU32::new(0);

fn traced() -> Option<std::ffi::OsString> {
    let disabled = std::env::var(env::DISABLE).is_ok_and(|v| v == "1");
    std::env::var_os(env::TRACE).filter(|p| !p.is_empty() && !disabled)
}

extern "C" fn at_load() {
    if traced().is_none() {
        return;
    }
    LOAD_NS.store(now_ns(), Ordering::Relaxed);
    // SAFETY: getpid/getppid have no preconditions; atexit registers a plain extern "C" function
    // of this library, which is never unloaded (linked -z nodelete).
    unsafe {
        LOAD_PID.store(libc::getpid() as u32, Ordering::Relaxed);
        LOAD_PPID.store(libc::getppid() as u32, Ordering::Relaxed);
        libc::atexit(at_exit_uninitialized);
    }
}

/// The lines of a process that never initialized the interposer.
extern "C" fn at_exit_uninitialized() {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    if crate::rt::STATE.load(Ordering::Acquire) != crate::rt::UNINIT
        || pid != LOAD_PID.load(Ordering::Relaxed)
    {
        return;
    }
    let Some(path) = traced() else { return };
    let role = std::env::var(env::ROLE)
        .ok()
        .and_then(|r| Role::parse(&r))
        .unwrap_or(Role::Trainer);
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    let rec = |t_ns, kind: Kind, aux, p0| Record {
        t_ns,
        kind: kind as u8,
        api: Api::None as u16,
        device: -1,
        tid,
        aux,
        p0,
        ..Default::default()
    };
    let mut lines = String::new();
    let ppid = LOAD_PPID.load(Ordering::Relaxed) as u64;
    let start = rec(
        LOAD_NS.load(Ordering::Relaxed),
        Kind::ProcessStart,
        role as u32,
        ppid,
    );
    json::write_line(&mut lines, pid, &start);
    json::write_line(&mut lines, pid, &rec(now_ns(), Kind::ProcessExit, 0, 0));
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    // One write with O_APPEND: the two lines land whole beside other processes' lines.
    let _ = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o644)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .and_then(|mut f| f.write_all(lines.as_bytes()));
}

/// Run by the dynamic loader after the library's relocation, before the program's `main`.
#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn() = at_load;
