//! How late the agent learns what a trainer's GPU did: for every GPU-side observation (an op's
//! begin or end, a wait reached or released), the time from its GPU time to when the agent read
//! it (`seen - t`). This is the comm poller's reporting delay plus the agent's own, and it bounds
//! how long a grant can outlive a bubble that ended before its prediction: the end is seen only
//! this much later. On a real GPU it is the waiter's wake-up (tens to hundreds of µs); on the test
//! bed it also holds the simulated GPU's delay in making a completion visible to the host, which
//! grows to milliseconds when its threads are short of CPU.
use crate::inference::{Ns, Obs};

/// Lags kept (the newest); older ones are dropped.
const KEPT: usize = 1 << 16;

/// The newest report lags, in µs.
#[derive(Clone, Debug, Default)]
pub struct ReportLag {
    lags_us: Vec<u32>,
    /// Where the next lag goes once `lags_us` is full.
    next: usize,
}

impl ReportLag {
    /// Notes observation `obs` (read at `now`) if it carries a GPU time.
    pub fn note(&mut self, obs: &Obs, now: Ns) {
        let t = match *obs {
            Obs::CommBegin { t, .. }
            | Obs::CommEnd { t, .. }
            | Obs::WaitReached { t, .. }
            | Obs::WaitReleased { t, .. } => t,
            _ => return,
        };
        let us = (now.saturating_sub(t) / 1000).min(u32::MAX as u64) as u32;
        if self.lags_us.len() < KEPT {
            self.lags_us.push(us);
        } else {
            self.lags_us[self.next] = us;
            self.next = (self.next + 1) % KEPT;
        }
    }

    /// The `q` quantile (0..=1) of the kept lags, in µs; None before any.
    pub fn quantile_us(&self, q: f64) -> Option<u32> {
        if self.lags_us.is_empty() {
            return None;
        }
        let mut v = self.lags_us.clone();
        let i = ((v.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
        Some(*v.select_nth_unstable(i).1)
    }

    /// Adds `other`'s lags (another node's agent), as many as there is room for.
    pub fn merge(&mut self, other: &ReportLag) {
        let room = KEPT - self.lags_us.len();
        self.lags_us
            .extend(other.lags_us.iter().take(room).copied());
    }

    /// Lags kept.
    pub fn len(&self) -> usize {
        self.lags_us.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lags_us.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_side_observations_give_their_lag_and_others_none() {
        let mut r = ReportLag::default();
        assert_eq!(r.quantile_us(0.5), None);
        r.note(&Obs::Exit { t: 0 }, 5_000);
        assert!(r.is_empty());
        for (i, lag_us) in [100u64, 200, 300, 4_000].into_iter().enumerate() {
            let t = 1_000_000 * i as u64;
            let obs = match i {
                0 => Obs::CommBegin { id: 1, t, seen: 0 },
                1 => Obs::CommEnd { id: 1, t, seen: 0 },
                2 => Obs::WaitReached {
                    wait: 1,
                    t,
                    seen: 0,
                },
                _ => Obs::WaitReleased {
                    wait: 1,
                    t,
                    seen: 0,
                },
            };
            r.note(&obs, t + lag_us * 1000);
        }
        assert_eq!(r.len(), 4);
        assert_eq!(r.quantile_us(0.0), Some(100));
        assert_eq!(r.quantile_us(0.5), Some(300));
        assert_eq!(r.quantile_us(1.0), Some(4_000));
        // Seen before its GPU time (clock anchors disagree by a few µs): no lag.
        r.note(
            &Obs::CommEnd {
                id: 2,
                t: 10,
                seen: 0,
            },
            5,
        );
        assert_eq!(r.quantile_us(0.0), Some(0));
    }

    #[test]
    fn only_the_newest_lags_are_kept() {
        let mut r = ReportLag::default();
        let end = |lag_us: u64| {
            (
                Obs::CommEnd {
                    id: 1,
                    t: 0,
                    seen: 0,
                },
                lag_us * 1000,
            )
        };
        for _ in 0..KEPT {
            let (o, now) = end(9_000);
            r.note(&o, now);
        }
        for _ in 0..KEPT {
            let (o, now) = end(50);
            r.note(&o, now);
        }
        assert_eq!(r.len(), KEPT);
        assert_eq!(r.quantile_us(1.0), Some(50));
    }
}
