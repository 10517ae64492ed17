//! What NCCL's kernels do on the simulated GPU (`simgpu::abi::DeviceWork::run`, version 4, on
//! the stream's thread once the kernel has started): post sends, wait (in real time) for receives
//! and collective peers, and tell the GPU when the transfer begins and how long it takes
//! (`simgpu::abi::CommKernel`); the GPU ends the kernel (after the transfer has had its time on
//! the device, which under time-slicing needs this process resident).
//!
//! * Send: posts (start time, bytes) in the channel's slot for its sequence number and transfers
//!   from its start. What fits in the channel's buffer ([`Cost::buffer_bytes`]: NCCL_BUFFSIZE's
//!   4 MiB unless `FREERIDE_SIM_NCCL_BUFFER_BYTES` says otherwise, 0 unlimited) moves at once
//!   (eager); a larger send fills the buffer, then waits until its receiver's
//!   kernel has started (the receiver answers in the slot) and moves the rest from then, as
//!   NCCL's sends do: it ends at max(its start + transfer time, the receiver's start + the rest's
//!   time), busy in both parts (one transfer where the receiver came before the buffer was full).
//! * Receive: transfers from max(its start, matching send's start) until the send's data are all
//!   there: max(its start, send start + transfer time), or for a send larger than the buffer
//!   max(send start + transfer time, its start + the rest's time); 0 when the data was there
//!   before it started.
//! * A group kernel posts all its sends first, then waits for its receives, then for the
//!   receivers of its sends larger than the buffer; it transfers from its start while its sends
//!   fill their buffers, while its large sends move their rests (from the first of their
//!   receivers' starts, after its fill, to the last of their ends) and from when the last of its
//!   receives' data began to arrive until the last of its ops would end: up to three spans
//!   (`CommKernel`'s eager part, mid span and transfer), joined where they overlap.
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
                // A peer may have done its part and exited between the check above and this one
                // (its last send delivered, as a real NCCL's buffers hold it): only a condition
                // still unmet after its death is an error.
                return if cond() {
                    Ok(())
                } else {
                    Err(NCCL_REMOTE_ERROR)
                };
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
    /// Bytes a send moves before its receiver is there (0: any size).
    pub buffer_bytes: u64,
    pub timeout_ns: u64,
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// The buffer where `FREERIDE_SIM_NCCL_BUFFER_BYTES` is unset: NCCL_BUFFSIZE's default, 4 MiB.
const DEFAULT_BUFFER_BYTES: u64 = 4 << 20;

/// Read once per process.
pub fn cost() -> &'static Cost {
    static COST: OnceLock<Cost> = OnceLock::new();
    COST.get_or_init(|| Cost {
        base_ns: env_u64(simgpu::abi::env::NCCL_BASE_NS).unwrap_or(0),
        ps_per_byte: env_u64(simgpu::abi::env::NCCL_PS_PER_BYTE).unwrap_or(100),
        buffer_bytes: env_u64(simgpu::abi::env::NCCL_BUFFER_BYTES).unwrap_or(DEFAULT_BUFFER_BYTES),
        timeout_ns: env_u64("FREERIDE_SIM_NCCL_TIMEOUT_S")
            .unwrap_or(600)
            .saturating_mul(1_000_000_000),
    })
}

/// Transfer time of `bytes`.
pub fn transfer_ns(bytes: u64) -> u64 {
    cost().base_ns + bytes_ns(bytes)
}

/// Time `bytes` take on the wire once a transfer runs (no base).
fn bytes_ns(bytes: u64) -> u64 {
    (bytes as u128 * cost().ps_per_byte as u128 / 1000) as u64
}

/// Bytes of a send of `bytes` that wait for its receiver (0: it fits in the buffer).
fn beyond_buffer(bytes: u64) -> u64 {
    match cost().buffer_bytes {
        0 => 0,
        b => bytes.saturating_sub(b),
    }
}

/// When a message sent at `sent` with `bytes` is all there, for a receiver that started at
/// `recv_start`.
fn arrival_end(sent: u64, bytes: u64, recv_start: u64) -> u64 {
    let whole = sent + transfer_ns(bytes);
    match beyond_buffer(bytes) {
        0 => whole,
        rest => whole.max(recv_start + bytes_ns(rest)),
    }
}

/// What one op (or a group kernel) transferred: from its start to `eager_end` (if any), over
/// `mid` (if any), then from `from` to `end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Transfer {
    eager_end: Option<u64>,
    mid: Option<(u64, u64)>,
    from: u64,
    end: u64,
}

impl Transfer {
    /// Moves nothing.
    fn none(t0: u64) -> Transfer {
        Transfer {
            eager_end: None,
            mid: None,
            from: t0,
            end: t0,
        }
    }

    /// A transfer from its start where its eager part runs into what follows.
    fn joined(self, t0: u64) -> Transfer {
        let next = self.mid.map_or(self.from, |m| m.0);
        match self.eager_end {
            Some(e) if e >= next => match self.mid {
                Some((_, m1)) => Transfer {
                    eager_end: Some(m1.max(e)),
                    mid: None,
                    ..self
                }
                .joined(t0),
                None => Transfer {
                    eager_end: None,
                    from: t0,
                    end: self.end.max(e),
                    ..self
                },
            },
            _ => self,
        }
    }
}

/// The spans a group's data moves in after its fill: its large sends' rests (each from its
/// receiver's start) and its receives (from when the last of their data began to arrive), one
/// span where they overlap, else the earlier as the mid span.
fn spans(rests: Option<(u64, u64)>, recvs: Option<(u64, u64)>, t0: u64) -> Transfer {
    let (mid, (from, end)) = match (rests, recvs) {
        (None, None) => (None, (t0, t0)),
        (Some(a), None) | (None, Some(a)) => (None, a),
        (Some(a), Some(b)) => {
            let (first, second) = if a.0 <= b.0 { (a, b) } else { (b, a) };
            if first.1 < second.0 {
                (Some(first), second)
            } else {
                (None, (first.0, first.1.max(second.1)))
            }
        }
    };
    Transfer {
        eager_end: None,
        mid,
        from,
        end,
    }
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

/// `DeviceWork.run` (version 4): takes ownership of the boxed [`Work`]; answers in `kernel`.
pub unsafe extern "C" fn run(ctx: *mut c_void, kernel: *mut CommKernel) {
    if ctx.is_null() || kernel.is_null() {
        return;
    }
    // SAFETY: ctx is the Box<Work> leaked by the launch; run is called exactly once.
    let work = unsafe { Box::from_raw(ctx as *mut Work) };
    // SAFETY: the simulated GPU passes a valid CommKernel it owns for the duration of the call.
    let k = unsafe { &mut *kernel };
    let t0 = k.start_ns;
    let t = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work.execute(t0)))
        .unwrap_or(Transfer::none(t0));
    k.eager_ns = t.eager_end.map_or(0, |e| e.saturating_sub(t0));
    if let Some((a, b)) = t.mid {
        k.mid_start_ns = a;
        k.mid_ns = b.saturating_sub(a);
    }
    k.transfer_start_ns = t.from.max(t0);
    k.transfer_ns = t.end.saturating_sub(k.transfer_start_ns);
}

impl Work {
    /// What the kernel started at `t0` transfers, as if the process stayed resident.
    fn execute(&self, t0: u64) -> Transfer {
        match self {
            Work::P2p(ops) => {
                let mut end = t0;
                // Sends that fill their buffer now and wait for their receivers for the rest.
                let mut waiting = vec![];
                let mut filled = None;
                for (comm, op) in ops {
                    if let P2p::Send { peer, seq, bytes } = op {
                        match post_send(comm, *peer, *seq, *bytes, t0) {
                            Ok(()) => {
                                end = end.max(t0 + transfer_ns(*bytes));
                                let eager = transfer_ns(*bytes - beyond_buffer(*bytes));
                                filled = filled.max(Some(t0 + eager));
                                if beyond_buffer(*bytes) > 0 {
                                    waiting.push((comm, *peer, *seq, *bytes));
                                }
                            }
                            Err(e) => comm.fail(e),
                        }
                    }
                }
                // Its receives' data: from when the last of it began to arrive to the last end.
                let mut recvs: Option<(u64, u64)> = None;
                for (comm, op) in ops {
                    if let P2p::Recv { peer, seq } = op {
                        match wait_recv(comm, *peer, *seq, t0) {
                            Ok((f, e)) => {
                                recvs = Some(recvs.map_or((f, e), |(a, b)| (a.max(f), b.max(e))));
                            }
                            Err(e) => comm.fail(e),
                        }
                    }
                }
                // Its large sends' rests: each from its receiver's start (after its fill).
                let mut rests: Option<(u64, u64)> = None;
                for (comm, peer, seq, bytes) in waiting {
                    match wait_receiver(comm, peer, seq) {
                        Ok(r) => {
                            let e = arrival_end(t0, bytes, r);
                            let fill = transfer_ns(bytes - beyond_buffer(bytes));
                            let f = r.max(t0 + fill).min(e);
                            rests = Some(rests.map_or((f, e), |(a, b)| (a.min(f), b.max(e))));
                        }
                        Err(e) => comm.fail(e),
                    }
                }
                if rests.is_none() && recvs.is_none() {
                    return Transfer {
                        end,
                        ..Transfer::none(t0)
                    };
                }
                let t = spans(rests, recvs, t0);
                Transfer {
                    eager_end: filled,
                    end: t.end.max(end),
                    ..t
                }
                .joined(t0)
            }
            Work::Coll { comm, seq, bytes } => match collective(comm, *seq, *bytes, t0) {
                Ok((from, end)) => Transfer {
                    from,
                    end,
                    ..Transfer::none(t0)
                },
                Err(e) => {
                    comm.fail(e);
                    Transfer::none(t0)
                }
            },
        }
    }
}

/// Posts a send started at `t0` in its channel's slot (once the slot is free).
fn post_send(
    comm: &CommShared,
    peer: usize,
    seq: u64,
    bytes: u64,
    t0: u64,
) -> Result<(), NcclResult> {
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
    Ok(())
}

/// When the receiver of send `seq` to `peer` started its kernel (waits for it).
fn wait_receiver(comm: &CommShared, peer: usize, seq: u64) -> Result<u64, NcclResult> {
    let ch = comm.map.channel(comm.rank, peer);
    let slot = &ch.slots[seq as usize % P2P_SLOTS];
    // The receiver answers before it counts the message consumed; the slot is posted again
    // only by this rank, for a later send.
    comm.wait(&ch.consumed, &[peer], || {
        slot.recv_tag.load(Ordering::Acquire) == seq + 1
            || u64::from(ch.consumed.load(Ordering::Acquire)) > seq
    })?;
    let r = slot.recv_start_ns.load(Ordering::Relaxed);
    if slot.recv_tag.load(Ordering::Acquire) == seq + 1 {
        Ok(r)
    } else {
        // Overwritten by a later message's receiver (this thread was away that long): it
        // started at the latest now.
        Ok(now_ns())
    }
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
    slot.recv_start_ns.store(t0, Ordering::Relaxed);
    slot.recv_tag.store(seq + 1, Ordering::Release);
    ch.consumed.fetch_add(1, Ordering::AcqRel);
    futex_wake_all(&ch.consumed);
    Ok((t0.max(start), t0.max(arrival_end(start, bytes, t0))))
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
        post_send(&c[0], 1, 0, 1_000_000, t0).unwrap();
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

    /// What `run` answers for `w` started at `start_ns`.
    fn answer(w: Work, start_ns: u64) -> CommKernel {
        let mut k = CommKernel {
            start_ns,
            ..CommKernel::default()
        };
        // SAFETY: a leaked Box<Work> and a CommKernel we own, as the simulated GPU passes.
        unsafe { run(Box::into_raw(Box::new(w)).cast(), &mut k) };
        k
    }

    fn send(c: &Ranks, from: usize, to: usize, seq: u64, bytes: u64) -> Work {
        Work::P2p(vec![(
            c[from].clone(),
            P2p::Send {
                peer: to,
                seq,
                bytes,
            },
        )])
    }

    fn recv(c: &Ranks, at: usize, from: usize, seq: u64) -> Work {
        Work::P2p(vec![(c[at].clone(), P2p::Recv { peer: from, seq })])
    }

    #[test]
    fn the_body_answers_when_its_transfer_begins_and_how_long_it_takes() {
        let c = ranks(2, "body");
        let t0 = now_ns();
        let s = answer(send(&c, 0, 1, 0, 1_000_000), t0);
        assert_eq!(
            (s.transfer_start_ns, s.transfer_ns, s.eager_ns),
            (t0, 100_000, 0)
        );
        let r = answer(recv(&c, 1, 0, 0), t0 + 30_000);
        assert_eq!((r.transfer_start_ns, r.transfer_ns), (t0 + 30_000, 70_000));
    }

    /// 5 MB at 100 ps/byte: 4 MiB (419.43 µs) fill the buffer, 805 696 bytes (80.57 µs) wait.
    const BIG: u64 = 5_000_000;
    const FILL_NS: u64 = 419_430;
    const REST_NS: u64 = 80_569;

    #[test]
    fn a_send_larger_than_the_buffer_waits_for_its_receiver_to_move_the_rest() {
        let c = ranks(2, "big");
        let t0 = now_ns();
        let w = send(&c, 0, 1, 0, BIG);
        let sender = std::thread::spawn(move || answer(w, t0));
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!sender.is_finished(), "the send waits for its receiver");
        let r0 = t0 + 10_000_000;
        let r = answer(recv(&c, 1, 0, 0), r0);
        let s = sender.join().unwrap();
        assert_eq!(
            (s.eager_ns, s.transfer_start_ns, s.transfer_ns),
            (FILL_NS, r0, REST_NS),
            "the buffer at its start, the rest from its receiver's start"
        );
        assert_eq!((r.transfer_start_ns, r.transfer_ns), (r0, REST_NS));
        // A receiver there first: the send moves it all from its start, and both end together.
        let c1 = c[1].clone();
        let receiver = std::thread::spawn(move || {
            let w = Work::P2p(vec![(c1, P2p::Recv { peer: 0, seq: 1 })]);
            answer(w, t0)
        });
        let s = answer(send(&c, 0, 1, 1, BIG), t0 + 1_000);
        let r = receiver.join().unwrap();
        assert_eq!(
            (s.eager_ns, s.transfer_start_ns, s.transfer_ns),
            (0, t0 + 1_000, FILL_NS + REST_NS + 1)
        );
        assert_eq!(
            (r.transfer_start_ns, r.transfer_start_ns + r.transfer_ns),
            (t0 + 1_000, t0 + 1_000 + transfer_ns(BIG))
        );
    }

    /// Rank 0's group sending `bytes` to rank 1 and receiving from it.
    fn exchange(c: &Ranks, bytes: u64) -> Work {
        Work::P2p(vec![
            (
                c[0].clone(),
                P2p::Send {
                    peer: 1,
                    seq: 0,
                    bytes,
                },
            ),
            (c[0].clone(), P2p::Recv { peer: 1, seq: 0 }),
        ])
    }

    #[test]
    fn a_group_fills_its_buffers_at_its_start_and_transfers_again_when_its_receives_come() {
        let c = ranks(2, "group");
        let t0 = now_ns();
        // Rank 0: a group sending 1 MB and receiving what rank 1 sends 5 ms later.
        let g = exchange(&c, 1_000_000);
        let group = std::thread::spawn(move || answer(g, t0));
        let late = t0 + 5_000_000;
        answer(send(&c, 1, 0, 0, 2_000_000), late);
        let k = group.join().unwrap();
        assert_eq!(
            (k.eager_ns, k.transfer_start_ns, k.transfer_ns),
            (100_000, late, 200_000),
            "busy while its send moves, then while its receive's data come"
        );
        answer(recv(&c, 1, 0, 0), late);
    }

    #[test]
    fn a_groups_large_send_moves_its_rest_when_its_receiver_comes_not_with_its_receive() {
        let c = ranks(2, "mid");
        let t0 = now_ns();
        // Rank 0: a group sending BIG to rank 1 and receiving from it; rank 1 receives at 2 ms
        // and sends only at 10 ms.
        let g = exchange(&c, BIG);
        let group = std::thread::spawn(move || answer(g, t0));
        let (r0, late) = (t0 + 2_000_000, t0 + 10_000_000);
        answer(recv(&c, 1, 0, 0), r0);
        answer(send(&c, 1, 0, 0, 1_000_000), late);
        let k = group.join().unwrap();
        assert_eq!(
            (k.eager_ns, k.mid_start_ns, k.mid_ns),
            (FILL_NS, r0, REST_NS),
            "the fill, then the rest from its receiver's start"
        );
        assert_eq!(
            (k.transfer_start_ns, k.transfer_ns),
            (late, 100_000),
            "then its receive's data"
        );
    }

    #[test]
    fn a_dead_peer_fails_a_wait_only_for_what_it_did_not_deliver() {
        let c = ranks(2, "dead");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        child.wait().unwrap();
        c[1].map.rank(0).pid.store(child.id(), Ordering::Release);
        let t0 = now_ns();
        post_send(&c[0], 1, 0, 1_000, t0).unwrap();
        assert!(
            wait_recv(&c[1], 0, 0, t0).is_ok(),
            "data sent before the sender exited"
        );
        assert_eq!(wait_recv(&c[1], 0, 1, t0), Err(NCCL_REMOTE_ERROR));
    }

    #[test]
    fn abort_ends_a_wait() {
        let c = ranks(2, "abort");
        c[0].map.header().aborted.store(1, Ordering::Release);
        assert_eq!(wait_recv(&c[1], 0, 0, now_ns()), Err(NCCL_INVALID_USAGE));
    }
}
