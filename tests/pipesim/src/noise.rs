//! The noise of a real cluster, drawn from a seed so that a noisy run repeats exactly: kernel
//! durations that vary (`--jitter`), micro-batches whose compute and message sizes vary with their
//! sequence length (`--seq-var`), host stalls (`--stall-every`, `--stall-ms`) and evaluation or
//! checkpoint pauses (`--pause-every`, `--pause-ms`).
//!
//! Every draw is a pure function of (seed, what it is for, its indices): every process of the job
//! draws the same value for the same micro-batch, and a rerun with the same seed draws them all
//! again.
use serde::{Deserialize, Serialize};

/// The noise of a job (all zero: none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Noise {
    pub seed: u64,
    /// Each kernel's duration is multiplied by a uniform draw in [1 - j, 1 + j], j = PCT / 100.
    pub jitter_pct: f64,
    /// Each micro-batch's compute and message sizes (per iteration) are multiplied by a uniform
    /// draw in [1 - v, 1 + v], the same on every rank.
    pub seq_var_pct: f64,
    /// Every this many iterations (0: never) one rank's host stalls for `stall_ns` at a point of
    /// its iteration drawn from the seed.
    pub stall_every: u32,
    pub stall_ns: u64,
    /// Every this many iterations (0: never) every rank pauses `pause_ns` after the iteration
    /// (the GPUs idle, as during an evaluation or a checkpoint).
    pub pause_every: u32,
    pub pause_ns: u64,
    /// The first iteration's kernels take this many percent longer: a real job's warm-up (the
    /// allocator growing, autotuning, compilation), which makes the pipeline's bubbles in it
    /// unlike the later ones.
    #[serde(default)]
    pub warmup_pct: f64,
}

/// What a draw is for (keeps the streams of draws apart).
#[repr(u64)]
enum Purpose {
    Jitter = 1,
    SeqVar = 2,
    StallRank = 3,
    StallAt = 4,
}

/// splitmix64.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Noise {
    /// A uniform draw in [0, 1) for `purpose` and `keys`.
    fn unit(&self, purpose: Purpose, keys: &[u64]) -> f64 {
        let mut h = mix(self.seed ^ mix(purpose as u64));
        for &k in keys {
            h = mix(h ^ k);
        }
        (h >> 11) as f64 / (1u64 << 53) as f64
    }

    /// 1 + a uniform draw in [-pct, pct] percent.
    fn around_one(&self, pct: f64, purpose: Purpose, keys: &[u64]) -> f64 {
        if pct <= 0.0 {
            return 1.0;
        }
        1.0 + (2.0 * self.unit(purpose, keys) - 1.0) * pct / 100.0
    }

    /// Checks the flags; the message is one line.
    pub fn validate(&self) -> Result<(), String> {
        for (flag, v, max) in [
            ("--jitter", self.jitter_pct, 90.0),
            ("--seq-var", self.seq_var_pct, 50.0),
            ("--warmup", self.warmup_pct, 400.0),
        ] {
            if !v.is_finite() || !(0.0..=max).contains(&v) {
                return Err(format!("{flag} must be a percentage in 0..={max}, got {v}"));
            }
        }
        if (self.stall_every > 0) != (self.stall_ns > 0) {
            return Err("--stall-every and --stall-ms go together".into());
        }
        if (self.pause_every > 0) != (self.pause_ns > 0) {
            return Err("--pause-every and --pause-ms go together".into());
        }
        Ok(())
    }

    /// The factor of kernel `index` of rank `rank`'s iteration `it` (the first iteration's with
    /// its warm-up).
    pub fn jitter(&self, it: u32, rank: u32, index: u64) -> f64 {
        let warmup = if it == 0 {
            1.0 + self.warmup_pct / 100.0
        } else {
            1.0
        };
        warmup
            * self.around_one(
                self.jitter_pct,
                Purpose::Jitter,
                &[u64::from(it), u64::from(rank), index],
            )
    }

    /// The size factor of micro-batch `mb` in iteration `it` (compute and messages).
    pub fn seq_scale(&self, it: u32, mb: u32) -> f64 {
        self.around_one(
            self.seq_var_pct,
            Purpose::SeqVar,
            &[u64::from(it), u64::from(mb)],
        )
    }

    /// Iteration `it`'s host stall, if it has one: (the rank, how far into its program, 0..1).
    pub fn stall(&self, it: u32, world: u32) -> Option<(u32, f64)> {
        if self.stall_every == 0 || !(it + 1).is_multiple_of(self.stall_every) || world == 0 {
            return None;
        }
        let r = (self.unit(Purpose::StallRank, &[u64::from(it)]) * f64::from(world)) as u32;
        Some((
            r.min(world - 1),
            self.unit(Purpose::StallAt, &[u64::from(it)]),
        ))
    }

    /// Whether every rank pauses after iteration `it` (never after the last one).
    pub fn pause_after(&self, it: u32, iterations: u32) -> bool {
        self.pause_every > 0 && (it + 1).is_multiple_of(self.pause_every) && it + 1 < iterations
    }

    /// Whether any noise is on.
    pub fn any(&self) -> bool {
        self.jitter_pct > 0.0
            || self.seq_var_pct > 0.0
            || self.warmup_pct > 0.0
            || self.stall_every > 0
            || self.pause_every > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_repeat_from_the_seed_and_stay_in_range() {
        let n = Noise {
            seed: 7,
            jitter_pct: 10.0,
            seq_var_pct: 20.0,
            stall_every: 2,
            stall_ns: 5,
            pause_every: 3,
            pause_ns: 9,
            warmup_pct: 0.0,
        };
        let other = Noise { seed: 8, ..n };
        let mut differs = false;
        for i in 0..200 {
            let j = n.jitter(1, 2, i);
            assert!((0.9..=1.1).contains(&j));
            assert_eq!(j, n.jitter(1, 2, i));
            differs |= j != other.jitter(1, 2, i);
            let s = n.seq_scale(3, i as u32);
            assert!((0.8..=1.2).contains(&s));
        }
        assert!(differs);
        assert!(n.stall(0, 4).is_none());
        let (r, at) = n.stall(1, 4).unwrap();
        assert!(r < 4 && (0.0..1.0).contains(&at));
        assert_eq!(n.stall(1, 4), Some((r, at)));
        assert!(n.pause_after(2, 10) && !n.pause_after(1, 10) && !n.pause_after(2, 3));
        assert_eq!(Noise::default().jitter(0, 0, 0), 1.0);
        let warm = Noise {
            warmup_pct: 50.0,
            ..Noise::default()
        };
        assert_eq!((warm.jitter(0, 1, 2), warm.jitter(1, 1, 2)), (1.5, 1.0));
        assert!(warm.any());
        assert!(!Noise::default().any());
        assert!(Noise {
            stall_every: 1,
            ..Noise::default()
        }
        .validate()
        .is_err());
    }
}
