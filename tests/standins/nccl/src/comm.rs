//! Communicators: creation (with the all-ranks rendezvous), sequence numbers, kernel launch.
use crate::driver::{self, CtxGuard, DeviceKernels, KernelName};
use crate::shm::{Mapping, MAGIC};
use crate::sync::{futex_wait, futex_wake_all, process_dead};
use crate::types::*;
use crate::work::{self, CommShared, Work};
use simgpu::abi::{now_ns, DeviceWork, DEVICE_WORK_MAGIC};
use std::ffi::c_void;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;

/// "FRNCCLID": first bytes of our unique ids.
const ID_MAGIC: &[u8; 8] = b"FRNCCLID";
const ID_RANDOM: usize = 16;

/// A communicator (`ncclComm_t` points to one).
pub struct Comm {
    /// The id it was made from (the name of its file, and of its splits').
    id: UniqueId,
    pub shared: Arc<CommShared>,
    pub kernels: DeviceKernels,
    pub nranks: usize,
    pub rank: usize,
    send_seq: Vec<AtomicU64>,
    recv_seq: Vec<AtomicU64>,
    coll_seq: AtomicU64,
    /// `ncclCommSplit`s of this communicator so far (every rank makes the same, in order).
    split_seq: AtomicU64,
}

/// ncclGetUniqueId.
pub fn new_unique_id() -> Result<UniqueId, NcclResult> {
    let mut id = UniqueId {
        internal: [0; UNIQUE_ID_BYTES],
    };
    id.internal[..8].copy_from_slice(ID_MAGIC);
    let buf = &mut id.internal[8..8 + ID_RANDOM];
    // SAFETY: getrandom writes at most buf.len() bytes into buf.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n != ID_RANDOM as isize {
        return Err(NCCL_SYSTEM_ERROR);
    }
    Ok(id)
}

fn id_name(id: &UniqueId) -> Option<String> {
    if &id.internal[..8] != ID_MAGIC {
        return None;
    }
    Some(
        id.internal[8..8 + ID_RANDOM]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
    )
}

/// `NCCL_SPLIT_NOCOLOR`: the rank takes part in the split but gets no communicator.
pub const SPLIT_NOCOLOR: i32 = -1;

/// A unique id made of `text` (the same in every process): our magic, then a hash of it.
fn derived_id(text: &str) -> UniqueId {
    let mut id = UniqueId {
        internal: [0; UNIQUE_ID_BYTES],
    };
    id.internal[..8].copy_from_slice(ID_MAGIC);
    for (half, seed) in [0xcbf2_9ce4_8422_2325u64, 0x8422_2325_cbf2_9ce4]
        .into_iter()
        .enumerate()
    {
        let h = text.bytes().fold(seed, |h, b| {
            (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
        });
        id.internal[8 + 8 * half..16 + 8 * half].copy_from_slice(&h.to_le_bytes());
    }
    id
}

/// Waits until `n` ranks arrived in `map` (or one of them died, the communicator was aborted, or
/// the simulation's time-out passed).
fn wait_arrived(map: &Mapping, n: usize) -> Result<(), NcclResult> {
    let h = map.header();
    let deadline = now_ns().saturating_add(work::cost().timeout_ns);
    loop {
        let seen = h.arrived.load(Ordering::Acquire);
        if seen as usize >= n {
            return Ok(());
        }
        if map.aborted() {
            return Err(NCCL_INVALID_USAGE);
        }
        let dead = (0..n).any(|r| {
            map.rank(r).present.load(Ordering::Acquire) != 0
                && process_dead(map.rank(r).pid.load(Ordering::Acquire))
        });
        if dead {
            // It may have arrived and exited since `seen` was read.
            return if h.arrived.load(Ordering::Acquire) as usize >= n {
                Ok(())
            } else {
                Err(NCCL_REMOTE_ERROR)
            };
        }
        if now_ns() > deadline {
            return Err(NCCL_TIMEOUT);
        }
        futex_wait(&h.arrived, seen, 10_000_000);
    }
}

impl Comm {
    /// Joins communicator `id` as `rank` of `nranks` without waiting for the others.
    /// `device`: None = the calling thread's current context.
    pub fn join(
        id: &UniqueId,
        nranks: i32,
        rank: i32,
        device: Option<i32>,
    ) -> Result<Box<Comm>, NcclResult> {
        if nranks < 1 || rank < 0 || rank >= nranks {
            return Err(NCCL_INVALID_ARGUMENT);
        }
        let (n, r) = (nranks as usize, rank as usize);
        let name = id_name(id).ok_or(NCCL_INVALID_ARGUMENT)?;
        let drv = driver::get().ok_or(NCCL_SYSTEM_ERROR)?;
        let kernels = DeviceKernels::load(drv, device).map_err(|_| NCCL_UNHANDLED_CUDA_ERROR)?;
        let map = Mapping::open(&name, n).map_err(|_| NCCL_SYSTEM_ERROR)?;
        let h = map.header();
        let _ = h
            .magic
            .compare_exchange(0, MAGIC, Ordering::AcqRel, Ordering::Acquire);
        match h
            .nranks
            .compare_exchange(0, n as u32, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {}
            Err(existing) if existing == n as u32 => {}
            Err(_) => return Err(NCCL_INVALID_USAGE),
        }
        let info = map.rank(r);
        if info
            .present
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(NCCL_INVALID_USAGE);
        }
        info.device.store(kernels.device, Ordering::Release);
        info.pid.store(std::process::id(), Ordering::Release);
        h.arrived.fetch_add(1, Ordering::AcqRel);
        futex_wake_all(&h.arrived);
        let zeros = || (0..n).map(|_| AtomicU64::new(0)).collect();
        Ok(Box::new(Comm {
            id: *id,
            shared: Arc::new(CommShared {
                map,
                rank: r,
                async_error: AtomicI32::new(NCCL_SUCCESS),
            }),
            kernels,
            nranks: n,
            rank: r,
            send_seq: zeros(),
            recv_seq: zeros(),
            coll_seq: AtomicU64::new(0),
            split_seq: AtomicU64::new(0),
        }))
    }

    /// Waits until every rank joined (ncclCommInitRank "implicitly synchronizes with other ranks").
    pub fn wait_all_joined(&self) -> Result<(), NcclResult> {
        wait_arrived(&self.shared.map, self.nranks)
    }

    /// `ncclCommSplit`: every rank of this communicator calls it (in the same order as its other
    /// splits); those passing one `color` form a new communicator, ranked by `key`, then by rank
    /// here. The ranks meet in a file of their own (`nccl-<id>-split<k>`, removed by the last one
    /// out) to learn each other's colour and key; the new communicator's id is derived from this
    /// one's, `k` and the colour, so its ranks join it as with ncclCommInitRank. `None`: this rank
    /// passed [`SPLIT_NOCOLOR`].
    pub fn split(&self, color: i32, key: i32) -> Result<Option<Box<Comm>>, NcclResult> {
        if color < 0 && color != SPLIT_NOCOLOR {
            return Err(NCCL_INVALID_ARGUMENT);
        }
        let k = self.split_seq.fetch_add(1, Ordering::AcqRel);
        let base = id_name(&self.id).ok_or(NCCL_INTERNAL_ERROR)?;
        let meet = format!("{base}-split{k}");
        let (rank, nranks) = {
            let map = Mapping::open(&meet, self.nranks).map_err(|_| NCCL_SYSTEM_ERROR)?;
            let h = map.header();
            let me = map.rank(self.rank);
            // The rendezvous's rank slots carry (colour, key) in (device, _pad).
            me.device.store(color, Ordering::Release);
            me._pad.store(key as u32, Ordering::Release);
            me.pid.store(std::process::id(), Ordering::Release);
            me.present.store(1, Ordering::Release);
            h.arrived.fetch_add(1, Ordering::AcqRel);
            futex_wake_all(&h.arrived);
            let waited = wait_arrived(&map, self.nranks);
            let mut same: Vec<(i32, usize)> = (0..self.nranks)
                .filter(|&r| map.rank(r).device.load(Ordering::Acquire) == color)
                .map(|r| (map.rank(r)._pad.load(Ordering::Acquire) as i32, r))
                .collect();
            same.sort();
            if h.departed.fetch_add(1, Ordering::AcqRel) + 1 >= self.nranks as u32 {
                let _ = std::fs::remove_file(&map.path);
            }
            waited?;
            let rank = same.iter().position(|&(_, r)| r == self.rank);
            (rank.ok_or(NCCL_INTERNAL_ERROR)?, same.len())
        };
        if color == SPLIT_NOCOLOR {
            return Ok(None);
        }
        let id = derived_id(&format!("{meet}-color{color}"));
        let c = Comm::join(&id, nranks as i32, rank as i32, Some(self.kernels.device))?;
        if let Err(e) = c.wait_all_joined() {
            (*c).leave(true);
            return Err(e);
        }
        Ok(Some(c))
    }

    pub fn check_peer(&self, peer: i32) -> Result<usize, NcclResult> {
        if peer < 0 || peer as usize >= self.nranks {
            return Err(NCCL_INVALID_ARGUMENT);
        }
        Ok(peer as usize)
    }

    /// Next sequence number of a send to `peer` (program order, host side).
    pub fn next_send(&self, peer: usize) -> u64 {
        self.send_seq[peer].fetch_add(1, Ordering::AcqRel)
    }

    pub fn next_recv(&self, peer: usize) -> u64 {
        self.recv_seq[peer].fetch_add(1, Ordering::AcqRel)
    }

    pub fn next_coll(&self) -> u64 {
        self.coll_seq.fetch_add(1, Ordering::AcqRel)
    }

    /// Queues one kernel named `name` on `stream` whose body is `work`.
    pub fn launch(
        &self,
        name: KernelName,
        stream: *mut c_void,
        work: Work,
    ) -> Result<(), NcclResult> {
        let drv = driver::get().ok_or(NCCL_SYSTEM_ERROR)?;
        let ctx = Box::into_raw(Box::new(work));
        let dw = DeviceWork {
            magic: DEVICE_WORK_MAGIC,
            run: work::run,
            ctx: ctx.cast(),
        };
        let mut dur: u64 = 0;
        let mut params: [*mut c_void; 2] = [
            (&mut dur as *mut u64).cast(),
            (&dw as *const DeviceWork).cast_mut().cast(),
        ];
        let result = CtxGuard::push(drv, self.kernels.ctx).and_then(|_guard| {
            // SAFETY: the function handle was loaded in this context; params point to locals that
            // live across the call, and the driver copies their values at launch.
            let r = unsafe {
                (drv.launch_kernel)(
                    self.kernels.funcs[name as usize],
                    1,
                    1,
                    1,
                    1,
                    1,
                    1,
                    0,
                    stream,
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            };
            if r == 0 {
                Ok(())
            } else {
                Err(r)
            }
        });
        match result {
            Ok(()) => Ok(()),
            Err(_) => {
                // SAFETY: the launch failed, so the kernel never took ownership of the work.
                drop(unsafe { Box::from_raw(ctx) });
                Err(NCCL_UNHANDLED_CUDA_ERROR)
            }
        }
    }

    /// ncclCommDestroy / ncclCommAbort: the last rank out removes the file.
    pub fn leave(self, abort: bool) {
        let h = self.shared.map.header();
        if abort {
            h.aborted.store(1, Ordering::Release);
            futex_wake_all(&h.arrived);
        }
        if h.departed.fetch_add(1, Ordering::AcqRel) + 1 >= self.nranks as u32 {
            let _ = std::fs::remove_file(&self.shared.map.path);
        }
    }
}
