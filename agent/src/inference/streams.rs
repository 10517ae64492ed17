//! What the agent knows of one stream of a timeline: the compute queued on it (counted in host
//! order), how far the GPU is known to have run it, and the waits on communication queued on it.
//!
//! A stream is known idle from the moment the GPU was known to be past its last queued compute
//! (`drained_at`) until the next compute queued on it can run: the host's launch of it, or, when a
//! wait on communication stands before it, the wait's release. A launch queued behind an
//! unreleased wait does not end the idle time; one that can run does, at its host time.
use super::obs::{CommSig, Ns};
use super::pattern::OpIndex;
use std::collections::VecDeque;

/// Host times of the newest launches kept per stream (enough for the GPU-side records, which come
/// within milliseconds).
const LAUNCH_TIMES: usize = 256;
/// Waits kept per stream (the oldest are dropped past this: they no longer hold it).
const MAX_BLOCKERS: usize = 256;

/// A wait queued on a stream for a communication op still in flight.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Blocker {
    /// The interposer's id of the wait (0: not timed).
    pub wait: u64,
    /// The awaited op (its id), while it is known, and its signature.
    pub op: Option<u64>,
    pub sig: Option<CommSig>,
    /// Launches on the stream before the wait.
    pub at: u64,
    /// Waits queued on the stream before it (set by [`Stream::add_blocker`]): a point recorded
    /// on the stream stands after the waits queued before it, not after those queued later at
    /// the same launch count.
    pub seq: u64,
    /// When the wait released the stream, once known.
    pub released: Option<Ns>,
}

/// How a stream stands.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Window {
    /// Running (or not known to be idle).
    Busy,
    /// Idle from `from` until `until` (`None`: still idle as far as known).
    Idle {
        from: Ns,
        until: Option<Ns>,
        /// Compute is queued behind an unreleased wait.
        blocked: bool,
        /// The first comm op the host issued after the stream's last launch that ran (where
        /// the bubble is learnt: a position in program order, the same every iteration).
        anchor: Option<OpIndex>,
        /// The op (its id) that a wait queued right after that launch waits for, if known: where
        /// the bubble is learnt when the host issued no op between that launch and the next
        /// (the op was issued before the compute that drained, as ZBV's backward-input waits on
        /// a receive issued before its weight-gradient kernels).
        awaited: Option<u64>,
    },
}

#[derive(Debug, Default)]
pub struct Stream {
    /// Compute launches queued on it so far.
    pub launches: u64,
    times: VecDeque<Ns>,
    /// Launches the GPU is known to have finished, and since when it was known past them.
    pub drained: u64,
    pub drained_at: Ns,
    /// The first comm op issued after each of the newest launches: (launches then, its index).
    first_ops: VecDeque<(u64, OpIndex)>,
    blockers: VecDeque<Blocker>,
    /// It carries communication.
    pub comm: bool,
    /// The last communication op queued on it.
    pub last_op: Option<u64>,
    /// Waits queued on it so far.
    pub waits: u64,
    /// Points on other streams (stream, launches, waits before it) that the next communication
    /// op on it waits for.
    pub deps: Vec<(u64, u64, u64)>,
}

impl Stream {
    pub fn on_launch(&mut self, t: Ns) {
        if self.launches == 0 {
            // Nothing is known of the time before the stream's first launch.
            self.drained_at = t;
        }
        self.launches += 1;
        if self.times.len() == LAUNCH_TIMES {
            self.times.pop_front();
        }
        self.times.push_back(t);
    }

    /// Host time of the `k`-th launch (1-based); 0 when too old to be kept.
    pub fn launch_time(&self, k: u64) -> Option<Ns> {
        if k == 0 || k > self.launches {
            return None;
        }
        let kept_from = self.launches - self.times.len() as u64 + 1;
        Some(if k < kept_from {
            0
        } else {
            self.times[(k - kept_from) as usize]
        })
    }

    /// Launches queued at host time `t` or before.
    pub fn launches_by(&self, t: Ns) -> u64 {
        let later = self.times.iter().rev().take_while(|&&x| x > t).count();
        self.launches - later as u64
    }

    /// A comm op (index `pos`) was issued: the first after the newest launch is remembered.
    pub fn on_op_issued(&mut self, pos: OpIndex) {
        if self
            .first_ops
            .back()
            .is_none_or(|&(k, _)| k != self.launches)
        {
            if self.first_ops.len() == LAUNCH_TIMES {
                self.first_ops.pop_front();
            }
            self.first_ops.push_back((self.launches, pos));
        }
    }

    /// The first comm op issued after the first `count` launches (and before the next).
    fn first_op_after(&self, count: u64) -> Option<OpIndex> {
        self.first_ops
            .iter()
            .rev()
            .find(|&&(k, _)| k <= count)
            .filter(|&&(k, _)| k == count)
            .map(|&(_, i)| i)
    }

    /// The GPU was past the first `count` launches at `at`. Returns how far ahead of the GPU the
    /// host had queued the last of them, when known.
    pub fn drained_to(&mut self, count: u64, at: Ns) -> Option<Ns> {
        let count = count.min(self.launches);
        if count > self.drained {
            self.drained = count;
            self.drained_at = at;
        } else if count == self.drained && at < self.drained_at {
            self.drained_at = at;
        } else {
            return None;
        }
        let drained = self.drained;
        self.blockers.retain(|b| b.at >= drained);
        self.launch_time(count)
            .filter(|&t| t > 0)
            .map(|t| at.saturating_sub(t))
    }

    /// Records were lost: how far the GPU got, and what waits are queued, is unknown until the
    /// next drain is seen.
    pub fn lost(&mut self) {
        self.drained = self.launches;
        self.drained_at = Ns::MAX;
        self.blockers.clear();
        self.deps.clear();
    }

    pub fn add_blocker(&mut self, mut b: Blocker) {
        if self.blockers.len() == MAX_BLOCKERS {
            self.blockers.pop_front();
        }
        b.seq = self.waits;
        self.waits += 1;
        self.blockers.push_back(b);
    }

    /// The timed wait `wait` reached: the GPU was past everything before it at `t`.
    pub fn reached(&mut self, wait: u64, t: Ns) -> Option<Ns> {
        let b = self.blockers.iter().find(|b| b.wait == wait).copied()?;
        self.drained_to(b.at, t)
    }

    /// The waits queued on this stream.
    pub fn blockers_mut(&mut self) -> impl Iterator<Item = &mut Blocker> {
        self.blockers.iter_mut()
    }

    pub fn blocker(&self, wait: u64) -> Option<&Blocker> {
        self.blockers.iter().find(|b| b.wait == wait)
    }

    /// Whether the GPU is known past a point of the stream: its first `count` launches and the
    /// first `waits` waits queued on it (what a point recorded there waits for; a wait queued
    /// later, even with no launch in between, stands after it).
    pub fn ran_to(&self, count: u64, waits: u64) -> bool {
        self.drained >= count
            && !self
                .blockers
                .iter()
                .any(|b| b.at <= count && b.seq < waits && b.released.is_none())
    }

    /// Whether a wait on this stream still waits for op `id`.
    pub fn awaits(&self, id: u64) -> bool {
        self.blockers
            .iter()
            .any(|b| b.op == Some(id) && b.released.is_none())
    }

    /// How the stream stands at `now`; compute queued longer than `stale_ns` ago with no wait in
    /// its way is taken to have run by then.
    pub fn window(&self, now: Ns, stale_ns: Ns) -> Window {
        let (mut drained, mut from) = (self.drained, self.drained_at);
        if from == Ns::MAX {
            return Window::Busy;
        }
        if self.launches > drained && self.blockers.iter().all(|b| b.released.is_some()) {
            let last = self.launch_time(self.launches).unwrap_or(0);
            if last > 0 && last + stale_ns <= now {
                (drained, from) = (self.launches, last + stale_ns);
            }
        }
        let anchor = self.first_op_after(drained);
        let mut held = false;
        let mut release = 0;
        let mut awaited = None;
        for b in self.blockers.iter().filter(|b| b.at == drained) {
            match b.released {
                Some(r) => release = release.max(r),
                None => held = true,
            }
            // The first wait's op: the one the stream reaches first.
            awaited = awaited.or(b.op);
        }
        let Some(next) = self.launch_time(drained + 1) else {
            return Window::Idle {
                from,
                until: None,
                blocked: false,
                anchor,
                awaited,
            };
        };
        if held {
            return Window::Idle {
                from,
                until: None,
                blocked: true,
                anchor,
                awaited,
            };
        }
        let until = next.max(release);
        if until <= from {
            Window::Busy
        } else {
            Window::Idle {
                from,
                until: Some(until),
                blocked: false,
                anchor,
                awaited,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_idle_from_its_drain_to_its_next_runnable_launch() {
        let mut s = Stream::default();
        s.on_launch(100);
        s.on_launch(200);
        assert_eq!(s.window(1_000, 1 << 40), Window::Busy);
        s.on_op_issued(3);
        s.drained_to(2, 5_000);
        assert_eq!(
            s.window(6_000, 1 << 40),
            Window::Idle {
                from: 5_000,
                until: None,
                blocked: false,
                anchor: Some(3),
                awaited: None
            }
        );
        s.on_launch(7_000);
        assert!(matches!(
            s.window(8_000, 1 << 40),
            Window::Idle {
                from: 5_000,
                until: Some(7_000),
                ..
            }
        ));
        // A launch the host made before the GPU got there runs at once: no idle time.
        let mut s = Stream::default();
        s.on_launch(100);
        s.on_launch(200);
        s.drained_to(1, 300);
        assert_eq!(s.window(400, 1 << 40), Window::Busy);
    }

    #[test]
    fn a_launch_behind_an_unreleased_wait_keeps_it_idle_until_the_release() {
        let mut s = Stream::default();
        s.on_launch(100);
        s.add_blocker(Blocker {
            wait: 7,
            op: Some(1),
            sig: None,
            at: 1,
            seq: 0,
            released: None,
        });
        s.on_launch(200);
        s.on_launch(300);
        s.reached(7, 1_000);
        assert!(matches!(
            s.window(2_000, 1 << 40),
            Window::Idle {
                from: 1_000,
                until: None,
                blocked: true,
                ..
            }
        ));
        for b in s.blockers_mut() {
            b.released = Some(4_000);
        }
        assert!(matches!(
            s.window(5_000, 1 << 40),
            Window::Idle {
                from: 1_000,
                until: Some(4_000),
                blocked: false,
                ..
            }
        ));
    }

    #[test]
    fn compute_queued_long_ago_is_taken_to_have_run() {
        let mut s = Stream::default();
        s.on_launch(1_000);
        assert_eq!(s.window(2_000, 10_000), Window::Busy);
        assert!(matches!(
            s.window(50_000, 10_000),
            Window::Idle {
                from: 11_000,
                until: None,
                ..
            }
        ));
        assert_eq!(s.launches_by(999), 0);
        assert_eq!(s.launches_by(1_000), 1);
    }
}
