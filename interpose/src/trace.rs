//! `FREERIDE_TRACE=path`: every event also goes, through a private in-process ring (same format
//! and push as the shared one), to a writer thread that appends JSON lines to `path`
//! (`O_APPEND`, whole lines per write, so several processes can share one file).
use freeride_abi::ring::{self, Geometry, Pop, RingView};
use freeride_abi::{env, json, now_ns, Kind, Record};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

const TRACE_CAPACITY: u32 = 1 << 18;

struct Drain {
    cursor: u64,
    reported_drops: u64,
    buf: String,
}

struct Trace {
    fd: i32,
    pid: u32,
    view: RingView,
    drain: Mutex<Drain>,
}

static TRACE: AtomicPtr<Trace> = AtomicPtr::new(std::ptr::null_mut());

pub fn enabled() -> bool {
    !TRACE.load(Ordering::Acquire).is_null()
}

/// Slow path (process init): opens the trace file, maps the private ring, starts the writer.
pub fn init(pid: u32) {
    let Some(path) = std::env::var_os(env::TRACE).filter(|p| !p.is_empty()) else {
        return;
    };
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_bytes()) else {
        return;
    };
    // SAFETY: c is a valid path.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_CLOEXEC,
            0o644,
        )
    };
    if fd < 0 {
        return;
    }
    let size = ring::file_size(TRACE_CAPACITY);
    // SAFETY: anonymous private mapping of `size` bytes.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if map == libc::MAP_FAILED {
        // SAFETY: fd is ours.
        unsafe { libc::close(fd) };
        return;
    }
    // SAFETY: map covers file_size(TRACE_CAPACITY) bytes and is never unmapped.
    let view = unsafe { RingView::new(map as *mut u8, Geometry::single(TRACE_CAPACITY)) };
    view.initialize(pid, 0, now_ns());
    let t: &'static Trace = Box::leak(Box::new(Trace {
        fd,
        pid,
        view,
        drain: Mutex::new(Drain {
            cursor: 0,
            reported_drops: 0,
            buf: String::with_capacity(1 << 16),
        }),
    }));
    let tp = t as *const Trace as *mut Trace;
    TRACE.store(tp, Ordering::Release);
    let tpu = tp as usize;
    let spawned = std::thread::Builder::new()
        .name("freeride-trace".into())
        .stack_size(256 << 10)
        .spawn(move || loop {
            std::thread::sleep(std::time::Duration::from_micros(500));
            if TRACE.load(Ordering::Acquire) as usize != tpu {
                return;
            }
            drain(t, false);
        });
    if spawned.is_err() {
        // No writer thread: flush happens at exit only.
    }
}

/// Hook path: one push into the private ring (if tracing).
#[inline(always)]
pub fn push(rec: &Record) {
    let p = TRACE.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: a Trace is leaked (never freed) once published.
        unsafe { (*p).view.push(rec) };
    }
}

/// Writes everything queued so far (at exit).
pub fn flush() {
    let p = TRACE.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: a Trace is leaked (never freed) once published.
        drain(unsafe { &*p }, true);
    }
}

/// Fork child: the parent's writer thread does not exist here; drop the parent's trace state.
pub fn reset_after_fork() {
    let p = TRACE.swap(std::ptr::null_mut(), Ordering::AcqRel);
    if !p.is_null() {
        // SAFETY: the fd belongs to this (child) process's copy of the descriptor table.
        unsafe { libc::close((*p).fd) };
    }
}

fn drain(t: &Trace, final_flush: bool) {
    let mut g = match if final_flush {
        t.drain.lock().ok()
    } else {
        t.drain.try_lock().ok()
    } {
        Some(g) => g,
        None => return,
    };
    let d = &mut *g;
    let deadline = now_ns() + if final_flush { 20_000_000 } else { 0 };
    loop {
        match t.view.pop(&mut d.cursor) {
            Pop::Record(r) => {
                json::write_line(&mut d.buf, t.pid, &r);
                if d.buf.len() > (1 << 16) - 512 {
                    write_all(t.fd, &mut d.buf);
                }
            }
            Pop::Empty => break,
            Pop::Pending => {
                if now_ns() >= deadline {
                    break;
                }
                std::hint::spin_loop();
            }
        }
    }
    let dropped = t.view.header().dropped.load(Ordering::Relaxed);
    if dropped != d.reported_drops {
        let r = Record {
            t_ns: now_ns(),
            kind: Kind::Dropped as u8,
            p0: dropped - d.reported_drops,
            device: -1,
            ..Default::default()
        };
        d.reported_drops = dropped;
        json::write_line(&mut d.buf, t.pid, &r);
    }
    write_all(t.fd, &mut d.buf);
}

fn write_all(fd: i32, buf: &mut String) {
    let b = buf.as_bytes();
    let mut off = 0;
    while off < b.len() {
        // SAFETY: writing initialized bytes of our buffer to our fd.
        let n = unsafe { libc::write(fd, b[off..].as_ptr() as *const libc::c_void, b.len() - off) };
        if n <= 0 {
            if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            break;
        }
        off += n as usize;
    }
    buf.clear();
}
