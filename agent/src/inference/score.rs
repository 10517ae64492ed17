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

#[cfg(test)]
mod tests {
    use super::*;

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
