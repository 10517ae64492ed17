//! Bubble ends anchored on the other trainers of the node: a pipeline stage's bubble ends when
//! the stage before it has done its work, so its length from its own start carries the jitter of
//! everything upstream (on torch's 1F1B, the last stage's first bubble of an iteration waits for
//! the first stage's host to wake after the iteration's end: 31-34 ms from the bubble's start,
//! spread over 1.3 ms), while its end a fixed time after an upstream stage resumed work (the
//! first stage's first kernel, the next stage's first receive) varies by microseconds.
//!
//! For each timeline's open bubble the node notes when the other timelines' bubbles closed while
//! it was open (each close named by its timeline and how many of that timeline's closes came
//! before it in the bubble). When the bubble closes, its end's offset from each such close is
//! learnt at the bubble's position, and carried along the position's chain of predecessors
//! ([`super::pattern`]) as its length is. While a bubble is open, a close of another timeline
//! whose offset was learnt at least `MIN_VALUES` times (an offset longer than the rest set
//! aside: `Offsets::kept`), steadier than the bubble's length or more confidently, predicts its
//! end, with a confidence of its own ([`Anchors::predict`]). Where micro-batches' sizes vary, a
//! position's offsets are scaled by the bytes each bubble part followed, where that predicted them
//! better ([`super::sizes`]).
use super::obs::{GpuId, Ns};
use super::pattern::{
    largest_group_centre, median, near, newest_first, OpIndex, Part, HISTORY, LONE_SPREAD_SHARE,
    VALUES,
};
use super::sizes;
use super::timeline::Timeline;
use super::Bubble;
use std::collections::{BTreeMap, HashMap};

/// A timeline of the node: (process, GPU).
pub type TlKey = (u32, GpuId);

/// An anchor predicts with at least this many values...
const MIN_VALUES: usize = 2;
/// ...and is trusted fully with this many, as a position's length is.
const FULL_CONFIDENCE: usize = 3;
/// The newest values whose shortest bounds the prediction.
const RECENT_SHORT: usize = 3;
/// Closes of other timelines noted per open bubble (the first ones: a pipeline's upstream
/// stages resume early in the bubble).
const MAX_EVENTS: usize = 32;
/// No anchored spread is taken below this: the GPU times of two records are each a few
/// microseconds off, and two values alike by chance say little more than that.
const SPREAD_FLOOR_NS: Ns = 50_000;
/// Predecessors walked past positions that learnt nothing.
const WALK: usize = 4;

/// A close of another timeline: which, and how many of its closes came before it in the bubble.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Source {
    tl: TlKey,
    nth: u32,
}

/// The newest offsets learnt for one source at one position, with the bytes each bubble part
/// followed (0: not known).
#[derive(Clone, Copy, Debug, Default)]
struct Offsets {
    v: [Ns; VALUES],
    bytes: [u64; VALUES],
    n: usize,
    /// Whether the offsets scaled by their bytes predicted the chain's offsets better
    /// ([`sizes::rescored`]).
    scaled_score: i8,
}

/// (median, shortest of the newest few, mean deviation from the median, how many): what an
/// anchor predicts from ([`Offsets::stats`]).
type Stats = (Ns, Ns, Ns, usize);

impl Offsets {
    fn with(x: Ns, bytes: u64, older: Option<&Offsets>) -> Offsets {
        let (v, n) = newest_first(x, older.map_or(&[], |o| &o.v[..o.n]));
        let (b, _) = newest_first(bytes, older.map_or(&[], |o| &o.bytes[..o.n]));
        let scaled_score = older.map_or(0, |o| {
            let plain = stats_of(&o.v[..o.n]).map(|s| s.0);
            let scaled = o.scaled_stats(bytes).map(|s| s.0);
            sizes::rescored(o.scaled_score, plain, scaled, x)
        });
        Offsets {
            v,
            bytes: b,
            n,
            scaled_score,
        }
    }

    /// [`stats_of`] the offsets as they would be for a part that follows `bytes`
    /// ([`sizes::scaled`]).
    fn scaled_stats(&self, bytes: u64) -> Option<Stats> {
        let v = sizes::scaled(&self.v[..self.n], &self.bytes[..self.n], bytes)?;
        stats_of(&v[..self.n])
    }

    /// [`stats_of`] the offsets, or of the offsets scaled to a part that follows `bytes` where
    /// the chain's record or their steadiness says so ([`sizes::prefer_scaled`]).
    fn stats(&self, bytes: u64) -> Option<Stats> {
        let plain = stats_of(&self.v[..self.n]);
        let scaled = self.scaled_stats(bytes);
        match (plain, scaled) {
            (Some(p), Some(s)) => {
                let prefer = sizes::prefer_scaled(self.scaled_score, (p.0, p.2), (s.0, s.2));
                Some(if prefer { s } else { p })
            }
            (None, Some(s)) if self.scaled_score > 0 => Some(s),
            (p, _) => p,
        }
    }
}

/// The values of `all` (newest first) to predict from: the largest group of values near one
/// another (on a tie, the newest's), with every value shorter than the group; longer ones are
/// set aside. A job's warm-up iteration (its kernels slower) or an upstream stall lengthens one
/// offset, and a longer offset says nothing of how early the next end may come; a shorter one
/// does, and stays. On torchtitan's ZBV job the iteration-start bubbles of the later stages end
/// 10.50 ms after the stage before them resumed, and 19.5 ms after it in the warm-up iteration:
/// with that value in their spread (2.3-3.0 ms) the anchor lost to the bubble's length from its
/// start, and the grants ended 6 ms before the bubbles did.
fn kept(all: &[Ns]) -> ([Ns; VALUES], usize) {
    let c = largest_group_centre(all);
    let low = all
        .iter()
        .filter(|&&x| near(x, c))
        .min()
        .copied()
        .unwrap_or(c);
    let mut out = [0; VALUES];
    let mut n = 0;
    for &x in all.iter().filter(|&&x| near(x, c) || x < low) {
        out[n] = x;
        n += 1;
    }
    (out, n)
}

/// (median, shortest of the newest few, mean deviation from the median, how many) of the values
/// of `all` (newest first) kept ([`kept`]; the shortest is of all the newest, kept or not),
/// `None` while fewer than [`MIN_VALUES`] are kept, but for a position's second value that is
/// shorter than its first, which was set aside: a job's first iteration is slower than the rest
/// (kernels compiled, tuned, memory allocated), and until a third iteration the second value was
/// all there was to predict from, so the iteration after it granted nothing of its later stages'
/// first bubbles (torchtitan's ZBV job: about 100 ms of the 275 ms of idle time of its first
/// scored iteration, which harvested 0.34-0.46; 0.44-0.53 since). It predicts as two agreeing
/// values would, with a spread of [`LONE_SPREAD_SHARE`] of it (the grant closes twice that
/// before the end it predicts).
fn stats_of(all: &[Ns]) -> Option<Stats> {
    let (s, n) = kept(all);
    if n == 1 && all.len() == 2 {
        let v = s[0];
        return Some((v, v, v / LONE_SPREAD_SHARE, MIN_VALUES));
    }
    if n < MIN_VALUES {
        return None;
    }
    let s = &s[..n];
    let median = median(s);
    let shortest = *all[..all.len().min(RECENT_SHORT)]
        .iter()
        .min()
        .expect("never empty");
    let spread = s.iter().map(|&x| x.abs_diff(median)).sum::<Ns>() / n as Ns;
    Some((median, shortest, spread, n))
}

/// The open bubble part of one timeline, and the closes elsewhere since it began.
#[derive(Clone, Debug)]
struct Track {
    start: Ns,
    at: (OpIndex, Part),
    from: Ns,
    /// What the part follows ([`Timeline::open_part_bytes`]; 0: not known).
    bytes: u64,
    events: Vec<(Source, Ns)>,
}

/// What one position learnt: the offsets of its end from each source.
type Learnt = Vec<(Source, Offsets)>;

/// An end predicted from another timeline's close.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Anchored {
    pub end: Ns,
    pub shortest_end: Ns,
    pub spread_ns: Ns,
    /// As a position's length prediction's (0..=1): how many offsets agree (`FULL_CONFIDENCE`
    /// of them for full trust) and how steady they are against their length.
    pub confidence: f64,
}

#[derive(Default)]
pub struct Anchors {
    tracks: HashMap<TlKey, Track>,
    /// Per timeline and position: what was learnt there, per source.
    learnt: HashMap<TlKey, BTreeMap<(OpIndex, Part), Learnt>>,
}

impl Anchors {
    /// Timeline `who` was just observed, and these bubbles of it closed: learns what their
    /// ends say, notes the closes on the other timelines' tracks, and follows its open part.
    pub fn observed(&mut self, who: TlKey, tl: &Timeline, closed: &[Bubble]) {
        for b in closed {
            if let Some(track) = self.tracks.remove(&who) {
                if !b.cut_by_exit && b.start == track.start {
                    self.learn(who, tl, &track, b.end);
                }
            }
            self.closed_elsewhere(who, b.end);
        }
        match tl.open_part() {
            None => {
                self.tracks.remove(&who);
            }
            Some((start, at, from)) => {
                let bytes = tl.open_part_bytes();
                let old = self.tracks.remove(&who);
                let track = match old {
                    Some(t) if t.start == start && t.at == at && t.from == from => t,
                    Some(t) => {
                        // The same bubble went on past an op that moved nothing: its earlier part
                        // ended there.
                        if t.start == start && t.from < from {
                            self.learn(who, tl, &t, from);
                        }
                        let events = t.events.into_iter().filter(|e| e.1 > from).collect();
                        Track {
                            start,
                            at,
                            from,
                            bytes,
                            events,
                        }
                    }
                    None => Track {
                        start,
                        at,
                        from,
                        bytes,
                        events: vec![],
                    },
                };
                self.tracks.insert(who, track);
            }
        }
    }

    /// A bubble of `who` closed at `t`: an event for every other open part that began before.
    fn closed_elsewhere(&mut self, who: TlKey, t: Ns) {
        for (k, track) in self.tracks.iter_mut() {
            if *k == who || t <= track.from || track.events.len() >= MAX_EVENTS {
                continue;
            }
            let nth = track.events.iter().filter(|e| e.0.tl == who).count() as u32;
            track.events.push((Source { tl: who, nth }, t));
        }
    }

    fn learn(&mut self, who: TlKey, tl: &Timeline, track: &Track, end: Ns) {
        let older = self.chain_before(who, tl, track.at).cloned();
        let mut here = vec![];
        for &(src, t) in track.events.iter().filter(|e| e.1 < end) {
            let prev = older
                .as_ref()
                .and_then(|v| v.iter().find(|x| x.0 == src))
                .map(|x| &x.1);
            here.push((src, Offsets::with(end - t, track.bytes, prev)));
        }
        let map = self.learnt.entry(who).or_default();
        if here.is_empty() {
            map.remove(&track.at);
        } else {
            map.insert(track.at, here);
        }
        // What the pattern no longer remembers cannot be reached along a chain.
        let keep_from = tl.pattern().ops().saturating_sub(2 * HISTORY as u64);
        while let Some((&(i, _), _)) = map.first_key_value() {
            if i >= keep_from {
                break;
            }
            map.pop_first();
        }
    }

    /// What was learnt at the position before `at` along its chain.
    fn chain_before(&self, who: TlKey, tl: &Timeline, at: (OpIndex, Part)) -> Option<&Learnt> {
        let map = self.learnt.get(&who)?;
        let mut i = tl.pattern().predecessor(at.0);
        for _ in 0..WALK {
            let p = i?;
            if let Some(v) = map.get(&(p, at.1)) {
                return Some(v);
            }
            i = tl.pattern().predecessor(p);
        }
        None
    }

    /// The end of `who`'s open bubble part as the steadiest close seen so far in it predicts it.
    pub fn predict(&self, who: TlKey, tl: &Timeline) -> Option<Anchored> {
        let track = self.tracks.get(&who)?;
        let learnt = self.chain_before(who, tl, track.at)?;
        let mut best: Option<Anchored> = None;
        for &(src, t) in &track.events {
            let Some((_, o)) = learnt.iter().find(|x| x.0 == src) else {
                continue;
            };
            let Some((median, shortest, spread, n)) = o.stats(track.bytes) else {
                continue;
            };
            let spread = spread.max(SPREAD_FLOOR_NS);
            let seen = n.min(FULL_CONFIDENCE) as f64 / FULL_CONFIDENCE as f64;
            let a = Anchored {
                end: t + median,
                shortest_end: t + shortest,
                spread_ns: spread,
                confidence: seen * (1.0 - (spread as f64 / median.max(1) as f64).min(1.0)),
            };
            // The steadiest; of those alike, the latest close (events are in order).
            if best.is_none_or(|b| a.spread_ns <= b.spread_ns) {
                best = Some(a);
            }
        }
        best
    }

    /// Keeps the timelines `live` says are still there.
    pub fn retain(&mut self, live: impl Fn(&TlKey) -> bool) {
        self.tracks.retain(|k, _| live(k));
        self.learnt.retain(|k, _| live(k));
        for t in self.tracks.values_mut() {
            t.events.retain(|e| live(&e.0.tl));
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::inference::gpus::Gpus;
    use crate::inference::obs::{CommKind, CommSig, GpuId, Ns, Obs, SyncOn};
    use crate::inference::OpenBubble;

    const MS: Ns = 1_000_000;
    const C: u64 = 7;
    const P2P: u64 = 20;
    const UP: (u32, GpuId) = (1, GpuId(0x1000));
    const DOWN: (u32, GpuId) = (2, GpuId(0x2000));

    fn see(g: &mut Gpus, who: (u32, GpuId), obs: Obs, now: Ns) {
        g.observe(who.0, Some(who.1), obs, now);
    }

    fn sig(kind: CommKind, bytes: u64) -> CommSig {
        CommSig {
            comm: 9,
            kind,
            peer: 0,
            bytes,
            largest_send: 0,
        }
    }

    /// Op `id` of `kind` on the downstream stage: issued at `t`, begun 50 µs later (seen 100 µs
    /// later), ended at `end` (seen 40 µs later) when given.
    fn op(g: &mut Gpus, id: u64, kind: CommKind, t: Ns, end: Option<Ns>) {
        op_of(g, id, kind, 4, t, end)
    }

    /// [`op`], moving `bytes`.
    fn op_of(g: &mut Gpus, id: u64, kind: CommKind, bytes: u64, t: Ns, end: Option<Ns>) {
        let issue = Obs::CommIssue {
            t,
            id,
            stream: P2P,
            sig: sig(kind, bytes),
        };
        see(g, DOWN, issue, t);
        let begin = Obs::CommBegin {
            id,
            t: t + 50_000,
            seen: t + 100_000,
        };
        see(g, DOWN, begin, t + 100_000);
        if let Some(end) = end {
            let seen = end + 40_000;
            see(g, DOWN, Obs::CommEnd { id, t: end, seen }, seen);
        }
    }

    /// Iteration `i` of a two-stage job from `t`: both hosts block until their GPUs drain at `t`;
    /// the upstream stage's host wakes `wake` later (its bubble closes with its launch); the
    /// downstream stage posts a receive at once, whose data comes `data` after `t` and which its
    /// compute follows. Returns the end of the downstream bubble predicted once the upstream
    /// stage resumed, and the true one.
    fn iteration(g: &mut Gpus, i: u64, t: Ns, wake: Ns, data: Ns) -> (Option<Ns>, Ns) {
        let (open, end) = iteration_open(g, i, t, wake, data);
        (open.and_then(|b| b.predicted_end), end)
    }

    /// [`iteration`], with the downstream bubble as the node saw it once the upstream stage
    /// resumed.
    fn iteration_open(g: &mut Gpus, i: u64, t: Ns, wake: Ns, data: Ns) -> (Option<OpenBubble>, Ns) {
        iteration_of(g, i, 4, t, wake, data)
    }

    /// [`iteration_open`], the downstream stage receiving `bytes`.
    fn iteration_of(
        g: &mut Gpus,
        i: u64,
        bytes: u64,
        t: Ns,
        wake: Ns,
        data: Ns,
    ) -> (Option<OpenBubble>, Ns) {
        for who in [UP, DOWN] {
            let launch = Obs::Launch {
                t: t - 5 * MS,
                stream: C,
            };
            see(g, who, launch, t - 5 * MS);
            let sync = Obs::Sync {
                t0: t - 5 * MS,
                t1: t,
                on: SyncOn::Device,
            };
            see(g, who, sync, t);
        }
        op_of(g, 100 + i, CommKind::Recv, bytes, t + 100_000, None);
        let launch = Obs::Launch {
            t: t + wake,
            stream: C,
        };
        see(g, UP, launch, t + wake + 100_000);
        let open = g.open_on(DOWN.1)[0];
        let end = t + data;
        let seen = end + 40_000;
        see(
            g,
            DOWN,
            Obs::CommEnd {
                id: 100 + i,
                t: end,
                seen,
            },
            seen,
        );
        let launch = Obs::Launch {
            t: seen + 10_000,
            stream: C,
        };
        see(g, DOWN, launch, seen + 10_000);
        (open, end)
    }

    /// The downstream bubble's predicted end and true end in the last two of 8 iterations,
    /// the upstream host waking 1-4 ms late; its data comes `data(wake)` after the drain.
    fn job(data: impl Fn(Ns) -> Ns) -> Vec<(Option<Ns>, Ns)> {
        let mut g = Gpus::new();
        // A send on the receives' communicator: its 50 ns bound their transfers.
        op(&mut g, 1, CommKind::Send, 10, Some(50_100));
        let wakes = [1, 4, 2, 3, 1, 4, 2, 3].map(|x| x * MS);
        let mut out = vec![];
        for (i, &wake) in wakes.iter().enumerate() {
            let t = (i as Ns + 1) * 100 * MS;
            out.push(iteration(&mut g, i as u64, t, wake, data(wake)));
        }
        out.split_off(6)
    }

    #[test]
    fn a_bubble_that_waits_for_an_upstream_stage_ends_a_learnt_time_after_that_stage_resumed() {
        // The data comes 20 ms after the upstream host woke: its bubble's length from its start
        // varies by 3 ms, its end from the upstream stage's resumption by nothing.
        assert_predicted(job(|wake| wake + 20 * MS));
        // The data comes 22 ms after the drain whenever the upstream host wakes: its start
        // predicts it, the upstream stage's resumption does not.
        assert_predicted(job(|_| 22 * MS));
    }

    #[test]
    fn one_late_offset_does_not_keep_the_anchor_from_predicting() {
        // The data comes 20 ms after the upstream host woke, but 40 ms after it in the sixth
        // iteration (a stall upstream, or a warm-up's slower kernels): while that value is among
        // the five kept, the end is still predicted from the upstream stage's resumption, within
        // the records' error (the build before spread the offsets over 7-9 ms, and the bubble's
        // length from its start, steadier, predicted it 1.5 ms off).
        let mut g = Gpus::new();
        op(&mut g, 1, CommKind::Send, 10, Some(50_100));
        let wakes = [1, 4, 2, 3, 1, 4, 2, 3, 1, 4].map(|x| x * MS);
        for (i, &wake) in wakes.iter().enumerate() {
            let t = (i as Ns + 1) * 100 * MS;
            let data = if i == 5 {
                wake + 40 * MS
            } else {
                wake + 20 * MS
            };
            let (predicted, end) = iteration(&mut g, i as u64, t, wake, data);
            if i >= 7 {
                let predicted = predicted.expect("the position was learnt");
                assert!(
                    predicted.abs_diff(end) <= 100_000,
                    "iteration {i}: predicted {predicted}, ended {end}"
                );
            }
        }
    }

    #[test]
    fn after_a_slower_first_value_the_second_offset_predicts_the_next_bubble() {
        // The data comes 20 ms after the upstream host woke, but 40 ms after it in the fifth
        // iteration, the first whose offset the position's chain keeps (here the pattern links
        // iterations from the fifth on; a job's first iteration is slower); the upstream host
        // wakes 1 to 12 ms after the drain, so the bubble's length from its start says little.
        // In the seventh iteration the anchor holds that offset, set aside, and the sixth's: the
        // build before predicted from the length (7 ms late here), the anchor only from the
        // eighth iteration on.
        let data = |i, wake| wake + if i == 4 { 40 * MS } else { 20 * MS };
        anchored_job(data, |i, open, end| {
            if i == 6 {
                let b = assert_anchored(i, open, end);
                // The lone offset's spread: a tenth of it (20 ms after the upstream resumed).
                assert!(
                    b.spread_ns.abs_diff(2 * MS) <= 1_000,
                    "iteration {i}: {b:?}"
                );
            }
        });
    }

    /// Eight iterations of the two-stage job ([`iteration_open`]), the upstream host waking 1 to
    /// 12 ms after each drain and the data coming `data(i, wake)` after the drain; `check(i,
    /// bubble, end)` after each.
    fn anchored_job(
        data: impl Fn(usize, Ns) -> Ns,
        mut check: impl FnMut(usize, Option<OpenBubble>, Ns),
    ) {
        let mut g = Gpus::new();
        op(&mut g, 1, CommKind::Send, 10, Some(50_100));
        let wakes = [1, 10, 3, 12, 1, 10, 3, 12].map(|x| x * MS);
        for (i, &wake) in wakes.iter().enumerate() {
            let t = (i as Ns + 1) * 100 * MS;
            let (open, end) = iteration_open(&mut g, i as u64, t, wake, data(i, wake));
            check(i, open, end);
        }
    }

    /// Iteration `i`'s bubble, its end predicted within the records' error of `end` and trusted
    /// at least at the grants' bar.
    fn assert_anchored(i: usize, open: Option<OpenBubble>, end: Ns) -> OpenBubble {
        let b = open.expect("a bubble open");
        let predicted = b.predicted_end.expect("the position was learnt");
        assert!(
            predicted.abs_diff(end) <= 100_000,
            "iteration {i}: predicted {predicted}, ended {end}"
        );
        assert!(b.confidence >= 0.5, "iteration {i}: {b:?}");
        b
    }

    #[test]
    fn a_steady_anchor_lends_its_confidence_to_a_bubble_whose_length_varies() {
        // The upstream host wakes 1 to 12 ms after the drain, and the data comes 10 ms after it:
        // the bubble's length from its start falls in two groups (11-13 and 20-22 ms), below the
        // grants' confidence bar; its end from the upstream stage's resumption does not vary.
        // The build before predicted the end from the anchor but kept the length's confidence.
        // At least the grants' bar from the seventh iteration on (two offsets of three for full
        // trust: 0.66).
        anchored_job(
            |_, wake| wake + 10 * MS,
            |i, open, end| {
                if i >= 6 {
                    assert_anchored(i, open, end);
                }
            },
        );
    }

    /// Ten iterations of the two-stage job, the upstream host waking 1 to 4 ms after each drain
    /// and the downstream stage receiving `bytes[i]`, which come `data(wake, bytes)` after the
    /// drain: the predicted and true ends of the downstream bubbles of the last three.
    fn sized_job(bytes: [u64; 10], data: impl Fn(Ns, u64) -> Ns) -> Vec<(Option<Ns>, Ns)> {
        let mut g = Gpus::new();
        // As large as the largest message: its 50 µs bound their transfers.
        op_of(&mut g, 1, CommKind::Send, 1_200_000, 10, Some(50_100));
        let wakes = [1, 4, 2, 3, 1, 4, 2, 3, 1, 4].map(|x| x * MS);
        let mut out = vec![];
        for (i, (&wake, &b)) in wakes.iter().zip(&bytes).enumerate() {
            let t = (i as Ns + 1) * 100 * MS;
            let (open, end) = iteration_of(&mut g, i as u64, b, t, wake, data(wake, b));
            out.push((open.and_then(|b| b.predicted_end), end));
        }
        out.split_off(7)
    }

    /// Each bubble's end predicted within the records' error.
    fn assert_predicted(runs: Vec<(Option<Ns>, Ns)>) {
        for (predicted, end) in runs {
            let predicted = predicted.expect("the position was learnt");
            assert!(
                predicted.abs_diff(end) <= 100_000,
                "predicted {predicted}, ended {end}"
            );
        }
    }

    /// Message sizes of a job whose micro-batches' sequence lengths vary by up to 20 %.
    const SIZES: [u64; 10] = [
        1_000_000, 820_000, 1_180_000, 940_000, 1_100_000, 860_000, 1_200_000, 900_000, 1_150_000,
        810_000,
    ];

    #[test]
    fn an_offset_that_follows_the_awaited_message_size_is_scaled_by_it() {
        // The upstream stage computes 20 ms per megabyte of the message it then sends, after its
        // host woke: the offsets from its resumption vary by 16-24 ms, the end of each bubble is
        // 20 ms per megabyte of what the downstream stage receives after it. Without scaling the
        // median of the newest offsets predicted it up to 4 ms off.
        let per_mb = |b: u64| b * 20 * MS / 1_000_000;
        assert_predicted(sized_job(SIZES, |wake, b| wake + per_mb(b)));
    }

    #[test]
    fn an_offset_that_does_not_follow_the_sizes_is_not_scaled() {
        // The sizes vary as above, but the data comes 20 ms after the upstream stage resumed
        // whatever its size: the plain offsets predict it, scaled ones would be up to 4 ms off.
        assert_predicted(sized_job(SIZES, |wake, _| wake + 20 * MS));
    }

    #[test]
    fn a_shorter_offset_is_never_set_aside() {
        use super::Offsets;
        let mut o = Offsets::default();
        for x in [10 * MS, 10 * MS, 6 * MS, 10 * MS, 19 * MS] {
            o = Offsets::with(x, 0, Some(&o).filter(|o| o.n > 0));
        }
        // Newest first: 19, 10, 6, 10, 10. The 19 ms value is set aside, the 6 ms one kept.
        let (median, shortest, spread, n) = o.stats(0).expect("four values kept");
        assert_eq!(n, 4);
        assert_eq!(median, 10 * MS);
        assert_eq!(shortest, 6 * MS);
        assert_eq!(spread, MS);
        // Two values unlike each other: the newer shorter, it alone, as two agreeing values with
        // a tenth of it for their spread; the newer longer, both kept.
        let two = Offsets::with(10 * MS, 0, Some(&Offsets::with(19 * MS, 0, None)));
        assert_eq!(two.stats(0), Some((10 * MS, 10 * MS, MS, 2)));
        // A third value unlike both: nothing.
        let three = Offsets::with(4 * MS, 0, Some(&two));
        assert_eq!(three.stats(0), None);
        let two = Offsets::with(19 * MS, 0, Some(&Offsets::with(10 * MS, 0, None)));
        assert_eq!(two.stats(0).map(|s| s.2), Some(4_500_000));
    }
}
