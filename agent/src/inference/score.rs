//! Precision and recall of predicted bubble intervals against the true idle intervals of a GPU.
use super::obs::Ns;

/// Sorts and merges overlapping or touching intervals `[start, end)`; empty ones are dropped.
pub fn merge(mut v: Vec<(Ns, Ns)>) -> Vec<(Ns, Ns)> {
    v.retain(|&(a, b)| b > a);
    v.sort_unstable();
    let mut out: Vec<(Ns, Ns)> = Vec::with_capacity(v.len());
    for (a, b) in v {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// Total length of merged intervals.
pub fn total(v: &[(Ns, Ns)]) -> Ns {
    v.iter().map(|&(a, b)| b - a).sum()
}

/// Length of the intersection of two merged interval lists.
pub fn overlap(a: &[(Ns, Ns)], b: &[(Ns, Ns)]) -> Ns {
    let (mut i, mut j, mut sum) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        let lo = a[i].0.max(b[j].0);
        let hi = a[i].1.min(b[j].1);
        if hi > lo {
            sum += hi - lo;
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    sum
}

/// The parts of merged intervals `a` that merged intervals `b` do not cover.
pub fn minus(a: &[(Ns, Ns)], b: &[(Ns, Ns)]) -> Vec<(Ns, Ns)> {
    let mut out = vec![];
    let mut j = 0;
    for &(lo, hi) in a {
        let mut at = lo;
        while j < b.len() && b[j].1 <= at {
            j += 1;
        }
        let mut k = j;
        while k < b.len() && b[k].0 < hi {
            if b[k].0 > at {
                out.push((at, b[k].0));
            }
            at = at.max(b[k].1);
            k += 1;
        }
        if at < hi {
            out.push((at, hi));
        }
    }
    out
}

/// Clips merged intervals to `[lo, hi)`.
pub fn clip(v: &[(Ns, Ns)], lo: Ns, hi: Ns) -> Vec<(Ns, Ns)> {
    v.iter()
        .map(|&(a, b)| (a.max(lo), b.min(hi)))
        .filter(|&(a, b)| a < b)
        .collect()
}

/// Time sums behind precision and recall; add several GPUs' together before dividing.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Tally {
    pub predicted_ns: Ns,
    pub truth_ns: Ns,
    pub overlap_ns: Ns,
}

impl Tally {
    pub fn of(predicted: &[(Ns, Ns)], truth: &[(Ns, Ns)]) -> Tally {
        let (p, t) = (merge(predicted.to_vec()), merge(truth.to_vec()));
        Tally {
            predicted_ns: total(&p),
            truth_ns: total(&t),
            overlap_ns: overlap(&p, &t),
        }
    }
    pub fn add(&mut self, o: Tally) {
        self.predicted_ns += o.predicted_ns;
        self.truth_ns += o.truth_ns;
        self.overlap_ns += o.overlap_ns;
    }
    /// Predicted bubble time that was truly idle / all predicted bubble time (1 when nothing predicted).
    pub fn precision(&self) -> f64 {
        if self.predicted_ns == 0 {
            1.0
        } else {
            self.overlap_ns as f64 / self.predicted_ns as f64
        }
    }
    /// True idle time covered by predictions / all true idle time (1 when there was no idle time).
    pub fn recall(&self) -> f64 {
        if self.truth_ns == 0 {
            1.0
        } else {
            self.overlap_ns as f64 / self.truth_ns as f64
        }
    }
}

/// Granted time against the truth's busy time of a GPU; add several GPUs' together before dividing.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GrantTally {
    pub granted_ns: Ns,
    /// Granted time during which the GPU was busy (a trainer's compute, or a transfer).
    pub over_busy_ns: Ns,
}

impl GrantTally {
    /// `granted` and `busy` need not be merged.
    pub fn of(granted: &[(Ns, Ns)], busy: &[(Ns, Ns)]) -> GrantTally {
        let (g, b) = (merge(granted.to_vec()), merge(busy.to_vec()));
        GrantTally {
            granted_ns: total(&g),
            over_busy_ns: overlap(&g, &b),
        }
    }
    pub fn add(&mut self, o: GrantTally) {
        self.granted_ns += o.granted_ns;
        self.over_busy_ns += o.over_busy_ns;
    }
    /// Share of granted time during which the GPU was busy (0 when nothing was granted).
    pub fn over_busy_share(&self) -> f64 {
        if self.granted_ns == 0 {
            0.0
        } else {
            self.over_busy_ns as f64 / self.granted_ns as f64
        }
    }
    pub fn granted_ms(&self) -> f64 {
        self.granted_ns as f64 / 1e6
    }
}

/// Idle intervals shorter than this that got no grant are counted apart in [`Coverage`]: a grant
/// needs the bubble to be seen (a few hundred µs), a guard before its end and a minimum length.
pub const SHORT_IDLE_NS: Ns = 1_000_000;

/// Where a GPU's true idle time went, against its grants: what the grants covered, and what they
/// left before the first grant of an idle interval, after its last, between its grants, and in
/// intervals with no grant at all (under [`SHORT_IDLE_NS`], and longer). The parts add up to
/// `idle_ns`. Add several GPUs' together before dividing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    pub idle_ns: Ns,
    pub covered_ns: Ns,
    pub before_ns: Ns,
    pub after_ns: Ns,
    pub between_ns: Ns,
    pub ungranted_short_ns: Ns,
    pub ungranted_ns: Ns,
}

impl Coverage {
    /// `idle` and `granted` need not be merged.
    pub fn of(idle: &[(Ns, Ns)], granted: &[(Ns, Ns)]) -> Coverage {
        let (idle, granted) = (merge(idle.to_vec()), merge(granted.to_vec()));
        let mut c = Coverage::default();
        let mut j = 0;
        for &(a, b) in &idle {
            c.idle_ns += b - a;
            while j < granted.len() && granted[j].1 <= a {
                j += 1;
            }
            let inside: Vec<(Ns, Ns)> = granted[j..]
                .iter()
                .take_while(|g| g.0 < b)
                .map(|&(x, y)| (x.max(a), y.min(b)))
                .collect();
            let (Some(first), Some(last)) = (inside.first(), inside.last()) else {
                if b - a < SHORT_IDLE_NS {
                    c.ungranted_short_ns += b - a;
                } else {
                    c.ungranted_ns += b - a;
                }
                continue;
            };
            let covered = total(&inside);
            c.covered_ns += covered;
            c.before_ns += first.0 - a;
            c.after_ns += b - last.1;
            c.between_ns += (last.1 - first.0) - covered;
        }
        c
    }

    pub fn add(&mut self, o: Coverage) {
        self.idle_ns += o.idle_ns;
        self.covered_ns += o.covered_ns;
        self.before_ns += o.before_ns;
        self.after_ns += o.after_ns;
        self.between_ns += o.between_ns;
        self.ungranted_short_ns += o.ungranted_short_ns;
        self.ungranted_ns += o.ungranted_ns;
    }

    /// `ns` as a share of the idle time (0 when there was none).
    pub fn share(&self, ns: Ns) -> f64 {
        if self.idle_ns == 0 {
            0.0
        } else {
            ns as f64 / self.idle_ns as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minus_leaves_what_the_other_does_not_cover() {
        let a = [(0, 10), (20, 30), (40, 50)];
        let b = [(5, 8), (9, 22), (25, 26), (45, 60)];
        assert_eq!(
            minus(&a, &b),
            vec![(0, 5), (8, 9), (22, 25), (26, 30), (40, 45)]
        );
        assert_eq!(minus(&a, &[]), a.to_vec());
        assert!(minus(&[], &b).is_empty());
        assert!(minus(&[(1, 2)], &[(0, 3)]).is_empty());
    }

    #[test]
    fn granted_time_on_busy_time_is_over_busy() {
        let g = GrantTally::of(&[(0, 100), (50, 200), (300, 400)], &[(150, 350)]);
        assert_eq!(
            g,
            GrantTally {
                granted_ns: 300,
                over_busy_ns: 100
            }
        );
        assert!((g.over_busy_share() - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(GrantTally::default().over_busy_share(), 0.0);
    }

    #[test]
    fn idle_time_is_split_by_what_the_grants_left() {
        let ms = 1_000_000;
        // Granted 1-3 and 4-8 ms of a 0-10 ms idle interval; nothing of 20-20.5 ms and of
        // 30-32 ms; a grant over busy time (12-14 ms) counts nowhere.
        let idle = [
            (0, 10 * ms),
            (20 * ms, 20 * ms + ms / 2),
            (30 * ms, 32 * ms),
        ];
        let granted = [(ms, 3 * ms), (4 * ms, 8 * ms), (12 * ms, 14 * ms)];
        let c = Coverage::of(&idle, &granted);
        assert_eq!(
            c,
            Coverage {
                idle_ns: 12 * ms + ms / 2,
                covered_ns: 6 * ms,
                before_ns: ms,
                after_ns: 2 * ms,
                between_ns: ms,
                ungranted_short_ns: ms / 2,
                ungranted_ns: 2 * ms,
            }
        );
        let parts = c.covered_ns
            + c.before_ns
            + c.after_ns
            + c.between_ns
            + c.ungranted_short_ns
            + c.ungranted_ns;
        assert_eq!(parts, c.idle_ns);
        assert!((c.share(c.covered_ns) - 0.48).abs() < 1e-9);
        assert_eq!(Coverage::default().share(5), 0.0);
        // A grant that spans two idle intervals covers both.
        let c = Coverage::of(&[(0, 10), (20, 30)], &[(5, 25)]);
        assert_eq!((c.covered_ns, c.before_ns, c.after_ns), (10, 5, 5));
    }

    #[test]
    fn merge_joins_and_drops_empties() {
        assert_eq!(
            merge(vec![(5, 7), (1, 3), (2, 4), (9, 9), (7, 8)]),
            vec![(1, 4), (5, 8)]
        );
    }

    #[test]
    fn precision_and_recall() {
        let truth = [(0, 100), (200, 300)];
        let pred = [(50, 150), (200, 300)];
        let t = Tally::of(&pred, &truth);
        assert_eq!(
            t,
            Tally {
                predicted_ns: 200,
                truth_ns: 200,
                overlap_ns: 150
            }
        );
        assert_eq!(t.precision(), 0.75);
        assert_eq!(t.recall(), 0.75);
        assert_eq!(
            clip(&merge(truth.to_vec()), 50, 250),
            vec![(50, 100), (200, 250)]
        );
    }
}
