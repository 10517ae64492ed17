//! Stand-in libnccl.so.2 for the GPU-less test bed (see tests/TESTBED.md, "NCCL").
//!
//! Like the real library it imports no CUDA symbol: it opens `libcuda.so.1` itself and gets driver
//! entry points through `cuGetProcAddress_v2` (`driver`). Every API function is a strong
//! `pncclX` with a weak `ncclX` alias at the same address (as real NCCL exports them, made for
//! interposition). Communicators share `$FREERIDE_SIM_DIR/nccl-<id>` (`shm`); each operation (or
//! each stream's share of a group) is one communication kernel whose body (`work`) runs on the
//! simulated GPU and models the transfer.
// The exported functions are C entry points: the validity of the pointers they receive is the C
// caller's contract (as with the real library), stated at each dereference.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

mod comm;
mod driver;
mod group;
mod shm;
mod sync;
mod types;
mod work;

use comm::Comm;
use driver::KernelName;
use group::Item;
use std::ffi::{c_char, c_int, c_void};
use types::*;
use work::P2p;

type NcclComm = *mut Comm;
type Stream = *mut c_void;

/// Weak `ncclX` = `pnccl X` (build.rs lists the same names in the export script).
macro_rules! weak_aliases {
    ($($name:literal),* $(,)?) => {
        $(
            std::arch::global_asm!(concat!(
                ".weak nccl", $name, "\n",
                ".type nccl", $name, ",@function\n",
                ".set nccl", $name, ", pnccl", $name, "\n",
            ));
        )*
    };
}

weak_aliases!(
    "GetVersion",
    "GetUniqueId",
    "CommInitRank",
    "CommInitRankConfig",
    "CommInitAll",
    "CommSplit",
    "CommDestroy",
    "CommAbort",
    "CommCount",
    "CommUserRank",
    "CommCuDevice",
    "CommGetAsyncError",
    "GetErrorString",
    "GetLastError",
    "Send",
    "Recv",
    "GroupStart",
    "GroupEnd",
    "AllReduce",
    "ReduceScatter",
    "AllGather",
    "Broadcast",
);

/// Runs an API body; a panic becomes ncclInternalError instead of unwinding into C.
fn guard(f: impl FnOnce() -> NcclResult) -> NcclResult {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(NCCL_INTERNAL_ERROR)
}

/// The communicator behind a handle.
fn comm<'a>(c: NcclComm) -> Result<&'a Comm, NcclResult> {
    // SAFETY: a non-NULL handle was returned by ncclCommInitRank(Config)/All/Split and not yet destroyed (the
    // caller's contract, as with real NCCL).
    unsafe { c.as_ref() }.ok_or(NCCL_INVALID_ARGUMENT)
}

fn put<T>(out: *mut T, v: T) -> NcclResult {
    if out.is_null() {
        return NCCL_INVALID_ARGUMENT;
    }
    // SAFETY: non-NULL out-pointer provided by the caller for a T.
    unsafe { out.write(v) };
    NCCL_SUCCESS
}

fn result(r: Result<NcclResult, NcclResult>) -> NcclResult {
    match r {
        Ok(v) => v,
        Err(e) => group::note_error(e),
    }
}

#[no_mangle]
pub extern "C" fn pncclGetVersion(version: *mut c_int) -> NcclResult {
    put(version, VERSION_CODE)
}

#[no_mangle]
pub extern "C" fn pncclGetUniqueId(unique_id: *mut UniqueId) -> NcclResult {
    guard(|| match comm::new_unique_id() {
        Ok(id) => put(unique_id, id),
        Err(e) => e,
    })
}

/// ncclCommInitRank(Config): joins, then waits for every rank.
fn init_rank(out: *mut NcclComm, nranks: c_int, comm_id: &UniqueId, rank: c_int) -> NcclResult {
    guard(|| {
        if out.is_null() {
            return NCCL_INVALID_ARGUMENT;
        }
        let c = match Comm::join(comm_id, nranks, rank, None) {
            Ok(c) => c,
            Err(e) => return e,
        };
        if let Err(e) = c.wait_all_joined() {
            (*c).leave(true);
            return e;
        }
        put(out, Box::into_raw(c))
    })
}

#[no_mangle]
pub extern "C" fn pncclCommInitRank(
    out: *mut NcclComm,
    nranks: c_int,
    comm_id: UniqueId,
    rank: c_int,
) -> NcclResult {
    init_rank(out, nranks, &comm_id, rank)
}

/// As ncclCommInitRank: the config (`ncclConfig_t*`, blocking or not, ...) is ignored.
#[no_mangle]
pub extern "C" fn pncclCommInitRankConfig(
    out: *mut NcclComm,
    nranks: c_int,
    comm_id: UniqueId,
    rank: c_int,
    _config: *mut c_void,
) -> NcclResult {
    init_rank(out, nranks, &comm_id, rank)
}

/// ncclCommSplit (see `Comm::split`); the config is ignored. A rank passing
/// `NCCL_SPLIT_NOCOLOR` (-1) gets NULL.
#[no_mangle]
pub extern "C" fn pncclCommSplit(
    c: NcclComm,
    color: c_int,
    key: c_int,
    newcomm: *mut NcclComm,
    _config: *mut c_void,
) -> NcclResult {
    guard(|| {
        if newcomm.is_null() {
            return NCCL_INVALID_ARGUMENT;
        }
        let parent = match comm(c) {
            Ok(p) => p,
            Err(e) => return e,
        };
        match parent.split(color, key) {
            Ok(Some(n)) => put(newcomm, Box::into_raw(n)),
            Ok(None) => put(newcomm, std::ptr::null_mut()),
            Err(e) => e,
        }
    })
}

#[no_mangle]
pub extern "C" fn pncclCommInitAll(
    comms: *mut NcclComm,
    ndev: c_int,
    devlist: *const c_int,
) -> NcclResult {
    guard(|| {
        if comms.is_null() || ndev < 1 {
            return NCCL_INVALID_ARGUMENT;
        }
        let id = match comm::new_unique_id() {
            Ok(id) => id,
            Err(e) => return e,
        };
        let mut made = Vec::new();
        for i in 0..ndev {
            // SAFETY: devlist, when given, has ndev entries (NCCL's contract).
            let dev = if devlist.is_null() {
                i
            } else {
                unsafe { *devlist.add(i as usize) }
            };
            match Comm::join(&id, ndev, i, Some(dev)) {
                Ok(c) => made.push(c),
                Err(e) => {
                    made.into_iter().for_each(|c| (*c).leave(true));
                    return e;
                }
            }
        }
        for (i, c) in made.into_iter().enumerate() {
            // SAFETY: comms has ndev slots (NCCL's contract).
            unsafe { comms.add(i).write(Box::into_raw(c)) };
        }
        NCCL_SUCCESS
    })
}

fn leave(c: NcclComm, abort: bool) -> NcclResult {
    guard(|| {
        if c.is_null() {
            return NCCL_INVALID_ARGUMENT;
        }
        // SAFETY: the handle came from Box::into_raw in init and is destroyed once (caller's contract).
        (*unsafe { Box::from_raw(c) }).leave(abort);
        NCCL_SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn pncclCommDestroy(c: NcclComm) -> NcclResult {
    leave(c, false)
}

#[no_mangle]
pub extern "C" fn pncclCommAbort(c: NcclComm) -> NcclResult {
    leave(c, true)
}

#[no_mangle]
pub extern "C" fn pncclCommCount(c: NcclComm, count: *mut c_int) -> NcclResult {
    guard(|| {
        comm(c)
            .map(|c| put(count, c.nranks as c_int))
            .unwrap_or_else(|e| e)
    })
}

#[no_mangle]
pub extern "C" fn pncclCommUserRank(c: NcclComm, rank: *mut c_int) -> NcclResult {
    guard(|| {
        comm(c)
            .map(|c| put(rank, c.rank as c_int))
            .unwrap_or_else(|e| e)
    })
}

#[no_mangle]
pub extern "C" fn pncclCommCuDevice(c: NcclComm, device: *mut c_int) -> NcclResult {
    guard(|| {
        comm(c)
            .map(|c| put(device, c.kernels.device))
            .unwrap_or_else(|e| e)
    })
}

#[no_mangle]
pub extern "C" fn pncclCommGetAsyncError(c: NcclComm, async_error: *mut NcclResult) -> NcclResult {
    guard(|| {
        comm(c)
            .map(|c| {
                put(
                    async_error,
                    c.shared
                        .async_error
                        .load(std::sync::atomic::Ordering::Acquire),
                )
            })
            .unwrap_or_else(|e| e)
    })
}

#[no_mangle]
pub extern "C" fn pncclGetErrorString(r: NcclResult) -> *const c_char {
    error_string(r).as_ptr()
}

#[no_mangle]
pub extern "C" fn pncclGetLastError(_c: NcclComm) -> *const c_char {
    c"".as_ptr()
}

fn bytes(count: usize, datatype: c_int) -> Result<u64, NcclResult> {
    type_size(datatype)
        .map(|s| count as u64 * s)
        .ok_or(NCCL_INVALID_ARGUMENT)
}

#[no_mangle]
pub extern "C" fn pncclSend(
    _sendbuff: *const c_void,
    count: usize,
    datatype: c_int,
    peer: c_int,
    c: NcclComm,
    stream: Stream,
) -> NcclResult {
    guard(|| {
        result((|| {
            let c = comm(c)?;
            let peer = c.check_peer(peer)?;
            let bytes = bytes(count, datatype)?;
            let seq = c.next_send(peer);
            Ok(group::issue(
                c,
                stream,
                Item::P2p(P2p::Send { peer, seq, bytes }),
            ))
        })())
    })
}

#[no_mangle]
pub extern "C" fn pncclRecv(
    _recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    peer: c_int,
    c: NcclComm,
    stream: Stream,
) -> NcclResult {
    guard(|| {
        result((|| {
            let c = comm(c)?;
            let peer = c.check_peer(peer)?;
            bytes(count, datatype)?;
            let seq = c.next_recv(peer);
            Ok(group::issue(c, stream, Item::P2p(P2p::Recv { peer, seq })))
        })())
    })
}

#[no_mangle]
pub extern "C" fn pncclGroupStart() -> NcclResult {
    guard(group::start)
}

#[no_mangle]
pub extern "C" fn pncclGroupEnd() -> NcclResult {
    guard(group::end)
}

/// A collective moving `bytes` (per rank's buffer) on every rank.
fn collective(
    c: NcclComm,
    name: KernelName,
    bytes: Result<u64, NcclResult>,
    stream: Stream,
) -> NcclResult {
    guard(|| {
        result((|| {
            let c = comm(c)?;
            let bytes = bytes?;
            let seq = c.next_coll();
            Ok(group::issue(c, stream, Item::Coll { name, seq, bytes }))
        })())
    })
}

fn check_op(op: c_int) -> Result<(), NcclResult> {
    if op < 0 {
        Err(NCCL_INVALID_ARGUMENT)
    } else {
        Ok(())
    }
}

#[no_mangle]
pub extern "C" fn pncclAllReduce(
    _sendbuff: *const c_void,
    _recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
    c: NcclComm,
    stream: Stream,
) -> NcclResult {
    collective(
        c,
        KernelName::AllReduce,
        check_op(op).and_then(|_| bytes(count, datatype)),
        stream,
    )
}

#[no_mangle]
pub extern "C" fn pncclReduceScatter(
    _sendbuff: *const c_void,
    _recvbuff: *mut c_void,
    recvcount: usize,
    datatype: c_int,
    op: c_int,
    c: NcclComm,
    stream: Stream,
) -> NcclResult {
    let n = comm(c).map(|c| c.nranks).unwrap_or(1);
    collective(
        c,
        KernelName::ReduceScatter,
        check_op(op).and_then(|_| bytes(recvcount * n, datatype)),
        stream,
    )
}

#[no_mangle]
pub extern "C" fn pncclAllGather(
    _sendbuff: *const c_void,
    _recvbuff: *mut c_void,
    sendcount: usize,
    datatype: c_int,
    c: NcclComm,
    stream: Stream,
) -> NcclResult {
    let n = comm(c).map(|c| c.nranks).unwrap_or(1);
    collective(
        c,
        KernelName::AllGather,
        bytes(sendcount * n, datatype),
        stream,
    )
}

#[no_mangle]
pub extern "C" fn pncclBroadcast(
    _sendbuff: *const c_void,
    _recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    c: NcclComm,
    stream: Stream,
) -> NcclResult {
    let b = comm(c)
        .and_then(|cm| cm.check_peer(root))
        .and_then(|_| bytes(count, datatype));
    collective(c, KernelName::Broadcast, b, stream)
}
