//! Sends beyond NCCL's buffer and groups of sends and receives: what moves at once, what waits
//! for the receiver, and what a send teaches of its kind's transfers.
use super::*;

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
