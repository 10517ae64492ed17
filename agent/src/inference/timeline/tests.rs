//! Tests of the timeline.
use super::*;
use crate::inference::obs::CommKind;

const C: StreamId = 7;
const P2P: StreamId = 20;

fn recv() -> CommSig {
    CommSig {
        comm: 1,
        kind: CommKind::Recv,
        peer: 0,
        bytes: 4,
        largest_send: 0,
    }
}

/// An eager send on the receives' communicator: its duration bounds their transfers (50 ns).
fn learn_transfer(tl: &mut Timeline) {
    let send = CommSig {
        kind: CommKind::Send,
        ..recv()
    };
    learn(tl, send, 50);
}

/// Op 100 of `sig`, issued at 10, took `ns` from its begin at 20.
fn learn(tl: &mut Timeline, sig: CommSig, ns: Ns) {
    learn_op(tl, 100, 10, sig, ns);
}

/// Op `id` of `sig`, issued at `t`, took `ns` from its begin 10 ns later.
fn learn_op(tl: &mut Timeline, id: u64, t: Ns, sig: CommSig, ns: Ns) {
    feed(
        tl,
        &[
            Obs::CommIssue {
                t,
                id,
                stream: P2P,
                sig,
            },
            Obs::CommBegin {
                id,
                t: t + 10,
                seen: t + 10,
            },
            Obs::CommEnd {
                id,
                t: t + 10 + ns,
                seen: t + 10 + ns,
            },
        ],
    );
    tl.take_closed();
}

fn feed(tl: &mut Timeline, obs: &[Obs]) {
    for &o in obs {
        let now = match o {
            Obs::CommBegin { seen, .. }
            | Obs::CommEnd { seen, .. }
            | Obs::WaitReached { seen, .. }
            | Obs::WaitReleased { seen, .. } => seen,
            o => o.time(),
        };
        tl.observe(o, now);
    }
}

/// A timeline whose compute (launched at 100) drained when receive-like op `id` of `sig`, issued
/// at 200, began at `begin`.
fn waiting(id: u64, sig: CommSig, begin: Ns) -> Timeline {
    let mut tl = Timeline::new();
    feed(
        &mut tl,
        &[
            Obs::Launch { t: 100, stream: C },
            Obs::CommIssue {
                t: 200,
                id,
                stream: P2P,
                sig,
            },
            Obs::CommBegin {
                id,
                t: begin,
                seen: begin + 100,
            },
        ],
    );
    tl
}

/// Op `id` ends at `end` and the host launches 200 ns later: the bubbles closed, (start, end).
fn ended(tl: &mut Timeline, id: u64, end: Ns) -> Vec<(Ns, Ns)> {
    feed(
        tl,
        &[
            Obs::CommEnd {
                id,
                t: end,
                seen: end + 100,
            },
            Obs::Launch {
                t: end + 200,
                stream: C,
            },
        ],
    );
    tl.take_closed().iter().map(|b| (b.start, b.end)).collect()
}

#[test]
fn todays_rings_a_receive_the_host_waits_for_is_a_bubble_until_its_next_launch() {
    let mut tl = Timeline::new();
    learn_transfer(&mut tl);
    feed(
        &mut tl,
        &[
            Obs::Launch { t: 100, stream: C },
            Obs::CommIssue {
                t: 200,
                id: 1,
                stream: P2P,
                sig: recv(),
            },
            // The op's stream waited for the compute: its begin is the drain.
            Obs::CommBegin {
                id: 1,
                t: 1_000,
                seen: 1_100,
            },
        ],
    );
    assert_eq!(tl.open_now().map(|b| b.start), Some(1_000));
    feed(
        &mut tl,
        &[
            Obs::CommEnd {
                id: 1,
                t: 9_000,
                seen: 9_100,
            },
            Obs::Sync {
                t0: 300,
                t1: 9_050,
                on: SyncOn::Stream(P2P),
            },
            Obs::Launch {
                t: 9_200,
                stream: C,
            },
        ],
    );
    assert!(tl.open_now().is_none());
    // Idle from the drain to its transfer, and from its end to the host's next launch.
    let b: Vec<_> = tl.take_closed().iter().map(|b| (b.start, b.end)).collect();
    assert_eq!(b, vec![(1_000, 8_950), (9_000, 9_200)]);

    // With nothing learnt of the transfer, the whole receive counts as transferring.
    let mut tl = Timeline::new();
    feed(
        &mut tl,
        &[
            Obs::Launch { t: 100, stream: C },
            Obs::CommIssue {
                t: 200,
                id: 1,
                stream: P2P,
                sig: recv(),
            },
            Obs::CommBegin {
                id: 1,
                t: 1_000,
                seen: 1_100,
            },
            Obs::CommEnd {
                id: 1,
                t: 9_000,
                seen: 9_100,
            },
            Obs::Launch {
                t: 9_200,
                stream: C,
            },
        ],
    );
    let b: Vec<_> = tl.take_closed().iter().map(|b| (b.start, b.end)).collect();
    assert_eq!(b, vec![(9_000, 9_200)]);
}

#[test]
fn a_launch_behind_a_wait_keeps_the_bubble_one_that_can_run_ends_it() {
    let mut tl = Timeline::new();
    learn_transfer(&mut tl);
    feed(
        &mut tl,
        &[
            Obs::Launch { t: 100, stream: C },
            Obs::CommIssue {
                t: 200,
                id: 1,
                stream: P2P,
                sig: recv(),
            },
            Obs::EventRecord {
                t: 210,
                event: 5,
                stream: P2P,
            },
            Obs::StreamWait {
                t: 220,
                stream: C,
                event: 5,
                wait: 9,
            },
            // Queued behind the wait: cannot run before the receive.
            Obs::Launch { t: 230, stream: C },
            Obs::WaitReached {
                wait: 9,
                t: 2_000,
                seen: 2_100,
            },
        ],
    );
    let open = tl
        .open_now()
        .expect("the compute stream is held by the wait");
    assert_eq!(open.start, 2_000);
    assert!(open.blocked);
    feed(
        &mut tl,
        &[Obs::WaitReleased {
            wait: 9,
            t: 8_000,
            seen: 8_100,
        }],
    );
    assert!(tl.open_now().is_none());
    // Until the transfer of the receive it waited for.
    let b: Vec<_> = tl.take_closed().iter().map(|b| (b.start, b.end)).collect();
    assert_eq!(b, vec![(2_000, 7_950)]);

    // A launch with no wait before it runs at once.
    let mut tl = Timeline::new();
    feed(
        &mut tl,
        &[
            Obs::Launch { t: 100, stream: C },
            Obs::Sync {
                t0: 150,
                t1: 1_000,
                on: SyncOn::Device,
            },
        ],
    );
    assert_eq!(tl.open_now().map(|b| b.start), Some(1_000));
    feed(
        &mut tl,
        &[Obs::Launch {
            t: 3_000,
            stream: C,
        }],
    );
    assert!(tl.open_now().is_none());
    assert_eq!(
        tl.take_closed()
            .iter()
            .map(|b| (b.start, b.end))
            .collect::<Vec<_>>(),
        vec![(1_000, 3_000)]
    );
}

#[test]
fn untimed_ops_are_forgotten_and_the_table_stays_bounded() {
    let mut tl = Timeline::new();
    tl.observe(Obs::Launch { t: 1, stream: C }, 1);
    for id in 0..(MAX_PENDING_OPS as u64 + 100) {
        let t = 10 + id;
        tl.observe(
            Obs::CommIssue {
                t,
                id,
                stream: P2P,
                sig: recv(),
            },
            t,
        );
        if id % 2 == 0 {
            tl.observe(Obs::CommUntimed { id }, t);
        }
    }
    assert!(tl.pending_ops() <= MAX_PENDING_OPS);
    // An op of the same stream that begins: those before it will never be timed.
    tl.observe(
        Obs::CommBegin {
            id: MAX_PENDING_OPS as u64 + 99,
            t: 10_000,
            seen: 10_000,
        },
        10_000,
    );
    assert_eq!(tl.pending_ops(), 1);
}

#[test]
fn the_op_a_wait_waits_for_is_not_evicted() {
    let mut tl = Timeline::new();
    feed(
        &mut tl,
        &[
            Obs::Launch { t: 1, stream: C },
            Obs::CommIssue {
                t: 2,
                id: 1,
                stream: P2P,
                sig: recv(),
            },
            Obs::EventRecord {
                t: 3,
                event: 5,
                stream: P2P,
            },
            Obs::StreamWait {
                t: 4,
                stream: C,
                event: 5,
                wait: 0,
            },
        ],
    );
    for id in 2..(MAX_PENDING_OPS as u64 + 10) {
        tl.observe(
            Obs::CommIssue {
                t: 10,
                id,
                stream: 30,
                sig: recv(),
            },
            10,
        );
    }
    assert!(tl.has_op(1), "evicted the op a wait waits for");
    assert!(tl.pending_ops() <= MAX_PENDING_OPS);
}

#[test]
fn lost_records_close_nothing_and_leave_the_gpu_unknown() {
    let mut tl = Timeline::new();
    feed(
        &mut tl,
        &[
            Obs::Launch { t: 100, stream: C },
            Obs::Sync {
                t0: 150,
                t1: 1_000,
                on: SyncOn::Device,
            },
        ],
    );
    assert!(tl.open_now().is_some());
    tl.observe(Obs::Lost { t: 2_000 }, 2_000);
    assert!(tl.open_now().is_none());
    assert!(
        tl.take_closed().is_empty(),
        "a bubble whose end may be lost"
    );
    // Known again after the next drain.
    feed(
        &mut tl,
        &[
            Obs::Launch {
                t: 3_000,
                stream: C,
            },
            Obs::Sync {
                t0: 3_100,
                t1: 4_000,
                on: SyncOn::Device,
            },
        ],
    );
    assert_eq!(tl.open_now().map(|b| b.start), Some(4_000));
}

#[test]
fn a_transfer_its_partners_began_is_busy_at_once_and_bounds_the_bubble() {
    // Nothing learnt of the transfer: without its partners the whole receive would count as
    // transferring (no bubble before its end).
    let mut tl = waiting(1, recv(), 1_000);
    let open = tl.open_now().expect("a receive the compute waits for");
    assert_eq!((open.start, open.busy_from), (1_000, Some(1_000)));
    // Its sender began at 6 000: it is transferring from then (a grant must close), and an op
    // not of this timeline, or a time before its own begin, changes nothing more.
    tl.partners_transferring(1, Some(6_000));
    tl.partners_transferring(99, Some(2_000));
    assert_eq!(tl.open_now().and_then(|b| b.busy_from), Some(1_000));
    // At its end: every party had begun by 6 000; nothing moved before.
    tl.transfer_floor(
        1,
        Floor {
            t: 6_000,
            others: Some(6_000),
            remote: None,
        },
    );
    let b = ended(&mut tl, 1, 30_000);
    // Idle from the drain to the sender's begin, and from the end to the next launch.
    assert_eq!(b, vec![(1_000, 6_000), (30_000, 30_200)]);

    // A wait learnt at the position puts the earliest transfer late (here 9 µs after the begin);
    // the partners' begin brings it forward to when the transfer truly began.
    let mut tl = waiting(2, recv(), 1_000);
    tl.in_flight.get_mut(&2).expect("in flight").learnt = 10_000;
    assert_eq!(tl.open_now().and_then(|b| b.busy_from), Some(10_000));
    tl.partners_transferring(2, Some(4_000));
    assert_eq!(tl.open_now().and_then(|b| b.busy_from), Some(4_000));
    // Its partners' data arrived (the key's receive ended): the learnt wait holds again...
    tl.partners_transferring(2, None);
    assert_eq!(tl.open_now().and_then(|b| b.busy_from), Some(10_000));
    // ...until another key of it is under way.
    tl.partners_transferring(2, Some(4_000));
    assert_eq!(tl.open_now().and_then(|b| b.busy_from), Some(4_000));
    // A floor from the local parties alone (one on another node not seen) still bounds the
    // transfer: nothing moved before the local parties' latest begin.
    tl.transfer_floor(
        2,
        Floor {
            t: 4_000,
            others: None,
            remote: None,
        },
    );
    let b = ended(&mut tl, 2, 30_000);
    assert_eq!(b, vec![(1_000, 4_000), (30_000, 30_200)]);

    // A floor within the skew of the parties' records (the last one's begin is written a few µs
    // before its kernel runs) says nothing moved: one bubble, learnt on past the end.
    let mut tl = waiting(3, recv(), 1_000);
    tl.transfer_floor(
        3,
        Floor {
            t: 29_000,
            others: Some(29_000),
            remote: None,
        },
    );
    let b = ended(&mut tl, 3, 30_000);
    assert_eq!(b, vec![(1_000, 30_200)]);
}

#[test]
fn an_op_that_may_have_begun_unseen_bounds_the_bubble() {
    // The compute drained at 1 000 (a synchronize returned); a receive issued at 2 000 on a
    // stream whose ops are timed can begin at once: its begin record may come late, so the GPU
    // may be transferring from its issue (no wait learnt at its position).
    let mut tl = Timeline::new();
    learn_transfer(&mut tl);
    let drained = [
        Obs::Launch { t: 100, stream: C },
        Obs::Sync {
            t0: 150,
            t1: 1_000,
            on: SyncOn::Device,
        },
    ];
    feed(&mut tl, &drained);
    assert_eq!(tl.open_now().map(|b| b.busy_from), Some(None));
    let issue = |id, t, stream| Obs::CommIssue {
        t,
        id,
        stream,
        sig: recv(),
    };
    feed(&mut tl, &[issue(2, 2_000, P2P), issue(3, 2_500, P2P)]);
    let open = tl.open_now().expect("nothing can run");
    assert_eq!((open.start, open.busy_from), (1_000, Some(2_000)));
    // On a stream never seen timed (graph-captured ops, say) an op says nothing.
    let mut tl = Timeline::new();
    learn_transfer(&mut tl);
    feed(&mut tl, &drained);
    feed(&mut tl, &[issue(2, 2_000, 30)]);
    assert_eq!(tl.open_now().map(|b| b.busy_from), Some(None));
    // Queued behind a wait on a receive in flight, an op cannot begin: the in-flight receive
    // bounds the bubble, from its learnt wait (here 50 µs after its begin).
    let mut tl = Timeline::new();
    learn_transfer(&mut tl);
    feed(
        &mut tl,
        &[
            Obs::Launch { t: 100, stream: C },
            issue(1, 200, 21),
            Obs::EventRecord {
                t: 210,
                event: 5,
                stream: 21,
            },
            Obs::StreamWait {
                t: 220,
                stream: P2P,
                event: 5,
                wait: 9,
            },
            issue(2, 230, P2P),
            Obs::Sync {
                t0: 240,
                t1: 900,
                on: SyncOn::Stream(C),
            },
            Obs::CommBegin {
                id: 1,
                t: 1_000,
                seen: 1_100,
            },
        ],
    );
    tl.in_flight.get_mut(&1).expect("in flight").learnt = 50_000;
    let open = tl.open_now().expect("nothing can run");
    assert_eq!((open.start, open.busy_from), (900, Some(50_000)));
}

#[test]
fn a_wait_queued_after_a_record_does_not_hold_what_waits_for_the_record() {
    // Megatron's iteration end with the distributed optimizer: the compute stream waits for the
    // grad-norm all-reduce (op 1, stream 21), a record on the compute stream sends the
    // parameter all-gathers (ops 2 and 3) on their stream, and then the compute stream waits for
    // those. The second wait stands after the record at the same launch count: it must not hold
    // the all-gathers, or the first of them waits for its own successor and is never taken to be
    // able to begin (on the test bed's TP2 x PP4 x DP2 job with noise, pause grants ran 1-2 ms
    // into its transfer, up to 0.013 of the granted time over busy).
    let mut tl = Timeline::new();
    learn_transfer(&mut tl);
    let issue = |id, t, stream| Obs::CommIssue {
        t,
        id,
        stream,
        sig: recv(),
    };
    let record = |t, event, stream| Obs::EventRecord { t, event, stream };
    let wait = |t, stream, event, wait| Obs::StreamWait {
        t,
        stream,
        event,
        wait,
    };
    feed(
        &mut tl,
        &[
            Obs::Launch { t: 100, stream: C },
            record(110, 4, C),
            wait(120, 21, 4, 8),
            issue(1, 200, 21),
            record(210, 5, 21),
            wait(220, C, 5, 9),
            record(225, 6, C),
            wait(226, P2P, 6, 10),
            issue(2, 230, P2P),
            issue(3, 235, P2P),
            record(240, 7, P2P),
            wait(245, C, 7, 11),
            Obs::CommBegin {
                id: 1,
                t: 1_000,
                seen: 1_100,
            },
        ],
    );
    tl.in_flight.get_mut(&1).expect("in flight").learnt = 50_000;
    let open = tl.open_now().expect("nothing can run");
    assert_eq!((open.start, open.busy_from), (1_000, Some(50_000)));
    // The all-reduce ended (moving data until then): the first all-gather can begin from there
    // (its begin record may come late).
    feed(
        &mut tl,
        &[Obs::CommEnd {
            id: 1,
            t: 5_000,
            seen: 5_100,
        }],
    );
    let open = tl.open_now().expect("the compute stream still waits");
    assert_eq!((open.start, open.busy_from), (5_000, Some(5_000)));
}

/// An iteration from `t0`: compute launched 1 µs in, then op `id` of `sig` issued 2 µs in, begun
/// `begin` in (read 10 µs later).
fn compute_then_op(tl: &mut Timeline, t0: Ns, id: u64, sig: CommSig, begin: Ns) {
    feed(
        tl,
        &[
            Obs::Launch {
                t: t0 + 1_000,
                stream: C,
            },
            Obs::CommIssue {
                t: t0 + 2_000,
                id,
                stream: P2P,
                sig,
            },
            Obs::CommBegin {
                id,
                t: t0 + begin,
                seen: t0 + begin + 10_000,
            },
        ],
    );
}

#[test]
fn the_idle_time_after_an_op_that_moved_nothing_is_learnt_at_its_end() {
    // An all-reduce the GPU stays idle across: in the first iterations its partners say it
    // moved data for its last 50 µs (the bubble splits there), then nothing (its last party
    // began at its end; from then on its transfer is learnt as none). Either way the time after
    // its end is learnt at the end (part 2), so the part before it keeps one length, and an open
    // bubble is predicted from the op's end once that has passed; it is reported as one bubble,
    // and forecast whole when it opens.
    let all_reduce = CommSig {
        kind: CommKind::AllReduce,
        peer: -1,
        ..recv()
    };
    let mut tl = Timeline::new();
    for k in 0..8u64 {
        let (t0, id) = (k * 10_000_000, k + 1);
        let moved = k < 4;
        compute_then_op(&mut tl, t0, id, all_reduce, 100_000);
        if k == 5 {
            // The part before the end: 0.75-0.8 ms in every iteration.
            let open = tl.open_now().expect("drained before the op");
            let end = open.predicted_end.expect("learnt");
            assert!(end <= t0 + 900_000, "{open:?}");
        }
        let last_began = t0 + if moved { 850_000 } else { 900_000 };
        tl.transfer_floor(
            id,
            Floor {
                t: last_began,
                others: None,
                remote: None,
            },
        );
        feed(
            &mut tl,
            &[Obs::CommEnd {
                id,
                t: t0 + 900_000,
                seen: t0 + 910_000,
            }],
        );
        if k == 5 {
            let open = tl.open_now().expect("idle across the end");
            assert_eq!(
                (open.start, open.predicted_end),
                (t0 + 100_000, Some(t0 + 1_500_000))
            );
        }
        feed(
            &mut tl,
            &[Obs::Launch {
                t: t0 + 1_500_000,
                stream: C,
            }],
        );
        let taken = tl.take_closed();
        if k == 7 {
            // What was forecast when it opened: the whole bubble, across the op's end (learnt
            // whole at where it opened), not only its part before the end.
            assert_eq!(taken[0].predicted_end, Some(t0 + 1_500_000), "{taken:?}");
        }
        let closed: Vec<_> = taken.iter().map(|b| (b.start - t0, b.end - t0)).collect();
        let want = if moved {
            vec![(100_000, 850_000), (900_000, 1_500_000)]
        } else {
            vec![(100_000, 1_500_000)]
        };
        assert_eq!(closed, want, "iteration {k}");
    }
}

#[test]
fn a_collective_that_waits_for_another_node_is_idle_until_the_fabric_bound() {
    // An all-reduce whose local parties all began at 1 ms and that ended at 41 ms, waiting for a
    // party on another node: nothing seen here bounds its transfer below 40 ms, the fabric does
    // (4 parties: 6 steps of 50 µs, 4 bytes).
    let all_reduce = CommSig {
        kind: CommKind::AllReduce,
        peer: -1,
        ..recv()
    };
    let run = |remote: Option<u32>| {
        let mut tl = waiting(1, all_reduce, 1_000_000);
        tl.transfer_floor(
            1,
            Floor {
                t: 1_000_000,
                others: None,
                remote,
            },
        );
        ended(&mut tl, 1, 41_000_000)
    };
    let bound = 300_008;
    assert_eq!(
        run(Some(4)),
        vec![(1_000_000, 41_000_000 - bound), (41_000_000, 41_000_200)]
    );
    // Every party local (began by 1 ms, none on another node): the floor alone says it may have
    // transferred all along.
    assert_eq!(run(None), vec![(41_000_000, 41_000_200)]);
}

/// A send of 20 MB, which took 20 µs alone (so its transfer is learnt as 20 µs).
fn big_send() -> CommSig {
    CommSig {
        kind: CommKind::Send,
        bytes: 20_000_000,
        largest_send: 20_000_000,
        ..recv()
    }
}

/// A timeline with NCCL's buffer at 5 MB that learnt [`big_send`]'s transfer, then whose compute
/// (launched at 100 000) drained when a big send issued at 100 500 began at 101 000.
fn sending_big(buffer: u64) -> Timeline {
    sending(buffer, big_send())
}

/// [`sending_big`] of an op of `s` (learnt to transfer in 20 µs).
fn sending(buffer: u64, s: CommSig) -> Timeline {
    let mut tl = Timeline::new().with_buffer(buffer);
    learn(&mut tl, s, 20_000);
    begin_op_1(&mut tl, s);
    tl
}

/// Compute launched at 100 000, then op 1 of `s` issued at 100 500 that began at 101 000.
fn begin_op_1(tl: &mut Timeline, s: CommSig) {
    feed(
        tl,
        &[
            Obs::Launch {
                t: 100_000,
                stream: C,
            },
            Obs::CommIssue {
                t: 100_500,
                id: 1,
                stream: P2P,
                sig: s,
            },
            Obs::CommBegin {
                id: 1,
                t: 101_000,
                seen: 101_100,
            },
        ],
    );
    tl.take_closed();
}

#[test]
fn a_send_beyond_the_buffer_is_idle_from_its_fill_until_its_receiver_begins() {
    // Its buffer's share (5 of 20 MB: 5 µs) moves at once; then the GPU is idle until its
    // receiver's kernel begins at 160 000, when the rest (15 µs) moves. (Partners' news that
    // some key of it is under way, its receive's, say nothing of it.)
    let mut tl = sending_big(5_000_000);
    assert_eq!(tl.open_now().map(|b| b.start), Some(106_000));
    tl.partners_transferring(1, Some(101_000));
    assert!(tl.take_closed().is_empty());
    tl.receiver_began(1, 160_000);
    assert_eq!(
        tl.take_closed()
            .iter()
            .map(|b| (b.start, b.end))
            .collect::<Vec<_>>(),
        vec![(106_000, 160_000)]
    );
    let b = ended(&mut tl, 1, 175_000);
    assert_eq!(b, vec![(175_000, 175_200)]);

    // Its receiver not seen to begin (on another node): the rest moved just before its end,
    // known once the end is read.
    let mut tl = sending_big(5_000_000);
    let b = ended(&mut tl, 1, 175_000);
    assert_eq!(b, vec![(106_000, 160_000), (175_000, 175_200)]);

    // Within the buffer (or with none: 0) it moves all of it from its begin: no bubble before
    // its transfer's end.
    for buffer in [20_000_000, 0] {
        let mut tl = sending_big(buffer);
        assert_eq!(tl.open_now().map(|b| b.start), Some(121_000), "{buffer}");
        let b = ended(&mut tl, 1, 175_000);
        assert_eq!(b, vec![(121_000, 175_200)], "{buffer}");
    }
}

#[test]
fn a_send_whose_receiver_was_seen_bounds_its_kinds_transfers() {
    // Learnt at 20 µs; this one's rest (15 of 20 MB) moved within the 12 µs from its
    // receiver's begin to its end: the whole takes at most 16 µs.
    let mut tl = sending_big(5_000_000);
    tl.receiver_began(1, 160_000);
    ended(&mut tl, 1, 172_000);
    assert_eq!(tl.transfers.estimate(&big_send(), None), Some(16_000));
    // Its end within the records' skew (10 µs) of its receiver's begin: nothing to go by.
    let mut tl = sending_big(5_000_000);
    tl.receiver_began(1, 160_000);
    ended(&mut tl, 1, 167_500);
    assert_eq!(tl.transfers.estimate(&big_send(), None), Some(20_000));
    // Not seen: its duration bounds nothing new.
    let mut tl = sending_big(5_000_000);
    ended(&mut tl, 1, 172_000);
    assert_eq!(tl.transfers.estimate(&big_send(), None), Some(20_000));
}

#[test]
fn a_groups_receive_moves_when_its_sender_began_not_at_the_groups_end() {
    // A group sending 20 MB and receiving 20 MB, whose receive's sender was there before it:
    // the data comes from its begin (for the group's 20 µs) while its send's rest waits.
    let group = CommSig {
        kind: CommKind::SendRecv,
        bytes: 40_000_000,
        ..big_send()
    };
    let mut tl = sending(5_000_000, group);
    assert_eq!(tl.open_now().map(|b| b.start), Some(106_000));
    tl.partners_transferring(1, Some(101_000));
    assert_eq!(tl.open_now().map(|b| b.start), Some(121_000));
    // Then its send's receiver at 160 000: the rest (15 µs) from then.
    tl.receiver_began(1, 160_000);
    let b = ended(&mut tl, 1, 175_000);
    assert_eq!(b, vec![(121_000, 160_000), (175_000, 175_200)]);
}

#[test]
fn a_groups_large_send_and_its_receives_take_their_own_shares_of_its_transfer() {
    // Learnt: a 20 MB send alone in 20 µs, a 40 MB group (20 MB each way) in 40 µs.
    let group = CommSig {
        kind: CommKind::SendRecv,
        bytes: 40_000_000,
        ..big_send()
    };
    let mut tl = Timeline::new().with_buffer(5_000_000);
    learn(&mut tl, big_send(), 20_000);
    learn_op(&mut tl, 50, 30_000, group, 40_000);
    begin_op_1(&mut tl, group);
    // The send's fill is 5 of its own 20 µs (not of the group's 40), its receive 20 µs from its
    // sender's begin.
    assert_eq!(tl.open_now().map(|b| b.start), Some(106_000));
    tl.partners_transferring(1, Some(101_000));
    assert_eq!(tl.open_now().map(|b| b.start), Some(121_000));
}

/// ZB-H1 in the blocking style: a receive posted early, the host queues compute, then blocks on
/// the receive's stream. Nothing says when that compute ran but the drain mark the host queued on
/// its stream before it blocked; without one the GPU's idle time before the receive's end is
/// never a bubble.
#[test]
fn a_drain_mark_says_when_compute_queued_before_a_blocking_call_ran() {
    let run = |mark: bool| {
        let mut tl = Timeline::new();
        learn_transfer(&mut tl);
        let mut obs = vec![
            Obs::CommIssue {
                t: 50,
                id: 1,
                stream: P2P,
                sig: recv(),
            },
            Obs::CommBegin {
                id: 1,
                t: 60,
                seen: 70,
            },
            Obs::Launch { t: 100, stream: C },
        ];
        if mark {
            obs.extend([
                Obs::StreamWait {
                    t: 150,
                    stream: C,
                    event: 0,
                    wait: 9,
                },
                Obs::WaitReached {
                    wait: 9,
                    t: 5_000,
                    seen: 5_100,
                },
            ]);
        }
        feed(&mut tl, &obs);
        let open = tl.open_now().map(|b| b.start);
        feed(
            &mut tl,
            &[
                Obs::WaitReleased {
                    wait: 9,
                    t: 5_000,
                    seen: 5_100,
                },
                Obs::CommEnd {
                    id: 1,
                    t: 9_000,
                    seen: 9_100,
                },
                Obs::Sync {
                    t0: 160,
                    t1: 9_050,
                    on: SyncOn::Stream(P2P),
                },
                Obs::Launch {
                    t: 9_200,
                    stream: C,
                },
            ],
        );
        let closed: Vec<_> = tl.take_closed().iter().map(|b| (b.start, b.end)).collect();
        (open, closed, tl.explicit)
    };
    let (open, closed, explicit) = run(true);
    assert_eq!(
        open,
        Some(5_000),
        "the bubble opens when the mark is reached"
    );
    // Idle from the drain to the receive's transfer, and from its end to the next launch.
    assert_eq!(closed, vec![(5_000, 8_950), (9_000, 9_200)]);
    assert!(
        !explicit,
        "a mark is no stream wait: comm ops still follow the last compute"
    );
    // Without it the compute is not known to have run at all: no bubble.
    let (open, closed, _) = run(false);
    assert_eq!(open, None);
    assert_eq!(closed, vec![]);
}

#[test]
fn a_receive_whose_transfer_nothing_bounds_teaches_no_wait() {
    // An all-reduce, then a receive posted 9 ms before its sender begins that moves its data in
    // its last 0.5 ms, every iteration. In the first two, the receive ends before its sender's
    // begin was read, and nothing of its communicator's transfers was learnt yet: it may have
    // moved data for its whole duration, so its wait is unknown. Learnt as 0, that wait would
    // stay the shortest at the position and hold the next receives to transferring from their
    // begins. From the third iteration on its sender's begin is read in time, and the wait it
    // teaches (9 ms) bounds the next receive's transfer.
    let all_reduce = CommSig {
        comm: 2,
        kind: CommKind::AllReduce,
        peer: -1,
        ..recv()
    };
    let mut tl = Timeline::new();
    for k in 0..5u64 {
        let (t0, id) = (k * 20_000_000, k + 1);
        learn_op(&mut tl, 1000 + k, t0 + 100, all_reduce, 100);
        compute_then_op(&mut tl, t0, id, recv(), 500_000);
        let busy_from = tl.open_now().and_then(|b| b.busy_from).map(|b| b - t0);
        // Nothing learnt yet: from its begin (conservative); then from the wait learnt.
        let want = if k < 3 { 500_000 } else { 9_500_000 };
        assert_eq!(busy_from, Some(want), "iteration {k}");
        let sent = t0 + 9_500_000;
        let floor = if k < 2 {
            // Only its own begin was read: no bound on its transfer.
            Floor {
                t: t0 + 500_000,
                others: None,
                remote: None,
            }
        } else {
            Floor {
                t: sent,
                others: Some(sent),
                remote: None,
            }
        };
        tl.transfer_floor(id, floor);
        ended(&mut tl, id, t0 + 10_000_000);
    }
}

/// An iteration from `t0` as a zero-bubble schedule queues it with the host ahead: an
/// all-reduce, the receive (op `k`), the weight-gradient kernel, then a wait for the receive and
/// the backward-input kernel behind it: no op is issued between the compute that drains and the
/// kernel that waits. The weight-gradient kernel drains 2 ms in, the receive ends 8 ms in.
/// Returns the open bubble once the wait is reached.
fn weight_then_wait(tl: &mut Timeline, t0: Ns, k: u64) -> Option<OpenBubble> {
    let all_reduce = CommSig {
        comm: 2,
        kind: CommKind::AllReduce,
        peer: -1,
        ..recv()
    };
    learn_op(tl, 1000 + k, t0 + 100, all_reduce, 100);
    feed(
        tl,
        &[
            Obs::CommIssue {
                t: t0 + 1_000,
                id: k,
                stream: P2P,
                sig: recv(),
            },
            Obs::EventRecord {
                t: t0 + 1_100,
                event: k,
                stream: P2P,
            },
            Obs::Launch {
                t: t0 + 2_000,
                stream: C,
            },
            Obs::StreamWait {
                t: t0 + 2_200,
                stream: C,
                event: k,
                wait: k,
            },
            Obs::Launch {
                t: t0 + 2_300,
                stream: C,
            },
            Obs::CommBegin {
                id: k,
                t: t0 + 3_000,
                seen: t0 + 4_000,
            },
            Obs::WaitReached {
                wait: k,
                t: t0 + 2_000_000,
                seen: t0 + 2_010_000,
            },
        ],
    );
    let open = tl.open_now();
    feed(
        tl,
        &[
            Obs::CommEnd {
                id: k,
                t: t0 + 8_000_000,
                seen: t0 + 8_010_000,
            },
            Obs::WaitReleased {
                wait: k,
                t: t0 + 8_000_000,
                seen: t0 + 8_010_000,
            },
        ],
    );
    open
}

#[test]
fn a_bubble_with_no_op_issued_after_its_compute_is_learnt_at_the_op_it_waits_for() {
    let mut tl = Timeline::new();
    learn_transfer(&mut tl);
    let mut opened = vec![];
    for k in 1..=5 {
        opened.push(weight_then_wait(&mut tl, k * 20_000_000, k));
    }
    // The last iteration's bubble: from the drain to the receive's transfer (its last 50 ns).
    let t0 = 5 * 20_000_000;
    let closed: Vec<_> = tl.take_closed().iter().map(|b| (b.start, b.end)).collect();
    assert_eq!(closed, vec![(t0 + 2_000_000, t0 + 7_999_950)]);
    // Learnt at the receive it waits for: predicted from the third iteration on, trusted from the
    // fourth (before, the bubble had no position, as nothing was issued after the compute that
    // drained, and no iteration ever predicted it).
    assert_eq!(opened[1].and_then(|b| b.predicted_end), None);
    assert_eq!(
        opened[2].and_then(|b| b.predicted_end),
        Some(3 * 20_000_000 + 7_999_950)
    );
    let last = opened[4].expect("the wait holds the compute stream");
    assert_eq!(last.predicted_end, Some(t0 + 7_999_950), "{last:?}");
    assert!(last.confidence >= 0.5, "{last:?}");
}
