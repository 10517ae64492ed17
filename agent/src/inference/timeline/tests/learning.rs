//! What the timeline learns over iterations: the idle time after an op that moved nothing, the
//! wait a receive teaches, and a bubble with no op issued after its compute.
use super::*;

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
