//! When the GPU counts as transferring during a bubble: partners that began, transfer floors, ops
//! that may have begun unseen, waits queued after a record, and the fabric bound.
use super::*;

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
