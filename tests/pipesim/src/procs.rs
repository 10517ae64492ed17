//! Child processes that end with their parent, and SIGINT/SIGTERM/SIGHUP turned into a request
//! to stop (used by `pipesim` for its stages and by `freeride sim`/`demo` for the job and the side
//! tasks).
//!
//! * [`tie_to_parent`]: the child gets a parent-death signal (`PR_SET_PDEATHSIG`), checked right
//!   after it is set against a parent that already died (then the child never starts), and
//!   optionally a process group of its own (a terminal's Ctrl-C then reaches only the parent,
//!   which stops the child in order: [`terminate`]). The signal comes when the *thread* that
//!   spawned the child ends: spawn from the thread that lives as long as the child should.
//! * [`interrupt`]: handlers that only store the signal's number (async-signal-safe); the main
//!   thread looks at [`interrupt::pending`] where it waits, stops its children and removes what
//!   it made. A second signal of the same kind ends the process at once (the default action).
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// Makes the child of `cmd` receive `death_signal` when this thread ends, and, with `own_group`,
/// the leader of a process group of its own (its children join it: [`terminate`] reaches them).
pub fn tie_to_parent(cmd: &mut Command, own_group: bool, death_signal: libc::c_int) {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    if own_group {
        cmd.process_group(0);
    }
    // SAFETY: the closure runs in the child between fork and exec and makes only
    // async-signal-safe system calls (prctl, getppid); it allocates nothing (the error is built
    // from a raw OS error code).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                death_signal as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before the signal was armed: then it never comes.
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Stops `child` (and, if it leads a process group, every process in it): SIGTERM, then SIGKILL
/// after `grace`; reaps it. A child already reaped is left alone (its pid may be another
/// process's by now).
pub fn terminate(child: &mut Child, grace: Duration) -> Option<ExitStatus> {
    if !signal(child, libc::SIGTERM) {
        return child.try_wait().ok().flatten();
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && !exited(child.id()) {
        std::thread::sleep(Duration::from_millis(5));
    }
    // Whatever is left of its group (it need not have waited for its own children).
    signal(child, libc::SIGKILL);
    child.wait().ok()
}

/// Sends `sig` to `child`, to its whole process group if it leads one, while it is not reaped
/// (its pid, and so its group's id, cannot be reused before that). False if it was reaped.
pub fn signal(child: &Child, sig: libc::c_int) -> bool {
    let pid = child.id() as libc::pid_t;
    if !unreaped(child.id()) {
        return false;
    }
    // SAFETY: getpgid and kill have no memory-safety preconditions; `pid` is our own child, not
    // yet reaped.
    unsafe {
        if libc::getpgid(pid) == pid {
            libc::kill(-pid, sig);
        } else {
            libc::kill(pid, sig);
        }
    }
    true
}

/// waitid(WNOWAIT) on our child `pid`: Some(exited) while it is not reaped, None once it is.
fn peek(pid: u32) -> Option<bool> {
    // SAFETY: waitid with WNOWAIT only reads the child's state into `info` (it reaps nothing).
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        (r == 0).then(|| info.si_pid() != 0)
    }
}

fn unreaped(pid: u32) -> bool {
    peek(pid).is_some()
}

fn exited(pid: u32) -> bool {
    peek(pid) != Some(false)
}

/// SIGINT, SIGTERM and SIGHUP as a request to stop.
pub mod interrupt {
    use std::sync::atomic::{AtomicI32, Ordering};

    static PENDING: AtomicI32 = AtomicI32::new(0);

    extern "C" fn on_signal(sig: libc::c_int) {
        // Only async-signal-safe work: an atomic swap; for a second signal, the default action.
        if PENDING.swap(sig, Ordering::SeqCst) == sig {
            // SAFETY: signal and raise are async-signal-safe.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
                libc::raise(sig);
            }
        }
    }

    /// Installs the handlers (idempotent).
    pub fn install() {
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: a zeroed sigaction with a plain handler that lives as long as the process;
            // the handler only does async-signal-safe work.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as *const () as libc::sighandler_t;
                sa.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
        }
    }

    /// The signal received since [`install`], if any.
    pub fn pending() -> Option<i32> {
        match PENDING.load(Ordering::SeqCst) {
            0 => None,
            s => Some(s),
        }
    }

    /// The exit status that reports the signal (128 + its number, as a shell does).
    pub fn exit_code(sig: i32) -> i32 {
        128 + sig
    }

    /// Its name, for messages.
    pub fn name(sig: i32) -> &'static str {
        match sig {
            libc::SIGINT => "SIGINT",
            libc::SIGTERM => "SIGTERM",
            libc::SIGHUP => "SIGHUP",
            _ => "a signal",
        }
    }
}

/// What a child writes to a pipe, read by a thread: passed on to our stderr as it comes (`echo`),
/// and its last lines kept for the error message when the child fails.
pub struct Tail {
    thread: Option<std::thread::JoinHandle<Vec<String>>>,
}

/// Lines kept by a [`Tail`].
const TAIL_LINES: usize = 3;

impl Tail {
    pub fn spawn(from: Option<impl Read + Send + 'static>, echo: bool) -> Tail {
        let thread = from.map(|r| {
            std::thread::spawn(move || {
                let mut last: std::collections::VecDeque<String> = Default::default();
                for line in BufReader::new(r).lines() {
                    let Ok(line) = line else { break };
                    if echo {
                        eprintln!("{line}");
                    }
                    if line.trim().is_empty() {
                        continue;
                    }
                    if last.len() == TAIL_LINES {
                        last.pop_front();
                    }
                    last.push_back(line);
                }
                last.into_iter().collect()
            })
        });
        Tail { thread }
    }

    /// The last lines, once the writer has closed the pipe (it exited).
    pub fn finish(mut self) -> Vec<String> {
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;

    /// Exists and is not a zombie (a killed orphan may wait a while to be reaped).
    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rfind(')')
                .and_then(|i| s[i + 1..].trim_start().chars().next())
                .is_some_and(|c| c != 'Z' && c != 'X')
        })
    }

    #[test]
    fn a_child_of_a_parent_that_dies_gets_its_death_signal() {
        // The parent-death signal comes when the spawning thread ends: a helper thread is the
        // parent that dies.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut c = Command::new("sleep");
            c.arg("60").stdin(Stdio::null());
            tie_to_parent(&mut c, false, libc::SIGKILL);
            let child = c.spawn().unwrap();
            tx.send(child).unwrap();
            // The thread ends here: the child's parent-death signal fires.
        });
        let mut child = rx.recv().unwrap();
        let t0 = Instant::now();
        let st = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break Some(st);
            }
            if t0.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                break None;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            st.and_then(|s| s.signal()),
            Some(libc::SIGKILL),
            "the child outlived the thread that spawned it"
        );
    }

    #[test]
    fn terminate_reaches_the_whole_group() {
        let mut c = Command::new("sh");
        c.args(["-c", "sleep 60 & echo $!; wait"])
            .stdout(Stdio::piped())
            .stdin(Stdio::null());
        tie_to_parent(&mut c, true, libc::SIGTERM);
        let mut child = c.spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let grandchild: u32 = line.trim().parse().unwrap();
        assert!(alive(grandchild));
        terminate(&mut child, Duration::from_secs(2));
        let t0 = Instant::now();
        // The grandchild is the shell's, reaped by init once killed: wait for it to be gone.
        while alive(grandchild) && t0.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!alive(grandchild), "the group's other process survived");
    }

    #[test]
    fn a_tail_keeps_the_last_lines() {
        let mut c = Command::new("sh")
            .args(["-c", "for i in 1 2 3 4 5; do echo line $i >&2; done"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let t = Tail::spawn(c.stderr.take(), false);
        c.wait().unwrap();
        assert_eq!(t.finish(), ["line 3", "line 4", "line 5"]);
    }
}
