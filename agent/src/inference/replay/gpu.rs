//! A small discrete-event model of trainer processes on GPUs: what each host does (its program of
//! CUDA and NCCL calls), when the GPU runs each item, and what the interposer would report of it.
//!
//! Per process and GPU, streams run their items in order; a compute kernel keeps the GPU busy while
//! it runs; a communication op keeps it busy only while it transfers (a send from its begin, a receive
//! or a collective once its peers are there); a stream wait holds its stream until the awaited
//! record has completed. The host pays a few µs per call and blocks only in a synchronize.
//! Processes are coupled through their messages and collectives ([`Link`]): the model is solved by
//! re-running every process with its peers' times until nothing changes.
use super::super::obs::{CommSig, GpuId, Ns, Obs, StreamId, SyncOn};
use super::super::score::merge;
use std::collections::HashMap;

/// How a communication op meets its peers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Link {
    /// No peer to wait for (an eager send, a lone op).
    Alone,
    /// The peer side is there `Ns` after the op begins (collectives of ranks nearly in step).
    Lag(Ns),
    /// Point-to-point messages, matched by key across processes: the op posts the message `send` at
    /// its begin and transfers the message `recv` once its sender has begun.
    Msg {
        send: Option<u64>,
        recv: Option<u64>,
    },
    /// A collective over `members` ops with this key: it transfers once all have begun.
    Coll { key: u64, members: u32 },
}

/// One host-side step of a process.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Act {
    /// Later calls are on this GPU (`cudaSetDevice`).
    Device(GpuId),
    /// A compute kernel of `ns` on `stream`.
    Launch {
        stream: StreamId,
        ns: Ns,
    },
    /// A communication op on `stream`; `transfer`: how long it keeps the GPU busy moving data;
    /// `timed`: whether the interposer can time it (not when captured into a graph).
    Comm {
        stream: StreamId,
        sig: CommSig,
        link: Link,
        transfer: Ns,
        timed: bool,
    },
    /// `cudaEventRecord(event, stream)`.
    Record {
        event: u64,
        stream: StreamId,
    },
    /// `cudaStreamWaitEvent(stream, event)`.
    Wait {
        stream: StreamId,
        event: u64,
    },
    Sync(SyncOn),
    /// The host is busy for this long without calling CUDA (Python, a data loader, a checkpoint).
    Host(Ns),
    /// An iteration starts here (for scoring).
    Mark,
}

/// What the interposer reports, as the model runs it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pushed {
    /// When it reaches the ring (host calls: the call; GPU-side: when the poller sees it).
    pub at: Ns,
    pub gpu: GpuId,
    pub obs: Obs,
}

/// A process of the model.
#[derive(Clone, Debug)]
pub struct Proc {
    pub pid: u32,
    pub program: Vec<Act>,
}

/// How the model reports and times.
#[derive(Clone, Copy, Debug)]
pub struct Model {
    /// The producer of issue 14 is there: event records, stream waits (timed when the event
    /// follows communication) and untimed ops are reported; otherwise only what today's rings carry.
    pub producer: bool,
    /// Host cost of one CUDA or NCCL call.
    pub call_ns: Ns,
    /// From a launch to the earliest GPU start of the item.
    pub launch_latency_ns: Ns,
    /// From a synchronize's completion to the host running again.
    pub wake_ns: Ns,
    /// The poller sees GPU-side times this long after them (plus up to `poll_jitter_ns`).
    pub poll_delay_ns: Ns,
    pub poll_jitter_ns: Ns,
    pub seed: u64,
}

impl Default for Model {
    fn default() -> Self {
        Model {
            producer: true,
            call_ns: 4_000,
            launch_latency_ns: 6_000,
            wake_ns: 15_000,
            poll_delay_ns: 30_000,
            poll_jitter_ns: 120_000,
            seed: 1,
        }
    }
}

/// The result of running a job on the model.
#[derive(Clone, Debug, Default)]
pub struct Run {
    /// Per process: what its ring would carry, in ring order.
    pub pushed: HashMap<u32, Vec<Pushed>>,
    /// Busy intervals (compute and transfers), merged, per (process, GPU).
    pub busy: HashMap<(u32, GpuId), Vec<(Ns, Ns)>>,
    /// Host times of each process's iteration marks.
    pub marks: HashMap<u32, Vec<Ns>>,
    /// When each process's last item ended.
    pub end: HashMap<u32, Ns>,
}

impl Run {
    /// Busy intervals of a GPU, over all its processes.
    pub fn gpu_busy(&self, gpu: GpuId) -> Vec<(Ns, Ns)> {
        merge(
            self.busy
                .iter()
                .filter(|((_, g), _)| *g == gpu)
                .flat_map(|(_, v)| v.iter().copied())
                .collect(),
        )
    }
    pub fn gpus(&self) -> Vec<GpuId> {
        let mut v: Vec<GpuId> = self.busy.keys().map(|k| k.1).collect();
        v.sort();
        v.dedup();
        v
    }
}

/// The peers' side of messages and collectives, from the previous round.
#[derive(Clone, Debug, Default, PartialEq)]
struct Peers {
    /// Message key -> begin of its send.
    sends: HashMap<u64, Ns>,
    /// Collective key -> begins of its members.
    colls: HashMap<u64, Vec<Ns>>,
}

/// Runs `procs` on the model until the processes agree on their peers' times.
pub fn run(procs: &[Proc], model: &Model) -> Run {
    let mut peers = Peers::default();
    for _ in 0..500 {
        let mut next = Peers::default();
        let mut run = Run::default();
        for p in procs {
            one(p, model, &peers, &mut next, &mut run);
        }
        if next == peers {
            return run;
        }
        peers = next;
    }
    panic!("the model did not settle: the job deadlocks");
}

/// A deterministic pseudo-random number in [0, 1) from `seed` and `k`.
pub fn unit(seed: u64, k: u64) -> f64 {
    let mut x = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(k.wrapping_mul(0xBF58_476D_1CE4_E5B9));
    x ^= x >> 31;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 29;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[derive(Default)]
struct StreamState {
    /// When the last item queued on it completes.
    free_at: Ns,
    /// Whether it has carried communication (a wait on an event recorded here is timed).
    comm: bool,
}

fn one(p: &Proc, m: &Model, peers: &Peers, next: &mut Peers, run: &mut Run) {
    let mut h: Ns = 1_000_000;
    let mut gpu = GpuId(0);
    let mut streams: HashMap<(GpuId, StreamId), StreamState> = HashMap::new();
    // Event -> (completion time of its latest record, whether its stream carries communication).
    let mut events: HashMap<u64, (Ns, bool)> = HashMap::new();
    let mut out: Vec<Pushed> = vec![];
    let mut busy: HashMap<GpuId, Vec<(Ns, Ns)>> = HashMap::new();
    let mut marks = vec![];
    let (mut next_op, mut next_wait, mut k) = (1u64, 1u64, 0u64);
    let mut end = 0;
    let seen = |t: Ns, k: &mut u64| {
        *k += 1;
        t + m.poll_delay_ns + (unit(m.seed ^ p.pid as u64, *k) * m.poll_jitter_ns as f64) as Ns
    };
    for act in &p.program {
        match *act {
            Act::Device(g) => gpu = g,
            Act::Mark => marks.push(h),
            Act::Host(ns) => h += ns,
            Act::Launch { stream, ns } => {
                let s = streams.entry((gpu, stream)).or_default();
                let start = s.free_at.max(h + m.launch_latency_ns);
                s.free_at = start + ns;
                end = end.max(s.free_at);
                busy.entry(gpu).or_default().push((start, start + ns));
                out.push(Pushed {
                    at: h,
                    gpu,
                    obs: Obs::Launch { t: h, stream },
                });
                h += m.call_ns;
            }
            Act::Comm {
                stream,
                sig,
                link,
                transfer,
                timed,
            } => {
                let id = next_op;
                next_op += 1;
                let s = streams.entry((gpu, stream)).or_default();
                s.comm = true;
                let begin = s.free_at.max(h + m.launch_latency_ns);
                // When the op's peers are there (its transfer cannot start before).
                let ready = match link {
                    Link::Alone => begin,
                    Link::Lag(ns) => begin + ns,
                    Link::Msg { send, recv } => {
                        if let Some(key) = send {
                            next.sends.insert(key, begin);
                        }
                        match recv {
                            Some(key) => peers.sends.get(&key).copied().unwrap_or(0).max(begin),
                            None => begin,
                        }
                    }
                    Link::Coll { key, members } => {
                        next.colls.entry(key).or_default().push(begin);
                        let all = peers.colls.get(&key);
                        match all {
                            Some(v) if v.len() as u32 >= members => {
                                v.iter().copied().max().unwrap_or(0).max(begin)
                            }
                            _ => begin,
                        }
                    }
                };
                let op_end = if sig.has_send() && !sig.has_recv() && !sig.collective() {
                    busy.entry(gpu).or_default().push((begin, begin + transfer));
                    begin + transfer
                } else {
                    if sig.has_send() {
                        busy.entry(gpu).or_default().push((begin, begin + transfer));
                    }
                    busy.entry(gpu).or_default().push((ready, ready + transfer));
                    (ready + transfer).max(begin + transfer)
                };
                s.free_at = op_end;
                end = end.max(op_end);
                out.push(Pushed {
                    at: h,
                    gpu,
                    obs: Obs::CommIssue {
                        t: h,
                        id,
                        stream,
                        sig,
                    },
                });
                if timed {
                    for (t, begin_end) in [(begin, true), (op_end, false)] {
                        let at = seen(t, &mut k);
                        let obs = if begin_end {
                            Obs::CommBegin { id, t, seen: at }
                        } else {
                            Obs::CommEnd { id, t, seen: at }
                        };
                        out.push(Pushed { at, gpu, obs });
                    }
                } else if m.producer {
                    out.push(Pushed {
                        at: h + 1,
                        gpu,
                        obs: Obs::CommUntimed { id },
                    });
                }
                h += m.call_ns;
            }
            Act::Record { event, stream } => {
                let s = streams.entry((gpu, stream)).or_default();
                let t = s.free_at.max(h + m.launch_latency_ns);
                events.insert(event, (t, s.comm));
                if m.producer {
                    out.push(Pushed {
                        at: h,
                        gpu,
                        obs: Obs::EventRecord {
                            t: h,
                            event,
                            stream,
                        },
                    });
                }
                h += m.call_ns;
            }
            Act::Wait { stream, event } => {
                let (done, on_comm) = events.get(&event).copied().unwrap_or((0, false));
                let s = streams.entry((gpu, stream)).or_default();
                let reached = s.free_at.max(h + m.launch_latency_ns);
                let released = reached.max(done);
                s.free_at = released;
                let wait = if on_comm {
                    next_wait += 1;
                    next_wait
                } else {
                    0
                };
                if m.producer {
                    out.push(Pushed {
                        at: h,
                        gpu,
                        obs: Obs::StreamWait {
                            t: h,
                            stream,
                            event,
                            wait,
                        },
                    });
                    if wait != 0 {
                        let at = seen(reached, &mut k);
                        out.push(Pushed {
                            at,
                            gpu,
                            obs: Obs::WaitReached {
                                wait,
                                t: reached,
                                seen: at,
                            },
                        });
                        let at = seen(released, &mut k);
                        out.push(Pushed {
                            at,
                            gpu,
                            obs: Obs::WaitReleased {
                                wait,
                                t: released,
                                seen: at,
                            },
                        });
                    }
                }
                h += m.call_ns;
            }
            Act::Sync(on) => {
                let t0 = h;
                let done = match on {
                    SyncOn::Device => streams
                        .iter()
                        .filter(|((g, _), _)| *g == gpu)
                        .map(|(_, s)| s.free_at)
                        .max()
                        .unwrap_or(0),
                    SyncOn::Stream(st) => streams.get(&(gpu, st)).map_or(0, |s| s.free_at),
                    SyncOn::Event(e) => events.get(&e).map_or(0, |e| e.0),
                };
                h = h.max(done) + m.wake_ns;
                out.push(Pushed {
                    at: h,
                    gpu,
                    obs: Obs::Sync { t0, t1: h, on },
                });
            }
        }
    }
    let t_exit = h.max(end) + m.wake_ns;
    out.push(Pushed {
        at: t_exit,
        gpu,
        obs: Obs::Exit { t: t_exit },
    });
    // The ring's order: by when each record was pushed (stable: host calls keep their order).
    out.sort_by_key(|p| p.at);
    for (g, v) in busy {
        run.busy.insert((p.pid, g), merge(v));
    }
    run.pushed.insert(p.pid, out);
    run.marks.insert(p.pid, marks);
    run.end.insert(p.pid, end);
}

#[cfg(test)]
mod tests {
    use super::super::super::obs::CommKind;
    use super::*;

    fn sig(kind: CommKind) -> CommSig {
        CommSig {
            comm: 1,
            kind,
            peer: 1,
            bytes: 1 << 20,
            largest_send: 0,
        }
    }

    #[test]
    fn a_receive_waits_for_its_send_and_transfers_after_it() {
        let send = Proc {
            pid: 1,
            program: vec![
                Act::Launch {
                    stream: 1,
                    ns: 5_000_000,
                },
                Act::Record {
                    event: 1,
                    stream: 1,
                },
                Act::Wait {
                    stream: 2,
                    event: 1,
                },
                Act::Comm {
                    stream: 2,
                    sig: sig(CommKind::Send),
                    link: Link::Msg {
                        send: Some(7),
                        recv: None,
                    },
                    transfer: 100_000,
                    timed: true,
                },
            ],
        };
        let recv = Proc {
            pid: 2,
            program: vec![
                Act::Device(GpuId(1)),
                Act::Comm {
                    stream: 2,
                    sig: sig(CommKind::Recv),
                    link: Link::Msg {
                        send: None,
                        recv: Some(7),
                    },
                    transfer: 100_000,
                    timed: true,
                },
                Act::Record {
                    event: 1,
                    stream: 2,
                },
                Act::Wait {
                    stream: 1,
                    event: 1,
                },
                Act::Launch {
                    stream: 1,
                    ns: 1_000_000,
                },
                Act::Sync(SyncOn::Device),
            ],
        };
        let r = run(&[send, recv], &Model::default());
        let b0 = &r.busy[&(1, GpuId(0))];
        let b1 = &r.busy[&(2, GpuId(1))];
        // The send begins when the compute before it has drained.
        assert_eq!(b0.len(), 1, "compute and the send's transfer touch: {b0:?}");
        let send_begin = b0[0].1 - 100_000;
        assert_eq!(b0[0].1 - b0[0].0, 5_100_000);
        // The receive transfers after the send began, then its compute runs.
        assert_eq!(b1[0].0, send_begin);
        assert_eq!(b1[0].1, send_begin + 100_000 + 1_000_000);
        // The timed wait reached early and released at the receive's end.
        let pushed = &r.pushed[&2];
        let reached = pushed.iter().find_map(|p| match p.obs {
            Obs::WaitReached { t, .. } => Some(t),
            _ => None,
        });
        let released = pushed.iter().find_map(|p| match p.obs {
            Obs::WaitReleased { t, .. } => Some(t),
            _ => None,
        });
        assert!(reached.unwrap() < send_begin);
        assert_eq!(released, Some(send_begin + 100_000));
        assert!(pushed.windows(2).all(|w| w[0].at <= w[1].at));
    }
}
