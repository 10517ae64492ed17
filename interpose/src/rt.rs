//! Process state, lazy initialization, the rings and the hook path.
//!
//! State machine ([`STATE`]): `UNINIT` -> (first hooked call) `INITING` -> `TRAINER` | `SIDETASK`
//! (recording) or `OFF` (pass-through: nothing to record to, or disabled). A fork child is put
//! back to `UNINIT` (new pid -> new ring). Nothing here runs in a constructor or inside dlsym.
use crate::{comm, lanes, trace};
use freeride_abi::clock::{self, ThreadClock};
use freeride_abi::ring::{self, Geometry, RingView};
use freeride_abi::{cpu, env, session, Api, Kind, Record, Role};
use std::cell::Cell;
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering,
};

pub const UNINIT: u8 = 0;
pub const INITING: u8 = 1;
pub const TRAINER: u8 = 2;
pub const SIDETASK: u8 = 3;
pub const OFF: u8 = 4;

pub static STATE: AtomicU8 = AtomicU8::new(UNINIT);
static SHM_BASE: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static SHM_CAP: AtomicU64 = AtomicU64::new(0);
/// Lanes of the process's ring ([`freeride_abi::ring`]; set before [`SHM_BASE`] is published).
static SHM_LANES: AtomicU32 = AtomicU32::new(1);
/// The ring view's geometry ([`RingView::parts`]: a lane's slot mask; log2 of a lane's slots |
/// lane mask << 8), set with [`SHM_LANES`]: a push rebuilds its view from them.
static SHM_MASK: AtomicU64 = AtomicU64::new(0);
static SHM_SHIFTS: AtomicU32 = AtomicU32::new(0);
/// `t_ns` of this process's [`Kind::ProcessStart`] record (0: none yet).
static START_RECORD_NS: AtomicU64 = AtomicU64::new(0);
static SHM_REPORTED_DROPS: AtomicU64 = AtomicU64::new(0);
static PID: AtomicU32 = AtomicU32::new(0);
/// The pid of the process whose thread last began [`init`].
static INIT_PID: AtomicU32 = AtomicU32::new(0);
/// The GPU ([`freeride_abi::GpuId`] field) of the first device this process was seen on (-1).
static PROC_GPU: AtomicI32 = AtomicI32::new(-1);
static HANDLERS_REGISTERED: AtomicBool = AtomicBool::new(false);

/// Per-thread state. Const-initialized `Cell`s without destructors: no lazy TLS allocation.
pub struct Thread {
    /// Re-entrancy guard: set while this thread is inside a hook (also covers "a runtime launch
    /// that reaches the driver wrapper": the inner call passes through unrecorded).
    pub busy: Cell<bool>,
    pub tid: Cell<u32>,
    /// CUDA device of this thread's current context: -2 not queried, -1 unknown.
    pub dev: Cell<i32>,
    /// Its GPU ([`freeride_abi::GpuId`] as a record's field; meaningful while `dev >= 0`): what
    /// every record of this thread names.
    pub gpu: Cell<i32>,
    /// Launches until the next device query when unknown.
    pub dev_retry: Cell<u32>,
    pub group_depth: Cell<u32>,
    pub group_id: Cell<u32>,
    pub group_streams: Cell<[u64; comm::GROUP_STREAMS]>,
    pub group_nstreams: Cell<usize>,
    pub group_queued: Cell<u64>,
    /// Depth of hooked NCCL calls this thread is inside: launches queued there are NCCL's own.
    pub in_nccl: Cell<u32>,
    /// Side tasks only: in-flight slot + 1 of the launch the gate just admitted (0 = none); its
    /// completion event is recorded when the hook's guard is dropped, after the real launch.
    pub gate_slot: Cell<u32>,
    /// Lane + 1 of the process's ring this thread pushes to, with [`lanes::OWNED`] if the thread
    /// owns it (0: not given one yet).
    pub lane: Cell<u32>,
    /// The stream of this thread's last kernel launch since its last drain mark
    /// ([`NO_STREAM`]: none; see [`take_unmarked_stream`]).
    pub unmarked: Cell<u64>,
    /// The hook clock's anchor ([`freeride_abi::clock`]).
    pub clock: ThreadClock,
}

/// No stream (stream 0 is CUDA's legacy default stream).
pub const NO_STREAM: u64 = u64::MAX;

thread_local! {
    pub static THREAD: Thread = const {
        Thread {
            busy: Cell::new(false),
            tid: Cell::new(0),
            dev: Cell::new(-2),
            gpu: Cell::new(-1),
            dev_retry: Cell::new(0),
            group_depth: Cell::new(0),
            group_id: Cell::new(0),
            group_streams: Cell::new([0; comm::GROUP_STREAMS]),
            group_nstreams: Cell::new(0),
            group_queued: Cell::new(0),
            in_nccl: Cell::new(0),
            gate_slot: Cell::new(0),
            lane: Cell::new(0),
            unmarked: Cell::new(NO_STREAM),
            clock: ThreadClock::new(),
        }
    };
}

/// Runs `f` on the calling thread's [`Thread`] (None only if its thread-local storage is gone).
/// The closure given to `try_with` only takes the address, so it always inlines: a hook pays one
/// thread-local look-up (`__tls_get_addr` in a shared library), which the compiler then shares
/// between the guard, the clock and the record.
#[inline(always)]
fn with_thread<R>(f: impl FnOnce(&Thread) -> R) -> Option<R> {
    let p = THREAD.try_with(|t| t as *const Thread).ok()?;
    // SAFETY: p is this thread's THREAD: const-initialized and without a destructor, it stays
    // valid for as long as the thread runs, and `f` runs now, on this thread (`&Thread` is not
    // Send: Thread holds Cells).
    Some(f(unsafe { &*p }))
}

/// Proof that this thread entered a hook; clears the guard when dropped.
pub struct Entered(());

impl Drop for Entered {
    #[inline(always)]
    fn drop(&mut self) {
        with_thread(|t| {
            let slot = t.gate_slot.get();
            if slot != 0 {
                t.gate_slot.set(0);
                crate::gate::after_launch(slot - 1);
            }
            t.busy.set(false)
        });
    }
}

/// Enters the hook on this thread, or `None` if it is already inside one (pass through).
#[inline(always)]
pub fn enter() -> Option<Entered> {
    with_thread(|t| {
        if t.busy.get() {
            None
        } else {
            t.busy.set(true);
            Some(Entered(()))
        }
    })
    .flatten()
}

/// The one atomic check of the hook path: is this process recording? Initializes on first use.
#[inline(always)]
pub fn active() -> bool {
    let s = STATE.load(Ordering::Acquire);
    s == TRAINER || (s != OFF && active_slow(s))
}

#[cold]
#[inline(never)]
fn active_slow(s: u8) -> bool {
    match s {
        SIDETASK => true,
        UNINIT | INITING => {
            init();
            matches!(STATE.load(Ordering::Acquire), TRAINER | SIDETASK)
        }
        _ => false,
    }
}

/// Whether this process records now (no initialization: for slow paths that may run early).
pub fn active_now() -> bool {
    matches!(STATE.load(Ordering::Acquire), TRAINER | SIDETASK)
}

pub fn is_sidetask() -> bool {
    STATE.load(Ordering::Relaxed) == SIDETASK
}

pub fn pid() -> u32 {
    PID.load(Ordering::Relaxed)
}

fn shm_view() -> Option<RingView> {
    let base = SHM_BASE.load(Ordering::Acquire);
    if base.is_null() {
        return None;
    }
    let shifts = SHM_SHIFTS.load(Ordering::Relaxed);
    let parts = (SHM_MASK.load(Ordering::Relaxed), shifts & 0xff, shifts >> 8);
    // SAFETY: base maps the ring for the life of the process (never unmapped); parts are those of
    // the view made over it when it was created, stored before base was published (Acquire above).
    Some(unsafe { RingView::from_parts(base, parts) })
}

/// Publishes the side-task gate's status in this process's ring header (no ring: nothing).
/// Atomic stores only.
pub fn publish_gate_status(g: ring::GateStatus) {
    if let Some(v) = shm_view() {
        v.header().publish_gate_status(g);
    }
}

/// Whether the agent lets this process report its communication ops' ends lazily at `now` (the
/// ring header's `lazy_ends_until_ns`; no ring: no). One atomic load.
pub fn ends_lazy(now: u64) -> bool {
    shm_view().is_some_and(|v| v.header().ends_lazy(now))
}

/// Tells the agent that ends completing from now on may reach it as late as `until_ns` (no ring:
/// nothing). One atomic.
pub fn say_ends_late_until(until_ns: u64) {
    if let Some(v) = shm_view() {
        v.header().say_ends_late_until(until_ns);
    }
}

/// Sets (`on`) or clears `bit` in this process's ring header `features` (no ring: nothing;
/// false). Atomic only.
pub fn set_ring_feature(bit: u32, on: bool) -> bool {
    match shm_view() {
        Some(v) => {
            let f = &v.header().features;
            if on {
                f.fetch_or(bit, Ordering::Release);
            } else {
                f.fetch_and(!bit, Ordering::Release);
            }
            true
        }
        None => false,
    }
}

/// Pushes a complete record to the shared ring (the calling thread's lane) and the trace ring. No
/// lock, no system call.
#[inline(always)]
pub fn push(rec: &Record) {
    let lane = THREAD.try_with(lane_of).unwrap_or_else(|_| service_lane());
    push_lane(lane, rec);
}

#[inline(always)]
fn push_lane(word: u32, rec: &Record) {
    if let Some(v) = shm_view() {
        let lane = word & !lanes::OWNED;
        let pushed = if word & lanes::OWNED != 0 {
            v.push_lane_owned(lane, rec)
        } else {
            v.push_lane(lane, rec)
        };
        if pushed {
            let d = v.header().dropped.load(Ordering::Relaxed);
            if d != SHM_REPORTED_DROPS.load(Ordering::Relaxed) {
                report_drops(v, d, lane);
            }
        }
    }
    trace::push(rec);
}

/// The lane of the process's ring the thread pushes to, with [`lanes::OWNED`] if it is the
/// thread's own (see [`lanes`]: threads launching at once on different cores share no cursor and
/// an owner pushes without a read-modify-write); the last lane is shared.
#[inline(always)]
fn lane_of(t: &Thread) -> u32 {
    let l = t.lane.get();
    if l != 0 {
        return l - 1;
    }
    assign_lane(t)
}

#[cold]
#[inline(never)]
fn assign_lane(t: &Thread) -> u32 {
    // Claimed once the ring (and so its lanes) exists; before, asked again.
    if SHM_BASE.load(Ordering::Acquire).is_null() {
        return service_lane();
    }
    let word = match lanes::claim(SHM_LANES.load(Ordering::Relaxed)) {
        Some(lane) => lane | lanes::OWNED,
        None => service_lane(),
    };
    t.lane.set(word + 1);
    word
}

/// The calling thread leaves the lane it owns, if any, and pushes to the service lane from now on
/// (at thread exit: see [`lanes`]).
pub(crate) fn give_back_lane() {
    let _ = THREAD.try_with(|t| {
        let w = t.lane.get();
        if w != 0 && (w - 1) & lanes::OWNED != 0 {
            t.lane.set(service_lane() + 1);
            lanes::free((w - 1) & !lanes::OWNED);
        }
    });
}

fn service_lane() -> u32 {
    SHM_LANES.load(Ordering::Relaxed).saturating_sub(1)
}

/// The calling thread (one of freeride's comm threads) pushes to the ring's last lane, leaving the
/// others to the threads that launch.
pub fn set_service_lane() {
    give_back_lane();
    let _ = THREAD.try_with(|t| t.lane.set(service_lane() + 1));
}

#[cold]
fn report_drops(v: RingView, d: u64, lane: u32) {
    let prev = SHM_REPORTED_DROPS.swap(d, Ordering::Relaxed);
    if d > prev {
        let r = Record {
            t_ns: now_ns(),
            kind: Kind::Dropped as u8,
            p0: d - prev,
            device: PROC_GPU.load(Ordering::Relaxed),
            ..Default::default()
        };
        v.push_lane(lane, &r);
    }
}

/// Thread id, cached per thread (one gettid per thread, ever).
#[inline(always)]
pub fn tid(t: &Thread) -> u32 {
    let v = t.tid.get();
    if v != 0 {
        return v;
    }
    // SAFETY: gettid has no preconditions.
    let v = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    t.tid.set(v);
    v
}

/// Device of the calling thread's current context (-1 unknown). Queries the driver at most once
/// per thread (and after a context switch), retrying every 64 launches while unknown.
#[inline(always)]
pub fn device(t: &Thread) -> i32 {
    let d = t.dev.get();
    if d >= 0 {
        return d;
    }
    if d == -1 {
        let r = t.dev_retry.get();
        if r > 0 {
            t.dev_retry.set(r - 1);
            return -1;
        }
    }
    query_device(t)
}

/// The GPU of the calling thread's current context, as a record's `device` field (-1 unknown):
/// the thread's cached value ([`Thread::gpu`]), resolved with its device.
#[inline(always)]
pub fn gpu(t: &Thread) -> i32 {
    if t.dev.get() >= 0 {
        return t.gpu.get();
    }
    if device(t) >= 0 {
        t.gpu.get()
    } else {
        -1
    }
}

#[cold]
#[inline(never)]
fn query_device(t: &Thread) -> i32 {
    let d = comm::driver().map(|drv| drv.ctx_device()).unwrap_or(-1);
    // A driver that knows the ordinal names its GPU (`cuDeviceGetPCIBusId` needs no context):
    // one that cannot leaves the thread's records on an unknown GPU.
    let g = crate::gpus::of_ordinal(d);
    t.gpu.set(g.field());
    t.dev.set(d);
    t.dev_retry.set(64);
    if d >= 0 && g.is_known() {
        let _ = PROC_GPU.compare_exchange(-1, g.field(), Ordering::Relaxed, Ordering::Relaxed);
        if let Some(v) = shm_view() {
            let _ = v.header().device.compare_exchange(
                -1,
                g.field(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }
    d
}

/// The GPU of device ordinal `ordinal` of this process, as a record's `device` field (-1
/// unknown). Resolved through the driver the first time ([`crate::gpus`]).
pub fn gpu_of(ordinal: i32) -> i32 {
    crate::gpus::of_ordinal(ordinal).field()
}

/// The `t_ns` of a record that declares something for the whole life of the process (a GPU's
/// [`Kind::DeviceInfo`]): just after the process's start record, so that the reader, which merges a
/// ring's lanes in time order, hands it out before every record of another thread that names what
/// it declares. Now, before there is a start record.
pub fn declaration_ns() -> u64 {
    match START_RECORD_NS.load(Ordering::Relaxed) {
        0 => now_ns(),
        t => t + 1,
    }
}

/// Forget the thread's device (the context changed).
pub fn invalidate_device() {
    let _ = THREAD.try_with(|t| t.dev.set(-2));
}

/// The hook clock: `CLOCK_MONOTONIC` nanoseconds from the calling thread's calibrated TSC anchor
/// ([`freeride_abi::clock`]; `clock_gettime` where the TSC is not in use). Hook path.
#[inline(always)]
pub fn now_ns() -> u64 {
    with_thread(|t| t.clock.now()).unwrap_or_else(freeride_abi::now_ns)
}

/// Records an event of the calling thread (the caller holds [`Entered`]).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn record(kind: Kind, api: Api, t_ns: u64, stream: u64, aux: u32, flags: u8, p: [u64; 3]) {
    with_thread(|t| record_on(t, kind, api, t_ns, stream, aux, flags, p));
}

/// [`record`] of a record about GPU `device` (a [`freeride_abi::GpuId`] field), not the calling
/// thread's (a comm op on a communicator of another GPU than the current context's).
#[allow(clippy::too_many_arguments)]
pub fn record_on_gpu(
    kind: Kind,
    api: Api,
    t_ns: u64,
    device: i32,
    stream: u64,
    aux: u32,
    flags: u8,
    p: [u64; 3],
) {
    with_thread(|t| push_on(t, kind, api, t_ns, device, stream, aux, flags, p));
}

/// [`record`] with the thread's state in hand.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn record_on(
    t: &Thread,
    kind: Kind,
    api: Api,
    t_ns: u64,
    stream: u64,
    aux: u32,
    flags: u8,
    p: [u64; 3],
) {
    push_on(t, kind, api, t_ns, gpu(t), stream, aux, flags, p);
}

/// The one push of every record kind a hook makes.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn push_on(
    t: &Thread,
    kind: Kind,
    api: Api,
    t_ns: u64,
    device: i32,
    stream: u64,
    aux: u32,
    flags: u8,
    p: [u64; 3],
) {
    push_lane(
        lane_of(t),
        &Record {
            t_ns,
            kind: kind as u8,
            flags,
            api: api as u16,
            device,
            tid: tid(t),
            aux,
            stream,
            p0: p[0],
            p1: p[1],
            p2: p[2],
        },
    );
}

/// The stream of the calling thread's last kernel launch (NCCL's own excepted) since this was
/// last called, if any: where a host-blocking call puts its drain mark
/// ([`crate::comm::drain_mark`]). Thread-local only.
pub fn take_unmarked_stream() -> Option<u64> {
    with_thread(|t| t.unmarked.replace(NO_STREAM)).filter(|&s| s != NO_STREAM)
}

/// Marks the calling thread as inside a hooked NCCL call until dropped: launches recorded meanwhile
/// carry [`freeride_abi::event::LAUNCH_FLAG_COMM`].
pub struct NcclScope(());

impl Drop for NcclScope {
    #[inline(always)]
    fn drop(&mut self) {
        with_thread(|t| t.in_nccl.set(t.in_nccl.get().saturating_sub(1)));
    }
}

/// Enters a hooked NCCL call's real work (see [`NcclScope`]).
#[inline(always)]
pub fn nccl_scope() -> NcclScope {
    with_thread(|t| t.in_nccl.set(t.in_nccl.get() + 1));
    NcclScope(())
}

/// [`freeride_abi::event::LAUNCH_FLAG_COMM`] while the calling thread is inside a hooked NCCL
/// call, else 0.
#[inline(always)]
pub fn comm_flag() -> u8 {
    if with_thread(|t| t.in_nccl.get() > 0).unwrap_or(false) {
        freeride_abi::event::LAUNCH_FLAG_COMM
    } else {
        0
    }
}

/// Records a kernel launch (hook path): one thread-local access, the clock, one push.
#[inline(always)]
pub fn launch(api: Api, stream: u64, func: u64, grid: [u32; 3], block: [u32; 3], shmem: u32) {
    if !active() {
        return;
    }
    with_thread(
        // Without this the closure is compiled once in this module and called, not inlined into
        // each wrapper (another codegen unit): a call and spilled arguments on every launch.
        #[inline(always)]
        |t| {
            let flags = if t.in_nccl.get() > 0 {
                freeride_abi::event::LAUNCH_FLAG_COMM
            } else {
                t.unmarked.set(stream);
                0
            };
            record_on(
                t,
                Kind::Launch,
                api,
                t.clock.now(),
                stream,
                shmem,
                flags,
                [
                    func,
                    grid[0] as u64 | (grid[1] as u64) << 32,
                    grid[2] as u64
                        | (freeride_abi::event::pack_block(block[0], block[1], block[2]) as u64)
                            << 32,
                ],
            )
        },
    );
    if is_sidetask() {
        crate::gate::before_launch(api, stream, func);
    }
}

mod lifecycle;
use lifecycle::init;
