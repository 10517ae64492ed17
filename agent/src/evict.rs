//! Killing a side-task process the watchdog evicts, and nothing else: the process must still be
//! the one that made the ring (same pid, started before the ring), run as the agent's own user, and
//! the signal goes through a pidfd opened before those checks, so a pid reused in between is never
//! hit.
use freeride_abi::clock_ns;
use std::io;

/// Why a kill was not sent.
#[derive(Debug)]
pub enum Refused {
    /// The process is already gone.
    Gone,
    /// It is not the ring's process or not ours (message says what).
    NotOurs(String),
    Io(io::Error),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Gone => write!(f, "already gone"),
            Refused::NotOurs(s) => write!(f, "not killed: {s}"),
            Refused::Io(e) => write!(f, "not killed: {e}"),
        }
    }
}

/// Real and effective uid of `pid` (from `/proc/<pid>/status`).
fn uids(pid: u32) -> Result<(u32, u32), Refused> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            Refused::Gone
        } else {
            Refused::Io(e)
        }
    })?;
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .ok_or_else(|| Refused::NotOurs("no Uid line".into()))?;
    let mut it = line.split_whitespace().map(|v| v.parse::<u32>().ok());
    match (it.next().flatten(), it.next().flatten()) {
        (Some(r), Some(e)) => Ok((r, e)),
        _ => Err(Refused::NotOurs("unreadable Uid line".into())),
    }
}

/// When `pid` started, in CLOCK_MONOTONIC ns (from `/proc/<pid>/stat`, clock ticks since boot).
fn start_mono_ns(pid: u32) -> Result<u64, Refused> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|_| Refused::Gone)?;
    // Field 22, counted after the command name's closing parenthesis (the name may hold spaces).
    let rest = text
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| Refused::NotOurs("unreadable stat".into()))?;
    let ticks: u64 = rest
        .split_whitespace()
        .nth(19)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| Refused::NotOurs("unreadable start time".into()))?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let since_boot = ticks.saturating_mul(1_000_000_000) / hz;
    // The stat time counts from boot including suspend (CLOCK_BOOTTIME); map it to MONOTONIC.
    let suspended = clock_ns(libc::CLOCK_BOOTTIME).saturating_sub(clock_ns(libc::CLOCK_MONOTONIC));
    Ok(since_boot.saturating_sub(suspended))
}

/// Sends SIGKILL to `pid` if it is the side task whose ring was made at `ring_start_ns`
/// (CLOCK_MONOTONIC) and runs as this user.
pub fn kill_sidetask(pid: u32, ring_start_ns: u64) -> Result<(), Refused> {
    if pid == 0 || pid == std::process::id() {
        return Err(Refused::NotOurs(format!("pid {pid}")));
    }
    // SAFETY: pidfd_open takes a pid and flags, returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) } as i32;
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(if e.raw_os_error() == Some(libc::ESRCH) {
            Refused::Gone
        } else {
            Refused::Io(e)
        });
    }
    let res = (|| {
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let (ruid, euid) = uids(pid)?;
        if ruid != me || euid != me {
            return Err(Refused::NotOurs(format!(
                "pid {pid} runs as uid {ruid}/{euid}, the agent as {me}"
            )));
        }
        // Clock ticks are 10 ms: a process started up to a tick after its ring reads as before.
        let started = start_mono_ns(pid)?;
        if started > ring_start_ns.saturating_add(20_000_000) {
            return Err(Refused::NotOurs(format!(
                "pid {pid} started after its ring: another process now has that pid"
            )));
        }
        // SAFETY: pidfd_send_signal on the descriptor we opened; no siginfo, no flags.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd,
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0u32,
            )
        };
        if r != 0 {
            let e = io::Error::last_os_error();
            return Err(if e.raw_os_error() == Some(libc::ESRCH) {
                Refused::Gone
            } else {
                Refused::Io(e)
            });
        }
        Ok(())
    })();
    // SAFETY: closing the descriptor we opened, once.
    unsafe { libc::close(fd) };
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_itself_a_later_process_and_the_dead() {
        let me = std::process::id();
        assert!(matches!(
            kill_sidetask(me, u64::MAX),
            Err(Refused::NotOurs(_))
        ));
        // A child started after "its ring" (time 0) is not the ring's process.
        let mut c = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        assert!(matches!(kill_sidetask(c.id(), 0), Err(Refused::NotOurs(_))));
        // The same child, with a ring made after it started: killed.
        kill_sidetask(c.id(), freeride_abi::now_ns()).unwrap();
        let st = c.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(st.signal(), Some(libc::SIGKILL));
        assert!(matches!(
            kill_sidetask(c.id(), freeride_abi::now_ns()),
            Err(Refused::Gone)
        ));
    }
}
