//! NCCL wrappers (exported, forwarding to the `pncclX` aliases): every op recorded, and timed on
//! the GPU outside groups (a group is timed per stream at `ncclGroupEnd`). A side task's op
//! outside a group, or its outermost `ncclGroupEnd`, is admitted by the gate on every GPU its
//! communicators are on before the real call ([`crate::gate::before_comm`]).

use super::*;
use freeride_abi::event::Untimed;

/// `ncclCommCuDevice` of the loaded NCCL: 0 not looked up yet, 1 missing.
static COMM_CU_DEVICE: AtomicUsize = AtomicUsize::new(0);

type CommCuDevice = unsafe extern "C" fn(P, *mut c_int) -> c_int;

/// The device ordinal of communicator `comm` (`ncclCommCuDevice`: NCCL reads it from the
/// communicator; the caller's device when NCCL cannot say).
pub(super) fn comm_device(comm: P) -> i32 {
    let mut f = COMM_CU_DEVICE.load(Ordering::Acquire);
    if f == 0 {
        let mut p = dl::sym(dl::RTLD_NEXT, c"ncclCommCuDevice");
        'libs: for lib in [c"libnccl.so.2", c"libnccl.so"] {
            for name in [c"pncclCommCuDevice", c"ncclCommCuDevice"] {
                if !p.is_null() {
                    break 'libs;
                }
                p = dl::sym_in_loaded(lib, name);
            }
        }
        f = if p.is_null() { 1 } else { p as usize };
        COMM_CU_DEVICE.store(f, Ordering::Release);
    }
    if f > 1 {
        // SAFETY: f is NCCL's ncclCommCuDevice(ncclComm_t, int*), writing one int we own.
        let g: CommCuDevice = unsafe { std::mem::transmute::<usize, CommCuDevice>(f) };
        let mut d: c_int = -1;
        // SAFETY: as above; NCCL checks the communicator.
        if unsafe { g(comm, &mut d) } == 0 && d >= 0 {
            return d;
        }
    }
    crate::gate::caller_device()
}

/// Host side of a comm op: records it; outside a group also starts GPU-side timing (an op that
/// cannot be timed is recorded untimed at once). Returns (op id, timing pair, host time).
#[inline]
fn comm_pre(
    api: Api,
    stream: P,
    peer: i32,
    bytes: u64,
    dtype: c_int,
    comm_h: P,
) -> (u32, Option<usize>, u64) {
    if !rt::active() {
        return (0, None, 0);
    }
    let t = now_ns();
    let op = comm::next_op();
    let (depth, group) = rt::THREAD
        .try_with(|th| (th.group_depth.get(), th.group_id.get()))
        .unwrap_or((0, 0));
    let group = if depth > 0 { group } else { 0 };
    // The op's GPU is its communicator's (one thread may queue on several GPUs' communicators).
    let gpu = rt::gpu_of(comm_device(comm_h));
    rt::record_on_gpu(
        Kind::CommOp,
        api,
        t,
        gpu,
        stream as u64,
        peer as u32,
        dtype as u8,
        [bytes, comm_h as u64, op as u64 | (group as u64) << 32],
    );
    crate::waits::comm_queued(stream as u64, comm::key(op, group));
    if depth > 0 {
        let tracked = rt::THREAD
            .try_with(|th| {
                let mut s = th.group_streams.get();
                let n = th.group_nstreams.get();
                if s[..n].contains(&(stream as u64)) {
                    return true;
                }
                if n == s.len() {
                    return false;
                }
                s[n] = stream as u64;
                th.group_streams.set(s);
                th.group_nstreams.set(n + 1);
                true
            })
            .unwrap_or(false);
        if !tracked {
            // More streams in the group than are timed: this one's work never will be.
            comm::untimed_op(
                Api::NcclGroupEnd,
                gpu,
                stream as u64,
                0,
                group,
                Untimed::TooManyStreams,
            );
        }
        return (op, None, t);
    }
    match comm::begin(stream as u64) {
        Ok(i) => (op, Some(i), t),
        Err(why) => {
            comm::untimed_op(api, gpu, stream as u64, op, 0, why);
            (op, None, t)
        }
    }
}

#[inline]
fn comm_post(api: Api, stream: P, op: u32, pair: Option<usize>, t: u64) {
    if let Some(i) = pair {
        comm::end(i, stream as u64, api, op, 0, t);
    }
}

/// Records an NCCL op around its real call: the op before, its GPU-side timing events after.
/// The guard covers only our own work: NCCL's kernel launches inside the real call must reach the
/// driver wrapper and be recorded (flagged as NCCL's own by the scope).
#[inline(always)]
fn nccl_op(
    api: Api,
    stream: P,
    peer: c_int,
    bytes: u64,
    dtype: c_int,
    comm_h: P,
    call: impl FnOnce() -> c_int,
) -> c_int {
    let pre = rt::enter().map(|_g| comm_pre(api, stream, peer, bytes, dtype, comm_h));
    let side = pre.is_some() && rt::is_sidetask();
    if side {
        let in_group = rt::THREAD
            .try_with(|th| th.group_depth.get() > 0)
            .unwrap_or(false);
        crate::gate::comm_op(api, comm_h as u64, comm_device(comm_h), in_group);
    }
    let nccl = rt::nccl_scope();
    let r = call();
    drop(nccl);
    if side {
        crate::gate::after_comm();
    }
    if let Some((op, pair, t)) = pre {
        let _g = rt::enter();
        comm_post(api, stream, op, pair, t);
    }
    r
}

fn bytes_of(count: usize, dtype: c_int) -> u64 {
    (count as u64).saturating_mul(freeride_abi::event::nccl_type_size(dtype))
}

#[no_mangle]
pub unsafe extern "C" fn ncclSend(
    buf: *const c_void,
    count: usize,
    dtype: c_int,
    peer: c_int,
    comm_h: P,
    stream: P,
) -> c_int {
    let api = Api::NcclSend;
    let Some(real) = real_fn::<NcclP2p>(api) else {
        return NCCL_SYSTEM_ERROR;
    };
    // SAFETY: pass-through (the real function resolved for this api, with the caller's arguments).
    nccl_op(
        api,
        stream,
        peer,
        bytes_of(count, dtype),
        dtype,
        comm_h,
        || unsafe { real(buf, count, dtype, peer, comm_h, stream) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn ncclRecv(
    buf: P,
    count: usize,
    dtype: c_int,
    peer: c_int,
    comm_h: P,
    stream: P,
) -> c_int {
    let api = Api::NcclRecv;
    let Some(real) = real_fn::<NcclP2pRecv>(api) else {
        return NCCL_SYSTEM_ERROR;
    };
    // SAFETY: pass-through (the real function resolved for this api, with the caller's arguments).
    nccl_op(
        api,
        stream,
        peer,
        bytes_of(count, dtype),
        dtype,
        comm_h,
        || unsafe { real(buf, count, dtype, peer, comm_h, stream) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn ncclGroupStart() -> c_int {
    let api = Api::NcclGroupStart;
    let Some(real) = real_fn::<NcclGroup>(api) else {
        return NCCL_SYSTEM_ERROR;
    };
    let Some(g) = rt::enter() else {
        // SAFETY: pass-through.
        return unsafe { real() };
    };
    let t = now_ns();
    let (depth, group) = rt::THREAD
        .try_with(|th| {
            let d = th.group_depth.get() + 1;
            th.group_depth.set(d);
            if d == 1 {
                th.group_id.set(comm::next_group());
                th.group_nstreams.set(0);
                th.group_queued.set(t);
            }
            (d, th.group_id.get())
        })
        .unwrap_or((0, 0));
    if rt::active() {
        rt::record(
            Kind::CommGroup,
            api,
            t,
            0,
            depth,
            0,
            [0, 0, (group as u64) << 32],
        );
    }
    drop(g);
    // SAFETY: pass-through.
    unsafe { real() }
}

#[no_mangle]
pub unsafe extern "C" fn ncclGroupEnd() -> c_int {
    let api = Api::NcclGroupEnd;
    let Some(real) = real_fn::<NcclGroup>(api) else {
        return NCCL_SYSTEM_ERROR;
    };
    let Some(g) = rt::enter() else {
        // SAFETY: pass-through.
        return unsafe { real() };
    };
    let t = now_ns();
    let (depth, group, streams, n) = rt::THREAD
        .try_with(|th| {
            let d = th.group_depth.get();
            (
                d,
                th.group_id.get(),
                th.group_streams.get(),
                th.group_nstreams.get(),
            )
        })
        .unwrap_or((0, 0, [0; comm::GROUP_STREAMS], 0));
    let active = rt::active();
    if active {
        rt::record(
            Kind::CommGroup,
            api,
            t,
            0,
            depth.saturating_sub(1),
            0,
            [0, 0, (group as u64) << 32],
        );
    }
    let mut pairs = [None::<usize>; comm::GROUP_STREAMS];
    let outermost = depth == 1;
    if active && outermost {
        for (p, s) in pairs.iter_mut().zip(&streams[..n]) {
            match comm::begin(*s) {
                Ok(i) => *p = Some(i),
                Err(why) => comm::untimed_op(api, -1, *s, 0, group, why),
            }
        }
    }
    drop(g);
    let side = outermost && rt::is_sidetask();
    if side {
        crate::gate::group_end();
    }
    let nccl = rt::nccl_scope();
    // SAFETY: pass-through (unguarded: NCCL's launches inside must be recorded).
    let r = unsafe { real() };
    drop(nccl);
    if side {
        crate::gate::after_comm();
    }
    let _g = rt::enter();
    if outermost {
        for (p, s) in pairs.iter().zip(&streams[..n]) {
            if let Some(i) = p {
                comm::end(*i, *s, api, 0, group, t);
            }
        }
    }
    let _ = rt::THREAD.try_with(|th| {
        th.group_depth.set(depth.saturating_sub(1));
        if depth <= 1 {
            th.group_nstreams.set(0);
        }
    });
    r
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn nccl_reduce(
    api: Api,
    s: *const c_void,
    d: P,
    count: usize,
    dtype: c_int,
    x: c_int,
    comm_h: P,
    stream: P,
    peer: i32,
) -> c_int {
    let Some(real) = real_fn::<NcclReduce>(api) else {
        return NCCL_SYSTEM_ERROR;
    };
    // SAFETY: pass-through (the real function resolved for this api, with the caller's arguments).
    nccl_op(
        api,
        stream,
        peer,
        bytes_of(count, dtype),
        dtype,
        comm_h,
        || unsafe { real(s, d, count, dtype, x, comm_h, stream) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn ncclAllReduce(
    s: *const c_void,
    d: P,
    count: usize,
    dtype: c_int,
    redop: c_int,
    comm_h: P,
    stream: P,
) -> c_int {
    // SAFETY: pass-through.
    unsafe {
        nccl_reduce(
            Api::NcclAllReduce,
            s,
            d,
            count,
            dtype,
            redop,
            comm_h,
            stream,
            -1,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn ncclReduceScatter(
    s: *const c_void,
    d: P,
    recvcount: usize,
    dtype: c_int,
    redop: c_int,
    comm_h: P,
    stream: P,
) -> c_int {
    // SAFETY: pass-through.
    unsafe {
        nccl_reduce(
            Api::NcclReduceScatter,
            s,
            d,
            recvcount,
            dtype,
            redop,
            comm_h,
            stream,
            -1,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn ncclBroadcast(
    s: *const c_void,
    d: P,
    count: usize,
    dtype: c_int,
    root: c_int,
    comm_h: P,
    stream: P,
) -> c_int {
    // SAFETY: pass-through.
    unsafe {
        nccl_reduce(
            Api::NcclBroadcast,
            s,
            d,
            count,
            dtype,
            root,
            comm_h,
            stream,
            root,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn ncclAllGather(
    s: *const c_void,
    d: P,
    sendcount: usize,
    dtype: c_int,
    comm_h: P,
    stream: P,
) -> c_int {
    let api = Api::NcclAllGather;
    let Some(real) = real_fn::<NcclGather>(api) else {
        return NCCL_SYSTEM_ERROR;
    };
    // SAFETY: pass-through (the real function resolved for this api, with the caller's arguments).
    nccl_op(
        api,
        stream,
        -1,
        bytes_of(sendcount, dtype),
        dtype,
        comm_h,
        || unsafe { real(s, d, sendcount, dtype, comm_h, stream) },
    )
}
