use super::*;
use std::sync::Arc;

#[repr(C, align(4096))]
struct Page([u8; 4096]);

fn mem(cap: u32) -> Vec<Page> {
    let pages = file_size(cap).div_ceil(4096);
    (0..pages).map(|_| Page([0; 4096])).collect()
}

/// A fresh ring of `cap` slots in `lanes` lanes over `m` (from [`mem`]`(cap)`), which the caller
/// keeps alive while the view is in use.
fn ring_over(m: &mut [Page], cap: u32, lanes: u32) -> RingView {
    let geom = Geometry {
        capacity: cap,
        lanes,
    };
    // SAFETY: m holds file_size(cap) bytes, 4096-aligned (see `mem`), and outlives the view's
    // use (the caller's part).
    let r = unsafe { RingView::new(m.as_mut_ptr() as *mut u8, geom) };
    r.initialize(1, 0, 0);
    r
}

fn rec(i: u64) -> Record {
    Record {
        t_ns: i,
        kind: 3,
        api: 1,
        p0: i,
        ..Default::default()
    }
}

#[test]
fn push_pop_and_full() {
    let cap = MIN_CAPACITY;
    let mut m = mem(cap);
    // SAFETY: m holds file_size(cap) bytes, 4096-aligned, and outlives r.
    let r = unsafe { RingView::new(m.as_mut_ptr() as *mut u8, Geometry::single(cap)) };
    r.initialize(1, 0, 0);
    for i in 0..cap as u64 {
        assert!(r.push(&rec(i)));
    }
    assert!(!r.push(&rec(9999)));
    assert_eq!(r.header().dropped.load(Ordering::Relaxed), 1);
    let mut cur = 0;
    for i in 0..cap as u64 {
        assert_eq!(r.pop(&mut cur), Pop::Record(rec(i)));
    }
    assert_eq!(r.pop(&mut cur), Pop::Empty);
    assert!(r.push(&rec(5)));
    assert_eq!(r.pop(&mut cur), Pop::Record(rec(5)));
}

#[test]
fn many_producers_one_consumer() {
    let cap = 1 << 12;
    let mut m = mem(cap);
    let base = m.as_mut_ptr() as usize;
    // SAFETY: m outlives all threads (joined below).
    let r = unsafe { RingView::new(base as *mut u8, Geometry::single(cap)) };
    r.initialize(1, 0, 0);
    let per = 20_000u64;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut hs = vec![];
    for t in 0..4u64 {
        hs.push(std::thread::spawn(move || {
            let mut ok = 0u64;
            for i in 0..per {
                if r.push(&rec(t << 32 | i)) {
                    ok += 1;
                }
            }
            ok
        }));
    }
    let d2 = done.clone();
    let c = std::thread::spawn(move || {
        let mut cur = 0;
        let mut got = 0u64;
        let mut last = [None::<u64>; 4];
        loop {
            match r.pop(&mut cur) {
                Pop::Record(x) => {
                    got += 1;
                    let t = (x.p0 >> 32) as usize;
                    let i = x.p0 & 0xffff_ffff;
                    if let Some(l) = last[t] {
                        assert!(i > l, "per-producer order");
                    }
                    last[t] = Some(i);
                }
                _ => {
                    if d2.load(Ordering::Acquire) && r.pop(&mut cur.clone()) == Pop::Empty {
                        break;
                    }
                    std::thread::yield_now();
                }
            }
        }
        got
    });
    let pushed: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
    done.store(true, Ordering::Release);
    let got = c.join().unwrap();
    assert_eq!(pushed, got);
    let dropped = r.header().dropped.load(Ordering::Relaxed);
    assert_eq!(pushed + dropped, 4 * per);
    drop(m);
}

/// Producers racing for the head never lose a record to one another: with room in the ring,
/// every push succeeds and every record is there once, in each producer's order.
#[test]
fn contended_producers_lose_nothing() {
    let cap = 1 << 18;
    let mut m = mem(cap);
    let base = m.as_mut_ptr() as usize;
    // SAFETY: m outlives all threads (joined below).
    let r = unsafe { RingView::new(base as *mut u8, Geometry::single(cap)) };
    r.initialize(1, 0, 0);
    let per = 30_000u64;
    let hs: Vec<_> = (0..4u64)
        .map(|t| std::thread::spawn(move || (0..per).all(|i| r.push(&rec(t << 32 | i)))))
        .collect();
    for h in hs {
        assert!(
            h.join().unwrap(),
            "a push failed with the ring far from full"
        );
    }
    assert_eq!(r.header().dropped.load(Ordering::Relaxed), 0);
    let (mut cur, mut next) = (0, [0u64; 4]);
    for _ in 0..4 * per {
        let Pop::Record(x) = r.pop(&mut cur) else {
            panic!("record missing at {cur}");
        };
        let t = (x.p0 >> 32) as usize;
        assert_eq!(x.p0 & 0xffff_ffff, next[t], "producer {t} out of order");
        next[t] += 1;
    }
    assert_eq!(r.pop(&mut cur), Pop::Empty);
    drop(m);
}

#[test]
fn lanes_are_queues_of_their_own() {
    let cap = 4096;
    let mut m = mem(cap);
    // SAFETY: m holds file_size(cap) bytes, 4096-aligned, and outlives r.
    let r = unsafe {
        RingView::new(
            m.as_mut_ptr() as *mut u8,
            Geometry {
                capacity: cap,
                lanes: 4,
            },
        )
    };
    r.initialize(1, 0, 0);
    assert_eq!(r.header().lanes.load(Ordering::Relaxed), 4);
    // Lane 1 filled: its next push is dropped, lane 2 still takes records.
    for i in 0..1024 {
        assert!(r.push_lane(1, &rec(i)));
    }
    assert!(!r.push_lane(1, &rec(9999)));
    assert!(r.push_lane(2, &rec(7)));
    assert!(
        r.push_lane(6, &rec(8)),
        "lanes are taken modulo their number"
    );
    let (mut c1, mut c2, mut c0) = (0, 0, 0);
    assert_eq!(r.pop_lane(0, &mut c0), Pop::Empty);
    assert_eq!(r.pop_lane(2, &mut c2), Pop::Record(rec(7)));
    assert_eq!(r.pop_lane(2, &mut c2), Pop::Record(rec(8)));
    for i in 0..1024 {
        assert_eq!(r.pop_lane(1, &mut c1), Pop::Record(rec(i)));
    }
    assert_eq!(r.pop_lane(1, &mut c1), Pop::Empty);
    assert_eq!(r.tail_of(1), 1024);
    assert_eq!(r.header().dropped.load(Ordering::Relaxed), 1);
    drop(m);
}

/// Threads on lanes of their own lose nothing and keep their order.
#[test]
fn producers_on_their_own_lanes_lose_nothing() {
    let cap = 1 << 18;
    let mut m = mem(cap);
    // m outlives all threads (joined below).
    let r = ring_over(&mut m, cap, 4);
    let per = 30_000u64;
    let hs: Vec<_> = (0..4u32)
        .map(|t| {
            std::thread::spawn(move || (0..per).all(|i| r.push_lane(t, &rec((t as u64) << 32 | i))))
        })
        .collect();
    for h in hs {
        assert!(
            h.join().unwrap(),
            "a push failed with its lane far from full"
        );
    }
    for t in 0..4u32 {
        let mut cur = 0;
        for i in 0..per {
            assert_eq!(
                r.pop_lane(t, &mut cur),
                Pop::Record(rec((t as u64) << 32 | i))
            );
        }
        assert_eq!(r.pop_lane(t, &mut cur), Pop::Empty);
    }
    assert_eq!(r.header().dropped.load(Ordering::Relaxed), 0);
    drop(m);
}

/// A lane's one owner pushing by plain stores, its consumer popping at once in another thread, the
/// lane wrapping many times and filling now and then: every record arrives once and in order, or
/// is counted dropped (only when the lane is full); the other lanes' multi-producer pushes go on
/// beside it.
#[test]
fn an_owned_lane_keeps_order_and_drops_only_when_full() {
    let cap = MIN_CAPACITY;
    let mut m = mem(cap);
    // m outlives all threads (joined below).
    let r = ring_over(&mut m, cap, 2);
    let per = 200_000u64;
    let owner =
        std::thread::spawn(move || (0..per).filter(|&i| r.push_lane_owned(0, &rec(i))).count());
    let others: Vec<_> = (0..2u64)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..per / 4 {
                    r.push_lane(1, &rec(t << 32 | i));
                }
            })
        })
        .collect();
    let mut cur = [0u64; 2];
    let (mut got, mut last) = (0u64, None::<u64>);
    let mut idle = 0;
    while idle < 1000 {
        let mut any = false;
        if let Pop::Record(x) = r.pop_lane(0, &mut cur[0]) {
            assert!(
                last.is_none_or(|l| x.p0 > l),
                "owned lane out of order: {x:?} after {last:?}"
            );
            last = Some(x.p0);
            got += 1;
            any = true;
        }
        any |= matches!(r.pop_lane(1, &mut cur[1]), Pop::Record(_));
        if any || !owner.is_finished() {
            idle = 0;
        } else {
            idle += 1;
        }
    }
    let pushed = owner.join().unwrap() as u64;
    for h in others {
        h.join().unwrap();
    }
    assert_eq!(got, pushed, "every owned push that succeeded arrives once");
    assert_eq!(r.pop_lane(0, &mut cur[0]), Pop::Empty);
    drop(m);
    // Full: the owner's push is refused and counted, then goes on once the consumer frees a slot.
    let mut m = mem(cap);
    // SAFETY: m holds file_size(cap) bytes, 4096-aligned, and outlives r.
    let r = unsafe { RingView::new(m.as_mut_ptr() as *mut u8, Geometry::single(cap)) };
    r.initialize(1, 0, 0);
    for i in 0..cap as u64 {
        assert!(r.push_lane_owned(0, &rec(i)));
    }
    assert!(!r.push_lane_owned(0, &rec(9999)));
    assert_eq!(r.header().dropped.load(Ordering::Relaxed), 1);
    let mut cur = 0;
    assert_eq!(r.pop_lane(0, &mut cur), Pop::Record(rec(0)));
    assert!(r.push_lane_owned(0, &rec(cap as u64)));
    for i in 1..=cap as u64 {
        assert_eq!(r.pop_lane(0, &mut cur), Pop::Record(rec(i)));
    }
    assert_eq!(r.pop_lane(0, &mut cur), Pop::Empty);
    drop(m);
}

#[test]
fn lanes_are_clamped_to_what_the_ring_holds() {
    assert_eq!(clamp_lanes(1 << 16, 4), 4);
    assert_eq!(clamp_lanes(1 << 16, 3), 4);
    assert_eq!(clamp_lanes(1 << 16, 0), 1);
    assert_eq!(clamp_lanes(1 << 16, 100), MAX_LANES);
    assert_eq!(
        clamp_lanes(MIN_CAPACITY, 8),
        MIN_CAPACITY / MIN_LANE_CAPACITY
    );
}

#[test]
fn garbage_seq_never_hangs_producer() {
    let cap = MIN_CAPACITY;
    let mut m = mem(cap);
    // SAFETY: as above.
    let r = unsafe { RingView::new(m.as_mut_ptr() as *mut u8, Geometry::single(cap)) };
    r.initialize(1, 0, 0);
    for i in 0..cap as u64 {
        r.slot(0, i)
            .seq
            .store(u64::MAX / 3 + i * 7, Ordering::Relaxed);
    }
    r.header().head.store(0xdead_beef_1234, Ordering::Relaxed);
    for i in 0..100 {
        let _ = r.push(&rec(i));
    }
}
