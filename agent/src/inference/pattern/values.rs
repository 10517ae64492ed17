//! The values learnt at a position of the pattern, carried along its chain of predecessors
//! (newest first), and which of them a prediction is made from.
use crate::inference::obs::Ns;
use crate::inference::sizes;

/// Values kept along a chain of predecessors (and an anchor's offsets at a position).
pub const VALUES: usize = 5;

/// A chain's first value is set aside while it holds at most this many ([`Values::learnt`]).
const FIRST_ASIDE_UNTIL: usize = 3;

/// The newest values along a chain, newest first.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Values {
    pub(super) v: [Ns; VALUES],
    /// The bytes each value's bubble followed (its op's, [`super::super::obs::CommSig::followed_bytes`]).
    bytes: [u64; VALUES],
    pub(super) n: usize,
    /// The oldest value kept is the chain's first: the position's first time, in the job's first
    /// iteration (or the agent's first look at a running job).
    pub(super) first: bool,
    /// Whether the values scaled by their bytes predicted the chain's values better
    /// ([`sizes::rescored`]).
    scaled_score: i8,
}

impl Values {
    /// Value `v` of a bubble that followed `bytes`, after the `older` values of its chain.
    pub(super) fn with(v: Ns, bytes: u64, older: Option<Values>) -> Values {
        let (vs, n) = newest_first(v, older.as_ref().map_or(&[], |o| &o.v[..o.n]));
        let (b, _) = newest_first(bytes, older.as_ref().map_or(&[], |o| &o.bytes[..o.n]));
        let scaled_score = older.map_or(0, |o| {
            let scaled = o.scaled_to(bytes).and_then(|s| s.expected());
            sizes::rescored(o.scaled_score, o.expected(), scaled, v)
        });
        Values {
            v: vs,
            bytes: b,
            n,
            first: older.is_none_or(|o| o.first && o.n < VALUES),
            scaled_score,
        }
    }

    /// The values as they would be for a bubble that follows `bytes` ([`sizes::scaled`]).
    fn scaled_to(&self, bytes: u64) -> Option<Values> {
        let v = sizes::scaled(&self.v[..self.n], &self.bytes[..self.n], bytes)?;
        Some(Values {
            v,
            bytes: [bytes; VALUES],
            ..*self
        })
    }

    /// What the values predict: the median of [`Values::regime`] of [`Values::learnt`]; `None`
    /// while fewer than two agree.
    fn expected(&self) -> Option<Ns> {
        let (kept, n) = self.learnt().regime();
        (n >= 2).then(|| median(&kept[..n]))
    }

    /// The values to predict a bubble that follows `bytes` from: these, or these scaled to it
    /// where they predicted the chain's values better ([`Values::scaled_score`] above 0). Unlike
    /// an anchor's offsets, a length is not scaled on steadiness alone: a bubble's length from
    /// its start holds more than the micro-batch it waits for, and with two or three values the
    /// scaled ones were steadier by chance often enough to cost torchtitan's ZBV job with noise
    /// 0.02-0.03 of its harvest (paired runs, docs/performance.md 2026-12-08).
    pub(super) fn for_bytes(self, bytes: u64) -> Values {
        match self.scaled_to(bytes) {
            Some(s) if self.scaled_score > 0 => s,
            _ => self,
        }
    }

    /// The values to learn from: the first one set aside while one or two later ones came and it
    /// is unlike each of them (once three came, [`Values::regime`]'s groups outvote it); it still
    /// bounds the shortest end ([`super::Pattern::predict`]). A job's first iteration runs its
    /// warm-up (the allocator growing, autotuning, communicators connecting on first use,
    /// compilation), and the pipeline's bubbles in it can differ from the rest: on torchtitan's
    /// ZBV job the iteration-start bubbles of the last stages were 19.5 ms in the first iteration
    /// and 26.9-29.2 ms after, and the first value, shorter, kept the positions' confidence below
    /// the grants' bar for two more iterations.
    pub(super) fn learnt(&self) -> Values {
        let mut out = *self;
        let n = self.n;
        if self.first
            && (2..=FIRST_ASIDE_UNTIL).contains(&n)
            && !self.v[..n - 1].iter().any(|&x| near(x, self.v[n - 1]))
        {
            out.n -= 1;
            out.first = false;
        }
        out
    }

    /// The values to predict from: the largest group of values within [`NEAR_SHARE`] of one of
    /// them (on a tie, the group of the newest), unless the newest two agree with each other and
    /// moved away from the rest the same way (the job changed: adopted after two observations, not
    /// one). A value from a misaligned early iteration or one host stall does not move it.
    pub(super) fn regime(&self) -> ([Ns; VALUES], usize) {
        let all = &self.v[..self.n];
        let mut out = [0; VALUES];
        if self.n >= 3 && near(all[1], all[0]) && !all[2..].iter().any(|&x| near(x, all[0])) {
            out[..2].copy_from_slice(&all[..2]);
            return (out, 2);
        }
        let c = largest_group_centre(all);
        let mut n = 0;
        for &x in all.iter().filter(|&&x| near(x, c)) {
            out[n] = x;
            n += 1;
        }
        (out, n)
    }
}

/// `x`, then the newest of `older` (newest first): at most [`VALUES`] values, and how many.
pub fn newest_first(x: Ns, older: &[Ns]) -> ([Ns; VALUES], usize) {
    let mut v = [0; VALUES];
    v[0] = x;
    let k = older.len().min(VALUES - 1);
    v[1..=k].copy_from_slice(&older[..k]);
    (v, k + 1)
}

/// The value of `all` (not empty) that the most values are [`near`]; on a tie, the first (the
/// newest, values being newest first).
pub fn largest_group_centre(all: &[Ns]) -> Ns {
    let mut best = (0, 0);
    for (k, &c) in all.iter().enumerate() {
        let size = all.iter().filter(|&&x| near(x, c)).count();
        if size > best.1 {
            best = (k, size);
        }
    }
    all[best.0]
}

/// Whether `x` is within `NEAR_SHARE` of `c`: the same bubble.
pub fn near(x: Ns, c: Ns) -> bool {
    x.abs_diff(c) as f64 <= NEAR_SHARE * c.max(1) as f64
}

/// Whether `learnt` ([`Values::learnt`] of `all`) is a position's second value alone, its first
/// (longer: the job's warm-up) set aside.
pub(super) fn after_a_longer_first(all: &Values, learnt: &Values) -> bool {
    all.n == 2 && learnt.n == 1 && all.v[1] > all.v[0]
}

/// The spread taken for a lone value that follows a longer one set aside (the position's second
/// value, `after_a_longer_first`; an anchor's second offset), as a share of it.
pub const LONE_SPREAD_SHARE: Ns = 10;

/// The newest values whose shortest bounds a prediction even outside its group.
pub(super) const RECENT_SHORT: usize = 3;

/// Values within this share of each other are the same bubble (a few percent of kernel noise,
/// and the host's wake-ups).
pub(super) const NEAR_SHARE: f64 = 0.2;

/// The median of at most [`VALUES`] values (of the middle two, their mean).
pub fn median(v: &[Ns]) -> Ns {
    let mut s = [0; VALUES];
    s[..v.len()].copy_from_slice(v);
    let s = &mut s[..v.len()];
    s.sort_unstable();
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2
    }
}
