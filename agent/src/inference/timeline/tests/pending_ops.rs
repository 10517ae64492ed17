//! The table of pending ops: untimed ops are forgotten, it stays bounded, and the op a wait waits
//! for is kept.
use super::*;

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
