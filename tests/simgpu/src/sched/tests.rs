//! The model on its own: no shared memory, no threads, no real time.
use super::*;

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

fn knobs(mode: Mode) -> Knobs {
    Knobs {
        mode: mode as u32,
        comm_spin: 1,
        slice_ns: 2 * MS,
        switch_ns: 25 * US,
        interference: 0.0,
        hold_ns: 2 * MS,
    }
}

fn kernel(slot: u32, key: u64, ns: u64, ready: u64) -> Submit {
    Submit {
        slot,
        stream_key: key,
        comm: false,
        with_body: false,
        mark: false,
        work_ns: ns,
        fill: 100,
        demand: 100,
        ready_ns: ready,
        hold_after: false,
    }
}

fn comm(slot: u32, key: u64, ready: u64) -> Submit {
    Submit {
        comm: true,
        with_body: true,
        work_ns: 0,
        ..kernel(slot, key, 0, ready)
    }
}

/// Runs the model far ahead (no real-time limit) and returns the entry's (start, end).
fn run(s: &mut Sched, id: EntryId) -> (u64, u64) {
    let end = s.predict(id, Until::Done).expect("ends");
    s.advance(end);
    let d = s.take_done(id).expect("done");
    assert_eq!(d.end_ns, end, "prediction matches");
    (d.start_ns, d.end_ns)
}

#[test]
fn a_lone_process_runs_at_full_speed_back_to_back() {
    let mut s = Sched::new(knobs(Mode::Timeslice));
    let a = s.submit(&kernel(0, 1, 5 * MS, 10 * MS)).unwrap();
    assert_eq!(run(&mut s, a), (10 * MS, 15 * MS));
    let b = s.submit(&kernel(0, 1, 3 * MS, 15 * MS)).unwrap();
    assert_eq!(run(&mut s, b), (15 * MS, 18 * MS));
    // A kernel submitted late (its stream was idle) still starts at its stream's time.
    let c = s.submit(&kernel(0, 1, 3 * MS, 18 * MS)).unwrap();
    assert_eq!(run(&mut s, c), (18 * MS, 21 * MS));
}

#[test]
fn two_processes_with_work_share_the_device_in_slices() {
    let mut s = Sched::new(knobs(Mode::Timeslice));
    // Both have 10 ms of preemptible work from t=0.
    let a = s.submit(&kernel(0, 1, 10 * MS, 0)).unwrap();
    let b = s.submit(&kernel(1, 2, 10 * MS, 0)).unwrap();
    let (ea, eb) = (
        s.predict(a, Until::Done).unwrap(),
        s.predict(b, Until::Done).unwrap(),
    );
    // Slices of 2 ms, alternating, 25 µs per switch: a ends after 5 of its slices and 4 of b's.
    assert_eq!(ea, 10 * MS + 4 * 2 * MS + 8 * 25 * US);
    assert_eq!(eb, ea + 2 * MS + 25 * US);
    assert_eq!(run(&mut s, a).0, 0);
    assert_eq!(run(&mut s, b).0, 2 * MS + 25 * US);
}

#[test]
fn a_short_kernel_finishes_before_the_switch_and_an_idle_holder_yields_at_once() {
    let mut s = Sched::new(knobs(Mode::Timeslice));
    // The side task has run alone for long: its slice has expired when the trainer comes.
    let side = s.submit(&kernel(1, 2, 100 * MS, 0)).unwrap();
    s.advance(50 * MS);
    let t = s.submit(&kernel(0, 1, 300 * US, 50 * MS)).unwrap();
    // A long kernel is preempted at once: the trainer waits only for the switch.
    assert_eq!(run(&mut s, t), (50 * MS + 25 * US, 50 * MS + 325 * US));
    // The trainer has nothing left: the side task gets the device back at once.
    let end = run(&mut s, side).1;
    assert_eq!(end, 100 * MS + 300 * US + 2 * 25 * US);

    // A kernel shorter than a slice is not preempted: the trainer waits for its end.
    let mut s = Sched::new(knobs(Mode::Timeslice));
    let mut trainer = None;
    for i in 0..40 {
        let k = s.submit(&kernel(1, 2, 1_700 * US, i * 1_700 * US)).unwrap();
        if i == 20 {
            let t = s
                .submit(&kernel(0, 1, 300 * US, 20 * 1_700 * US + 500 * US))
                .unwrap();
            let (start, end) = (
                s.predict(t, Until::Started).unwrap(),
                s.predict(t, Until::Done).unwrap(),
            );
            assert_eq!(start, 21 * 1_700 * US + 25 * US);
            assert_eq!(end - start, 300 * US);
            trainer = Some(t);
        }
        run(&mut s, k);
    }
    assert!(s.take_done(trainer.unwrap()).is_some());
}

#[test]
fn a_receive_whose_data_arrived_completes_when_its_process_is_resident_again() {
    let mut s = Sched::new(knobs(Mode::Timeslice));
    // The trainer's receive waits (spinning) from t=0; a side task runs 10 ms kernels.
    let r = s.submit(&comm(0, 1, 0)).unwrap();
    let side = s.submit(&kernel(1, 2, 10 * MS, 0)).unwrap();
    assert_eq!(s.predict(r, Until::Started), Some(0));
    // They alternate: the trainer (spinning) 0-2 ms, the side task 2.025-4.025 ms, ...
    s.advance(3 * MS);
    // At 3 ms the data has arrived (a transfer of 100 µs from 2.9 ms): the trainer is not
    // resident, so it completes in its next slice, at 4.05 ms + what is left of the transfer.
    s.report_transfer(r, 2_900 * US, 100 * US, 0, None);
    let (_, end) = run(&mut s, r);
    assert_eq!(end, 4_025 * US + 25 * US + 100 * US);
    let d = s.entry(side).unwrap();
    assert_eq!(d.state, ACTIVE);
}

#[test]
fn a_transfer_reported_late_is_settled_from_the_history() {
    let mut s = Sched::new(knobs(Mode::Timeslice));
    let r = s.submit(&comm(0, 1, 0)).unwrap();
    // Alone: resident all along; the report comes when the clock is at 5 ms for a transfer that
    // began at 1 ms and took 1 ms.
    s.advance(5 * MS);
    s.report_transfer(r, MS, MS, 0, None);
    let d = s.take_done(r).unwrap();
    assert_eq!((d.start_ns, d.transfer_start_ns, d.end_ns), (0, MS, 2 * MS));
    assert_eq!(d.eager_end_ns, None);
}

#[test]
fn a_transfer_reported_late_holds_the_clock_for_its_streams_next_work() {
    let mut s = Sched::new(knobs(Mode::Mps));
    // A receive whose stream has more queued (a record, then compute waits for it), and compute
    // of another stream that keeps the clock moving meanwhile.
    let r = s
        .submit(&Submit {
            hold_after: true,
            ..comm(0, 1, 0)
        })
        .unwrap();
    let half = |key, ns, ready| Submit {
        fill: 50,
        demand: 50,
        ..kernel(0, key, ns, ready)
    };
    let other = s.submit(&half(2, 10 * MS, 0)).unwrap();
    s.advance(3 * MS);
    // Its data came at 1 ms for 1 ms (its peer's thread was late to say so): it ended at 2 ms,
    // before the clock; the stream's next work, due then, is held for where the clock is.
    s.report_transfer(r, MS, MS, 0, None);
    assert_eq!(s.take_done(r).unwrap().end_ns, 2 * MS);
    assert!(s.has_hold(1));
    s.advance(3 * MS + 500 * US);
    assert_eq!(s.clock_ns, 3 * MS);
    let next = s.submit(&half(1, MS, 2 * MS)).unwrap();
    assert_eq!(run(&mut s, next), (3 * MS, 4 * MS));
    assert_eq!(run(&mut s, other), (0, 10 * MS));
}

#[test]
fn a_send_that_filled_its_buffer_transfers_at_its_start_and_again_from_its_receivers() {
    let mut s = Sched::new(knobs(Mode::Timeslice));
    let r = s.submit(&comm(0, 1, 0)).unwrap();
    // 400 µs into its buffer from its start, then (its receiver started at 3 ms) 100 µs more.
    s.advance(5 * MS);
    s.report_transfer(r, 3 * MS, 100 * US, 400 * US, None);
    let d = s.take_done(r).unwrap();
    assert_eq!(
        (d.start_ns, d.eager_end_ns, d.transfer_start_ns, d.end_ns),
        (0, Some(400 * US), 3 * MS, 3 * MS + 100 * US)
    );
    // Its receiver there before the buffer was full: one transfer, from the buffer's end.
    let r = s.submit(&comm(0, 1, 5 * MS)).unwrap();
    s.advance(8 * MS);
    s.report_transfer(r, 5 * MS + 100 * US, 100 * US, 400 * US, None);
    let d = s.take_done(r).unwrap();
    assert_eq!(
        (d.eager_end_ns, d.transfer_start_ns, d.end_ns),
        (Some(5_400 * US), 5_400 * US, 5_500 * US)
    );
    // Reported while the clock is still inside the buffer's fill (its peer posted early in real
    // time): the fill ends where it would have, and the rest still moves from its receiver's start.
    let r = s.submit(&comm(0, 1, 10 * MS)).unwrap();
    s.advance(10 * MS + 100 * US);
    s.report_transfer(r, 13 * MS, 100 * US, 400 * US, None);
    s.advance(15 * MS);
    let d = s.take_done(r).unwrap();
    assert_eq!(
        (d.eager_end_ns, d.transfer_start_ns, d.end_ns),
        (Some(10_400 * US), 13 * MS, 13_100 * US)
    );
}

#[test]
fn a_group_busy_between_its_fill_and_its_transfer_has_a_mid_span() {
    let mut s = Sched::new(knobs(Mode::Timeslice));
    let r = s.submit(&comm(0, 1, 0)).unwrap();
    // Its buffer's fill (400 µs), its send's rest from its receiver's start at 1 ms (1.6 ms),
    // then its receive's data from 5 ms (2 ms).
    s.advance(8 * MS);
    s.report_transfer(r, 5 * MS, 2 * MS, 400 * US, Some((MS, 1_600 * US)));
    let d = s.take_done(r).unwrap();
    assert_eq!(
        (d.eager_end_ns, d.mid, d.transfer_start_ns, d.end_ns),
        (Some(400 * US), Some((MS, 2_600 * US)), 5 * MS, 7 * MS)
    );
    // A mid span that runs into the transfer's start delays it; none of 0 ns is none.
    let r = s.submit(&comm(0, 1, 10 * MS)).unwrap();
    s.advance(20 * MS);
    s.report_transfer(r, 11 * MS, MS, 0, Some((10_500 * US, MS)));
    let d = s.take_done(r).unwrap();
    assert_eq!(
        (d.mid, d.transfer_start_ns, d.end_ns),
        (Some((10_500 * US, 11_500 * US)), 11_500 * US, 12_500 * US)
    );
    let r = s.submit(&comm(0, 1, 30 * MS)).unwrap();
    s.advance(40 * MS);
    s.report_transfer(r, 31 * MS, MS, 0, Some((30 * MS, 0)));
    assert_eq!(s.take_done(r).unwrap().mid, None);
}

#[test]
fn without_spin_a_waiting_receive_leaves_the_device_to_others() {
    let mut k = knobs(Mode::Timeslice);
    k.comm_spin = 0;
    let mut s = Sched::new(k);
    let r = s.submit(&comm(0, 1, 0)).unwrap();
    let side = s.submit(&kernel(1, 2, 10 * MS, 0)).unwrap();
    assert_eq!(s.predict(side, Until::Done), Some(10 * MS));
    assert_eq!(s.predict(r, Until::Started), Some(0));
}

#[test]
fn mps_caps_a_kernel_at_its_share_and_runs_the_others_beside_it() {
    let mut s = Sched::new(knobs(Mode::Mps));
    let side = s
        .submit(&Submit {
            demand: 30,
            ..kernel(1, 2, 10 * MS, 0)
        })
        .unwrap();
    let t = s.submit(&kernel(0, 1, 7 * MS, 0)).unwrap();
    // The side task on 30 % of the SMs: 10 ms of work takes 33.3 ms; the trainer gets the other
    // 70 % until then.
    assert_eq!(s.predict(t, Until::Done), Some(10 * MS));
    assert_eq!(run(&mut s, t), (0, 10 * MS));
    assert_eq!(run(&mut s, side).1, 10 * MS * 100 / 30 + 1);
}

#[test]
fn mps_preempts_nothing_and_hands_freed_sms_to_the_oldest() {
    let mut s = Sched::new(knobs(Mode::Mps));
    let side = s.submit(&kernel(1, 2, 13 * MS, 0)).unwrap();
    let t = s.submit(&kernel(0, 1, 300 * US, MS)).unwrap();
    let side2 = s.submit(&kernel(1, 2, 13 * MS, 13 * MS)).unwrap();
    // The trainer waits for the whole side kernel, then goes first (it waited longer).
    assert_eq!(run(&mut s, t), (13 * MS, 13 * MS + 300 * US));
    assert_eq!(run(&mut s, side).1, 13 * MS);
    assert_eq!(run(&mut s, side2).0, 13 * MS + 300 * US);
}

#[test]
fn mps_interference_slows_kernels_by_the_others_load() {
    let mut k = knobs(Mode::Mps);
    k.interference = 1.0;
    let mut s = Sched::new(k);
    let side = s
        .submit(&Submit {
            demand: 50,
            ..kernel(1, 2, 100 * MS, 0)
        })
        .unwrap();
    let t = s.submit(&kernel(0, 1, MS, 0)).unwrap();
    // 50 % of the SMs, slowed by 1 + 0.5: 3 ms.
    assert_eq!(run(&mut s, t).1, 3 * MS);
    let _ = side;
}

#[test]
fn kernels_of_one_process_share_by_fill() {
    let mut s = Sched::new(knobs(Mode::Timeslice));
    let small = |key, ns| Submit {
        fill: 40,
        demand: 40,
        ..kernel(0, key, ns, 0)
    };
    let a = s.submit(&small(1, 4 * MS)).unwrap();
    let b = s.submit(&small(2, 4 * MS)).unwrap();
    let c = s.submit(&kernel(0, 3, 2 * MS, 0)).unwrap();
    // a and b fit side by side at full speed; c gets the last 20 % (a fifth of its speed) until
    // they end at 4 ms, then all of it.
    assert_eq!(run(&mut s, a), (0, 4 * MS));
    assert_eq!(run(&mut s, b), (0, 4 * MS));
    assert_eq!(run(&mut s, c), (0, 4 * MS + 2 * MS - 4 * MS / 5));
}

#[test]
fn holds_stop_the_clock_until_cleared_or_expired() {
    let mut s = Sched::new(knobs(Mode::Timeslice));
    let a = s
        .submit(&Submit {
            hold_after: true,
            ..kernel(0, 1, MS, 0)
        })
        .unwrap();
    // Real time 10 ms: the clock stops at a's end (its stream has more to submit).
    s.advance(10 * MS);
    assert_eq!(s.clock_ns, MS);
    assert!(s.take_done(a).is_some());
    let b = s.submit(&kernel(0, 1, MS, MS)).unwrap();
    assert_eq!(run(&mut s, b), (MS, 2 * MS));
    // A hold that is not cleared is honoured for hold_ns of real time only, as long as the model
    // is visited (a thread held back sleeps until `hold_expiry`, at most a tick at a time).
    s.set_hold(7, 1, 3 * MS, 20 * MS);
    let mut now = 20 * MS;
    while let Some(next) = s.hold_expiry() {
        assert!(
            next > now && next - now <= Sched::HOLD_TICK_NS,
            "{now} {next}"
        );
        now = next;
        s.advance(now);
        if now <= 22 * MS {
            assert_eq!(s.clock_ns, 3 * MS, "at {now}");
        }
    }
    assert_eq!(now, 22 * MS + 1);
    assert_eq!(s.clock_ns, 22 * MS + 1);
}

#[test]
fn a_machine_that_stops_as_a_whole_does_not_expire_the_holds() {
    let mut s = Sched::new(knobs(Mode::Mps));
    let a = s.submit(&kernel(0, 1, MS, 0)).unwrap();
    assert_eq!(run(&mut s, a), (0, MS));
    // Stream 1 is released at 2 ms (a record it waited for), at real time 2 ms; then nothing of
    // the machine runs for 12 ms (a hypervisor's pause): the first visit after it must not move
    // the clock past 2 ms, where the stream's next kernel is due.
    s.set_hold(1, 0, 2 * MS, 2 * MS);
    s.advance(14 * MS);
    assert_eq!(s.clock_ns, 2 * MS);
    let b = s.submit(&kernel(0, 1, MS, 2 * MS)).unwrap();
    assert!(!s.has_hold(1));
    assert_eq!(run(&mut s, b), (2 * MS, 3 * MS));
}

#[test]
fn a_dead_process_is_forgotten() {
    let mut s = Sched::new(knobs(Mode::Timeslice));
    let _side = s.submit(&kernel(1, 2, 100 * MS, 0)).unwrap();
    s.advance(10 * MS);
    let t = s.submit(&kernel(0, 1, MS, 10 * MS)).unwrap();
    s.reap_slot(1);
    assert_eq!(run(&mut s, t), (10 * MS + 25 * US, 11 * MS + 25 * US));
}

#[test]
fn a_record_takes_its_time_when_its_process_is_resident() {
    let mut s = Sched::new(knobs(Mode::Timeslice));
    // The side task holds the device with a short kernel when the trainer records an event.
    let side = s.submit(&kernel(1, 2, 1_500 * US, 0)).unwrap();
    s.advance(500 * US);
    let rec = s
        .submit(&Submit {
            mark: true,
            ..kernel(0, 1, 0, 500 * US)
        })
        .unwrap();
    // The side task has held the device past a slice? No: 0.5 ms into it. The record waits for
    // the slice's end (2 ms), the short kernel's end (1.5 ms is before) and a switch.
    assert_eq!(run(&mut s, rec), (1_525 * US, 1_525 * US));
    assert_eq!(run(&mut s, side).1, 1_500 * US);
    // Alone, a record is immediate.
    let rec = s
        .submit(&Submit {
            mark: true,
            ..kernel(0, 1, 0, 3 * MS)
        })
        .unwrap();
    assert_eq!(run(&mut s, rec), (3 * MS, 3 * MS));
}

#[test]
fn a_record_submitted_late_takes_the_time_its_stream_reached_it() {
    let mut s = Sched::new(knobs(Mode::Timeslice));
    let mark = |ready| Submit {
        mark: true,
        ..kernel(0, 1, 0, ready)
    };
    // The trainer alone: its kernel ends at 1 ms, its stream thread submits the record after it
    // only when the clock is at 4 ms (it woke late).
    let k = s.submit(&kernel(0, 1, MS, 0)).unwrap();
    assert_eq!(run(&mut s, k), (0, MS));
    s.advance(4 * MS);
    assert_eq!(s.clock_ns, 4 * MS);
    let rec = s.submit(&mark(MS)).unwrap();
    assert_eq!(
        s.take_done(rec).map(|d| (d.start_ns, d.end_ns)),
        Some((MS, MS))
    );
    // A side task then takes the device (from about 4 ms to 10 ms); a record due at 5 ms, when
    // the trainer was not resident, takes the first instant it was again.
    let side = s.submit(&kernel(1, 2, 6 * MS, 4 * MS)).unwrap();
    let (a, b) = run(&mut s, side);
    assert!(a >= 4 * MS && b > 9 * MS, "{a} {b}");
    let t = s.submit(&kernel(0, 1, 100 * US, b)).unwrap();
    let (back, _) = run(&mut s, t);
    s.advance(back + 5 * MS);
    let rec = s.submit(&mark(5 * MS)).unwrap();
    let d = s.take_done(rec).expect("settled from the history");
    assert_eq!(
        d.start_ns, back,
        "the trainer's first resident instant after 5 ms"
    );
    // Not late: as before, at its time.
    let rec = s.submit(&mark(s.clock_ns + MS)).unwrap();
    assert!(s.take_done(rec).is_none());
}

#[test]
fn a_kernel_chained_behind_another_runs_at_its_end_whatever_its_stream_thread_does() {
    for mode in [Mode::Timeslice, Mode::Mps] {
        let mut s = Sched::new(knobs(mode));
        // Its stream had more queued when the first went in: it asked for a hold at its end.
        let a = s
            .submit(&Submit {
                hold_after: true,
                ..kernel(0, 1, 5 * MS, 0)
            })
            .unwrap();
        let b = s.submit_after(&kernel(0, 1, 3 * MS, 0), a).unwrap();
        let c = s.submit_after(&kernel(0, 1, 2 * MS, 0), b).unwrap();
        // No hold keeps the clock back (the next work is in the model), and nothing of the
        // stream's thread is needed for b and c to run: 20 ms of real time settle all three.
        assert!(!s.has_hold(1));
        s.advance(20 * MS);
        assert_eq!(s.clock_ns, 20 * MS, "{mode:?}");
        assert!(
            !s.has_hold(1),
            "{mode:?}: a chained kernel's end set a hold"
        );
        let times = [a, b, c].map(|id| {
            let d = s.take_done(id).expect("done");
            (d.start_ns, d.end_ns)
        });
        assert_eq!(
            times,
            [(0, 5 * MS), (5 * MS, 8 * MS), (8 * MS, 10 * MS)],
            "{mode:?}"
        );
    }
}

#[test]
fn a_chained_kernel_waits_for_its_own_launch_and_its_predecessor() {
    let mut s = Sched::new(knobs(Mode::Mps));
    let a = s.submit(&kernel(0, 1, MS, 0)).unwrap();
    // Launched by the host at 4 ms, after a's end: it runs from its launch.
    let b = s.submit_after(&kernel(0, 1, MS, 4 * MS), a).unwrap();
    assert_eq!(s.predict(b, Until::Done), Some(5 * MS));
    s.advance(10 * MS);
    assert_eq!(s.take_done(b).map(|d| d.start_ns), Some(4 * MS));
    // Behind a kernel that has already ended: from that end (nothing ran since: see
    // a_late_kernel_starts_where_its_stream_reached_it_if_the_device_was_free).
    let c = s.submit(&kernel(0, 1, MS, 10 * MS)).unwrap();
    s.advance(30 * MS);
    let d = s.submit_after(&kernel(0, 1, MS, 0), c).unwrap();
    assert_eq!(
        s.take_done(d).map(|d| (d.start_ns, d.end_ns)),
        Some((11 * MS, 12 * MS))
    );
    // Behind a communication kernel: from the end its body reports, even one in the past.
    let x = s.submit(&comm(0, 2, 31 * MS)).unwrap();
    let y = s.submit_after(&kernel(0, 2, MS, 0), x).unwrap();
    s.advance(40 * MS);
    assert!(s
        .entry(y)
        .is_some_and(|e| e.state == ACTIVE && !e.is(STARTED)));
    s.report_transfer(x, 32 * MS, 2 * MS, 0, None);
    assert_eq!(run(&mut s, y), (40 * MS, 41 * MS));
    assert_eq!(s.take_done(x).map(|d| d.end_ns), Some(34 * MS));
}

#[test]
fn a_late_kernel_starts_where_its_stream_reached_it_if_the_device_was_free() {
    let mut s = Sched::new(knobs(Mode::Mps));
    let a = s.submit(&kernel(0, 1, MS, 0)).unwrap();
    assert_eq!(run(&mut s, a), (0, MS));
    // Its stream's thread comes at 4 ms with a kernel due at 1 ms (when a ended): nothing ran
    // since, so it ran from 1 ms, and ended at 2 ms, before the clock: done at once, and the
    // stream's next work is held for at the clock.
    s.advance(4 * MS);
    let b = s
        .submit(&Submit {
            hold_after: true,
            ..kernel(0, 1, MS, MS)
        })
        .unwrap();
    assert_eq!(
        s.take_done(b).map(|d| (d.start_ns, d.end_ns)),
        Some((MS, 2 * MS))
    );
    assert!(s.has_hold(1));
    // One of 3 ms due at 3.5 ms: 0.5 ms of it ran before the clock, the rest runs from it.
    s.advance(4 * MS);
    let c = s.submit(&kernel(0, 1, 3 * MS, 3_500 * US)).unwrap();
    assert_eq!(run(&mut s, c), (3_500 * US, 6_500 * US));
    // Another process's kernel ran meanwhile: the SMs of the past were its; from the clock.
    let side = s.submit(&kernel(1, 2, MS, 6_500 * US)).unwrap();
    assert_eq!(run(&mut s, side), (6_500 * US, 7_500 * US));
    s.advance(9 * MS);
    let d = s.submit(&kernel(0, 1, MS, 7 * MS)).unwrap();
    assert_eq!(run(&mut s, d), (9 * MS, 10 * MS));
    // A communication kernel takes no SMs: it waits for its peers from when its stream reached it.
    s.advance(12 * MS);
    let r = s.submit(&comm(0, 3, 10 * MS)).unwrap();
    assert_eq!(s.entry(r).map(|e| e.start_ns), Some(10 * MS));
    s.report_transfer(r, 11 * MS, 500 * US, 0, None);
    assert_eq!(
        s.take_done(r).map(|d| (d.start_ns, d.end_ns)),
        Some((10 * MS, 11_500 * US))
    );
}

#[test]
fn under_time_slicing_late_work_starts_in_the_past_only_while_its_process_was_resident() {
    let mut s = Sched::new(knobs(Mode::Timeslice));
    // The trainer alone, resident: its late kernel (due at 1 ms, submitted at 3 ms) ran from 1 ms.
    let a = s.submit(&kernel(0, 1, MS, 0)).unwrap();
    assert_eq!(run(&mut s, a), (0, MS));
    s.advance(3 * MS);
    let b = s.submit(&kernel(0, 1, MS, MS)).unwrap();
    assert_eq!(
        s.take_done(b).map(|d| (d.start_ns, d.end_ns)),
        Some((MS, 2 * MS))
    );
    // A side task takes the device at 3 ms (the trainer had nothing left: it gave the device up
    // at once) for a 1 ms kernel, then has nothing left either and gives it up.
    let side = s.submit(&kernel(1, 2, MS, 3 * MS)).unwrap();
    assert_eq!(run(&mut s, side), (3 * MS + 25 * US, 4 * MS + 25 * US));
    s.advance(6 * MS);
    // Submitted at 6 ms: a receive due at 2.5 ms waits (spinning, on the device) from then, when
    // the trainer was resident; one due at 3.5 ms from the clock (the trainer has not been
    // resident since: nothing says when it would have got the device back).
    let r = s.submit(&comm(0, 3, 2_500 * US)).unwrap();
    assert_eq!(s.entry(r).map(|e| e.start_ns), Some(2_500 * US));
    let r2 = s.submit(&comm(0, 4, 3_500 * US)).unwrap();
    assert!(s.entry(r2).is_some_and(|e| !e.is(STARTED)));
    // The side task's kernel ran since 3.5 ms: a compute kernel due then starts at the clock.
    let c = s.submit(&kernel(0, 1, MS, 3_500 * US)).unwrap();
    assert_eq!(run(&mut s, c).0, 6 * MS + 25 * US);
}
