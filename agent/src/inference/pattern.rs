//! Learns the recurring sequence of a timeline's communication ops, without a marker, and what is
//! learnt at each position of it: the lengths of the bubbles learnt at an op (see [`Part`]) and how
//! long the op waits for its peers before it transfers.
//!
//! Ops are compared by (communicator, kind, peer, and for a collective its log2 size bucket: see
//! `Key`); a neighbouring bucket is a near-match (sizes vary between iterations). Every new op
//! is aligned with the recent history by an incremental local alignment of the sequence with
//! itself (Smith-Waterman, one row per op, indexed by the lag between the aligned ops): the op's
//! *predecessor* is the earlier op whose preceding context matches best. Insertions (an extra
//! collective), deletions (a missing op), other sizes and a changed micro-batch count cost a
//! little score, not the alignment.
//! * A rare op (one per iteration, say) weighs more than a frequent one in a match, a mismatch or
//!   a gap, so that the first ops of the second iteration already align with the first iteration
//!   rather than with the run of look-alike ops before them.
//! * Scores decay geometrically (a change is followed within a few dozen ops); of lags that score
//!   (nearly) alike, as inside a long run of identical ops, the one the previous op was aligned at
//!   is kept.
//! * Once a lag has held for a few ops, the ops of the period before that match at it are re-linked
//!   to it (early in the second iteration the context is too short to tell the period from a
//!   repetition inside the iteration), and the first iteration's links inside itself are cut: at
//!   once for the ops of one period before, then one op at a time, each new op's predecessor,
//!   while the lag holds. A position's chain so never walks into other positions' bubbles.
//! * The iteration's period shows in its rarest op (the gradient all-reduce, the optimizer's
//!   collectives: once per iteration): the longest recurrence distance of a key, once the
//!   sequence matches itself at that lag. When it is known, an op is aligned one period back (or a
//!   few ops off it, past an insertion or a deletion) if an op of its key is there: repetitions
//!   inside the iteration (the steady state of a pipeline schedule) are not taken for it.
//!
//! What is learnt at a position is carried along the chain of predecessors (the newest few values;
//! a missed iteration is skipped over): it ages out as new values come, it is never wiped on one
//! mismatch. The iteration's period (ops and ns) is the lag most of the newest ops are aligned at.
use super::obs::{CommKind, CommSig, Ns};
use std::collections::{HashMap, VecDeque};
use values::{after_a_longer_first, Values, NEAR_SHARE, RECENT_SHORT};
pub use values::{largest_group_centre, median, near, newest_first, LONE_SPREAD_SHARE, VALUES};

mod values;

/// Index of an op in the timeline's sequence (0 = its first op).
pub type OpIndex = u64;

/// What is learnt at an op: the bubble that begins when the compute before it has drained (0: the
/// op is the first the host issued after that compute), the ones that begin after the op's transfer
/// at its begin (1: a send) and at its end (2: a receive, a collective), and how long it waits for
/// its peers before it transfers ([`WAIT`]).
pub type Part = usize;
/// The part that learns how long the op waits before its transfer begins.
pub const WAIT: Part = 3;
/// The whole bubble that opened at bubble part `p` (0..=2) is learnt at part `WHOLE + p`: from its
/// start to its end, across the ends of ops that moved nothing inside it, where part `p` learns
/// only up to the first such end (see `Timeline::moved_nothing`). What is forecast when a bubble
/// opens. See [`whole`].
pub const WHOLE: Part = 4;
/// The bubble that begins when the compute before a wait on the op has drained, where the host
/// issued no op between that compute and the next (the op was issued before it: a receive that a
/// backward-input kernel waits on, issued before the weight-gradient kernels queued ahead of
/// that kernel, as in zero-bubble schedules). Not part 0: the op can also be the first issued
/// after another compute, and one position learning two bubbles trusts neither.
pub const AWAITED: Part = 7;
/// Where the whole of a bubble that opened at [`AWAITED`] is learnt.
const AWAITED_WHOLE: Part = 8;
/// A bubble that opens where the one before it opened, if that one lasted a millisecond or more
/// (the same op, the same part: the GPU ran a little between them, no op was issued), is learnt
/// apart from it (a shorter one first is a host's late wake-up now and then, and the real bubble
/// that follows stays the position's). Learnt at the same part, the
/// second replaced the first's value: on Megatron's TP2 x PP4 x DP2 job a 24 ms wait for a
/// batched send and receive was followed by a 0.2-0.5 ms gap after the receive's transfer as it
/// was known then, and the position predicted 0.2-0.5 ms for the next 24 ms wait (GPipe with
/// batched groups and 2 ms sends: forecast recall 0.53, 0.98-0.99 since 2026-12-07).
pub const REPEAT: Part = 9;
/// Where the whole of a bubble that opened at [`REPEAT`] is learnt.
const REPEAT_WHOLE: Part = 10;
const PARTS: usize = 11;

/// The part that learns the whole bubble opened at bubble part `part` (see [`WHOLE`]).
pub fn whole(part: Part) -> Part {
    match part {
        AWAITED => AWAITED_WHOLE,
        REPEAT => REPEAT_WHOLE,
        p => WHOLE + p,
    }
}

/// Whether `part` learns (part of) a bubble from where it opened: 0..=2, [`AWAITED`] and
/// [`REPEAT`].
fn opens_a_bubble(part: Part) -> bool {
    part < WAIT || part == AWAITED || part == REPEAT
}

/// What the pattern expects of the bubble that opens at an op.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prediction {
    pub expected_ns: Ns,
    /// The shortest of the values the expectation is made from (what a grant must not outlast).
    pub shortest_ns: Ns,
    pub spread_ns: Ns,
    /// 0..=1: grows with the number of values, shrinks with their spread.
    pub confidence: f64,
}

/// What the alignment compares of an op: its communicator, kind and peer, and for a collective
/// the log2 bucket of its size. A point-to-point op's size is left out: a pipeline's messages are
/// its micro-batches' activations and gradients, whose size follows the micro-batch's sequence
/// length, and where lengths vary (packed or unpadded batches) the log2 bucket of the same
/// send flips between iterations whenever its sizes straddle a power of two; with the size in
/// the key, those ops did not replay the iteration before and their positions' values did not
/// chain. (torch's 1F1B with `--seq-var 20` alone, one run of seed 9: 0.24 of its idle time granted
/// with sizes in the key, 0.28 without, 0.87 without that noise: the rest is the schedule's
/// bubbles changing with the micro-batches' lengths.) Its peer on its communicator names the
/// stage it talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    comm: u64,
    kind: CommKind,
    peer: i32,
    bucket: u8,
}

impl Key {
    fn of(sig: &CommSig) -> Key {
        Key {
            comm: sig.comm,
            kind: sig.kind,
            peer: sig.peer,
            bucket: if sig.collective() {
                sig.size_bucket()
            } else {
                0
            },
        }
    }

    /// Alignment score of two ops, the new one of `weight`: (score, exact match).
    fn score(self, o: Key, weight: f32) -> (f32, bool) {
        if self == o {
            (weight, true)
        } else if self.comm == o.comm
            && self.kind == o.kind
            && self.peer == o.peer
            && self.bucket.abs_diff(o.bucket) <= 1
        {
            (weight / 2.0, false)
        } else {
            (-MISMATCH - weight, false)
        }
    }
}

/// An op weighs 1 + log2(ops in the history / ops of its key), within these bounds: what a match
/// of it gains.
const WEIGHT_MIN: f32 = 1.0;
const WEIGHT_MAX: f32 = 4.0;
/// A mismatch loses this plus the new op's weight; leaving an op unaligned, this plus its weight.
const MISMATCH: f32 = 3.0;
const GAP: f32 = 2.0;
/// Each op's score carries this share of the score before it (a match run saturates at
/// its weight / (1 - DECAY)).
const DECAY: f32 = 0.9;
/// Lags scoring within this share of the best are alike (the previous op's lag is kept).
const ALIKE: f32 = 0.05;
/// A lag that held for this many ops re-links the period before to it.
const STABLE_OPS: u32 = 4;
/// A predecessor needs this much matched context (a rare op, or a few frequent ones).
const MIN_PRED: f32 = 3.5;
/// Ops of history aligned against (the longest iteration the pattern can follow, in ops, is half
/// of it). Once the iteration is known, lags up to three iterations (and a margin) are aligned at.
pub const HISTORY: usize = 2048;
/// Predecessors walked past ops that learnt nothing (a missed iteration, a bubble that did not
/// happen at a position).
const WALK: usize = 4;
/// Observations after which a position is trusted fully (before its spread is counted).
const FULL_CONFIDENCE: usize = 3;
/// A young position's single value counts as this many observations while the newest ops
/// replay the ops one lag before them (`Pattern::replaying`): at least [`REPLAY_OPS`]
/// consecutive begins spaced as theirs were, to within [`REPLAY_SHARE`] (the job's jitter on
/// the 2-core test bed is 2-4 % of a 10-60 ms spacing) plus [`REPLAY_SLACK_NS`], and at most one
/// spacing in [`REPLAY_UNLIKE_OF`] (of begins, and of ends) unlike (a host stall, a wake-up
/// late: the ops after it shifted, not the iteration changed); its spread is
/// then [`REPLAYED_SPREADS`] times the largest difference of those alike spacings from the
/// iteration before's (a bubble is the gap between two such times, its drain and its data), no
/// narrower than [`REPLAY_SHARE`] of the value and no wider than [`NEAR_SHARE`]. So a steady job
/// is granted in its second iteration, not only its third. A job whose first iteration differs
/// from the second (allocator and autotuning warm-up, lazy communicator setup), or whose kernels
/// and messages vary by more than that, does not replay, and waits for a second value as before;
/// so does a position whose bubble comes only now and then (it is no longer young).
const REPLAYED_SEEN: usize = 2;
const REPLAY_OPS: u32 = 2;
/// At most one spacing in this many may be unlike the iteration before's.
const REPLAY_UNLIKE_OF: u32 = 4;
const REPLAY_SHARE: f64 = 0.05;
const REPLAY_SLACK_NS: Ns = 100_000;
/// A replayed value's spread, in the largest difference of the replayed spacings.
const REPLAYED_SPREADS: f64 = 2.0;
/// Begins closer than this (a group's ops) say nothing about replaying.
const REPLAY_TOGETHER_NS: u64 = 50_000;
/// A position is young (its single value may count as two, see [`REPLAYED_SEEN`]) while it came
/// at most this many times before.
const YOUNG_OCCURRENCES: usize = 2;
/// The ops before a prediction that must replay the ops one lag before them (fewer where the
/// history begins: early in the second iteration).
const REPLAY_WINDOW: u64 = 8;
/// The period is the lag at which most of this many of the newest ops are aligned.
const PERIOD_WINDOW: usize = 256;
/// An op is aligned within this many ops of one iteration back, when the iteration is known.
const PERIOD_SLACK: usize = 2;
/// A recurrence distance is the iteration when at least this share of the ops of the last one
/// match the op that distance before them.
const PERIOD_MATCH: f64 = 0.75;
/// Without an iteration found from its rarest op, the most common lag is the iteration only once
/// this many ops were seen (enough for a once-per-iteration op to show up)...
const MIN_FALLBACK_OPS: usize = 32;
/// ...and while no key recurs less often than every this many lags.
const RARER_THAN_LAG: f64 = 1.5;
/// An op is aligned one iteration back only while that scores at least this share of the best lag.
const NEAR_PERIOD_SHARE: f32 = 0.5;
/// How often (ops) the iteration is looked for again.
const PERIOD_EVERY: u64 = 16;

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: Key,
    /// Its weight when it was issued.
    weight: f32,
    t: Ns,
    pred: Option<OpIndex>,
    /// When its transfer began and when it ended on the GPU (0: not yet seen).
    began: Ns,
    ended: Ns,
    /// The bytes its bubbles follow ([`CommSig::followed_bytes`]).
    bytes: u64,
    /// What this op's own bubbles lasted, once known, with the older values of their chains.
    values: [Option<Values>; PARTS],
}

/// How a key recurs.
#[derive(Clone, Copy, Debug)]
struct Recur {
    last: OpIndex,
    longest: usize,
    longest_at: OpIndex,
}

/// The learnt pattern of one timeline.
#[derive(Debug)]
pub struct Pattern {
    hist: VecDeque<Entry>,
    /// Index of `hist[0]`.
    first: OpIndex,
    /// Alignment scores of the newest op, by lag (index 0 unused).
    row: Vec<f32>,
    next_row: Vec<f32>,
    /// The newest op's match scores by lag (0 where it did not match).
    diag: Vec<f32>,
    /// The lags of the newest ops' alignments (0: none).
    lags: VecDeque<usize>,
    /// Ops of each key in the history.
    counts: HashMap<Key, u32>,
    /// The lag the newest op was aligned at, and for how many ops in a row.
    last_lag: usize,
    stable: u32,
    /// The lags aligned at: 1..=max_lag.
    max_lag: usize,
    /// Per key, where it was last, and the longest recent distance between two of it (and when
    /// that was).
    recur: HashMap<Key, Recur>,
    /// The iteration (ops), once its rarest op recurred and the sequence matches itself at it.
    iteration: Option<usize>,
}

impl Default for Pattern {
    fn default() -> Self {
        Pattern {
            hist: VecDeque::with_capacity(HISTORY),
            first: 0,
            row: vec![0.0; HISTORY + 2],
            next_row: vec![0.0; HISTORY + 2],
            diag: vec![0.0; HISTORY + 2],
            lags: VecDeque::with_capacity(PERIOD_WINDOW),
            counts: HashMap::new(),
            last_lag: 0,
            stable: 0,
            max_lag: HISTORY,
            recur: HashMap::new(),
            iteration: None,
        }
    }
}

impl Pattern {
    pub fn new() -> Self {
        Self::default()
    }

    fn entry(&self, i: OpIndex) -> Option<&Entry> {
        let k = i.checked_sub(self.first)? as usize;
        self.hist.get(k)
    }

    /// Ops issued so far.
    pub fn ops(&self) -> u64 {
        self.first + self.hist.len() as u64
    }

    /// An op of `sig` was issued at `t`: aligns it; returns its index.
    pub fn on_issue(&mut self, sig: CommSig, t: Ns) -> OpIndex {
        let key = Key::of(&sig);
        let n = self.hist.len();
        let lags = n.min(self.max_lag);
        let (mut best, mut best_lag) = (0.0, 0usize);
        let seen = self.counts.get(&key).copied().unwrap_or(0) as f32;
        let weight = (1.0 + (n.max(1) as f32 / (seen + 1.0)).log2()).clamp(WEIGHT_MIN, WEIGHT_MAX);
        self.next_row[lags + 1] = 0.0;
        for d in (1..=lags).rev() {
            let other = &self.hist[n - d];
            let (s, _) = key.score(other.key, weight);
            let diag = DECAY * self.row[d] + s;
            // This op left unaligned, or the history op it would face skipped.
            let ins = if d > 1 {
                DECAY * self.row[d - 1] - GAP - weight
            } else {
                0.0
            };
            let del = self.next_row[d + 1] - GAP - other.weight;
            self.next_row[d] = diag.max(ins).max(del).max(0.0);
            self.diag[d] = if s > 0.0 { diag } else { 0.0 };
            // Descending lags with >=: on a tie, the smaller lag (the nearer predecessor).
            if s > 0.0 && diag >= best {
                best = diag;
                best_lag = d;
            }
        }
        std::mem::swap(&mut self.row, &mut self.next_row);
        for d in lags + 1..self.row.len() {
            self.row[d] = 0.0;
        }
        // One iteration back (or a few ops off it), when the iteration is known; otherwise, of
        // lags that score alike, the previous op's is kept.
        let near_period = self.iteration.filter(|&p| p <= lags).and_then(|p| {
            (p.saturating_sub(PERIOD_SLACK).max(1)..=(p + PERIOD_SLACK).min(lags))
                .filter(|&d| self.hist[n - d].key == key)
                .max_by(|&a, &b| {
                    self.diag[a]
                        .total_cmp(&self.diag[b])
                        .then(b.abs_diff(p).cmp(&a.abs_diff(p)))
                })
        });
        // ...unless another lag matches much better (the job changed its iteration).
        if let Some(d) = near_period.filter(|&d| self.diag[d] >= NEAR_PERIOD_SHARE * best) {
            best_lag = d;
            best = self.diag[d].max(MIN_PRED);
        } else if (1..=lags).contains(&self.last_lag)
            && self.diag[self.last_lag] >= best * (1.0 - ALIKE)
        {
            best_lag = self.last_lag;
            best = self.diag[best_lag];
        }
        let lag = if best >= MIN_PRED { best_lag } else { 0 };
        self.stable = if lag > 0 && lag == self.last_lag {
            self.stable + 1
        } else {
            0
        };
        self.last_lag = lag;
        if self.lags.len() == PERIOD_WINDOW {
            self.lags.pop_front();
        }
        self.lags.push_back(self.last_lag);
        let index = self.ops();
        let pred = (best >= MIN_PRED).then(|| index - best_lag as u64);

        if self.hist.len() == HISTORY {
            if let Some(old) = self.hist.pop_front() {
                if let Some(c) = self.counts.get_mut(&old.key) {
                    *c -= 1;
                    if *c == 0 {
                        self.counts.remove(&old.key);
                    }
                }
            }
            self.first += 1;
            // Lags shift by one with the history: the row stays indexed by lag.
        }
        *self.counts.entry(key).or_default() += 1;
        let r = self.recur.entry(key).or_insert(Recur {
            last: index,
            longest: 0,
            longest_at: index,
        });
        let distance = (index - r.last) as usize;
        // The longest gap lately (a gap longer ago than a few of it is forgotten).
        if distance >= r.longest || index - r.longest_at > 4 * r.longest as u64 {
            r.longest = distance;
            r.longest_at = index;
        }
        r.last = index;
        if self.recur.len() > HISTORY {
            let oldest = index.saturating_sub(HISTORY as u64);
            self.recur.retain(|_, r| r.last >= oldest);
        }
        if index.is_multiple_of(PERIOD_EVERY) || self.iteration.is_none_or(|p| distance > p) {
            let found = self.find_iteration();
            if found != self.iteration {
                self.iteration = found;
                self.max_lag = found.map_or(HISTORY, |p| (3 * p + 64).min(HISTORY));
            }
        }
        if self.stable == STABLE_OPS {
            self.relink(index, lag);
        } else if self.stable > STABLE_OPS {
            // The relink's cut, carried on one op at a time while the lag holds: the new op's
            // predecessor keeps no link inside its own iteration.
            self.cut_inner_link(index - lag as u64, lag as u64);
        }
        self.hist.push_back(Entry {
            key,
            weight,
            t,
            pred,
            began: 0,
            ended: 0,
            bytes: sig.followed_bytes(),
            values: [None; PARTS],
        });
        index
    }

    /// The iteration: the longest recurrence distance of a key, if that key is rare (it occurs
    /// once in that many ops: the gradient all-reduce, not a send of the steady state) and the
    /// newest ops match the ops that distance before them. A job with no op that occurs once per
    /// iteration has none: its alignment is the local one alone.
    fn find_iteration(&self) -> Option<usize> {
        let n = self.hist.len();
        let (key, p) = self
            .recur
            .iter()
            .map(|(k, r)| (*k, r.longest))
            .filter(|&(_, d)| d > 0 && 2 * d <= n)
            .max_by_key(|&(_, d)| d)?;
        let occurrences = (n - 2 * p..n).filter(|&k| self.hist[k].key == key).count();
        if occurrences > 2 {
            return None;
        }
        let matched = (n - p..n)
            .filter(|&k| self.hist[k].key == self.hist[k - p].key)
            .count();
        (matched as f64 >= PERIOD_MATCH * p as f64 && !self.rarer_than(p)).then_some(p)
    }

    /// Aligns the ops of the period before op `i` that match the op `lag` before them at that
    /// lag, with what they learnt carried along the new chain; the ops of the period before those
    /// that were aligned at a much shorter lag (inside the first iteration: a repetition within
    /// it) keep only what they learnt themselves.
    fn relink(&mut self, i: OpIndex, lag: usize) {
        let lag = lag as u64;
        let cut_from = i.saturating_sub(2 * lag).max(self.first) + 1;
        for k in cut_from..=i.saturating_sub(lag) {
            self.cut_inner_link(k, lag);
        }
        let from = (i.saturating_sub(lag) + 1).max(self.first + lag);
        for k in from..i {
            let (Some(e), Some(o)) = (self.entry(k), self.entry(k - lag)) else {
                continue;
            };
            // An op already linked at the lag is rebuilt too: what its predecessor carried when
            // it learnt may have been cut since.
            if e.key != o.key {
                continue;
            }
            let own: [Option<Ns>; PARTS] = e.values.map(|v| v.map(|v| v.v[0]));
            let bytes = e.bytes;
            let idx = (k - self.first) as usize;
            self.hist[idx].pred = Some(k - lag);
            for (part, v) in own.iter().enumerate() {
                if let Some(v) = *v {
                    let older = self.chain_before(k, part);
                    self.hist[idx].values[part] = Some(Values::with(v, bytes, older));
                }
            }
        }
    }

    /// Op `k` keeps only what it learnt itself if it was aligned at less than half of `lag` (the
    /// lag that holds now, one iteration): a repetition inside its own iteration, from before the
    /// iteration was known. Its chain would walk on into other positions' bubbles (past ops that
    /// learnt nothing), and what it carried from them would reach the positions after it.
    fn cut_inner_link(&mut self, k: OpIndex, lag: u64) {
        let Some(e) = self.entry_mut(k) else {
            return;
        };
        if e.pred.is_some_and(|p| 2 * (k - p) < lag) {
            e.pred = None;
            let bytes = e.bytes;
            for v in e.values.iter_mut().flatten() {
                *v = Values::with(v.v[0], bytes, None);
            }
        }
    }

    /// The iteration found from the rarest op's recurrence (ops), if any.
    pub fn iteration(&self) -> Option<usize> {
        self.iteration
    }

    /// The op's predecessor, if it has one in the history.
    pub fn predecessor(&self, i: OpIndex) -> Option<OpIndex> {
        self.entry(i)?.pred
    }

    /// The values of the chain before `i` (walking past ops that learnt nothing).
    fn chain_before(&self, i: OpIndex, part: Part) -> Option<Values> {
        let mut at = self.entry(i)?.pred;
        for _ in 0..WALK {
            let e = self.entry(at?)?;
            if e.values[part].is_some() {
                return e.values[part];
            }
            at = e.pred;
        }
        None
    }

    /// The bytes op `i`'s bubbles follow ([`CommSig::followed_bytes`]; 0: not in the history).
    pub fn followed_bytes(&self, i: OpIndex) -> u64 {
        self.entry(i).map_or(0, |e| e.bytes)
    }

    /// Op `i`'s transfer began at `t` (the GPU's clock; what [`Pattern::predict`] compares with
    /// the ops one lag back, see `REPLAYED_SEEN`).
    pub fn began(&mut self, i: OpIndex, t: Ns) {
        if let Some(e) = self.entry_mut(i).filter(|e| e.began == 0) {
            e.began = t.max(1);
        }
    }

    /// Op `i` ended at `t` (the GPU's clock; as [`Pattern::began`]).
    pub fn ended(&mut self, i: OpIndex, t: Ns) {
        if let Some(e) = self.entry_mut(i).filter(|e| e.ended == 0) {
            e.ended = t.max(1);
        }
    }

    fn entry_mut(&mut self, i: OpIndex) -> Option<&mut Entry> {
        let k = i.checked_sub(self.first)? as usize;
        self.hist.get_mut(k)
    }

    /// Whether the ops up to op `i` replay the ops one lag before them (the lag of `i`'s
    /// predecessor): the last [`REPLAY_WINDOW`] ops have the keys of the ops that lag before them,
    /// and of those that began, at least [`REPLAY_OPS`] are spaced as theirs were, to within
    /// [`REPLAY_SHARE`] of the spacing plus [`REPLAY_SLACK_NS`], with at most one spacing in
    /// [`REPLAY_UNLIKE_OF`] that is not (ops that begin together, a group's, say nothing); the
    /// same of their ends, where they ended (a begin can be the host's pace, a receive posted
    /// early; an end is the data's). Until 2026-12-06 one unlike spacing was enough to say no: on
    /// the 2-core test bed DeepSpeed's blocking job rarely replayed at all (a wake-up 0.1-0.3 ms
    /// late between two ops 0.1-1.5 ms apart). `Some(the largest difference of an alike
    /// spacing)` where they replay.
    fn replaying(&self, i: OpIndex) -> Option<Ns> {
        let lag = self.entry(i).and_then(|e| e.pred).map(|p| i - p)?;
        // (time, time one lag back) of the ops that began, and of those that ended, newest first.
        let mut begun = [(0i64, 0i64); REPLAY_WINDOW as usize + 1];
        let mut ended = begun;
        let (mut nb, mut ne) = (0, 0);
        // The first iteration seen (ops 0..lag) is the job's warm-up: once `i`'s value was learnt
        // after it, ops compared with it say nothing about whether the job replays that value's
        // iteration (early in the third iteration the window reaches back to the second's end,
        // one lag after the first's).
        let floor = if i - lag >= lag { lag } else { 0 };
        for j in (i.saturating_sub(REPLAY_WINDOW)..=i).rev() {
            let (Some(e), Some(o)) = (
                self.entry(j),
                j.checked_sub(lag)
                    .filter(|&o| o >= floor)
                    .and_then(|o| self.entry(o)),
            ) else {
                // The history (or what it says about replaying) begins here.
                break;
            };
            if e.key != o.key {
                return None;
            }
            if e.began != 0 && o.began != 0 {
                begun[nb] = (e.began as i64, o.began as i64);
                nb += 1;
            }
            if e.ended != 0 && o.ended != 0 {
                ended[ne] = (e.ended as i64, o.ended as i64);
                ne += 1;
            }
        }
        // (spacings alike, spacings unlike, the largest difference of an alike one); ops that
        // begin together, a group's, say nothing.
        let agreed = |v: &[(i64, i64)]| -> (u32, u32, Ns) {
            let (mut n, mut off, mut dev) = (0, 0, 0);
            for w in v.windows(2) {
                let (now, before) = (w[0].0 - w[1].0, w[0].1 - w[1].1);
                if now.unsigned_abs() < REPLAY_TOGETHER_NS
                    && before.unsigned_abs() < REPLAY_TOGETHER_NS
                {
                    continue;
                }
                let tol = REPLAY_SHARE * before.unsigned_abs() as f64 + REPLAY_SLACK_NS as f64;
                let diff = (now - before).unsigned_abs();
                if diff as f64 > tol {
                    off += 1;
                } else {
                    n += 1;
                    dev = dev.max(diff);
                }
            }
            (n, off, dev)
        };
        let (b, b_off, b_dev) = agreed(&begun[..nb]);
        let (e, e_off, e_dev) = agreed(&ended[..ne]);
        (b >= REPLAY_OPS
            && REPLAY_UNLIKE_OF * b_off <= b + b_off
            && REPLAY_UNLIKE_OF * e_off <= e + e_off)
            .then_some(b_dev.max(e_dev))
    }

    /// How many times op `i`'s position came before it (its chain of predecessors, counted up
    /// to [`YOUNG_OCCURRENCES`] + 1).
    fn earlier_occurrences(&self, i: OpIndex) -> usize {
        let mut at = self.entry(i).and_then(|e| e.pred);
        let mut n = 0;
        while let Some(e) = at.and_then(|a| self.entry(a)) {
            n += 1;
            if n > YOUNG_OCCURRENCES {
                break;
            }
            at = e.pred;
        }
        n
    }

    /// Bubble `part` of op `i` lasted `ns`.
    pub fn record(&mut self, i: OpIndex, part: Part, ns: Ns) {
        let older = self.chain_before(i, part);
        let Some(k) = i.checked_sub(self.first) else {
            return;
        };
        if let Some(e) = self.hist.get_mut(k as usize) {
            // A second bubble of the same part of an op (rare) replaces the value.
            e.values[part] = Some(Values::with(ns, e.bytes, older));
        }
    }

    /// What is expected of bubble `part` of op `i`, opening now.
    pub fn predict(&self, i: OpIndex, part: Part) -> Option<Prediction> {
        // A wait's shortest value bounds when a transfer may begin: none is set aside, and it is
        // not scaled (a transfer's wait for its peers is not the micro-batch's).
        let all = self.chain_before(i, part)?;
        let all = if part == WAIT {
            all
        } else {
            all.for_bytes(self.followed_bytes(i))
        };
        let vals = if part == WAIT { all } else { all.learnt() };
        let (kept, n) = vals.regime();
        let v = &kept[..n];
        let expected = median(v);
        // A shorter value among the newest few counts even outside the group: a bubble that is
        // sometimes shorter must not be outlasted the next time it is.
        // A value set aside still counts here: with noise, a first value unlike the next two is
        // as often a short bubble as a warm-up, and the grant stops before it either way.
        let recent_short = all.v[..all.n.min(RECENT_SHORT)].iter().copied().min();
        let shortest = (*v.iter().min()?).min(recent_short.unwrap_or(Ns::MAX));
        let mut spread = v.iter().map(|&x| x.abs_diff(expected)).sum::<Ns>() / v.len() as Ns;
        let mut seen = v.len().min(FULL_CONFIDENCE) as f64 / FULL_CONFIDENCE as f64;
        // A young position (its second or third time: in the second iteration, or the third
        // where the first had no bubble there, as before the job's first op), and the ops so far
        // replay the ones its one value was learnt among: as good as two values, with a spread
        // from how closely they replay (see [`REPLAYED_SEEN`]; the grant keeps two spreads in
        // hand: it ends at 59-89 % of the value). Until 2026-12-06 the spread was always the
        // widest band of the same bubble (20 %: grants ended at 59 %).
        let young = self.earlier_occurrences(i) <= YOUNG_OCCURRENCES;
        let replayed = (vals.n == 1 && opens_a_bubble(part) && young)
            .then(|| self.replaying(i))
            .flatten();
        if let Some(dev) = replayed {
            seen = seen.max(REPLAYED_SEEN as f64 / FULL_CONFIDENCE as f64);
            let (lo, hi) = (expected as f64 * REPLAY_SHARE, expected as f64 * NEAR_SHARE);
            spread = spread.max((REPLAYED_SPREADS * dev as f64).clamp(lo, hi) as Ns);
        } else if opens_a_bubble(part) && after_a_longer_first(&all, &vals) {
            // A position's second value, shorter than its first (set aside): as an anchor's lone
            // offset after a longer one (see [`super::anchors`]), as good as two values with a
            // spread of [`LONE_SPREAD_SHARE`] of it (the grant ends at 79 % of it). A job's
            // first iteration is its slowest, so the ops after it do not replay it, and a stall
            // lengthens one value: until 2026-12-07 such positions waited for a third value (the
            // zoo's pipelines with noise were granted 0.05-0.11 less of their idle time).
            seen = seen.max(REPLAYED_SEEN as f64 / FULL_CONFIDENCE as f64);
            spread = spread.max(expected / LONE_SPREAD_SHARE);
        }
        let steadiness = if expected > 0 {
            1.0 - (spread as f64 / expected as f64).min(1.0)
        } else {
            1.0
        };
        // Values left out because they were shorter (another, shorter bubble at this position
        // lately) lower the trust: the next one may be short again. Longer ones do not: a bubble
        // that a stall or a slow peer sometimes lengthens still lasts at least as long as the
        // group, and the grant stops before the shortest recent value anyway.
        let low = *v.iter().min()?;
        let shorter = vals.v[..vals.n].iter().filter(|&&x| x < low).count();
        let share = 1.0 - shorter as f64 / vals.n as f64;
        Some(Prediction {
            expected_ns: expected,
            shortest_ns: shortest,
            spread_ns: spread,
            confidence: seen * steadiness * share,
        })
    }

    /// Ops per iteration: the iteration found from its rarest op, else the lag at which most of the
    /// newest ops are aligned, once the sequence was seen twice over. `None` before that.
    pub fn ops_per_iteration(&self) -> Option<usize> {
        if self.iteration.is_some() {
            return self.iteration;
        }
        let mut count: HashMap<usize, usize> = HashMap::new();
        for &l in self.lags.iter().filter(|&&l| l > 0) {
            *count.entry(l).or_default() += 1;
        }
        let (lag, n) = count
            .into_iter()
            .max_by_key(|&(l, n)| (n, std::cmp::Reverse(l)))?;
        let ops = self.hist.len();
        (2 * n >= self.lags.len()
            && ops >= (2 * lag).max(MIN_FALLBACK_OPS)
            && !self.rarer_than(lag))
        .then_some(lag)
    }

    /// Whether a key recurs less often than every `lag` ops (by more than [`RARER_THAN_LAG`]): an
    /// op seen once so far (an agent that began in a job's steady state) says that the iteration
    /// is longer than `lag`, and not known yet.
    fn rarer_than(&self, lag: usize) -> bool {
        let now = self.first + self.hist.len() as u64;
        let longer = |d: usize| d as f64 > RARER_THAN_LAG * lag as f64;
        self.recur.values().any(|r| {
            let since = (now - 1).saturating_sub(r.last) as usize;
            // Keys gone for longer than the window (the job changed) say nothing.
            since < PERIOD_WINDOW && (longer(r.longest) || (r.longest == 0 && longer(since)))
        })
    }

    /// The iteration's period: the median time between the newest ops and the ops one period
    /// before them.
    pub fn period_ns(&self) -> Option<Ns> {
        let p = self.ops_per_iteration()?;
        let n = self.hist.len();
        let mut v: Vec<Ns> = (p..n)
            .rev()
            .take(31)
            .map(|k| self.hist[k].t.saturating_sub(self.hist[k - p].t))
            .collect();
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        Some(v[v.len() / 2])
    }
}

#[cfg(test)]
mod tests;
