//! A log of every grant the agent published, per GPU: the intervals side tasks were allowed to run
//! in (from the publication to the earlier of its closing and its deadline), for scoring against
//! the truth (`freeride sim --json`'s `"grants"`, see [`crate::inference::score::GrantTally`]).
use crate::inference::score::{clip, merge, GrantTally};
use crate::inference::{GpuId, Ns};
use std::collections::BTreeMap;

#[derive(Debug, Default, Clone)]
pub struct GrantLog {
    /// The grant open now per GPU: (opened at, open until).
    open: BTreeMap<GpuId, (Ns, Ns)>,
    done: BTreeMap<GpuId, Vec<(Ns, Ns)>>,
}

impl GrantLog {
    /// GPU `gpu`'s grant at `now` is `until` (`Some`: open until then; `None`: closed).
    pub fn note(&mut self, gpu: GpuId, now: Ns, until: Option<Ns>) {
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

    fn finish(&mut self, gpu: GpuId, from: Ns, to: Ns) {
        if to > from {
            self.done.entry(gpu).or_default().push((from, to));
        }
    }

    /// The granted intervals of `gpu` (an open grant up to its deadline).
    pub fn intervals(&self, gpu: GpuId) -> Vec<(Ns, Ns)> {
        let mut v = self.done.get(&gpu).cloned().unwrap_or_default();
        if let Some(&(from, until)) = self.open.get(&gpu) {
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
}
