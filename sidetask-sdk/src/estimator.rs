//! Online estimate of a step's duration: `margin` x a high quantile of the last `window` samples.
//!
//! Conservative by construction: an overrun (a slow step) raises the estimate at once and is
//! forgotten only after `window` newer samples; until the first sample there is no estimate.
use std::collections::VecDeque;

#[derive(Clone, Debug)]
pub struct StepEstimator {
    samples: VecDeque<u64>,
    window: usize,
    quantile: f64,
    margin: f64,
    count: u64,
}

impl StepEstimator {
    pub fn new(window: usize, quantile: f64, margin: f64) -> Self {
        StepEstimator {
            samples: VecDeque::with_capacity(window.max(1)),
            window: window.max(1),
            quantile: quantile.clamp(0.0, 1.0),
            margin: margin.max(1.0),
            count: 0,
        }
    }

    pub fn record(&mut self, ns: u64) {
        if self.samples.len() == self.window {
            self.samples.pop_front();
        }
        self.samples.push_back(ns);
        self.count += 1;
    }

    /// Records `ns`, or the quantile the estimate is taken from where `ns` is above it: such a
    /// sample never raises the estimate, and it still ages the window's oldest sample out.
    pub fn record_at_most_estimate(&mut self, ns: u64) {
        let cap = self.quantile_ns(self.quantile).unwrap_or(ns);
        self.record(ns.min(cap));
    }

    /// The lowest the estimate comes down to by [`StepEstimator::relax`]: `margin` x the median.
    pub fn floor_ns(&self) -> Option<u64> {
        self.median_ns()
            .map(|m| (m as f64 * self.margin).ceil() as u64)
    }

    /// Replaces the window's largest sample with its median; false where they are equal.
    pub fn relax(&mut self) -> bool {
        let (Some(med), Some(max)) = (self.median_ns(), self.samples.iter().copied().max()) else {
            return false;
        };
        if max <= med {
            return false;
        }
        if let Some(s) = self.samples.iter_mut().find(|s| **s == max) {
            *s = med;
        }
        true
    }

    /// Samples recorded in all.
    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn is_learned(&self) -> bool {
        !self.samples.is_empty()
    }

    /// The `q` quantile (nearest rank) of the window.
    pub fn quantile_ns(&self, q: f64) -> Option<u64> {
        if self.samples.is_empty() {
            return None;
        }
        let mut v: Vec<u64> = self.samples.iter().copied().collect();
        v.sort_unstable();
        let rank = ((q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize).clamp(1, v.len());
        Some(v[rank - 1])
    }

    pub fn median_ns(&self) -> Option<u64> {
        self.quantile_ns(0.5)
    }

    /// The time a step must have left to be started.
    pub fn estimate_ns(&self) -> Option<u64> {
        self.quantile_ns(self.quantile)
            .map(|q| (q as f64 * self.margin).ceil() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converges_to_margin_times_high_quantile() {
        let mut e = StepEstimator::new(64, 0.9, 1.2);
        assert_eq!(e.estimate_ns(), None);
        // A first slow outlier, then 1 ms +- 5 % (deterministic pseudo-noise).
        e.record(10_000_000);
        let mut x: u64 = 12345;
        for _ in 0..500 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let noise = (x >> 33) % 100_001; // 0..=100 µs
            e.record(950_000 + noise);
        }
        let est = e.estimate_ns().unwrap();
        assert!(
            (1_140_000..=1_260_000).contains(&est),
            "estimate {est} ns is not about 1.2 x p90 of 0.95..1.05 ms"
        );
        let med = e.median_ns().unwrap();
        assert!((950_000..=1_050_000).contains(&med));
        assert_eq!(e.count(), 501);
    }

    #[test]
    fn overrun_raises_estimate_at_once() {
        let mut e = StepEstimator::new(8, 0.9, 1.0);
        for _ in 0..8 {
            e.record(100);
        }
        assert_eq!(e.estimate_ns(), Some(100));
        e.record(1_000);
        assert_eq!(e.estimate_ns(), Some(1_000));
    }

    #[test]
    fn relaxing_comes_down_to_margin_times_the_median_and_no_lower() {
        let mut e = StepEstimator::new(8, 1.0, 1.2);
        for ns in [100, 100, 100, 100, 100, 900, 900] {
            e.record(ns);
        }
        assert_eq!(e.estimate_ns(), Some(1080));
        assert_eq!(e.floor_ns(), Some(120));
        assert!(e.relax());
        assert_eq!(e.estimate_ns(), Some(1080), "one of the two 900s is left");
        assert!(e.relax());
        assert_eq!(e.estimate_ns(), Some(120));
        assert!(!e.relax(), "nothing above the median");
        assert_eq!(e.estimate_ns(), Some(120));
        assert_eq!(e.count(), 7, "relaxing records nothing");
    }

    #[test]
    fn capped_samples_never_raise_the_estimate_and_age_the_window() {
        let mut e = StepEstimator::new(4, 1.0, 1.0);
        for ns in [100, 100, 900, 900] {
            e.record(ns);
        }
        assert_eq!(e.estimate_ns(), Some(900));
        e.record_at_most_estimate(5_000);
        assert_eq!(e.estimate_ns(), Some(900), "a capped sample raised it");
        for _ in 0..3 {
            e.record_at_most_estimate(200);
        }
        assert_eq!(
            e.estimate_ns(),
            Some(900),
            "the capped 900 is still in the window"
        );
        e.record_at_most_estimate(200);
        assert_eq!(e.estimate_ns(), Some(200), "the slow samples aged out");
    }
}
