//! Programs of the job shapes real frameworks produce (reference/real-jobs.md), for the model in
//! [`super::gpu`]: a pipeline-parallel 1F1B job in Megatron's, DeepSpeed's or PyTorch's pipeline
//! runtime's way of communicating, with tensor-parallel all-reduces inside every layer,
//! data-parallel gradient buckets reduced during the last backward, extra collectives, sizes that
//! vary, a micro-batch count that changes, long host pauses; a helper process sharing a GPU; one
//! process driving two GPUs.
use super::super::obs::{CommKind, CommSig, GpuId, Ns, StreamId, SyncOn};
use super::gpu::{unit, Act, Link, Proc};

/// How a pipeline stage talks to its neighbours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// Megatron non-interleaved: one `batch_isend_irecv` group (the previous op's sends and this
    /// op's receives), then `torch.cuda.synchronize()`.
    Megatron,
    /// DeepSpeed: a blocking receive (the op, then a synchronize of its stream) before each compute,
    /// a send after it.
    DeepSpeed,
    /// PyTorch's pipeline runtime: every send and receive an asynchronous op on its pair's stream,
    /// receives posted one action early, the compute stream made to wait for them; the host never
    /// blocks before the iteration's end.
    Torch,
}

/// Streams of a stage process.
pub const COMPUTE: StreamId = 7;
const P2P_PREV: StreamId = 20;
const P2P_NEXT: StreamId = 21;
/// PyTorch's runtime: sends on their own streams (with receives posted early, one stream per pair
/// in both directions would deadlock this simple order).
const SEND_PREV: StreamId = 22;
const SEND_NEXT: StreamId = 23;
const TP: StreamId = 30;
const DP: StreamId = 40;
const WORLD: StreamId = 50;
/// Communicator handles.
const COMM_P2P: u64 = 0x1000;
const COMM_PREV: u64 = 0x1001;
const COMM_NEXT: u64 = 0x1002;
const COMM_TP: u64 = 0x2000;
const COMM_DP: u64 = 0x3000;
const COMM_WORLD: u64 = 0x4000;

/// A pipeline-parallel job: one process per stage, stage `s` on GPU `s` (pid 100 + s).
#[derive(Clone, Debug)]
pub struct Pipeline {
    pub stages: usize,
    pub micro: usize,
    pub iterations: usize,
    pub f_ns: Ns,
    pub b_ns: Ns,
    /// Kernels per forward or backward (without tensor parallelism).
    pub kernels: usize,
    pub style: Style,
    /// Layers with tensor-parallel all-reduces (2 in each layer's forward, 2 in its backward).
    pub tp_layers: usize,
    /// The tensor-parallel collectives are captured into CUDA graphs: never timed.
    pub tp_untimed: bool,
    /// Data-parallel gradient buckets all-reduced during the iteration's last backward.
    pub dp_buckets: usize,
    pub dp_transfer_ns: Ns,
    /// All-reduces after the pipeline (gradient norm, loss), each waited for.
    pub extra_collectives: usize,
    pub p2p_bytes: u64,
    pub p2p_transfer_ns: Ns,
    /// Message sizes (and their transfer) vary by up to this share between iterations.
    pub size_jitter: f64,
    /// Kernel durations vary by up to this share.
    pub noise: f64,
    /// From this iteration on, this many micro-batches.
    pub change: Option<(usize, usize)>,
    /// After every `.0`-th iteration, the host pauses for `.1` (evaluation, checkpoint).
    pub pause: Option<(usize, Ns)>,
    /// The all-reduce that ends every iteration over all stages (as pipesim's).
    pub allreduce_transfer_ns: Ns,
    pub seed: u64,
}

impl Default for Pipeline {
    fn default() -> Self {
        Pipeline {
            stages: 4,
            micro: 8,
            iterations: 8,
            f_ns: 4_000_000,
            b_ns: 8_000_000,
            kernels: 4,
            style: Style::Megatron,
            tp_layers: 0,
            tp_untimed: false,
            dp_buckets: 0,
            dp_transfer_ns: 1_500_000,
            extra_collectives: 0,
            p2p_bytes: 8 << 20,
            p2p_transfer_ns: 200_000,
            size_jitter: 0.0,
            noise: 0.03,
            change: None,
            pause: None,
            allreduce_transfer_ns: 1_000_000,
            seed: 7,
        }
    }
}

/// Forward or backward of a micro-batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    F,
    B,
}

/// 1F1B order of stage `s`: warm-up forwards, one forward one backward, cool-down backwards.
fn one_f_one_b(p: usize, m: usize, s: usize) -> Vec<(Phase, usize)> {
    let w = (p - s - 1).min(m);
    let mut v: Vec<(Phase, usize)> = (0..w).map(|i| (Phase::F, i)).collect();
    for i in 0..m - w {
        v.push((Phase::F, w + i));
        v.push((Phase::B, i));
    }
    v.extend((m - w..m).map(|i| (Phase::B, i)));
    v
}

/// Message keys: the activation of micro-batch `mb` from stage `s` to `s + 1`, the gradient from `s`
/// to `s - 1`.
fn key(it: usize, mb: usize, phase: Phase, from: usize) -> u64 {
    (((it as u64 * 1024 + mb as u64) * 2 + (phase == Phase::B) as u64) << 8) | from as u64
}

/// Builds one stage's program.
struct Stage<'a> {
    job: &'a Pipeline,
    s: usize,
    acts: Vec<Act>,
    events: u64,
    draws: u64,
}

impl Stage<'_> {
    fn draw(&mut self) -> f64 {
        self.draws += 1;
        unit(self.job.seed ^ (self.s as u64) << 40, self.draws)
    }

    fn noisy(&mut self, ns: Ns) -> Ns {
        let f = 1.0 + self.job.noise * (2.0 * self.draw() - 1.0);
        (ns as f64 * f) as Ns
    }

    fn event(&mut self) -> u64 {
        self.events += 1;
        self.events
    }

    fn launch(&mut self, ns: Ns) {
        let ns = self.noisy(ns);
        self.acts.push(Act::Launch {
            stream: COMPUTE,
            ns,
        });
    }

    /// A ProcessGroupNCCL op issued from the compute stream: the op's stream waits for the compute
    /// queued so far, the op, an event after it (returned: what `work.wait()` waits on).
    fn pg_op(
        &mut self,
        stream: StreamId,
        sig: CommSig,
        link: Link,
        transfer: Ns,
        timed: bool,
    ) -> u64 {
        let before = self.event();
        self.acts.push(Act::Record {
            event: before,
            stream: COMPUTE,
        });
        self.acts.push(Act::Wait {
            stream,
            event: before,
        });
        self.acts.push(Act::Comm {
            stream,
            sig,
            link,
            transfer,
            timed,
        });
        let after = self.event();
        self.acts.push(Act::Record {
            event: after,
            stream,
        });
        after
    }

    /// `work.wait()`: the compute stream waits for the op.
    fn wait(&mut self, event: u64) {
        self.acts.push(Act::Wait {
            stream: COMPUTE,
            event,
        });
    }

    /// The kernels of one forward or backward, with tensor-parallel all-reduces inside each layer.
    fn compute(&mut self, phase: Phase, last_backward: bool) -> Vec<u64> {
        let total = if phase == Phase::F {
            self.job.f_ns
        } else {
            self.job.b_ns
        };
        let mut buckets = vec![];
        let layers = self.job.tp_layers;
        if layers == 0 {
            let k = self.job.kernels.max(1);
            for i in 0..k {
                self.launch(total / k as Ns);
                if last_backward && self.job.dp_buckets > 0 && i + 1 == k {
                    buckets.extend(self.dp_buckets());
                }
            }
            return buckets;
        }
        for l in 0..layers {
            for _ in 0..2 {
                self.launch(total / (2 * layers) as Ns);
                let sig = CommSig {
                    comm: COMM_TP,
                    kind: CommKind::AllReduce,
                    peer: -1,
                    bytes: 4 << 20,
                    largest_send: 0,
                };
                let lag = (self.draw() * 30_000.0) as Ns;
                let e = self.pg_op(TP, sig, Link::Lag(lag), 80_000, !self.job.tp_untimed);
                self.wait(e);
            }
            if last_backward && self.job.dp_buckets > 0 && l + 1 == layers {
                buckets.extend(self.dp_buckets());
            }
        }
        buckets
    }

    /// Gradient buckets of the last backward, all-reduced on the data-parallel stream while the
    /// backward's remaining kernels run (each bucket issued after a share of them).
    fn dp_buckets(&mut self) -> Vec<u64> {
        let mut v = vec![];
        for _ in 0..self.job.dp_buckets {
            self.launch(self.job.b_ns / 10);
            let sig = CommSig {
                comm: COMM_DP,
                kind: CommKind::AllReduce,
                peer: -1,
                bytes: 40 << 20,
                largest_send: 0,
            };
            let lag = (self.draw() * 50_000.0) as Ns;
            v.push(self.pg_op(DP, sig, Link::Lag(lag), self.job.dp_transfer_ns, true));
        }
        v
    }

    fn p2p(&self, kind: CommKind, peer: usize, it: usize) -> (CommSig, Ns) {
        let f = 1.0 + self.job.size_jitter * (2.0 * unit(self.job.seed ^ 0xab, it as u64) - 1.0);
        let comm = match (self.job.style, peer < self.s) {
            (Style::Megatron, _) => COMM_P2P,
            (_, true) => COMM_PREV,
            (_, false) => COMM_NEXT,
        };
        (
            CommSig {
                comm,
                kind,
                peer: peer as i32,
                bytes: (self.job.p2p_bytes as f64 * f) as u64,
                largest_send: 0,
            },
            (self.job.p2p_transfer_ns as f64 * f) as Ns,
        )
    }

    /// Where the input of `(phase, mb)` comes from and where its output goes.
    fn neighbours(&self, phase: Phase) -> (Option<usize>, Option<usize>) {
        let last = self.job.stages - 1;
        match phase {
            Phase::F => (
                (self.s > 0).then(|| self.s - 1),
                (self.s < last).then(|| self.s + 1),
            ),
            Phase::B => (
                (self.s < last).then(|| self.s + 1),
                (self.s > 0).then(|| self.s - 1),
            ),
        }
    }

    fn stream_to(&self, peer: usize) -> StreamId {
        if peer < self.s {
            P2P_PREV
        } else {
            P2P_NEXT
        }
    }

    fn iteration(&mut self, it: usize) {
        let m = match self.job.change {
            Some((at, m2)) if it >= at => m2,
            _ => self.job.micro,
        };
        self.acts.push(Act::Mark);
        let order = one_f_one_b(self.job.stages, m, self.s);
        let last_b = order.iter().rposition(|a| a.0 == Phase::B);
        let mut buckets = vec![];
        // Megatron: the previous op's output goes with the next op's receive.
        let mut pending_send: Option<(usize, u64, Phase)> = None;
        // Torch: receives posted early, by action index.
        let mut posted: Vec<Option<u64>> = vec![None; order.len()];
        let mut sends = vec![];
        for (k, &(phase, mb)) in order.iter().enumerate() {
            let (from, to) = self.neighbours(phase);
            match self.job.style {
                Style::Megatron => {
                    let recv = from.map(|f| (f, key(it, mb, phase, f)));
                    self.megatron_step(it, pending_send.take(), recv);
                }
                Style::DeepSpeed => {
                    if let Some(f) = from {
                        let (sig, tr) = self.p2p(CommKind::Recv, f, it);
                        let link = Link::Msg {
                            send: None,
                            recv: Some(key(it, mb, phase, f)),
                        };
                        let st = self.stream_to(f);
                        let e = self.pg_op(st, sig, link, tr, true);
                        self.acts.push(Act::Sync(SyncOn::Stream(st)));
                        self.wait(e);
                    }
                }
                Style::Torch => {
                    if k == 0 {
                        posted[0] = self.torch_recv(it, &order, 0);
                    }
                    if k + 1 < order.len() {
                        posted[k + 1] = self.torch_recv(it, &order, k + 1);
                    }
                    if let Some(e) = posted[k] {
                        self.wait(e);
                    }
                }
            }
            buckets.extend(self.compute(phase, Some(k) == last_b));
            if let Some(t) = to {
                match self.job.style {
                    Style::Megatron => pending_send = Some((t, key(it, mb, phase, self.s), phase)),
                    Style::DeepSpeed | Style::Torch => {
                        let (sig, tr) = self.p2p(CommKind::Send, t, it);
                        let link = Link::Msg {
                            send: Some(key(it, mb, phase, self.s)),
                            recv: None,
                        };
                        let st = match (self.job.style, t < self.s) {
                            (Style::Torch, true) => SEND_PREV,
                            (Style::Torch, false) => SEND_NEXT,
                            _ => self.stream_to(t),
                        };
                        sends.push(self.pg_op(st, sig, link, tr, true));
                    }
                }
            }
        }
        if self.job.style == Style::Megatron {
            self.megatron_step(it, pending_send.take(), None);
        }
        // WAIT_SEND: the sends' buffers are freed before the optimizer.
        for e in sends {
            self.wait(e);
        }
        for e in buckets {
            self.wait(e);
        }
        for _ in 0..self.job.extra_collectives {
            let sig = CommSig {
                comm: COMM_DP,
                kind: CommKind::AllReduce,
                peer: -1,
                bytes: 8,
                largest_send: 0,
            };
            let e = self.pg_op(DP, sig, Link::Lag(20_000), 30_000, true);
            self.wait(e);
            self.launch(200_000);
        }
        // The all-reduce over all stages that ends the iteration (pipesim's), then the optimizer.
        let sig = CommSig {
            comm: COMM_WORLD,
            kind: CommKind::AllReduce,
            peer: -1,
            bytes: 64 << 20,
            largest_send: 0,
        };
        let link = Link::Coll {
            key: 1 << 60 | it as u64,
            members: self.job.stages as u32,
        };
        let e = self.pg_op(WORLD, sig, link, self.job.allreduce_transfer_ns, true);
        self.wait(e);
        self.launch(1_000_000);
        self.acts.push(Act::Sync(SyncOn::Device));
        if let Some((every, ns)) = self.job.pause {
            if (it + 1).is_multiple_of(every) && it + 1 < self.job.iterations {
                self.acts.push(Act::Host(ns));
            }
        }
        self.acts.push(Act::Host(300_000));
    }

    /// Megatron's batched step: one group of the previous op's send and this op's receive, then a
    /// device synchronize.
    fn megatron_step(
        &mut self,
        it: usize,
        send: Option<(usize, u64, Phase)>,
        recv: Option<(usize, u64)>,
    ) {
        let (kind, peer) = match (send, recv) {
            (None, None) => return,
            (Some((t, ..)), None) => (CommKind::Send, t),
            (None, Some((f, _))) => (CommKind::Recv, f),
            (Some(_), Some((f, _))) => (CommKind::SendRecv, f),
        };
        let (mut sig, tr) = self.p2p(kind, peer, it);
        if kind == CommKind::SendRecv {
            sig.bytes *= 2;
            sig.peer = -1;
        }
        let link = Link::Msg {
            send: send.map(|s| s.1),
            recv: recv.map(|r| r.1),
        };
        let e = self.pg_op(P2P_PREV, sig, link, tr, true);
        self.acts.push(Act::Sync(SyncOn::Device));
        if recv.is_some() {
            self.wait(e);
        }
    }

    /// PyTorch runtime: posts the receive action `k` needs, if any.
    fn torch_recv(&mut self, it: usize, order: &[(Phase, usize)], k: usize) -> Option<u64> {
        let (phase, mb) = order[k];
        let from = self.neighbours(phase).0?;
        let (sig, tr) = self.p2p(CommKind::Recv, from, it);
        let link = Link::Msg {
            send: None,
            recv: Some(key(it, mb, phase, from)),
        };
        let st = self.stream_to(from);
        Some(self.pg_op(st, sig, link, tr, true))
    }
}

impl Pipeline {
    /// One process per stage.
    pub fn procs(&self) -> Vec<Proc> {
        (0..self.stages)
            .map(|s| {
                let mut st = Stage {
                    job: self,
                    s,
                    acts: vec![Act::Device(GpuId(s as u32))],
                    events: 0,
                    draws: 0,
                };
                for it in 0..self.iterations {
                    st.iteration(it);
                }
                Proc {
                    pid: 100 + s as u32,
                    program: st.acts,
                }
            })
            .collect()
    }
}

/// A helper process on `gpu` (a co-located inference engine, a trainer's helper): a burst of
/// kernels, a synchronize, then a long host-side gap, for `total_ns`.
pub fn helper(pid: u32, gpu: GpuId, burst_ns: Ns, gap_ns: Ns, total_ns: Ns) -> Proc {
    let mut program = vec![Act::Device(gpu)];
    let mut t = 0;
    while t < total_ns {
        program.push(Act::Launch {
            stream: 9,
            ns: burst_ns,
        });
        program.push(Act::Sync(SyncOn::Stream(9)));
        program.push(Act::Host(gap_ns));
        t += burst_ns + gap_ns;
    }
    Proc { pid, program }
}

/// One process driving a 2-stage GPipe pipeline on GPUs `a` and `b` from one thread: asynchronous
/// sends and receives, the compute streams made to wait for the receives.
pub fn two_gpus(pid: u32, a: GpuId, b: GpuId, micro: usize, iterations: usize) -> Proc {
    let mut acts = vec![];
    let mut ev = 0u64;
    let mut event = || {
        ev += 1;
        ev
    };
    let sig = |kind, peer| CommSig {
        comm: 0x5000 + peer as u64,
        kind,
        peer,
        bytes: 1 << 20,
        largest_send: 0,
    };
    // (GPU, phase) -> its message key base.
    for it in 0..iterations {
        acts.push(Act::Device(a));
        acts.push(Act::Mark);
        let mut pass = |acts: &mut Vec<Act>, from: GpuId, to: GpuId, ns: Ns, dir: u64| {
            for mb in 0..micro {
                let k = ((it as u64 * 64 + mb as u64) << 2) | dir;
                acts.push(Act::Device(from));
                acts.push(Act::Launch { stream: 1, ns });
                let e0 = event();
                acts.push(Act::Record {
                    event: e0,
                    stream: 1,
                });
                acts.push(Act::Wait {
                    stream: 2,
                    event: e0,
                });
                acts.push(Act::Comm {
                    stream: 2,
                    sig: sig(CommKind::Send, 1),
                    link: Link::Msg {
                        send: Some(k),
                        recv: None,
                    },
                    transfer: 100_000,
                    timed: true,
                });
                acts.push(Act::Device(to));
                acts.push(Act::Comm {
                    stream: 2,
                    sig: sig(CommKind::Recv, 0),
                    link: Link::Msg {
                        send: None,
                        recv: Some(k),
                    },
                    transfer: 100_000,
                    timed: true,
                });
                let e1 = event();
                acts.push(Act::Record {
                    event: e1,
                    stream: 2,
                });
                acts.push(Act::Wait {
                    stream: 1,
                    event: e1,
                });
                acts.push(Act::Launch { stream: 1, ns });
            }
        };
        pass(&mut acts, a, b, 3_000_000, 0);
        pass(&mut acts, b, a, 6_000_000, 1);
        for g in [a, b] {
            acts.push(Act::Device(g));
            acts.push(Act::Sync(SyncOn::Device));
        }
        acts.push(Act::Host(200_000));
    }
    Proc { pid, program: acts }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_f_one_b_runs_every_micro_batch_once_each_way() {
        for s in 0..4 {
            let o = one_f_one_b(4, 8, s);
            assert_eq!(o.len(), 16);
            assert_eq!(o.iter().filter(|a| a.0 == Phase::F).count(), 8);
            // A backward never comes before its forward.
            for (i, a) in o.iter().enumerate() {
                if a.0 == Phase::B {
                    assert!(o[..i].contains(&(Phase::F, a.1)));
                }
            }
        }
        assert_eq!(
            one_f_one_b(4, 8, 0)[..4]
                .iter()
                .filter(|a| a.0 == Phase::F)
                .count(),
            4
        );
    }
}
