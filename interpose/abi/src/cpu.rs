//! Side tasks yield the host CPU to the trainer: their threads run at a lower CPU priority (a nice
//! value), so that on a node whose cores are busy the trainer's host threads (its launches, its
//! data loading) are scheduled first. Applied by `freeride run --role sidetask` before it execs, by
//! the interposer when it starts in the side-task role, and by the side-task SDK.

/// The nice value side tasks take unless told otherwise (the lowest CPU priority).
pub const DEFAULT_SIDETASK_NICE: i32 = 19;

/// Overrides [`DEFAULT_SIDETASK_NICE`]: `0`..=`19` (`0`: leave the CPU priority as it is).
pub const ENV_SIDETASK_NICE: &str = "FREERIDE_SIDETASK_NICE";

/// The side tasks' nice value: `FREERIDE_SIDETASK_NICE` if set, else `default`. An unparsable or
/// out-of-range value is an error naming it.
pub fn sidetask_nice(default: i32) -> Result<i32, String> {
    match std::env::var(ENV_SIDETASK_NICE) {
        Err(_) => Ok(default),
        Ok(v) => parse_nice(&v).ok_or_else(|| {
            format!("{ENV_SIDETASK_NICE}={v:?}: expected a nice value from 0 to 19")
        }),
    }
}

/// A nice value from `0` to `19`.
pub fn parse_nice(v: &str) -> Option<i32> {
    v.trim().parse().ok().filter(|n| (0..=19).contains(n))
}

/// Lowers every thread of this process to nice `nice` (Linux keeps a nice value per thread; threads
/// started later inherit their creator's). A thread already at `nice` or lower keeps its value:
/// this never raises a priority, which needs no privilege. `0`: does nothing.
pub fn lower_process_priority(nice: i32) -> std::io::Result<()> {
    if nice <= 0 {
        return Ok(());
    }
    // SAFETY: getpid has no preconditions.
    let mut tids = threads_of(unsafe { libc::getpid() } as u32);
    if tids.is_empty() {
        // No /proc: the calling thread (and those it starts later).
        tids.push(0);
    }
    let mut result = Ok(());
    for tid in tids {
        if let Err(e) = lower_thread_priority(tid, nice) {
            // A thread that exited meanwhile is no error.
            if e.raw_os_error() != Some(libc::ESRCH) {
                result = Err(e);
            }
        }
    }
    result
}

/// The thread ids of process `pid` (from `/proc`; empty if it cannot be read).
fn threads_of(pid: u32) -> Vec<libc::id_t> {
    match std::fs::read_dir(format!("/proc/{pid}/task")) {
        Ok(dir) => dir
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect(),
        Err(_) => vec![],
    }
}

/// The nice value of every thread of process `pid` that could be read (for tests and status).
pub fn thread_nices(pid: u32) -> Vec<i32> {
    threads_of(pid)
        .into_iter()
        .filter_map(|t| thread_nice(t).ok())
        .collect()
}

/// The nice value of thread `tid` (0: the calling one).
pub fn thread_nice(tid: libc::id_t) -> std::io::Result<i32> {
    // getpriority may return -1 legitimately: errno tells an error apart.
    // SAFETY: __errno_location returns this thread's errno slot, valid for the thread's life;
    // getpriority only reads the scheduler's state.
    let nice = unsafe {
        *libc::__errno_location() = 0;
        libc::getpriority(libc::PRIO_PROCESS, tid)
    };
    // SAFETY: as above.
    let errno = unsafe { *libc::__errno_location() };
    if nice == -1 && errno != 0 {
        return Err(std::io::Error::from_raw_os_error(errno));
    }
    Ok(nice)
}

fn lower_thread_priority(tid: libc::id_t, nice: i32) -> std::io::Result<()> {
    if thread_nice(tid)? >= nice {
        return Ok(());
    }
    // SAFETY: setpriority only changes the scheduler's nice value of the thread named.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_values_parse_within_range() {
        assert_eq!(parse_nice("19"), Some(19));
        assert_eq!(parse_nice(" 0 "), Some(0));
        assert_eq!(parse_nice("20"), None);
        assert_eq!(parse_nice("-5"), None);
        assert_eq!(parse_nice("low"), None);
    }

    #[test]
    fn lowering_reaches_every_thread_and_never_raises() {
        // In a child process: the test binary's own threads must keep their priority.
        // SAFETY: fork in a test; the child only calls async-signal-safe-enough code of its own
        // (thread spawn, setpriority, /proc reads) and exits with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let code = (|| -> Result<(), String> {
                let (tx, rx) = std::sync::mpsc::channel();
                let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
                let t = std::thread::spawn(move || {
                    // SAFETY: gettid has no preconditions.
                    tx.send(unsafe { libc::gettid() } as libc::id_t).unwrap();
                    let _ = done_rx.recv();
                });
                let other = rx.recv().map_err(|e| e.to_string())?;
                // Run under `nice` the test starts lower than 5 and must stay there.
                let start = thread_nice(0).map_err(|e| e.to_string())?;
                let want = start.max(5);
                lower_process_priority(5).map_err(|e| e.to_string())?;
                let (me, them) = (thread_nice(0), thread_nice(other));
                if me.as_ref().ok() != Some(&want) || them.as_ref().ok() != Some(&want) {
                    return Err(format!(
                        "after lowering to 5 from {start}: {me:?}, {them:?}"
                    ));
                }
                lower_process_priority(3).map_err(|e| e.to_string())?;
                if thread_nice(0).ok() != Some(want) {
                    return Err("lowering to 3 raised the priority".into());
                }
                let _ = done_tx.send(());
                t.join().map_err(|_| "thread panicked")?;
                Ok(())
            })();
            if let Err(e) = &code {
                eprintln!("{e}");
            }
            // SAFETY: ends the forked child without running the parent's exit handlers.
            unsafe { libc::_exit(code.is_err() as i32) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child failed (status {status})"
        );
    }
}
