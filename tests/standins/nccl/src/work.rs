//! What NCCL's kernels do on the simulated GPU (`simgpu::abi::DeviceWork::run`, version 2, on
//! the stream's thread once the kernel has started): post sends, wait (in real time) for receives
//! and collective peers, and tell the GPU when the transfer begins and how long it takes
//! (`simgpu::abi::CommKernel`); the GPU ends the kernel (after the transfer has had its time on
//! the device, which under time-slicing needs this process resident).
//!
//! * Send: posts (start time, bytes) in the channel's slot for its sequence number; transfers
//!   from its start for the transfer time (eager).
//! * Receive: transfers from max(its start, matching send's start) until max(its start, matching
//!   send's start + transfer time): 0 when the data was there before it started.
//! * A group kernel posts all its sends first, then waits for its receives; its transfer begins
//!   when the last of its receives' data began to arrive (at its start if it has none) and lasts
//!   until the last of its ops would end.
//! * Collective: transfers from max(all ranks' starts) for the transfer time of 2(n-1)/n x bytes.
use crate::shm::{Mapping, P2P_SLOTS};
use crate::sync::{futex_wait, futex_wake_all, process_dead};
use crate::types::*;
use simgpu::abi::{now_ns, CommKernel};
use std::ffi::c_void;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

/// The part of a communicator that its kernels need (kept alive by queued kernels).
pub struct CommShared {
    pub map: Mapping,
    pub rank: usize,
    /// First error a kernel of this communicator hit (ncclCommGetAsyncError).
    pub async_error: AtomicI32,
}

impl CommShared {
    fn fail(&self, e: NcclResult) {
        let _ =
            self.async_error
                .compare_exchange(NCCL_SUCCESS, e, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Waits until `cond` holds, sleeping on `word`; gives up when the communicator is aborted, a
    /// process `peers` names died, or the timeout passes.
    fn wait(
        &self,
        word: &AtomicU32,
        peers: &[usize],
        cond: impl Fn() -> bool,
    ) -> Result<(), NcclResult> {
        let deadline = now_ns().saturating_add(cost().timeout_ns);
        loop {
            let seen = word.load(Ordering::Acquire);
            if cond() {
                return Ok(());
            }
            if self.map.aborted() {
                return Err(NCCL_INVALID_USAGE);
            }
            if peers
                .iter()
                .any(|&p| process_dead(self.map.rank(p).pid.load(Ordering::Acquire)))
            {
                return Err(NCCL_REMOTE_ERROR);
            }
            if now_ns() > deadline {
                return Err(NCCL_TIMEOUT);
            }
            futex_wait(word, seen, 10_000_000);
        }
    }
}

/// The transfer cost model (simgpu::abi::env).
pub struct Cost {
    pub base_ns: u64,
    pub ps_per_byte: u64,
    pub timeout_ns: u64,
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Read once per process.
pub fn cost() -> &'static Cost {
    static COST: OnceLock<Cost> = OnceLock::new();
    COST.get_or_init(|| Cost {
        base_ns: env_u64(simgpu::abi::env::NCCL_BASE_NS).unwrap_or(0),
        ps_per_byte: env_u64(simgpu::abi::env::NCCL_PS_PER_BYTE).unwrap_or(100),
        timeout_ns: env_u64("FREERIDE_SIM_NCCL_TIMEOUT_S")
            .unwrap_or(600)
            .saturating_mul(1_000_000_000),
    })
}

/// Transfer time of `bytes`.
pub fn transfer_ns(bytes: u64) -> u64 {
    let c = cost();
    c.base_ns + (bytes as u128 * c.ps_per_byte as u128 / 1000) as u64
}

/// A point-to-point op of a group kernel.
pub enum P2p {
    Send { peer: usize, seq: u64, bytes: u64 },
    Recv { peer: usize, seq: u64 },
}

/// The body of one kernel.
pub enum Work {
    /// One kernel's point-to-point ops (possibly of several communicators).
    P2p(Vec<(Arc<CommShared>, P2p)>),
    /// A collective: ends at max(starts) + transfer of `bytes` x 2(n-1)/n.
    Coll {
        comm: Arc<CommShared>,
        seq: u64,
        bytes: u64,
    },
}

/// `DeviceWork.run` (version 2): takes ownership of the boxed [`Work`]; answers in `kernel`.
pub unsafe extern "C" fn run(ctx: *mut c_void, kernel: *mut CommKernel) {
    if ctx.is_null() || kernel.is_null() {
        return;
    }
    // SAFETY: ctx is the Box<Work> leaked by the launch; run is called exactly once.
    let work = unsafe { Box::from_raw(ctx as *mut Work) };
    // SAFETY: the simulated GPU passes a valid CommKernel it owns for the duration of the call.
    let k = unsafe { &mut *kernel };
    let t0 = k.start_ns;
    let (from, end) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work.execute(t0)))
        .unwrap_or((t0, t0));
    k.transfer_start_ns = from.max(t0);
    k.transfer_ns = end.saturating_sub(k.transfer_start_ns);
}

impl Work {
    /// (transfer start, end as if the process stayed resident) of the kernel started at `t0`.
    fn execute(&self, t0: u64) -> (u64, u64) {
        match self {
            Work::P2p(ops) => {
                let mut end = t0;
                for (comm, op) in ops {
                    if let P2p::Send { peer, seq, bytes } = op {
                        match post_send(comm, *peer, *seq, *bytes, t0) {
                            Ok(e) => end = end.max(e),
                            Err(e) => comm.fail(e),
                        }
                    }
                }
                let mut from = t0;
                for (comm, op) in ops {
                    if let P2p::Recv { peer, seq } = op {
                        match wait_recv(comm, *peer, *seq, t0) {
                            Ok((f, e)) => {
                                from = from.max(f);
                                end = end.max(e);
                            }
                            Err(e) => comm.fail(e),
                        }
                    }
                }
                (from, end)
            }
            Work::Coll { comm, seq, bytes } => match collective(comm, *seq, *bytes, t0) {
                Ok(fe) => fe,
                Err(e) => {
                    comm.fail(e);
                    (t0, t0)
                }
            },
        }
    }
}

fn post_send(
    comm: &CommShared,
    peer: usize,
    seq: u64,
    bytes: u64,
    t0: u64,
) -> Result<u64, NcclResult> {
    let ch = comm.map.channel(comm.rank, peer);
    // Flow control: the slot must have been consumed P2P_SLOTS messages ago.
    comm.wait(&ch.consumed, &[peer], || {
        seq < u64::from(ch.consumed.load(Ordering::Acquire)) + P2P_SLOTS as u64
    })?;
    let slot = &ch.slots[seq as usize % P2P_SLOTS];
    slot.start_ns.store(t0, Ordering::Relaxed);
    slot.bytes.store(bytes, Ordering::Relaxed);
    slot.tag.store(seq + 1, Ordering::Release);
    ch.posted.fetch_add(1, Ordering::AcqRel);
    futex_wake_all(&ch.posted);
    Ok(t0 + transfer_ns(bytes))
}

/// (transfer start, end) of a receive started at `t0`.
fn wait_recv(comm: &CommShared, peer: usize, seq: u64, t0: u64) -> Result<(u64, u64), NcclResult> {
    let ch = comm.map.channel(peer, comm.rank);
    let slot = &ch.slots[seq as usize % P2P_SLOTS];
    comm.wait(&ch.posted, &[peer], || {
        slot.tag.load(Ordering::Acquire) == seq + 1
    })?;
    let start = slot.start_ns.load(Ordering::Relaxed);
    let bytes = slot.bytes.load(Ordering::Relaxed);
    ch.consumed.fetch_add(1, Ordering::AcqRel);
    futex_wake_all(&ch.consumed);
    Ok((t0.max(start), t0.max(start + transfer_ns(bytes))))
}

/// (transfer start, end) of a collective whose rank here started at `t0`.
fn collective(comm: &CommShared, seq: u64, bytes: u64, t0: u64) -> Result<(u64, u64), NcclResult> {
    let n = comm.map.nranks();
    let (head, slots) = comm.map.coll(seq);
    let mine = &slots[comm.rank];
    mine.start_ns.store(t0, Ordering::Relaxed);
    mine.bytes.store(bytes, Ordering::Relaxed);
    mine.tag.store(seq + 1, Ordering::Release);
    head.gen.fetch_add(1, Ordering::AcqRel);
    futex_wake_all(&head.gen);
    let peers: Vec<usize> = (0..n).filter(|&r| r != comm.rank).collect();
    comm.wait(&head.gen, &peers, || {
        slots.iter().all(|s| s.tag.load(Ordering::Acquire) > seq)
    })?;
    let latest = slots
        .iter()
        .map(|s| s.start_ns.load(Ordering::Relaxed))
        .max()
        .unwrap_or(t0);
    let moved = if n > 1 {
        (bytes as u128 * 2 * (n as u128 - 1) / n as u128) as u64
    } else {
        0
    };
    Ok((latest, latest + if n > 1 { transfer_ns(moved) } else { 0 }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ranks of one communicator; their folder goes with them (also when a test fails).
    struct Ranks(std::path::PathBuf, Vec<Arc<CommShared>>);

    impl std::ops::Deref for Ranks {
        type Target = [Arc<CommShared>];
        fn deref(&self) -> &Self::Target {
            &self.1
        }
    }

    impl Drop for Ranks {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// `n` ranks of one communicator file, as separate mappings (like separate processes).
    fn ranks(n: usize, tag: &str) -> Ranks {
        let dir = std::env::temp_dir().join(format!("nccl-work-test-{}-{tag}", std::process::id()));
        let comms = (0..n)
            .map(|r| {
                let map = Mapping::open_in(&dir, "t", n).unwrap();
                map.rank(r).pid.store(std::process::id(), Ordering::Release);
                Arc::new(CommShared {
                    map,
                    rank: r,
                    async_error: AtomicI32::new(NCCL_SUCCESS),
                })
            })
            .collect();
        Ranks(dir, comms)
    }

    #[test]
    fn receive_ends_at_send_start_plus_transfer_or_its_own_start() {
        let c = ranks(2, "p2p");
        let t0 = now_ns();
        // 1 MB at the default 100 ps/byte: 100 µs.
        assert_eq!(post_send(&c[0], 1, 0, 1_000_000, t0).unwrap(), t0 + 100_000);
        assert_eq!(
            wait_recv(&c[1], 0, 0, t0 - 5).unwrap(),
            (t0, t0 + 100_000),
            "the receive transfers from the send's start"
        );
        // A receive that starts after the data arrived ends at its start.
        post_send(&c[0], 1, 1, 1_000_000, t0).unwrap();
        assert_eq!(
            wait_recv(&c[1], 0, 1, t0 + 300_000).unwrap(),
            (t0 + 300_000, t0 + 300_000)
        );
        assert_eq!(c[1].map.channel(0, 1).consumed.load(Ordering::Acquire), 2);
    }

    #[test]
    fn receive_waits_for_a_late_sender() {
        let c = ranks(2, "late");
        let c0 = c[0].clone();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            let t = now_ns();
            post_send(&c0, 1, 0, 4, t).unwrap();
            t
        });
        let (from, end) = wait_recv(&c[1], 0, 0, now_ns()).unwrap();
        let sent = sender.join().unwrap();
        assert_eq!((from, end), (sent, sent)); // 4 bytes: 0.4 ns, rounded down
    }

    #[test]
    fn collective_ends_at_latest_start_plus_ring_transfer() {
        let c = ranks(3, "coll");
        let t0 = now_ns();
        let handles: Vec<_> = c
            .iter()
            .cloned()
            .enumerate()
            .map(|(r, comm)| {
                std::thread::spawn(move || {
                    collective(&comm, 0, 3_000_000, t0 + r as u64 * 1000).unwrap()
                })
            })
            .collect();
        // 2(n-1)/n x 3 MB = 4 MB at 100 ps/byte: 400 µs after the latest start.
        for h in handles {
            assert_eq!(h.join().unwrap(), (t0 + 2000, t0 + 2000 + 400_000));
        }
    }

    #[test]
    fn the_body_answers_when_its_transfer_begins_and_how_long_it_takes() {
        let c = ranks(2, "body");
        let t0 = now_ns();
        let send = Work::P2p(vec![(
            c[0].clone(),
            P2p::Send {
                peer: 1,
                seq: 0,
                bytes: 1_000_000,
            },
        )]);
        let recv = Work::P2p(vec![(c[1].clone(), P2p::Recv { peer: 0, seq: 0 })]);
        let answer = |w: Work, start_ns| {
            let mut k = CommKernel {
                start_ns,
                ..CommKernel::default()
            };
            // SAFETY: a leaked Box<Work> and a CommKernel we own, as the simulated GPU passes.
            unsafe { run(Box::into_raw(Box::new(w)).cast(), &mut k) };
            k
        };
        let s = answer(send, t0);
        assert_eq!((s.transfer_start_ns, s.transfer_ns), (t0, 100_000));
        let r = answer(recv, t0 + 30_000);
        assert_eq!((r.transfer_start_ns, r.transfer_ns), (t0 + 30_000, 70_000));
    }

    #[test]
    fn abort_ends_a_wait() {
        let c = ranks(2, "abort");
        c[0].map.header().aborted.store(1, Ordering::Release);
        assert_eq!(wait_recv(&c[1], 0, 0, now_ns()), Err(NCCL_INVALID_USAGE));
    }
}
