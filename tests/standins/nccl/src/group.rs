//! ncclGroupStart/End: operations issued inside a group are held (per thread) and launched at the
//! outermost ncclGroupEnd; the point-to-point ops of a group become one kernel per stream.
use crate::comm::Comm;
use crate::driver::KernelName;
use crate::types::*;
use crate::work::{P2p, Work};
use std::cell::RefCell;
use std::ffi::c_void;

/// An operation to launch.
pub enum Item {
    P2p(P2p),
    Coll {
        name: KernelName,
        seq: u64,
        bytes: u64,
    },
}

struct Pending {
    comm: *const Comm,
    stream: *mut c_void,
    item: Item,
}

/// A stream's point-to-point ops of a group, launched through the first op's communicator.
type Bucket = (
    *mut c_void,
    *const Comm,
    Vec<(std::sync::Arc<crate::work::CommShared>, P2p)>,
);

#[derive(Default)]
struct Group {
    depth: u32,
    pending: Vec<Pending>,
    error: NcclResult,
}

thread_local! {
    static GROUP: RefCell<Group> = RefCell::new(Group::default());
}

pub fn start() -> NcclResult {
    GROUP.with(|g| g.borrow_mut().depth += 1);
    NCCL_SUCCESS
}

/// Launches the held operations when the outermost group ends.
pub fn end() -> NcclResult {
    let taken = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Err(NCCL_INVALID_USAGE);
        }
        g.depth -= 1;
        if g.depth > 0 {
            return Ok(None);
        }
        let err = std::mem::replace(&mut g.error, NCCL_SUCCESS);
        Ok(Some((std::mem::take(&mut g.pending), err)))
    });
    let (pending, mut result) = match taken {
        Err(e) => return e,
        Ok(None) => return NCCL_SUCCESS,
        Ok(Some(x)) => x,
    };
    // One bucket of p2p ops per stream, in order of first use.
    let mut buckets: Vec<Bucket> = Vec::new();
    for p in pending {
        // SAFETY: the caller keeps communicators alive until ncclGroupEnd (NCCL's contract).
        let comm = unsafe { &*p.comm };
        match p.item {
            Item::P2p(op) => match buckets.iter_mut().find(|b| b.0 == p.stream) {
                Some(b) => b.2.push((comm.shared.clone(), op)),
                None => buckets.push((p.stream, p.comm, vec![(comm.shared.clone(), op)])),
            },
            Item::Coll { name, seq, bytes } => {
                if let Err(e) = comm.launch(
                    name,
                    p.stream,
                    Work::Coll {
                        comm: comm.shared.clone(),
                        seq,
                        bytes,
                    },
                ) {
                    result = e;
                }
            }
        }
    }
    for (stream, comm, ops) in buckets {
        // SAFETY: as above.
        let comm = unsafe { &*comm };
        if let Err(e) = comm.launch(KernelName::SendRecv, stream, Work::P2p(ops)) {
            result = e;
        }
    }
    result
}

/// Launches `item` at once as its own kernel (outside a group) or holds it (inside).
pub fn issue(comm: &Comm, stream: *mut c_void, item: Item) -> NcclResult {
    let item = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth > 0 {
            g.pending.push(Pending { comm, stream, item });
            None
        } else {
            Some(item)
        }
    });
    let r = match item {
        None => return NCCL_SUCCESS,
        Some(Item::P2p(op)) => comm.launch(
            KernelName::SendRecv,
            stream,
            Work::P2p(vec![(comm.shared.clone(), op)]),
        ),
        Some(Item::Coll { name, seq, bytes }) => comm.launch(
            name,
            stream,
            Work::Coll {
                comm: comm.shared.clone(),
                seq,
                bytes,
            },
        ),
    };
    r.err().unwrap_or(NCCL_SUCCESS)
}

/// Remembers an argument error of an op inside a group (returned by ncclGroupEnd too).
pub fn note_error(e: NcclResult) -> NcclResult {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth > 0 && g.error == NCCL_SUCCESS {
            g.error = e;
        }
    });
    e
}
