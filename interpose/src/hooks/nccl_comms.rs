//! NCCL communicator creation (exported, forwarding to the `pncclX` aliases): each communicator
//! this process joins is recorded once, as a [`Kind::CommInit`], after the real call made it, with
//! an identity that every process of the communicator computes alike (so that a reader can tell
//! which processes' comm ops are the same collective):
//!
//! * `ncclCommInitRank`, `ncclCommInitRankConfig`: [`comm_ident_of_id`] of the `ncclUniqueId`
//!   every rank passes; rank and rank count as the caller passed them. Recorded on `ncclSuccess`
//!   and on `ncclInProgress` (a non-blocking communicator: the handle is already valid).
//! * `ncclCommInitAll`: one record per communicator made (rank `i` of `ndev`), all with
//!   [`comm_ident_local`]`(pid, k)`, `k` = the `ncclCommInitAll` calls this process made before.
//! * `ncclCommSplit`: [`comm_ident_of_split`]`(parent, k, color)`, `k` = the splits this process
//!   made of that parent before (every rank of the parent makes the same splits in the same
//!   order); rank and rank count asked of NCCL (`ncclCommUserRank`, `ncclCommCount`). Nothing is
//!   recorded for a rank that gets no communicator (`NCCL_SPLIT_NOCOLOR`), nor for a split of a
//!   parent whose identity is unknown (made before the preload took effect, or not in the table):
//!   an invented identity could collide with another communicator's.
//!
//! The identities of the communicators made here live in [`COMMS`], a fixed lock-free table
//! (handle -> identity, split count) of [`COMM_TABLE`] entries: no allocation, no lock. Entries
//! are never removed (`ncclCommDestroy` is not hooked): a handle that NCCL reuses for a new
//! communicator takes over its entry, and once the table is full new communicators are still
//! recorded but their splits are not.
//!
//! Hook-path rules as everywhere ([`crate`]): the re-entrancy guard covers only our own work (NCCL's
//! allocations and launches inside the real call are recorded, flagged as NCCL's by the scope), a
//! missing real function returns `ncclSystemError`, and recording never changes the result.

use super::*;
use freeride_abi::event::{comm_ident_local, comm_ident_of_id, comm_ident_of_split};
use std::sync::atomic::{AtomicU32, AtomicU64};

const NCCL_SUCCESS: c_int = 0;
/// `ncclInProgress`: a non-blocking communicator is still being made (its handle is valid).
const NCCL_IN_PROGRESS: c_int = 7;

/// Entries of [`COMMS`].
pub const COMM_TABLE: usize = 512;

/// The communicators this process made: handle -> (identity, splits made of it so far). Open
/// addressing over atomics; a slot is claimed by a compare-and-swap of its handle word (0 =
/// free) and never freed.
pub struct CommTable<const N: usize> {
    handles: [AtomicUsize; N],
    /// 0 until the slot's identity is written (a reader then knows nothing of it yet).
    idents: [AtomicU64; N],
    splits: [AtomicU32; N],
}

impl<const N: usize> CommTable<N> {
    pub const fn new() -> Self {
        CommTable {
            handles: [const { AtomicUsize::new(0) }; N],
            idents: [const { AtomicU64::new(0) }; N],
            splits: [const { AtomicU32::new(0) }; N],
        }
    }

    fn start(handle: usize) -> usize {
        ((handle as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize % N
    }

    /// The slot of `handle`: its own, or (`claim`) a free one claimed for it. None: not there
    /// (or the table is full).
    fn slot(&self, handle: usize, claim: bool) -> Option<usize> {
        if handle == 0 || N == 0 {
            return None;
        }
        let s = Self::start(handle);
        for i in 0..N {
            let j = (s + i) % N;
            let mut cur = self.handles[j].load(Ordering::Acquire);
            if cur == 0 {
                if !claim {
                    // Slots are never freed: the handle would be here or before.
                    return None;
                }
                cur = match self.handles[j].compare_exchange(
                    0,
                    handle,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => handle,
                    Err(other) => other,
                };
            }
            if cur == handle {
                return Some(j);
            }
        }
        None
    }

    /// Remembers communicator `handle` as `ident` with no split made of it yet (a reused handle
    /// starts over). False: the table is full.
    pub fn insert(&self, handle: usize, ident: u64) -> bool {
        match self.slot(handle, true) {
            Some(j) => {
                self.splits[j].store(0, Ordering::Relaxed);
                self.idents[j].store(ident, Ordering::Release);
                true
            }
            None => false,
        }
    }

    /// The identity of `handle` (None: unknown).
    pub fn ident(&self, handle: usize) -> Option<u64> {
        let j = self.slot(handle, false)?;
        Some(self.idents[j].load(Ordering::Acquire)).filter(|&i| i != 0)
    }

    /// A split of `handle` begins: its identity and the index of this split among its splits.
    /// None: the communicator is unknown.
    pub fn next_split(&self, handle: usize) -> Option<(u64, u32)> {
        let j = self.slot(handle, false)?;
        let ident = self.idents[j].load(Ordering::Acquire);
        if ident == 0 {
            return None;
        }
        Some((ident, self.splits[j].fetch_add(1, Ordering::AcqRel)))
    }
}

impl<const N: usize> Default for CommTable<N> {
    fn default() -> Self {
        Self::new()
    }
}

/// This process's communicators (see [`CommTable`]).
pub static COMMS: CommTable<COMM_TABLE> = CommTable::new();

/// `ncclCommInitAll` calls of this process so far (the `k` of [`comm_ident_local`]).
static INIT_ALL_CALLS: AtomicU32 = AtomicU32::new(0);

/// `ncclCommUserRank` / `ncclCommCount` of the loaded NCCL: 0 not looked up yet, 1 missing.
static COMM_USER_RANK: AtomicUsize = AtomicUsize::new(0);
static COMM_COUNT: AtomicUsize = AtomicUsize::new(0);

type CommQuery = unsafe extern "C" fn(P, *mut c_int) -> c_int;

/// Asks NCCL's `name` (`ncclResult_t name(ncclComm_t, int*)`, or its `pnccl` alias) about `comm`,
/// looked up once as [`comm_device`] looks up `ncclCommCuDevice`. None: missing, or it failed.
fn comm_query(cache: &AtomicUsize, name: &CStr, alias: &CStr, comm: P) -> Option<c_int> {
    let mut f = cache.load(Ordering::Acquire);
    if f == 0 {
        let mut p = dl::sym(dl::RTLD_NEXT, name);
        'libs: for lib in [c"libnccl.so.2", c"libnccl.so"] {
            for n in [alias, name] {
                if !p.is_null() {
                    break 'libs;
                }
                p = dl::sym_in_loaded(lib, n);
            }
        }
        f = if p.is_null() { 1 } else { p as usize };
        cache.store(f, Ordering::Release);
    }
    if f <= 1 {
        return None;
    }
    // SAFETY: f is NCCL's `name`, of this C signature (nccl.h).
    let g: CommQuery = unsafe { std::mem::transmute::<usize, CommQuery>(f) };
    let mut v: c_int = -1;
    // SAFETY: as above; it writes one int we own, and NCCL checks the communicator.
    (unsafe { g(comm, &mut v) } == NCCL_SUCCESS && v >= 0).then_some(v)
}

/// Records communicator `handle` (`rank` of `nranks`, identity `ident`) and remembers it as a
/// possible parent of splits. The caller holds the guard and saw the process recording.
fn joined(api: Api, handle: P, ident: u64, nranks: c_int, rank: c_int) {
    if handle.is_null() {
        return;
    }
    // A full table only costs this communicator's splits their records.
    let _ = COMMS.insert(handle as usize, ident);
    let gpu = rt::gpu_of(comm_device(handle));
    rt::record_on_gpu(
        Kind::CommInit,
        api,
        now_ns(),
        gpu,
        0,
        rank.max(0) as u32,
        0,
        [ident, handle as u64, nranks.max(0) as u64],
    );
}

/// Whether this call records: not inside another hook, and the process records.
#[inline]
fn recording() -> bool {
    rt::enter().is_some_and(|_g| rt::active())
}

/// The real call of a communicator-creating function, unguarded (NCCL's allocations and launches
/// inside must be recorded) and in the NCCL scope.
#[inline(always)]
fn real_call(call: impl FnOnce() -> c_int) -> c_int {
    let nccl = rt::nccl_scope();
    let r = call();
    drop(nccl);
    r
}

/// `ncclCommInitRank(Config)` around its real call.
///
/// # Safety
/// `comm` is the caller's out-pointer, written by NCCL when it succeeds (or is in progress).
#[inline(always)]
unsafe fn init_rank(
    api: Api,
    comm: PP,
    nranks: c_int,
    id: &NcclUniqueId,
    rank: c_int,
    call: impl FnOnce() -> c_int,
) -> c_int {
    let rec = recording();
    let r = real_call(call);
    if rec && (r == NCCL_SUCCESS || r == NCCL_IN_PROGRESS) && !comm.is_null() {
        if let Some(_g) = rt::enter() {
            // SAFETY: NCCL wrote the new handle to the caller's non-NULL out-pointer (success, or a
            // non-blocking communicator in progress: its handle is valid already).
            let h = unsafe { *comm };
            joined(api, h, comm_ident_of_id(&id.internal), nranks, rank);
        }
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRank(
    comm: PP,
    nranks: c_int,
    comm_id: NcclUniqueId,
    rank: c_int,
) -> c_int {
    let api = Api::NcclCommInitRank;
    let Some(real) = real_fn::<NcclInitRank>(api) else {
        return NCCL_SYSTEM_ERROR;
    };
    // SAFETY: pass-through (the real function resolved for this api, with the caller's
    // arguments); `comm` is the caller's out-pointer, as NCCL requires.
    unsafe {
        init_rank(api, comm, nranks, &comm_id, rank, || {
            real(comm, nranks, comm_id, rank)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRankConfig(
    comm: PP,
    nranks: c_int,
    comm_id: NcclUniqueId,
    rank: c_int,
    config: P,
) -> c_int {
    let api = Api::NcclCommInitRankConfig;
    let Some(real) = real_fn::<NcclInitRankConfig>(api) else {
        return NCCL_SYSTEM_ERROR;
    };
    // SAFETY: pass-through (the real function resolved for this api, with the caller's
    // arguments; the config is NCCL's to read); `comm` is the caller's out-pointer.
    unsafe {
        init_rank(api, comm, nranks, &comm_id, rank, || {
            real(comm, nranks, comm_id, rank, config)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitAll(comms: PP, ndev: c_int, devlist: *const c_int) -> c_int {
    let api = Api::NcclCommInitAll;
    let Some(real) = real_fn::<NcclInitAll>(api) else {
        return NCCL_SYSTEM_ERROR;
    };
    let rec = recording();
    let index = INIT_ALL_CALLS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: pass-through (the real function resolved for this api, with the caller's arguments).
    let r = real_call(|| unsafe { real(comms, ndev, devlist) });
    if rec && r == NCCL_SUCCESS && !comms.is_null() {
        if let Some(_g) = rt::enter() {
            // The process records, so its pid is the one `rt` cached at its initialization.
            let ident = comm_ident_local(rt::pid(), index);
            for i in 0..ndev.max(0) {
                // SAFETY: on success NCCL wrote `ndev` handles to the caller's array of `ndev`.
                let h = unsafe { *comms.add(i as usize) };
                joined(api, h, ident, ndev, i);
            }
        }
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommSplit(
    comm: P,
    color: c_int,
    key: c_int,
    newcomm: PP,
    config: P,
) -> c_int {
    let api = Api::NcclCommSplit;
    let Some(real) = real_fn::<NcclSplit>(api) else {
        return NCCL_SYSTEM_ERROR;
    };
    // The parent's identity and this split's index among its splits, taken whatever the result
    // (every rank of the parent makes the same calls, in the same order).
    let parent = rt::enter()
        .filter(|_| rt::active())
        .and_then(|_g| COMMS.next_split(comm as usize));
    // SAFETY: pass-through (the real function resolved for this api, with the caller's
    // arguments; the config is NCCL's to read).
    let r = real_call(|| unsafe { real(comm, color, key, newcomm, config) });
    let Some((parent, index)) = parent else {
        return r;
    };
    if r != NCCL_SUCCESS || newcomm.is_null() {
        return r;
    }
    if let Some(_g) = rt::enter() {
        // SAFETY: on success NCCL wrote the caller's non-NULL out-pointer (NULL for
        // NCCL_SPLIT_NOCOLOR).
        let h = unsafe { *newcomm };
        if h.is_null() {
            return r;
        }
        let rank = comm_query(
            &COMM_USER_RANK,
            c"ncclCommUserRank",
            c"pncclCommUserRank",
            h,
        );
        let count = comm_query(&COMM_COUNT, c"ncclCommCount", c"pncclCommCount", h);
        if let (Some(rank), Some(nranks)) = (rank, count) {
            joined(
                api,
                h,
                comm_ident_of_split(parent, index, color),
                nranks,
                rank,
            );
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_remembers_identities_and_counts_splits() {
        let t = CommTable::<8>::new();
        assert_eq!(t.ident(0x1000), None);
        assert_eq!(t.next_split(0x1000), None);
        assert!(t.insert(0x1000, 11));
        assert!(t.insert(0x2000, 22));
        assert_eq!(t.ident(0x1000), Some(11));
        assert_eq!(t.ident(0x2000), Some(22));
        assert_eq!(t.next_split(0x1000), Some((11, 0)));
        assert_eq!(t.next_split(0x1000), Some((11, 1)));
        assert_eq!(t.next_split(0x2000), Some((22, 0)));
        // A handle reused for a new communicator starts over.
        assert!(t.insert(0x1000, 33));
        assert_eq!(t.next_split(0x1000), Some((33, 0)));
        // Null is never a communicator.
        assert!(!t.insert(0, 1));
        assert_eq!(t.ident(0), None);
    }

    #[test]
    fn a_full_table_refuses_new_communicators_and_keeps_the_old() {
        let t = CommTable::<4>::new();
        for h in 1..=4usize {
            assert!(t.insert(h * 0x40, h as u64));
        }
        assert!(!t.insert(0x1000, 9));
        assert_eq!(t.ident(0x1000), None);
        assert_eq!(t.next_split(0x1000), None);
        for h in 1..=4usize {
            assert_eq!(t.ident(h * 0x40), Some(h as u64));
            // Updating a known one still works when full.
            assert!(t.insert(h * 0x40, 10 + h as u64));
        }
        assert_eq!(t.next_split(0x80), Some((12, 0)));
    }

    #[test]
    fn concurrent_inserts_each_get_their_own_slot() {
        static T: CommTable<64> = CommTable::new();
        std::thread::scope(|s| {
            for th in 0..4usize {
                s.spawn(move || {
                    for i in 0..16usize {
                        let h = 0x10_0000 + (th * 16 + i) * 0x30;
                        assert!(T.insert(h, h as u64));
                    }
                });
            }
        });
        for k in 0..64usize {
            let h = 0x10_0000 + k * 0x30;
            assert_eq!(T.ident(h), Some(h as u64));
        }
        assert!(!T.insert(0x99, 1));
    }

    /// The split identities two ranks of one parent compute (each in its own process, its own
    /// handles) agree split by split and colour by colour, and differ from the parent's and
    /// between splits.
    #[test]
    fn ranks_of_a_parent_agree_on_the_identities_of_its_splits() {
        let parent = comm_ident_of_id(&[3u8; 128]);
        let (a, b) = (CommTable::<16>::new(), CommTable::<16>::new());
        assert!(a.insert(0x7f00_1000, parent));
        assert!(b.insert(0x5500_2000, parent));
        let ids = |t: &CommTable<16>, h: usize, colors: &[i32]| -> Vec<u64> {
            colors
                .iter()
                .map(|&c| {
                    let (p, k) = t.next_split(h).unwrap();
                    comm_ident_of_split(p, k, c)
                })
                .collect()
        };
        let ia = ids(&a, 0x7f00_1000, &[0, 5, 5]);
        let ib = ids(&b, 0x5500_2000, &[0, 5, 5]);
        assert_eq!(ia, ib);
        assert_ne!(
            ia[1], ia[2],
            "two splits with one colour are two communicators"
        );
        assert!(!ia.contains(&parent));
        // A split of a split: known once recorded.
        assert!(a.insert(0x7f00_3000, ia[0]));
        let (p, k) = a.next_split(0x7f00_3000).unwrap();
        assert_eq!((p, k), (ia[0], 0));
        assert_ne!(comm_ident_of_split(p, k, 0), ia[0]);
    }
}
