//! The processes of `freeride sim` / `freeride demo`: the job (pipesim, in a process group of its
//! own with its stages) and the side tasks (each in its own group), all tied to this process
//! (they get SIGTERM if it dies: pipesim then kills its stages and removes its folders, an SDK
//! side task stops cleanly). While the job runs, SIGINT/SIGTERM/SIGHUP stop it in order
//! ([`pipesim::procs::interrupt`]); the caller's guards then remove the session and GPU folders.
use freeride_abi::now_ns;
use pipesim::procs::{self, interrupt, Tail};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// How long a stopped process gets to end by itself before SIGKILL.
const GRACE: Duration = Duration::from_secs(2);

/// A side task that ended before the job did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidetaskEnd {
    pub pid: u32,
    /// When it was seen gone (CLOCK_MONOTONIC).
    pub at_ns: u64,
    /// Its exit status (None: killed by a signal).
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl SidetaskEnd {
    /// Exited 0: it ran out of work (an SDK task whose task reported itself finished).
    pub fn finished(&self) -> bool {
        self.code == Some(0)
    }

    /// "finished its work (exit status 0)", "exited with status 2", "was killed by signal 9".
    pub fn describe(&self) -> String {
        match (self.code, self.signal) {
            (Some(0), _) => "finished its work (exit status 0)".into(),
            (Some(c), _) => format!("exited with status {c}"),
            (None, Some(s)) => format!("was killed by signal {s}"),
            _ => "ended".into(),
        }
    }
}

fn end_of(pid: u32, st: ExitStatus) -> SidetaskEnd {
    use std::os::unix::process::ExitStatusExt;
    SidetaskEnd {
        pid,
        at_ns: now_ns(),
        code: st.code(),
        signal: st.signal(),
    }
}

/// Ties a side task's command to this process (a group of its own: a terminal's Ctrl-C reaches
/// only `freeride`, which stops it in order).
pub fn tie_sidetask(cmd: &mut Command) {
    procs::tie_to_parent(cmd, true, libc::SIGTERM);
}

/// How the job ended.
pub struct JobOutcome {
    pub status: ExitStatus,
    /// The last lines it wrote on stderr.
    pub tail: Vec<String>,
    /// Side tasks that ended while it ran, in the order seen.
    pub sidetask_ends: Vec<SidetaskEnd>,
}

/// Runs the job `cmd` to its end, its stderr passed on to ours when `progress` (and its last
/// lines kept either way), watching `side` for side tasks that end early. Interrupted
/// (SIGINT/SIGTERM/SIGHUP, see [`interrupt::install`]): stops the job's whole process group and
/// returns an error naming the signal.
pub fn run_job(mut cmd: Command, progress: bool, side: &mut [Child]) -> Result<JobOutcome, String> {
    procs::tie_to_parent(&mut cmd, true, libc::SIGTERM);
    cmd.stderr(Stdio::piped());
    let mut job = cmd
        .spawn()
        .map_err(|e| format!("cannot start the job: {e}"))?;
    let tail = Tail::spawn(job.stderr.take(), progress);
    let mut ends: Vec<SidetaskEnd> = vec![];
    let status = loop {
        match job.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) => {}
            Err(e) => {
                procs::terminate(&mut job, GRACE);
                return Err(format!("waiting for the job: {e}"));
            }
        }
        for c in side.iter_mut() {
            if ends.iter().any(|e| e.pid == c.id()) {
                continue;
            }
            if let Ok(Some(st)) = c.try_wait() {
                ends.push(end_of(c.id(), st));
            }
        }
        if let Some(sig) = interrupt::pending() {
            procs::terminate(&mut job, GRACE);
            let _ = tail.finish();
            return Err(format!(
                "interrupted ({}); the job was stopped",
                interrupt::name(sig)
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Ok(JobOutcome {
        status,
        tail: tail.finish(),
        sidetask_ends: ends,
    })
}

/// Stops the side tasks (SIGTERM to each one's group, SIGKILL after a second).
pub fn stop_sidetasks(children: &mut [Child]) {
    for c in children.iter() {
        procs::signal(c, libc::SIGTERM);
    }
    for c in children.iter_mut() {
        procs::terminate(c, Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failed job's error names its cause: the last lines it wrote (the error used to end in
    /// a colon with nothing after it when its stderr went to the terminal), and the side tasks
    /// that ended while it ran are told apart from those still running.
    #[test]
    fn a_job_keeps_its_last_lines_and_early_side_task_ends() {
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "echo 'pipesim: starting' >&2; sleep 0.3; \
             echo 'pipesim-stage rank 8: cudaSetDevice failed: 101' >&2; \
             echo 'pipesim: stage 8 died: exit status 1' >&2; exit 1",
        ]);
        let mut side = vec![
            Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap(),
            Command::new("sleep").arg("30").spawn().unwrap(),
        ];
        let out = run_job(cmd, false, &mut side).unwrap();
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(
            out.tail.last().map(String::as_str),
            Some("pipesim: stage 8 died: exit status 1")
        );
        assert!(out.tail.iter().any(|l| l.contains("cudaSetDevice failed")));
        assert_eq!(out.sidetask_ends.len(), 1, "{:?}", out.sidetask_ends);
        assert_eq!(out.sidetask_ends[0].pid, side[0].id());
        assert_eq!(out.sidetask_ends[0].describe(), "exited with status 3");
        stop_sidetasks(&mut side);
        assert!(
            side[1].try_wait().unwrap().is_some(),
            "a side task outlived its stop"
        );
    }
}
