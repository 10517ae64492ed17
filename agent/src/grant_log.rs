//! A log of every grant the agent published, per GPU: the intervals side tasks were allowed to run
//! in (from the publication to the earlier of its closing, its deadline and, where the agent went
//! longer than the grant's freshness limit without a step, the last heartbeat plus that limit:
//! side tasks read it closed from then on, see [`freeride_abi::grant::Grant::open_at`]), for
//! scoring against the truth (`freeride sim --json`'s `"grants"`, see
//! [`crate::inference::score::GrantTally`]); and the intervals each GPU's grant was held closed,
//! with why ([`Held`]: from one step of the agent to the next step that says otherwise).
use crate::grants::Held;
use crate::inference::score::{clip, merge, GrantTally};
use crate::inference::{GpuId, Ns};
use std::collections::BTreeMap;

#[derive(Debug, Default, Clone)]
pub struct GrantLog {
    /// The grant open now per GPU: (opened at, open until).
    open: BTreeMap<GpuId, (Ns, Ns)>,
    done: BTreeMap<GpuId, Vec<(Ns, Ns)>>,
    /// The grants' freshness limit (0: none) and each GPU's last note (a heartbeat).
    fresh_ns: Ns,
    seen: BTreeMap<GpuId, Ns>,
    /// Why each GPU's grant is closed now, and since when; the intervals it was held before.
    held_now: BTreeMap<GpuId, (Ns, Held)>,
    held_done: BTreeMap<GpuId, Vec<(Ns, Ns, Held)>>,
}

impl GrantLog {
    /// A log of grants whose heartbeat must be no older than `fresh_ns` (0: no limit).
    pub fn new(fresh_ns: Ns) -> GrantLog {
        GrantLog {
            fresh_ns,
            ..GrantLog::default()
        }
    }

    /// GPU `gpu`'s grant at `now` is `until` (`Some`: open until then; `None`: closed). Every
    /// step of the agent notes every GPU (the grant's heartbeat).
    pub fn note(&mut self, gpu: GpuId, now: Ns, until: Option<Ns>) {
        let last = self.seen.insert(gpu, now);
        if let (Some(last), Some(&(from, old))) = (last, self.open.get(&gpu)) {
            if self.fresh_ns > 0 && now.saturating_sub(last) > self.fresh_ns {
                // The agent went without a step: side tasks read the grant closed from here.
                self.open.remove(&gpu);
                self.finish(gpu, from, old.min(last + self.fresh_ns));
            }
        }
        match (self.open.get(&gpu).copied(), until) {
            (Some((from, old)), Some(new)) => {
                if old <= now {
                    // It had lapsed before this renewal.
                    self.finish(gpu, from, old);
                    self.open.insert(gpu, (now, new));
                } else {
                    self.open.insert(gpu, (from, new));
                }
            }
            (Some((from, old)), None) => {
                self.open.remove(&gpu);
                self.finish(gpu, from, old.min(now));
            }
            (None, Some(new)) => {
                self.open.insert(gpu, (now, new));
            }
            (None, None) => {}
        }
    }

    /// GPU `gpu`'s grant is held closed at `now` for `why` (`None`: it is open). Noted after
    /// [`GrantLog::note`] at each step.
    pub fn note_held(&mut self, gpu: GpuId, now: Ns, why: Option<Held>) {
        let before = self.held_now.get(&gpu).copied();
        if before.map(|(_, h)| h) == why {
            return;
        }
        if let Some((from, h)) = before {
            if now > from {
                self.held_done.entry(gpu).or_default().push((from, now, h));
            }
        }
        match why {
            Some(h) => self.held_now.insert(gpu, (now, h)),
            None => self.held_now.remove(&gpu),
        };
    }

    /// The intervals `gpu`'s grant was held closed, and why (the reason it is held for now, up to
    /// its last note).
    pub fn held(&self, gpu: GpuId) -> Vec<(Ns, Ns, Held)> {
        let mut v = self.held_done.get(&gpu).cloned().unwrap_or_default();
        if let (Some(&(from, h)), Some(&last)) = (self.held_now.get(&gpu), self.seen.get(&gpu)) {
            if last > from {
                v.push((from, last, h));
            }
        }
        v
    }

    fn finish(&mut self, gpu: GpuId, from: Ns, to: Ns) {
        if to > from {
            self.done.entry(gpu).or_default().push((from, to));
        }
    }

    /// The granted intervals of `gpu` (an open grant up to its deadline, or its last heartbeat
    /// plus the freshness limit if earlier).
    pub fn intervals(&self, gpu: GpuId) -> Vec<(Ns, Ns)> {
        let mut v = self.done.get(&gpu).cloned().unwrap_or_default();
        if let Some(&(from, until)) = self.open.get(&gpu) {
            let until = match (self.fresh_ns, self.seen.get(&gpu)) {
                (0, _) | (_, None) => until,
                (f, Some(&last)) => until.min(last + f),
            };
            if until > from {
                v.push((from, until));
            }
        }
        v
    }

    /// Granted time of `gpu` within `[from, to)` against its busy intervals there.
    pub fn tally(&self, gpu: GpuId, from: Ns, to: Ns, busy: &[(Ns, Ns)]) -> GrantTally {
        let granted = clip(&merge(self.intervals(gpu)), from, to);
        GrantTally::of(&granted, &clip(&merge(busy.to_vec()), from, to))
    }

    /// Every GPU that was granted.
    pub fn gpus(&self) -> Vec<GpuId> {
        let mut v: Vec<GpuId> = self.done.keys().chain(self.open.keys()).copied().collect();
        v.sort();
        v.dedup();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_lasts_until_it_closes_or_its_deadline_passes() {
        let mut l = GrantLog::default();
        let g = GpuId(3);
        l.note(g, 100, Some(500));
        l.note(g, 200, Some(600)); // renewed
        l.note(g, 300, None); // closed before its deadline
        l.note(g, 1_000, Some(1_200));
        l.note(g, 1_500, None); // closed after its deadline: counted to the deadline
        l.note(g, 2_000, Some(2_100));
        l.note(g, 2_300, Some(2_400)); // renewed after it had lapsed
        assert_eq!(
            l.intervals(g),
            vec![(100, 300), (1_000, 1_200), (2_000, 2_100), (2_300, 2_400)]
        );
        assert_eq!(l.gpus(), vec![g]);
        assert!(l.intervals(GpuId(1)).is_empty());
        let t = l.tally(g, 150, 2_350, &[(1_100, 1_150), (2_000, 2_050)]);
        assert_eq!(
            (t.granted_ns, t.over_busy_ns),
            (150 + 200 + 100 + 50, 50 + 50)
        );
    }

    #[test]
    fn a_closed_grant_is_held_for_the_reason_of_each_step_until_another() {
        let mut l = GrantLog::default();
        let g = GpuId(3);
        let step = |l: &mut GrantLog, t: Ns, grant: Result<Ns, Held>| {
            l.note(g, t, grant.ok());
            l.note_held(g, t, grant.err());
        };
        step(&mut l, 100, Err(Held::NotInBubble));
        step(&mut l, 150, Err(Held::NotInBubble));
        step(&mut l, 200, Err(Held::LowConfidence));
        step(&mut l, 300, Ok(500));
        step(&mut l, 400, Err(Held::NotInBubble));
        step(&mut l, 450, Err(Held::GuardOfShortest));
        step(&mut l, 600, Err(Held::GuardOfShortest));
        assert_eq!(
            l.held(g),
            vec![
                (100, 200, Held::NotInBubble),
                (200, 300, Held::LowConfidence),
                (400, 450, Held::NotInBubble),
                (450, 600, Held::GuardOfShortest)
            ]
        );
        assert_eq!(l.intervals(g), vec![(300, 400)]);
        assert!(l.held(GpuId(1)).is_empty());
    }

    #[test]
    fn a_grant_the_agent_stops_refreshing_ends_at_its_freshness_limit() {
        let mut l = GrantLog::new(100);
        let g = GpuId(3);
        l.note(g, 1_000, Some(2_000));
        l.note(g, 1_050, Some(2_000)); // a step: the heartbeat
        l.note(g, 1_600, Some(2_000)); // after a stall of 550: side tasks stopped at 1_150
        l.note(g, 1_650, None);
        l.note(g, 3_000, Some(3_500));
        l.note(g, 3_080, Some(3_500)); // the last step before the log is read
        assert_eq!(
            l.intervals(g),
            vec![(1_000, 1_150), (1_600, 1_650), (3_000, 3_180)]
        );
        // Without a limit the stall is not seen.
        let mut l = GrantLog::new(0);
        l.note(g, 1_000, Some(2_000));
        l.note(g, 1_600, None);
        assert_eq!(l.intervals(g), vec![(1_000, 1_600)]);
    }
}
