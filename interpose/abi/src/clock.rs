//! The hook path's clock: `CLOCK_MONOTONIC` nanoseconds, read from the CPU's time-stamp counter.
//!
//! A vDSO `clock_gettime(CLOCK_MONOTONIC)` costs 25-35 ns on the development VM, a third of the
//! hook's cost; one `rdtsc` about 12 ns. A [`ThreadClock`] (one per thread, in the interposer's
//! thread-local state) turns a TSC reading into `CLOCK_MONOTONIC` nanoseconds:
//! `anchor_ns + (tsc - anchor_tsc) x ns_per_tick`, where the anchor is a (TSC, `clock_gettime`)
//! pair this thread took less than [`REANCHOR_NS`] ago. Every value is thus a `CLOCK_MONOTONIC`
//! reading plus at most 1 ms of extrapolation: what reaches the agent stays `CLOCK_MONOTONIC`
//! nanoseconds, on the one time line of every process, of the comm poller's GPU-side times and of
//! the test bed's truth. Nothing in the ring format changes.
//!
//! Error against `CLOCK_MONOTONIC` (see `docs/perf-hook.md` for the measured figures): the anchor
//! pair's half-width (a pair is the tighter of two tries, each an `rdtsc`, a `clock_gettime` and
//! an `lfence; rdtsc`, kept only if at most [`PAIR_MAX_TICKS`] wide; 20-50 ns here) plus the
//! rate's error over at most 1 ms. The rate (`ns_per_tick`, 32.32 fixed point) is estimated per
//! process from two pairs at least 1 ms apart, and only once their windows bound its error to 50
//! ppm (50 ns over 1 ms); it is re-estimated over doubling spans up to 1 s and then over each
//! following second (so an NTP frequency correction of the kernel's clock is followed within a
//! second), below 0.1 ppm from then on. A thread's values never go backwards: after a re-anchor
//! a value is at least what the old anchor could have given.
//!
//! The TSC is used only where the kernel itself trusts it: x86-64, the kernel's clocksource is
//! `tsc` (it checked that the counter is invariant and synchronized across CPUs, and it switches
//! away from a counter its watchdog finds unstable), `/proc/cpuinfo` lists `constant_tsc` and
//! `nonstop_tsc`, and the process may read it (`PR_GET_TSC`). Anywhere else, with `FREERIDE_CLOCK=monotonic`, before [`start`] and until the
//! first rate estimate, every read is `clock_gettime` (exact, the old cost). A re-anchor that finds
//! the extrapolation more than [`MAX_DRIFT_NS`] off the clock (a TSC that jumped or changed its
//! rate) turns the TSC off for the rest of the process.
//!
//! Hot path ([`ThreadClock::now`]): one `rdtsc`, loads from the thread's own state, a multiply, a
//! compare. No atomic, no lock, no system call. The slow path (a re-anchor, about once a
//! millisecond per thread) adds two vDSO `clock_gettime`s and a few atomics; it calibrates under
//! a claim flag that is never waited for.
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

/// A thread re-anchors its TSC extrapolation to `clock_gettime` this often.
pub const REANCHOR_NS: u64 = 1_000_000;
/// A re-anchor that finds the extrapolation this far off the clock turns the TSC off.
pub const MAX_DRIFT_NS: u64 = 50_000;
/// The widest (TSC, clock) pair kept: wider means the thread was interrupted while taking it
/// (a pair's window is 40-100 ns here, 100-260 ticks).
pub const PAIR_MAX_TICKS: u64 = 10_000;
/// The first rate estimate needs two pairs this far apart; the span doubles up to [`ROLL_NS`].
const FIRST_SPAN_NS: u64 = 1_000_000;
/// Once the estimate spans this long, it is renewed over each following span of this length.
const ROLL_NS: u64 = 1_000_000_000;
/// Plausible TSC rates: 50 MHz to 20 GHz (32.32 fixed-point ns per tick).
const MULT_MIN: u128 = (1u128 << 32) / 20;
const MULT_MAX: u128 = 20u128 << 32;

/// Which clock the hook path reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// [`start`] has not run: `clock_gettime`.
    Undecided,
    /// The TSC is trusted but its rate not yet estimated: `clock_gettime` (pairs are being taken).
    Calibrating,
    /// The TSC, calibrated against `CLOCK_MONOTONIC`.
    Tsc,
    /// `clock_gettime` for good (no trusted TSC, `FREERIDE_CLOCK=monotonic`, or a TSC found off).
    Monotonic,
}

const UNDECIDED: u8 = 0;
const CALIBRATING: u8 = 1;
const TSC: u8 = 2;
const MONOTONIC: u8 = 3;

static MODE: AtomicU8 = AtomicU8::new(UNDECIDED);
/// The process's rate estimate: ns per tick, 32.32 fixed point (0: none yet).
static NS_PER_TICK: AtomicU64 = AtomicU64::new(0);
/// [`REANCHOR_NS`] in ticks at that rate.
static REANCHOR_TICKS: AtomicU64 = AtomicU64::new(0);
/// The calibration's base pair and the span the next estimate needs (written under [`CLAIM`]).
static BASE_TSC: AtomicU64 = AtomicU64::new(0);
static BASE_NS: AtomicU64 = AtomicU64::new(0);
static NEXT_SPAN_NS: AtomicU64 = AtomicU64::new(FIRST_SPAN_NS);
/// Held by the thread refining the estimate; others skip (never wait).
static CLAIM: AtomicBool = AtomicBool::new(false);

/// The clock the hook path currently reads.
pub fn mode() -> Mode {
    match MODE.load(Ordering::Acquire) {
        UNDECIDED => Mode::Undecided,
        CALIBRATING => Mode::Calibrating,
        TSC => Mode::Tsc,
        _ => Mode::Monotonic,
    }
}

/// The process's TSC rate estimate in ticks per second (None until there is one).
pub fn tsc_hz() -> Option<f64> {
    let m = NS_PER_TICK.load(Ordering::Relaxed);
    (m != 0).then(|| 1e9 * (1u64 << 32) as f64 / m as f64)
}

/// Decides which clock the hook path reads and takes the calibration's first pair. Slow path
/// (process initialization: reads `/sys` and `/proc`); later calls do nothing.
pub fn start() {
    if MODE.load(Ordering::Acquire) != UNDECIDED || CLAIM.swap(true, Ordering::Acquire) {
        return;
    }
    let forced_off = std::env::var(crate::env::CLOCK).is_ok_and(|v| v.trim() == "monotonic");
    let base = if !forced_off && tsc_trusted() {
        pair(5)
    } else {
        None
    };
    match base {
        Some(p) => {
            set_base(p);
            NEXT_SPAN_NS.store(FIRST_SPAN_NS, Ordering::Relaxed);
            MODE.store(CALIBRATING, Ordering::Release);
        }
        None => MODE.store(MONOTONIC, Ordering::Release),
    }
    CLAIM.store(false, Ordering::Release);
}

/// In a fork child: a parent thread may have held the calibration claim at the fork.
/// Async-signal-safe (one atomic store).
pub fn reset_after_fork() {
    CLAIM.store(false, Ordering::Release);
}

/// Whether the kernel trusts this machine's TSC (see the module docs).
fn tsc_trusted() -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    let source =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .unwrap_or_default();
    source.trim() == "tsc" && cpu_flags_have(&["constant_tsc", "nonstop_tsc"]) && tsc_readable()
}

/// Whether this process may execute `rdtsc` (a sandbox or a record/replay tool can make it fault
/// with `prctl(PR_SET_TSC, PR_TSC_SIGSEGV)`).
fn tsc_readable() -> bool {
    let mut state: libc::c_int = 0;
    // SAFETY: PR_GET_TSC writes one int through the pointer we pass, to our own local.
    let r = unsafe { libc::prctl(libc::PR_GET_TSC, &mut state as *mut libc::c_int) };
    r == 0 && state == libc::PR_TSC_ENABLE
}

/// Whether the first `flags` line of `/proc/cpuinfo` lists all of `want`.
fn cpu_flags_have(want: &[&str]) -> bool {
    use std::io::BufRead;
    let Ok(f) = std::fs::File::open("/proc/cpuinfo") else {
        return false;
    };
    for line in std::io::BufReader::new(f).lines() {
        let Ok(line) = line else { return false };
        if let Some(flags) = line
            .strip_prefix("flags")
            .and_then(|r| r.trim_start().strip_prefix(':'))
        {
            let have: Vec<&str> = flags.split_whitespace().collect();
            return want.iter().all(|w| have.contains(w));
        }
    }
    false
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rdtsc() -> u64 {
    // SAFETY: rdtsc reads the time-stamp counter; it has no memory effects and exists on every
    // x86-64 CPU. It runs only once `start` found it allowed in user mode for this process
    // (PR_GET_TSC) and trusted (see `tsc_trusted`).
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn rdtsc() -> u64 {
    0
}

/// `rdtsc` after every earlier instruction has completed (the closing read of a pair).
#[cfg(target_arch = "x86_64")]
fn rdtsc_after() -> u64 {
    // SAFETY: lfence and rdtsc have no memory effects (see `rdtsc`).
    unsafe {
        core::arch::x86_64::_mm_lfence();
        core::arch::x86_64::_rdtsc()
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn rdtsc_after() -> u64 {
    0
}

/// The tightest pair window this process has seen, in ticks.
static TIGHTEST: AtomicU64 = AtomicU64::new(u64::MAX);
/// The window of the calibration's base pair, in ticks.
static BASE_W: AtomicU64 = AtomicU64::new(u64::MAX);
/// A rate estimate is taken only if its pairs' windows bound its error to this (parts per
/// million): at most 50 ns of error over a 1 ms extrapolation.
const RATE_MAX_ERROR_PPM: u128 = 50;

/// A TSC reading and the `CLOCK_MONOTONIC` ns read at (about) the same instant.
#[derive(Clone, Copy, Debug)]
struct Pair {
    /// Midpoint of the TSC reads before and after `clock_gettime`.
    tsc: u64,
    ns: u64,
    /// Ticks between those two reads: the pair's uncertainty is half of it.
    w: u64,
}

/// The tightest of `tries` pairs, keeping only windows of at most [`PAIR_MAX_TICKS`] (or 4 times
/// the tightest this process has seen, where even that is wider: `clock_gettime` is a real
/// system call under valgrind). None if no try was tight enough: the thread keeps being
/// interrupted (or a first `clock_gettime` faulted its pages in).
fn pair(tries: u32) -> Option<Pair> {
    let mut best: Option<Pair> = None;
    let mut kept = 0;
    // A few more attempts than pairs wanted, for the ones too wide to keep.
    for _ in 0..tries + 2 {
        let a = rdtsc();
        let ns = crate::now_ns();
        let b = rdtsc_after();
        let w = b.wrapping_sub(a);
        let tightest = TIGHTEST.fetch_min(w, Ordering::Relaxed).min(w);
        if w <= PAIR_MAX_TICKS.max(tightest.saturating_mul(4)) {
            kept += 1;
            if best.is_none_or(|p| w < p.w) {
                best = Some(Pair {
                    tsc: a + w / 2,
                    ns,
                    w,
                });
            }
            if kept >= tries {
                break;
            }
        }
    }
    best
}

fn set_base(p: Pair) {
    BASE_TSC.store(p.tsc, Ordering::Relaxed);
    BASE_NS.store(p.ns, Ordering::Relaxed);
    BASE_W.store(p.w, Ordering::Relaxed);
}

/// Refines the process's rate estimate with a fresh pair, if the span since the base is long
/// enough for its precision and no other thread is at it.
fn refine(p: Pair) {
    if CLAIM.swap(true, Ordering::Acquire) {
        return;
    }
    let span_ns = p.ns.saturating_sub(BASE_NS.load(Ordering::Relaxed));
    let span_ticks = p.tsc.wrapping_sub(BASE_TSC.load(Ordering::Relaxed));
    let base_w = BASE_W.load(Ordering::Relaxed);
    let error_ticks = (base_w.saturating_add(p.w) / 2) as u128;
    if MODE.load(Ordering::Relaxed) == CALIBRATING && p.w * 2 < base_w && span_ns < FIRST_SPAN_NS {
        // Still calibrating from a base much wider than this pair: start again from this one.
        set_base(p);
    } else if span_ns >= NEXT_SPAN_NS.load(Ordering::Relaxed)
        && (span_ticks as i64) > 0
        && error_ticks * 1_000_000 <= span_ticks as u128 * RATE_MAX_ERROR_PPM
    {
        let mult = ((span_ns as u128) << 32) / span_ticks as u128;
        if (MULT_MIN..=MULT_MAX).contains(&mult) {
            NS_PER_TICK.store(mult as u64, Ordering::Relaxed);
            REANCHOR_TICKS.store(
                (((REANCHOR_NS as u128) << 32) / mult) as u64,
                Ordering::Relaxed,
            );
            if span_ns >= ROLL_NS {
                set_base(p);
                NEXT_SPAN_NS.store(ROLL_NS, Ordering::Relaxed);
            } else {
                NEXT_SPAN_NS.store((2 * span_ns).min(ROLL_NS), Ordering::Relaxed);
            }
            let _ = MODE.compare_exchange(CALIBRATING, TSC, Ordering::Release, Ordering::Relaxed);
        } else {
            MODE.store(MONOTONIC, Ordering::Release);
        }
    }
    CLAIM.store(false, Ordering::Release);
}

/// One thread's view of the hook clock: its anchor pair and a copy of the rate. Plain cells,
/// const-initialized: made for a `thread_local!` without lazy initialization or destructor.
pub struct ThreadClock {
    tsc0: Cell<u64>,
    ns0: Cell<u64>,
    mult: Cell<u64>,
    /// Ticks the anchor may be extrapolated over (0: no anchor; every read takes the slow path).
    limit: Cell<u64>,
    /// No value below this: the most the previous anchor could have given (monotonic values).
    floor: Cell<u64>,
}

impl Default for ThreadClock {
    fn default() -> ThreadClock {
        ThreadClock::new()
    }
}

impl ThreadClock {
    pub const fn new() -> ThreadClock {
        ThreadClock {
            tsc0: Cell::new(0),
            ns0: Cell::new(0),
            mult: Cell::new(0),
            limit: Cell::new(0),
            floor: Cell::new(0),
        }
    }

    /// `CLOCK_MONOTONIC` nanoseconds (see the module docs for the error bound). Hot path.
    #[inline(always)]
    pub fn now(&self) -> u64 {
        // No `rdtsc` at all without an anchor: a process that made it fault (PR_SET_TSC) before
        // [`start`] looked never gets one.
        let limit = self.limit.get();
        if limit != 0 {
            let d = rdtsc().wrapping_sub(self.tsc0.get());
            if d < limit {
                // d < limit ~ REANCHOR_NS in ticks: d x mult ~ 2^52, no overflow at any rate.
                let v = self.ns0.get() + ((d * self.mult.get()) >> 32);
                return v.max(self.floor.get());
            }
        }
        self.reanchor()
    }

    /// No anchor, or an old one: `clock_gettime`, and a fresh anchor where the TSC is in use.
    #[cold]
    #[inline(never)]
    fn reanchor(&self) -> u64 {
        let mut floor = self.floor.get();
        let mode = MODE.load(Ordering::Acquire);
        let fresh = if mode == CALIBRATING || mode == TSC {
            pair(2)
        } else {
            None
        };
        let Some(p) = fresh else {
            self.limit.set(0);
            return crate::now_ns().max(floor);
        };
        let (tsc, ns) = (p.tsc, p.ns);
        let limit = self.limit.get();
        if limit != 0 {
            let d = tsc.wrapping_sub(self.tsc0.get());
            let mult = self.mult.get();
            floor = floor.max(self.ns0.get() + ((d.min(limit) * mult) >> 32));
            if d <= 2 * limit {
                let extrapolated = self.ns0.get() + ((d * mult) >> 32);
                if extrapolated.abs_diff(ns) > MAX_DRIFT_NS {
                    MODE.store(MONOTONIC, Ordering::Release);
                }
            }
        }
        refine(p);
        self.floor.set(floor);
        let mult = NS_PER_TICK.load(Ordering::Relaxed);
        if MODE.load(Ordering::Acquire) != TSC || mult == 0 {
            self.limit.set(0);
            return ns.max(floor);
        }
        self.tsc0.set(tsc);
        self.ns0.set(ns);
        self.mult.set(mult);
        self.limit.set(REANCHOR_TICKS.load(Ordering::Relaxed));
        ns.max(floor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin_ns(ns: u64) {
        let t0 = crate::now_ns();
        while crate::now_ns() - t0 < ns {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn cpuinfo_flags_parse() {
        // Every x86-64 Linux lists fpu; no CPU lists this.
        if cfg!(target_arch = "x86_64") {
            assert!(cpu_flags_have(&["fpu"]));
        }
        assert!(!cpu_flags_have(&["no_such_flag_anywhere"]));
    }

    /// Every thread's clock stays within a few microseconds of CLOCK_MONOTONIC and never goes
    /// backwards, through calibration, re-anchors and the TSC's steady state. (One test, not
    /// several: the calibration is process-wide state.)
    #[test]
    fn follows_clock_monotonic_on_every_thread() {
        start();
        let trusted = tsc_trusted() && std::env::var(crate::env::CLOCK).is_err();
        let threads: Vec<_> = (0..3)
            .map(|_| {
                std::thread::spawn(|| {
                    let c = ThreadClock::new();
                    let mut last = 0;
                    let mut worst = 0u64;
                    let t_end = crate::now_ns() + 30_000_000;
                    while crate::now_ns() < t_end {
                        let before = crate::now_ns();
                        let v = c.now();
                        let after = crate::now_ns();
                        assert!(v >= last, "went backwards: {v} after {last}");
                        last = v;
                        // v must lie in [before, after], up to the stated error.
                        let off = if v < before {
                            before - v
                        } else {
                            v.saturating_sub(after)
                        };
                        worst = worst.max(off);
                        spin_ns(2_000);
                    }
                    worst
                })
            })
            .collect();
        for t in threads {
            let worst = t.join().unwrap();
            // A value lies inside its [before, after] window up to the clock's error: the anchor
            // pair's half-width (at most PAIR_MAX_TICKS / 2: 2 µs at 2.5 GHz) plus 50 ppm of 1 ms.
            // (Preemption between the reads widens the window, it does not move the value out.)
            // A wrong rate or a lost anchor is off by far more than 5 µs within 30 ms.
            assert!(worst < 5_000, "worst offset {worst} ns");
        }
        if trusted {
            assert_eq!(mode(), Mode::Tsc, "a trusted TSC was not taken into use");
            let hz = tsc_hz().unwrap();
            assert!((5e7..2e10).contains(&hz), "{hz} Hz");
        }
    }
}
