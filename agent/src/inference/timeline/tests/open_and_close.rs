//! When a bubble opens (the compute drains, a wait is reached) and closes (a launch that can run,
//! the transfer of the op waited for), and lost records.
use super::*;

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
