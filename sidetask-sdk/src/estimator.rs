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
}
