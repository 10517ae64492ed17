//! The slow path of [`super`]: initialization (the ring, the role), fork and exit.
use super::*;

/// How long a thread waits for another one's initialization before passing through unrecorded.
const INIT_WAIT_MAX_NS: u64 = 200_000_000;

pub(super) fn init() {
    // SAFETY: getpid has no preconditions (slow path: once per process, or per waiting thread).
    let me = unsafe { libc::getpid() } as u32;
    // Who initializes, stored before the claim: a thread that finds INITING set by another pid is
    // in a fork child of a process that forked while one of its threads was initializing (before
    // the fork handler below existed): that initialization will never finish here.
    let initer = INIT_PID.swap(me, Ordering::AcqRel);
    if STATE
        .compare_exchange(UNINIT, INITING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        if initer != me
            && initer != 0
            && STATE
                .compare_exchange(INITING, UNINIT, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            return init();
        }
        // Another thread is initializing: wait for it (once per thread), never forever (it could
        // be blocked on something this thread holds, e.g. the loader lock). Sleep rather than
        // yield: many threads yielding at once on a small machine starve the initializing one.
        let t0 = freeride_abi::now_ns();
        while STATE.load(Ordering::Acquire) == INITING
            && freeride_abi::now_ns() - t0 < INIT_WAIT_MAX_NS
        {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        return;
    }
    // First, so that a fork at any later point of the initialization resets the child.
    register_handlers();
    let st = do_init();
    // The process's first record, before the state is published: the other threads, waiting for
    // the initialization, push their records only after it.
    if st != OFF {
        let role = if st == SIDETASK {
            Role::Sidetask
        } else {
            Role::Trainer
        };
        let cap = SHM_CAP.load(Ordering::Relaxed);
        // SAFETY: getppid has no preconditions.
        let ppid = unsafe { libc::getppid() } as u64;
        let t0 = now_ns();
        START_RECORD_NS.store(t0, Ordering::Relaxed);
        let _ = THREAD.try_with(|t| {
            push(&Record {
                t_ns: t0,
                kind: Kind::ProcessStart as u8,
                api: Api::None as u16,
                device: -1,
                tid: tid(t),
                aux: role as u32,
                p0: ppid,
                p1: cap,
                ..Default::default()
            })
        });
    }
    STATE.store(st, Ordering::Release);
}

fn do_init() -> u8 {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    PID.store(pid, Ordering::Relaxed);
    if std::env::var(env::DISABLE)
        .map(|v| v == "1")
        .unwrap_or(false)
    {
        return OFF;
    }
    let role = std::env::var(env::ROLE)
        .ok()
        .and_then(|r| Role::parse(&r))
        .unwrap_or(Role::Trainer);
    // The hook clock: TSC or clock_gettime, and the calibration's first pair.
    clock::start();
    // Before the ring is published: a thread claims a lane of it only with the key in place.
    crate::lanes::init();
    let start = freeride_abi::now_ns();
    let cap = ring::clamp_capacity(
        std::env::var(env::RING_CAPACITY)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(ring::DEFAULT_CAPACITY as u64),
    );
    let lanes = ring::clamp_lanes(
        cap,
        std::env::var(env::RING_LANES)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(ring::DEFAULT_LANES as u64),
    );
    let dir = session::resolve_dir();
    match session::validate_dir(&dir) {
        Ok(()) => {
            if let Some((base, parts)) = create_ring(&dir, pid, role, start, cap, lanes) {
                SHM_CAP.store(cap as u64, Ordering::Relaxed);
                SHM_LANES.store(lanes, Ordering::Relaxed);
                SHM_MASK.store(parts.0, Ordering::Relaxed);
                SHM_SHIFTS.store(parts.1 | parts.2 << 8, Ordering::Relaxed);
                SHM_REPORTED_DROPS.store(0, Ordering::Relaxed);
                SHM_BASE.store(base, Ordering::Release);
            }
        }
        Err(e) => crate::session_check::report_unusable(&dir, &e, role == Role::Sidetask),
    }
    trace::init(pid);
    if SHM_BASE.load(Ordering::Relaxed).is_null() && !trace::enabled() {
        return OFF;
    }
    if role == Role::Sidetask {
        yield_cpu_to_trainer();
        SIDETASK
    } else {
        TRAINER
    }
}

/// A side task's threads take a low CPU priority (see [`freeride_abi::cpu`]).
fn yield_cpu_to_trainer() {
    let nice = cpu::sidetask_nice(cpu::DEFAULT_SIDETASK_NICE).unwrap_or_else(|e| {
        eprintln!("freeride: {e}; using {}", cpu::DEFAULT_SIDETASK_NICE);
        cpu::DEFAULT_SIDETASK_NICE
    });
    if let Err(e) = cpu::lower_process_priority(nice) {
        eprintln!("freeride: cannot lower this side task's CPU priority to nice {nice}: {e}");
    }
}

/// Maps a new ring file `ring-<pid>-<start>.ring` (0600), initialized before it appears under
/// that name: it is built as `ring-<pid>-<start>.staging` and then hard-linked to the final name
/// (a reader that lists the directory between `open` and `ftruncate` would otherwise find an
/// empty file and refuse it for good). Returns its mapping and its view's geometry
/// ([`RingView::parts`]).
fn create_ring(
    dir: &std::path::Path,
    pid: u32,
    role: Role,
    start: u64,
    cap: u32,
    lanes: u32,
) -> Option<(*mut u8, (u64, u32, u32))> {
    use std::os::unix::ffi::OsStrExt;
    let cpath = |name: String| std::ffi::CString::new(dir.join(name).as_os_str().as_bytes()).ok();
    let size = ring::file_size(cap);
    for attempt in 0..4u64 {
        let stamp = start + attempt;
        let staging = cpath(session::ring_staging_name(pid, stamp))?;
        let fin = cpath(session::ring_file_name(pid, stamp))?;
        // SAFETY: staging is a valid path; O_EXCL|O_NOFOLLOW never follows or reuses a file.
        let fd = unsafe {
            libc::open(
                staging.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o600,
            )
        };
        if fd < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EEXIST) {
                continue;
            }
            return None;
        }
        // SAFETY: fd is ours; size fits in off_t.
        let ok = unsafe { libc::ftruncate(fd, size as libc::off_t) } == 0;
        let map = if ok {
            // SAFETY: mapping `size` bytes of the file we just sized.
            unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    size,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                )
            }
        } else {
            libc::MAP_FAILED
        };
        // SAFETY: fd is ours; the mapping (if any) survives the close.
        unsafe { libc::close(fd) };
        if map == libc::MAP_FAILED {
            // SAFETY: staging is a valid path we created.
            unsafe { libc::unlink(staging.as_ptr()) };
            return None;
        }
        // SAFETY: map covers file_size(cap) bytes, page aligned.
        let v = unsafe {
            RingView::new(
                map as *mut u8,
                Geometry {
                    capacity: cap,
                    lanes,
                },
            )
        };
        v.initialize(pid, role as u32, stamp);
        // SAFETY: both are valid paths; link(2) never replaces an existing file.
        let linked = unsafe { libc::link(staging.as_ptr(), fin.as_ptr()) } == 0;
        let link_err = std::io::Error::last_os_error().raw_os_error();
        // SAFETY: staging is a valid path we created; the final name (if linked) keeps the file.
        unsafe { libc::unlink(staging.as_ptr()) };
        if linked {
            // The mapping stays for the life of the process: the ring is never unmapped.
            return Some((map as *mut u8, v.parts()));
        }
        // SAFETY: map/size come from the successful mmap above; nothing else refers to it.
        unsafe { libc::munmap(map, size) };
        if link_err != Some(libc::EEXIST) {
            return None;
        }
    }
    None
}

fn register_handlers() {
    if HANDLERS_REGISTERED.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: registering plain extern "C" functions that live as long as the process
    // (the library is linked -z nodelete).
    unsafe {
        libc::pthread_atfork(None, None, Some(atfork_child));
        libc::atexit(at_exit);
    }
}

/// In the child after fork: forget the parent's ring, trace and poller (new pid -> new ring on
/// the next hooked call). Only atomic stores and close(): async-signal-safe.
extern "C" fn atfork_child() {
    SHM_BASE.store(std::ptr::null_mut(), Ordering::Release);
    SHM_CAP.store(0, Ordering::Relaxed);
    START_RECORD_NS.store(0, Ordering::Relaxed);
    PROC_GPU.store(-1, Ordering::Relaxed);
    crate::gpus::reset_after_fork();
    // The forking thread (the child's only one) asks for its GPU again: the child's ring gets
    // its own DeviceInfo before a record names it.
    invalidate_device();
    // ...and its lane of the child's ring, the first one handed out there.
    lanes::reset_after_fork();
    let _ = THREAD.try_with(|t| t.lane.set(0));
    crate::waits::reset_after_fork();
    trace::reset_after_fork();
    comm::reset_after_fork();
    clock::reset_after_fork();
    crate::gate::reset_after_fork();
    STATE.store(UNINIT, Ordering::Release);
}

/// At exit: a process-exit record, the ring marked exited, the trace flushed.
extern "C" fn at_exit() {
    let s = STATE.load(Ordering::Acquire);
    if s != TRAINER && s != SIDETASK {
        return;
    }
    let dropped = shm_view()
        .map(|v| v.header().dropped.load(Ordering::Relaxed))
        .unwrap_or(0);
    // Side tasks: the gate's counters (launches held, wait ns, in-flight max); 0 for trainers.
    let (held, wait_ns, inflight_max) = if s == SIDETASK {
        crate::gate::report_at_exit();
        crate::gate::stats()
    } else {
        (0, 0, 0)
    };
    let _ = THREAD.try_with(|t| {
        push(&Record {
            t_ns: now_ns(),
            kind: Kind::ProcessExit as u8,
            api: Api::None as u16,
            device: PROC_GPU.load(Ordering::Relaxed),
            tid: tid(t),
            aux: inflight_max.min(u32::MAX as u64) as u32,
            p0: dropped,
            p1: held,
            p2: wait_ns,
            ..Default::default()
        })
    });
    if clock::mode() == clock::Mode::Tsc {
        set_ring_feature(ring::FEATURE_TSC_CLOCK, true);
    }
    if let Some(v) = shm_view() {
        v.header()
            .state
            .store(ring::STATE_EXITED, Ordering::Release);
    }
    comm::flush_at_exit();
    trace::flush();
}
