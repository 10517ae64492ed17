//! How much of this machine's CPU the hypervisor gave to other guests (`steal` in `/proc/stat`):
//! the test bed's simulated GPUs run on the CPU, so a shared host in a slow spell (measured on the
//! development VM on 2026-12-02: 1-2 % when quiet, up to 35 % for tens of seconds) slows every
//! simulated kernel and delays every completion. Timed tests and benchmarks say how much was stolen
//! while they ran, and do not count runs that lost more than [`STEAL_LIMIT`].

/// Stolen share above which a timed run is not evidence.
pub const STEAL_LIMIT: f64 = 0.05;

/// (steal, total) CPU time of the machine so far, in clock ticks (`/proc/stat`'s first line).
pub fn cpu_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let v: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|x| x.parse().ok())
        .collect();
    (v.len() == 8).then(|| (v[7], v.iter().sum()))
}

/// The share of the machine's CPU time stolen between two [`cpu_ticks`] readings (0 when the
/// kernel does not say).
pub fn stolen_share(from: Option<(u64, u64)>, to: Option<(u64, u64)>) -> f64 {
    match (from, to) {
        (Some((s0, t0)), Some((s1, t1))) if t1 > t0 => {
            s1.saturating_sub(s0) as f64 / (t1 - t0) as f64
        }
        _ => 0.0,
    }
}

/// Runs `f`; with what it returned, the share of the machine's CPU time stolen meanwhile.
pub fn stolen_during<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let a = cpu_ticks();
    let r = f();
    (r, stolen_share(a, cpu_ticks()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stolen_time_is_a_share_of_the_machines_cpu_time() {
        let (v, share) = stolen_during(|| {
            // Some CPU time, so that the counters move.
            let t = std::time::Instant::now();
            while t.elapsed() < std::time::Duration::from_millis(30) {}
            7
        });
        assert_eq!(v, 7);
        assert!((0.0..=1.0).contains(&share), "{share}");
        assert!(cpu_ticks().is_some_and(|(steal, total)| steal <= total));
        assert_eq!(stolen_share(Some((5, 100)), Some((15, 200))), 0.1);
        assert_eq!(stolen_share(None, Some((15, 200))), 0.0);
    }
}
