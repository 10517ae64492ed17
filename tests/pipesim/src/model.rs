//! A discrete-event model of one iteration of every rank's [`Program`], with the semantics of the
//! test bed (and of CUDA and NCCL):
//! * a rank's host runs its steps in order; only a synchronize (until the streams it waits for
//!   are done) and a sleep take host time; every other step queues work on a stream at once;
//! * each stream runs its queue in order: a kernel from max(the stream's time, its enqueue time)
//!   for its duration; an event record completes when the stream reaches it; a wait holds the
//!   stream until the event completed;
//! * NCCL (the stand-in's cost model, TESTBED.md): sends and receives match in order per
//!   (communicator, sender, receiver); a kernel posts its sends when it starts and ends when its
//!   last op does: a send at start + transfer time, a receive at max(start, the matching send's
//!   start + its transfer time); a send larger than NCCL's buffer (`Cost::buffer_bytes`) also
//!   waits for its receiver's kernel to start, and it and its receive end no earlier than that
//!   start + the time of the bytes beyond the buffer (so two such sends that wait for each
//!   other's receivers on the same streams are a deadlock, as in NCCL); a collective ends at the
//!   latest member's start + the transfer of 2(n-1)/n x bytes;
//! * a communication kernel is busy for its transfer (the last `transfer` ns before its end) and
//!   idle while it waits for a peer.
//!
//! [`run`] refuses a set of programs that cannot complete (a receive whose send is never reached,
//! a collective a member never joins, a cycle of waits), naming where each rank stopped, and
//! otherwise gives the iteration's makespan and every rank's busy and idle time.
use crate::program::{Action, CollKind, EventId, JobPlan, Origin, Program, Tensor, COMPUTE};
use std::collections::HashMap;

/// The stand-in NCCL's default buffer per channel: NCCL_BUFFSIZE's 4 MiB
/// (`FREERIDE_SIM_NCCL_BUFFER_BYTES`; 0: every send eager).
pub const DEFAULT_BUFFER_BYTES: u64 = 4 << 20;

/// The NCCL cost model: transfer time = `base_ns` + bytes x `ps_per_byte` / 1000.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cost {
    pub base_ns: u64,
    pub ps_per_byte: u64,
    /// Bytes a send moves before its receiver's kernel has started (0: any size).
    pub buffer_bytes: u64,
}

impl Cost {
    /// The cost the simulated GPU uses (`FREERIDE_SIM_NCCL_BASE_NS`, `..._PS_PER_BYTE`,
    /// `..._BUFFER_BYTES`, the stand-in NCCL's defaults where unset).
    pub fn from_env() -> Cost {
        let var = |name: &str| -> Option<u64> {
            std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
        };
        Cost {
            base_ns: var("FREERIDE_SIM_NCCL_BASE_NS").unwrap_or(0),
            ps_per_byte: crate::config::JobConfig::ps_per_byte(),
            buffer_bytes: var("FREERIDE_SIM_NCCL_BUFFER_BYTES").unwrap_or(DEFAULT_BUFFER_BYTES),
        }
    }

    /// Zero latency, every send eager: what the reference tables assume.
    pub const FREE: Cost = Cost {
        base_ns: 0,
        ps_per_byte: 0,
        buffer_bytes: 0,
    };

    /// Bytes of a send of `bytes` that wait for its receiver (0: it fits in the buffer).
    fn beyond_buffer(&self, bytes: u64) -> u64 {
        match self.buffer_bytes {
            0 => 0,
            b => bytes.saturating_sub(b),
        }
    }

    /// Time of `bytes` alone, without the base latency.
    fn bytes_ns(&self, bytes: u64) -> u64 {
        (bytes as u128 * self.ps_per_byte as u128 / 1000) as u64
    }

    /// When a message of `bytes` sent at `sent` is all there, for a receiver that started at
    /// `recv_start` (the stand-in NCCL's `arrival_end`).
    fn arrival_end(&self, sent: u64, bytes: u64, recv_start: u64) -> u64 {
        let whole = sent + self.transfer(bytes);
        match self.beyond_buffer(bytes) {
            0 => whole,
            rest => whole.max(recv_start + self.bytes_ns(rest)),
        }
    }

    fn transfer(&self, bytes: u64) -> u64 {
        if self.ps_per_byte == 0 && self.base_ns == 0 {
            return 0;
        }
        self.base_ns + (bytes as u128 * self.ps_per_byte as u128 / 1000) as u64
    }

    /// Transfer time of a collective of `bytes` on `n` ranks.
    pub fn transfer_of_collective(&self, bytes: u64, n: usize) -> u64 {
        self.collective(bytes, n)
    }

    fn collective(&self, bytes: u64, n: usize) -> u64 {
        if n < 2 {
            return 0;
        }
        self.transfer((bytes as u128 * 2 * (n as u128 - 1) / n as u128) as u64)
    }
}

/// One rank's expected iteration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankTiming {
    /// Compute kernels' time.
    pub compute_ns: u64,
    /// Time with a compute kernel running or a transfer in progress.
    pub busy_ns: u64,
    /// Makespan minus `busy_ns`: what the truth calls idle.
    pub idle_ns: u64,
    /// Makespan minus `compute_ns`: idle when transfers are not told apart from waits (a truth
    /// without `transfer_start_ns`).
    pub idle_without_transfers_ns: u64,
    /// When the host wrote its mark.
    pub mark_ns: u64,
}

/// The expected iteration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelResult {
    /// From the iteration's start (every host at 0) to the last kernel's end.
    pub makespan_ns: u64,
    pub ranks: Vec<RankTiming>,
    /// Sends and receives that NCCL matches by order although they carry different tensors.
    pub warnings: Vec<String>,
}

impl ModelResult {
    /// Mean idle fraction over ranks.
    pub fn idle_fraction(&self) -> f64 {
        if self.makespan_ns == 0 || self.ranks.is_empty() {
            return 0.0;
        }
        let idle: u64 = self.ranks.iter().map(|r| r.idle_ns).sum();
        idle as f64 / (self.makespan_ns as f64 * self.ranks.len() as f64)
    }
}

/// What a stream runs.
enum QKind {
    Kernel(u64),
    Record(EventId),
    Wait(EventId),
    /// Point-to-point ops of one kernel: sends (peer, seq, bytes), receives (peer, seq).
    P2p {
        comm: usize,
        sends: Vec<(u32, u64, u64)>,
        recvs: Vec<(u32, u64, Tensor)>,
    },
    Coll {
        comm: usize,
        seq: u64,
        bytes: u64,
        kind: CollKind,
    },
}

struct QOp {
    kind: QKind,
    enq: u64,
    step: usize,
}

#[derive(Default)]
struct StreamState {
    q: Vec<QOp>,
    head: usize,
    t: u64,
    /// Start of the head op when it is a communication kernel that started and waits.
    started: Option<u64>,
}

impl StreamState {
    fn drained(&self) -> bool {
        self.head == self.q.len()
    }
}

/// (communicator, sender, receiver).
type Channel = (usize, u32, u32);

struct World<'a> {
    plan: &'a JobPlan,
    programs: &'a [Program],
    cost: Cost,
    pc: Vec<usize>,
    host_t: Vec<u64>,
    mark: Vec<u64>,
    streams: Vec<Vec<StreamState>>,
    events: Vec<Vec<Option<u64>>>,
    next_send: HashMap<Channel, u64>,
    next_recv: HashMap<Channel, u64>,
    next_coll: HashMap<(usize, u32), u64>,
    /// Posted sends: (start, bytes) by sequence number.
    posted: HashMap<Channel, Vec<Option<(u64, u64)>>>,
    /// Receive kernels' starts by sequence number (what a send beyond the buffer waits for).
    receiving: HashMap<Channel, Vec<Option<u64>>>,
    /// What each send and receive carries, by sequence number, and where it was posted.
    sent: HashMap<Channel, Vec<(Tensor, String)>>,
    received: HashMap<Channel, Vec<(Tensor, String)>>,
    /// Collective starts by (communicator, sequence number), per member.
    coll: HashMap<(usize, u64), Vec<Option<u64>>>,
    compute: Vec<Vec<(u64, u64)>>,
    transfers: Vec<Vec<(u64, u64)>>,
}

impl<'a> World<'a> {
    fn new(plan: &'a JobPlan, programs: &'a [Program], cost: Cost) -> World<'a> {
        let n = programs.len();
        World {
            plan,
            programs,
            cost,
            pc: vec![0; n],
            host_t: vec![0; n],
            mark: vec![0; n],
            streams: (0..n)
                .map(|r| {
                    (0..plan.ranks[r].streams.len())
                        .map(|_| StreamState::default())
                        .collect()
                })
                .collect(),
            events: programs.iter().map(|p| vec![None; p.events]).collect(),
            next_send: HashMap::new(),
            next_recv: HashMap::new(),
            next_coll: HashMap::new(),
            posted: HashMap::new(),
            receiving: HashMap::new(),
            sent: HashMap::new(),
            received: HashMap::new(),
            coll: HashMap::new(),
            compute: vec![vec![]; n],
            transfers: vec![vec![]; n],
        }
    }

    fn enqueue(&mut self, r: usize, stream: usize, kind: QKind) {
        let enq = self.host_t[r];
        let step = self.pc[r];
        self.streams[r][stream].q.push(QOp { kind, enq, step });
    }

    /// Runs rank r's host as far as it can go.
    fn host(&mut self, r: usize) -> bool {
        let mut progressed = false;
        let prog = &self.programs[r];
        while let Some(step) = prog.steps.get(self.pc[r]) {
            match &step.action {
                Action::Graph => {
                    let ns = self.plan.ranks[r].graph_ns;
                    self.enqueue(r, COMPUTE, QKind::Kernel(ns));
                }
                Action::Kernels { stream, ns, .. } => {
                    self.enqueue(r, *stream, QKind::Kernel(ns.iter().sum()));
                }
                Action::Record { stream, event } => self.enqueue(r, *stream, QKind::Record(*event)),
                Action::Wait { stream, event } => self.enqueue(r, *stream, QKind::Wait(*event)),
                Action::P2p {
                    comm,
                    stream,
                    grouped,
                    ops,
                } => {
                    let me = r as u32;
                    let mut kernel = (vec![], vec![]);
                    for op in ops {
                        let where_ = step.origin.to_string();
                        if op.send {
                            let ch = (*comm, me, op.peer);
                            let seq = bump(&mut self.next_send, ch);
                            self.sent.entry(ch).or_default().push((op.tensor, where_));
                            kernel.0.push((op.peer, seq, op.bytes));
                        } else {
                            let ch = (*comm, op.peer, me);
                            let seq = bump(&mut self.next_recv, ch);
                            self.received
                                .entry(ch)
                                .or_default()
                                .push((op.tensor, where_));
                            kernel.1.push((op.peer, seq, op.tensor));
                        }
                        if !grouped {
                            let (sends, recvs) = std::mem::take(&mut kernel);
                            self.enqueue(
                                r,
                                *stream,
                                QKind::P2p {
                                    comm: *comm,
                                    sends,
                                    recvs,
                                },
                            );
                        }
                    }
                    if *grouped {
                        let (sends, recvs) = kernel;
                        self.enqueue(
                            r,
                            *stream,
                            QKind::P2p {
                                comm: *comm,
                                sends,
                                recvs,
                            },
                        );
                    }
                }
                Action::Collective {
                    comm,
                    stream,
                    kind,
                    bytes,
                } => {
                    let seq = bump(&mut self.next_coll, (*comm, r as u32));
                    self.enqueue(
                        r,
                        *stream,
                        QKind::Coll {
                            comm: *comm,
                            seq,
                            bytes: *bytes,
                            kind: *kind,
                        },
                    );
                }
                Action::SyncDevice => {
                    if !self.streams[r].iter().all(StreamState::drained) {
                        break;
                    }
                    let t = self.streams[r].iter().map(|s| s.t).max().unwrap_or(0);
                    self.host_t[r] = self.host_t[r].max(t);
                }
                Action::SyncStream(s) => {
                    if !self.streams[r][*s].drained() {
                        break;
                    }
                    self.host_t[r] = self.host_t[r].max(self.streams[r][*s].t);
                }
                Action::Sleep { ns } => self.host_t[r] += ns,
                Action::Mark => self.mark[r] = self.host_t[r],
            }
            self.pc[r] += 1;
            progressed = true;
        }
        progressed
    }

    /// Runs stream s of rank r as far as it can go.
    fn stream(&mut self, r: usize, s: usize) -> bool {
        let mut progressed = false;
        loop {
            let st = &self.streams[r][s];
            let Some(op) = st.q.get(st.head) else {
                break;
            };
            let start = st.started.unwrap_or(st.t.max(op.enq));
            let was_waiting = st.started.is_some();
            let end = match &op.kind {
                QKind::Kernel(ns) => {
                    let end = start + ns;
                    self.compute[r].push((start, end));
                    Some(end)
                }
                QKind::Record(e) => {
                    let e = *e;
                    self.events[r][e] = Some(start);
                    Some(start)
                }
                QKind::Wait(e) => self.events[r][*e].map(|t| t.max(start)),
                QKind::P2p { comm, sends, recvs } => {
                    let (comm, sends, recvs) = (*comm, sends.clone(), recvs.clone());
                    self.p2p(r, s, start, comm, &sends, &recvs)
                }
                QKind::Coll {
                    comm, seq, bytes, ..
                } => {
                    let (comm, seq, bytes) = (*comm, *seq, *bytes);
                    self.collective(r, s, start, comm, seq, bytes)
                }
            };
            let st = &mut self.streams[r][s];
            match end {
                Some(t) => {
                    st.t = t;
                    st.head += 1;
                    st.started = None;
                    progressed = true;
                }
                None => {
                    // A kernel that started and waits has still told its peers it is there
                    // (a receive that a send beyond the buffer waits for).
                    progressed |= was_waiting != st.started.is_some();
                    break;
                }
            }
        }
        progressed
    }

    fn p2p(
        &mut self,
        r: usize,
        s: usize,
        start: u64,
        comm: usize,
        sends: &[(u32, u64, u64)],
        recvs: &[(u32, u64, Tensor)],
    ) -> Option<u64> {
        let me = r as u32;
        if self.streams[r][s].started.is_none() {
            for &(peer, seq, bytes) in sends {
                put(
                    self.posted.entry((comm, me, peer)).or_default(),
                    seq,
                    (start, bytes),
                );
            }
            for &(peer, seq, _) in recvs {
                put(
                    self.receiving.entry((comm, peer, me)).or_default(),
                    seq,
                    start,
                );
            }
            self.streams[r][s].started = Some(start);
        }
        let cost = self.cost;
        let mut end = start;
        let mut longest = 0;
        for &(peer, seq, bytes) in sends {
            let t = cost.transfer(bytes);
            let rest = cost.beyond_buffer(bytes);
            if rest == 0 {
                // Busy from the kernel's start while it moves the data (in a group too).
                end = end.max(start + t);
                longest = longest.max(t);
                if t > 0 {
                    self.transfers[r].push((start, start + t));
                }
                continue;
            }
            let got = self
                .receiving
                .get(&(comm, me, peer))
                .and_then(|v| v.get(seq as usize).copied().flatten())?;
            end = end.max(cost.arrival_end(start, bytes, got));
            longest = longest.max(cost.bytes_ns(rest));
            // The eager part: busy from the kernel's start, filling the buffer.
            let eager = t.saturating_sub(cost.bytes_ns(rest));
            if eager > 0 {
                self.transfers[r].push((start, start + eager));
            }
        }
        for &(peer, seq, _) in recvs {
            let (sent_at, bytes) = self
                .posted
                .get(&(comm, peer, me))
                .and_then(|v| v.get(seq as usize).copied().flatten())?;
            end = end.max(cost.arrival_end(sent_at, bytes, start));
            longest = longest.max(match cost.beyond_buffer(bytes) {
                0 => cost.transfer(bytes),
                rest => cost.bytes_ns(rest),
            });
        }
        if longest > 0 {
            self.transfers[r].push((end.saturating_sub(longest).max(start), end));
        }
        Some(end)
    }

    fn collective(
        &mut self,
        r: usize,
        s: usize,
        start: u64,
        comm: usize,
        seq: u64,
        bytes: u64,
    ) -> Option<u64> {
        let members = &self.plan.comms[comm].members;
        let n = members.len();
        let me = members.iter().position(|&m| m == r as u32)?;
        let starts = self
            .coll
            .entry((comm, seq))
            .or_insert_with(|| vec![None; n]);
        starts[me] = Some(start);
        self.streams[r][s].started = Some(start);
        let latest = starts.iter().try_fold(0u64, |a, x| x.map(|t| a.max(t)))?;
        let t = self.cost.collective(bytes, n);
        let end = latest + t;
        if t > 0 {
            self.transfers[r].push((end - t, end));
        }
        Some(end)
    }

    fn done(&self) -> bool {
        (0..self.programs.len()).all(|r| {
            self.pc[r] == self.programs[r].steps.len()
                && self.streams[r].iter().all(StreamState::drained)
        })
    }

    /// Where each rank stopped, for the deadlock message.
    fn stuck(&self) -> String {
        let mut parts = vec![];
        for r in 0..self.programs.len() {
            let prog = &self.programs[r];
            for (s, st) in self.streams[r].iter().enumerate() {
                let Some(op) = st.q.get(st.head) else {
                    continue;
                };
                let what = match &op.kind {
                    QKind::Wait(_) => "waits for an event".to_string(),
                    QKind::P2p { recvs, .. } => match recvs.first() {
                        Some((peer, _, t)) => format!("receives {t} from rank {peer}"),
                        None => "sends".into(),
                    },
                    QKind::Coll { comm, kind, .. } => {
                        format!("a {} on {}", kind.name(), self.plan.comms[*comm].name)
                    }
                    _ => continue,
                };
                let role = self.plan.ranks[r].streams[s];
                parts.push(format!(
                    "rank {r} stops at {} ({role:?} stream {what})",
                    prog.steps[op.step].origin
                ));
            }
            if parts.len() >= 6 {
                break;
            }
        }
        if parts.is_empty() {
            parts.push("every rank's host waits in a synchronize".into());
        }
        parts.join("; ")
    }

    /// Sends and receives that NCCL pairs by order but that carry different tensors.
    fn order_warnings(&self) -> Vec<String> {
        let mut w = vec![];
        let mut chans: Vec<&Channel> = self.received.keys().collect();
        chans.sort_unstable();
        for ch in chans {
            let (Some(sent), Some(recv)) = (self.sent.get(ch), self.received.get(ch)) else {
                continue;
            };
            if let Some(((st, sw), (rt, rw))) =
                sent.iter().zip(recv).find(|((st, _), (rt, _))| st != rt)
            {
                w.push(format!(
                    "rank {} receives from rank {} in another order than it sends: {rw} expects {rt} \
                     and gets {st} (sent at {sw}), as NCCL pairs sends and receives by order",
                    ch.2, ch.1
                ));
            }
        }
        w
    }
}

/// Sets `v[i]`, growing `v` as needed.
fn put<T: Copy>(v: &mut Vec<Option<T>>, i: u64, x: T) {
    if v.len() <= i as usize {
        v.resize(i as usize + 1, None);
    }
    v[i as usize] = Some(x);
}

fn bump<K: std::hash::Hash + Eq>(m: &mut HashMap<K, u64>, k: K) -> u64 {
    let v = m.entry(k).or_insert(0);
    *v += 1;
    *v - 1
}

/// Total length of the union of intervals.
fn union_ns(mut v: Vec<(u64, u64)>) -> u64 {
    v.sort_unstable();
    let (mut total, mut cur): (u64, Option<(u64, u64)>) = (0, None);
    for (a, b) in v {
        match cur {
            Some((ca, cb)) if a <= cb => cur = Some((ca, cb.max(b))),
            Some((ca, cb)) => {
                total += cb - ca;
                cur = Some((a, b));
            }
            None => cur = Some((a, b)),
        }
    }
    total + cur.map_or(0, |(a, b)| b - a)
}

/// Runs every rank's program (`programs[r]` is rank r's) of one iteration; see the module docs.
pub fn run(plan: &JobPlan, programs: &[Program], cost: Cost) -> Result<ModelResult, String> {
    let mut w = World::new(plan, programs, cost);
    loop {
        let mut progressed = false;
        for r in 0..programs.len() {
            progressed |= w.host(r);
            for s in 0..w.streams[r].len() {
                progressed |= w.stream(r, s);
            }
        }
        if !progressed {
            break;
        }
    }
    if !w.done() {
        return Err(format!(
            "the schedule deadlocks (no rank can go on): {}",
            w.stuck()
        ));
    }
    let makespan_ns = (0..programs.len())
        .flat_map(|r| w.streams[r].iter().map(|s| s.t))
        .max()
        .unwrap_or(0);
    let ranks = (0..programs.len())
        .map(|r| {
            let compute_ns = union_ns(w.compute[r].clone());
            let mut all = w.compute[r].clone();
            all.extend(w.transfers[r].iter().copied());
            let busy_ns = union_ns(all);
            RankTiming {
                compute_ns,
                busy_ns,
                idle_ns: makespan_ns.saturating_sub(busy_ns),
                idle_without_transfers_ns: makespan_ns.saturating_sub(compute_ns),
                mark_ns: w.mark[r],
            }
        })
        .collect();
    Ok(ModelResult {
        makespan_ns,
        ranks,
        warnings: w.order_warnings(),
    })
}

/// Where a step comes from, for messages about it.
pub fn origin_of(p: &Program, step: usize) -> &Origin {
    &p.steps[step].origin
}
