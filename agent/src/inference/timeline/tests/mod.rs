//! Tests of the timeline, by topic; the helpers they share are here.
use super::*;
use crate::inference::obs::CommKind;

mod learning;
mod open_and_close;
mod pending_ops;
mod sends;
mod transfers;

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
