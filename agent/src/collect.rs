//! Reads every process's event ring in the session directory and turns trainers' events into
//! [`Obs`]ervations for the bubble detectors.
//!
//! Processes come and go: the directory is rescanned every [`RESCAN_NS`]; a ring whose writer is gone
//! is drained and then closed. A ring that cannot be opened (not yet initialized, another layout
//! version, not ours) is retried at the next scan and reported once. A staging ring (see
//! [`session`]) whose process is gone is removed.
use crate::comm_match::{Communicators, Joined, MatchKey};
use crate::inference::obs::{gpu_of_record, CommKind, GpuId, SyncOn};
use crate::inference::{CommSig, Ns, Obs};
use crate::memview::MemView;
use freeride_abi::event::{Decoded, Event, Kind};
use freeride_abi::reader::{OpenError, RingReader};
use freeride_abi::ring::GateStatus;
use freeride_abi::{session, Api, Role};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// How often the session directory is listed for new rings.
pub const RESCAN_NS: Ns = 20_000_000;
/// A ring file whose header is still not valid this long after it was first seen is ignored.
pub const UNREADY_GIVE_UP_NS: Ns = 1_000_000_000;
/// A ring's writer that has not marked it exited is checked for being alive (a `kill(pid, 0)`) at
/// most this often, not at every poll: an exit is then seen up to this much later.
pub const LIVENESS_CHECK_NS: Ns = 1_000_000;
/// How often staging rings left by processes that died creating them are looked for.
pub const STAGING_SWEEP_NS: Ns = 1_000_000_000;
/// Records taken from one ring per poll, so that one busy ring cannot starve the others and a
/// step stays short: a trainer that queues a whole iteration at once (PyTorch's pipeline runtime
/// at an iteration's start: thousands of launches per rank) would otherwise make the step that
/// reads it take milliseconds, and the begins and ends that arrive meanwhile wait for its end
/// (on the test bed's ZBV job, steps of 5-17 ms at every iteration's start, with 3 000-8 500
/// records each). What is left is read at the next step, which follows at once
/// ([`Collector::backlog`]).
const MAX_PER_POLL: usize = 128;

/// One observation of a trainer, with where it comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrainerObs {
    pub pid: u32,
    /// The GPU the record names (today: the context's device ordinal), if known.
    pub gpu: Option<GpuId>,
    pub obs: Obs,
}

/// What the agent knows of a process with a ring.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessView {
    pub pid: u32,
    pub role: Option<Role>,
    pub device: i32,
    pub gone: bool,
    pub events: u64,
    pub dropped: u64,
    pub invalid: u64,
    /// Device memory the process holds (what its hooked allocations of every path still hold),
    /// on all its GPUs.
    pub mem_held_bytes: u64,
    /// The same per GPU: (device, bytes), in device order.
    pub mem_by_device: Vec<(i32, u64)>,
    /// Until when its comm ops' ends may reach the agent late (0: never; what its ring header
    /// says, see [`freeride_abi::ring::RingHeader::ends_late_until`]).
    pub ends_late_until_ns: Ns,
}

impl ProcessView {
    /// Device memory the process holds on GPU `device`.
    pub fn mem_on(&self, device: i32) -> u64 {
        mem_on(&self.mem_by_device, device)
    }
}

fn mem_on(by_device: &[(i32, u64)], device: i32) -> u64 {
    by_device
        .iter()
        .find(|(d, _)| *d == device)
        .map_or(0, |(_, b)| *b)
}

/// A side task's ring as the watchdog looks at it (read from its header when asked).
#[derive(Clone, Debug, PartialEq)]
pub struct SidetaskRing {
    pub pid: u32,
    /// When the ring was made (CLOCK_MONOTONIC): with the pid, which process instance it is.
    pub start_ns: Ns,
    pub device: i32,
    /// The writer marked the ring exited (a clean exit).
    pub exited: bool,
    /// What its gate last published.
    pub gate: GateStatus,
    pub mem_held_bytes: u64,
    /// (device, bytes held there), in device order.
    pub mem_by_device: Vec<(i32, u64)>,
}

impl SidetaskRing {
    /// Device memory it holds on GPU `device`.
    pub fn mem_on(&self, device: i32) -> u64 {
        mem_on(&self.mem_by_device, device)
    }
}

/// A side task's ring the collector closed (drained, its writer gone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClosedRing {
    pub pid: u32,
    pub start_ns: Ns,
    pub device: i32,
    /// The writer marked it exited; false: the process died without exiting (a crash, a kill).
    pub exited: bool,
}

struct Proc {
    reader: RingReader,
    view: ProcessView,
    /// The NCCL groups being built, by group id: per stream used, the signature of its ops and
    /// their match keys.
    groups: HashMap<u32, Vec<GroupPart>>,
    /// Its communicators, for the match keys of its ops.
    comms: Communicators,
    /// The streams of groups issued lately (their begin/end records name the group and the stream).
    group_streams: BTreeMap<u32, Vec<u64>>,
    /// What its memory records say it holds.
    mem: MemView,
    /// When the writer's process was last found alive (see [`LIVENESS_CHECK_NS`]).
    alive_at_ns: Ns,
}

impl Proc {
    /// Whether the writer marked the ring exited or its process is gone (looked up at most every
    /// [`LIVENESS_CHECK_NS`]).
    fn writer_gone(&mut self, now: Ns) -> bool {
        if self.reader.info().exited {
            return true;
        }
        if now.saturating_sub(self.alive_at_ns) < LIVENESS_CHECK_NS {
            return false;
        }
        let gone = self.reader.writer_gone();
        if !gone {
            self.alive_at_ns = now;
        }
        gone
    }
}

/// The session directory's rings.
pub struct Collector {
    dir: PathBuf,
    procs: HashMap<PathBuf, Proc>,
    refused: HashSet<PathBuf>,
    /// Rings without a valid magic yet (being created), with when they were first seen.
    unready: HashMap<PathBuf, Ns>,
    /// Messages about rings that could not be read, for the operator (drained by the caller).
    pub warnings: Vec<String>,
    last_scan: Option<Ns>,
    last_sweep: Option<Ns>,
    /// Side-task rings closed since the last [`Collector::take_closed_sidetasks`].
    closed_sidetasks: Vec<ClosedRing>,
    buf: Vec<Decoded>,
    /// See [`Collector::backlog`].
    backlog: bool,
}

impl Collector {
    pub fn new(dir: &Path) -> Collector {
        Collector {
            dir: dir.to_path_buf(),
            procs: HashMap::new(),
            refused: HashSet::new(),
            unready: HashMap::new(),
            warnings: Vec::new(),
            last_scan: None,
            last_sweep: None,
            closed_sidetasks: vec![],
            buf: Vec::with_capacity(MAX_PER_POLL),
            backlog: false,
        }
    }

    /// The last poll left records in a ring (it took the most a poll takes, 128 records, from
    /// it): the next step should not wait.
    pub fn backlog(&self) -> bool {
        self.backlog
    }

    /// Takes what the rings hold now; appends trainers' observations to `out` (time order within
    /// one process). `now` is when the agent looks: the `seen` time of GPU-side observations.
    pub fn poll(&mut self, now: Ns, out: &mut Vec<TrainerObs>) {
        if self
            .last_scan
            .is_none_or(|t| now.saturating_sub(t) >= RESCAN_NS)
        {
            self.scan(now);
            self.last_scan = Some(now);
        }
        if self
            .last_sweep
            .is_none_or(|t| now.saturating_sub(t) >= STAGING_SWEEP_NS)
        {
            self.sweep_staging();
            self.last_sweep = Some(now);
        }
        let mut finished = vec![];
        self.backlog = false;
        for (path, p) in self.procs.iter_mut() {
            let gone_before = p.writer_gone(now);
            self.buf.clear();
            let st = p.reader.poll(MAX_PER_POLL, &mut self.buf);
            self.backlog |= st.records as usize >= MAX_PER_POLL;
            p.view.events += st.records;
            p.view.invalid += st.invalid;
            for d in &self.buf {
                translate(p, d, now, out);
            }
            let info = p.reader.info();
            if info.dropped > p.view.dropped && p.view.role == Some(Role::Trainer) {
                // The writer is dropping records (its ring is full): what its GPU does is unknown
                // until records come again.
                out.push(TrainerObs {
                    pid: p.view.pid,
                    gpu: gpu_of_record(p.view.device),
                    obs: Obs::Lost { t: now },
                });
            }
            p.view.dropped = info.dropped;
            p.view.ends_late_until_ns = p.reader.ends_late_until();
            if info.device >= 0 {
                p.view.device = info.device;
            }
            if gone_before && st.records == 0 && st.skipped == 0 {
                p.view.gone = true;
                finished.push(path.clone());
            }
        }
        for path in finished {
            // Drained and its writer gone: nothing more will come. The file (megabytes of shared
            // memory) goes too, so dead processes leave nothing behind in /dev/shm.
            if let Some(p) = self.procs.remove(&path) {
                if p.view.role == Some(Role::Sidetask) {
                    let info = p.reader.info();
                    self.closed_sidetasks.push(ClosedRing {
                        pid: info.pid,
                        start_ns: info.start_ns,
                        device: p.view.device,
                        exited: info.exited,
                    });
                }
            }
            if let Err(e) = std::fs::remove_file(&path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    self.warnings
                        .push(format!("cannot remove {}: {e}", path.display()));
                }
            }
        }
    }

    /// Removes staging rings whose process is gone (it died between creating and publishing its
    /// ring): megabytes of shared memory nobody will read.
    fn sweep_staging(&mut self) {
        let Ok(staging) = session::list_staging(&self.dir) else {
            return;
        };
        for (path, pid) in staging {
            if session::pid_alive(pid) {
                continue;
            }
            match std::fs::remove_file(&path) {
                Ok(()) => self.warnings.push(format!(
                    "removed {}: left by process {pid}, which died while creating its ring",
                    path.display()
                )),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => self
                    .warnings
                    .push(format!("cannot remove {}: {e}", path.display())),
            }
        }
    }

    fn scan(&mut self, now: Ns) {
        let Ok(paths) = session::list_rings(&self.dir) else {
            return;
        };
        for path in paths {
            if self.procs.contains_key(&path) || self.refused.contains(&path) {
                continue;
            }
            match RingReader::open(&path) {
                Ok(reader) => {
                    let info = reader.info();
                    self.unready.remove(&path);
                    let view = ProcessView {
                        pid: info.pid,
                        role: info.role,
                        device: info.device,
                        gone: false,
                        events: 0,
                        dropped: info.dropped,
                        invalid: 0,
                        mem_held_bytes: 0,
                        mem_by_device: vec![],
                        ends_late_until_ns: 0,
                    };
                    self.procs.insert(
                        path,
                        Proc {
                            reader,
                            view,
                            groups: HashMap::new(),
                            comms: Communicators::default(),
                            group_streams: BTreeMap::new(),
                            mem: MemView::default(),
                            alive_at_ns: 0,
                        },
                    );
                }
                // A ring being created: try again at the next scan, for a while.
                Err(OpenError::BadMagic) => {
                    let first = *self.unready.entry(path.clone()).or_insert(now);
                    if now.saturating_sub(first) >= UNREADY_GIVE_UP_NS {
                        self.unready.remove(&path);
                        self.warnings.push(format!(
                            "ignoring {}: not a freeride ring (no valid header after {} ms)",
                            path.display(),
                            UNREADY_GIVE_UP_NS / 1_000_000
                        ));
                        self.refused.insert(path);
                    }
                }
                Err(e) => {
                    self.warnings
                        .push(format!("ignoring {}: {e}", path.display()));
                    self.refused.insert(path);
                }
            }
        }
    }

    /// Whether any ring is open now.
    pub fn watching_any(&self) -> bool {
        !self.procs.is_empty()
    }

    /// Whether every trainer whose ring is open now rings the session doorbell (true with none).
    pub fn trainers_ring_doorbell(&self) -> bool {
        self.procs
            .values()
            .filter(|p| p.view.role != Some(Role::Sidetask))
            .all(|p| p.reader.rings_doorbell())
    }

    /// The side tasks whose rings are open now, with their headers as they are now.
    pub fn sidetask_rings(&self) -> Vec<SidetaskRing> {
        self.procs
            .values()
            .filter(|p| p.view.role == Some(Role::Sidetask))
            .map(|p| {
                let info = p.reader.info();
                SidetaskRing {
                    pid: info.pid,
                    start_ns: info.start_ns,
                    device: p.view.device,
                    exited: info.exited,
                    gate: p.reader.gate_status(),
                    mem_held_bytes: p.view.mem_held_bytes,
                    mem_by_device: p.view.mem_by_device.clone(),
                }
            })
            .collect()
    }

    /// Side-task rings closed since the last call.
    pub fn take_closed_sidetasks(&mut self) -> Vec<ClosedRing> {
        std::mem::take(&mut self.closed_sidetasks)
    }

    /// Lets every ring but the side tasks' report its comm ops' ends lazily until `until_ns` (0:
    /// promptly; see [`freeride_abi::ring::RingHeader::ends_lazy`]).
    pub fn let_trainer_ends_be_lazy_until(&self, until_ns: Ns) {
        for p in self.procs.values() {
            if p.view.role != Some(Role::Sidetask) {
                p.reader.let_ends_be_lazy_until(until_ns);
            }
        }
    }

    /// Until when process `pid`'s ends may reach the agent late, read from its rings now (after
    /// the agent's last word: see [`crate::ends`]); 0: never said.
    pub fn ends_late_until(&self, pid: u32) -> Ns {
        self.procs
            .values()
            .filter(|p| p.view.pid == pid)
            .map(|p| p.reader.ends_late_until())
            .max()
            .unwrap_or(0)
    }

    /// The processes whose rings are open now.
    pub fn processes(&self) -> Vec<ProcessView> {
        let mut v: Vec<ProcessView> = self.procs.values().map(|p| p.view.clone()).collect();
        v.sort_by_key(|p| p.pid);
        v
    }
}

/// A group's work on one stream: the signature of its ops and their match keys.
struct GroupPart {
    stream: u64,
    sig: CommSig,
    keys: Vec<MatchKey>,
    /// Every op of it had a key (else its keys say only part of what it moves: none is given).
    all_keyed: bool,
}

/// Match keys kept per group part (a group of more ops still matches by these).
const MAX_KEYS_PER_PART: usize = 16;

/// The key of a comm op outside a group, as its comm begin/end records name it.
fn op_key(op: u32) -> u64 {
    op as u64
}

/// The key of a group's work on the `k`-th stream it used (a group is timed per stream).
fn group_key(group: u32, k: usize) -> u64 {
    (group as u64) << 32 | 0x8000_0000 | (k as u64 & 0x7fff_ffff)
}

/// Groups whose streams are remembered for their begin/end records (the newest ones).
const MAX_TRACKED_GROUPS: usize = 1024;

fn sig_of(api: Api, peer: i32, bytes: u64, comm: u64) -> CommSig {
    let kind = match api {
        Api::NcclSend => CommKind::Send,
        Api::NcclRecv => CommKind::Recv,
        Api::NcclAllReduce => CommKind::AllReduce,
        Api::NcclReduceScatter => CommKind::ReduceScatter,
        Api::NcclAllGather => CommKind::AllGather,
        Api::NcclBroadcast => CommKind::Broadcast,
        _ => CommKind::Grouped,
    };
    CommSig {
        comm,
        kind,
        peer: if kind.collective() && api != Api::NcclBroadcast {
            -1
        } else {
            peer
        },
        bytes,
        largest_send: if kind == CommKind::Send { bytes } else { 0 },
    }
}

/// What a synchronize call waited for.
fn sync_on(api: Api, handle: u64) -> Option<SyncOn> {
    Some(match api {
        Api::CudaDeviceSynchronize | Api::CuCtxSynchronize => SyncOn::Device,
        Api::CudaStreamSynchronize
        | Api::CudaStreamSynchronizePtsz
        | Api::CuStreamSynchronize
        | Api::CuStreamSynchronizePtsz => SyncOn::Stream(handle),
        Api::CudaEventSynchronize | Api::CuEventSynchronize => SyncOn::Event(handle),
        _ => return None,
    })
}

/// The id a comm begin/end record names: its op, or its group's work on its stream.
fn timed_key(p: &Proc, op: u32, group: u32, stream: u64) -> u64 {
    if group == 0 {
        return op_key(op);
    }
    let k = p
        .group_streams
        .get(&group)
        .and_then(|s| s.iter().position(|&x| x == stream))
        .unwrap_or(0);
    group_key(group, k)
}

fn translate(p: &mut Proc, d: &Decoded, now: Ns, out: &mut Vec<TrainerObs>) {
    // A memory record names the GPU the memory is on, which need not be the process's.
    if d.device >= 0 && matches!(d.kind, Kind::Launch | Kind::CommOp) {
        p.view.device = d.device;
    }
    if let Some(e) = d.mem_effect() {
        p.mem.apply(d.device, p.view.device, e);
        p.view.mem_held_bytes = p.mem.total();
        p.view.mem_by_device = p.mem.by_device();
    }
    if p.view.role != Some(Role::Trainer) {
        return;
    }
    let gpu = gpu_of_record(d.device).or(gpu_of_record(p.view.device));
    let mut push = |obs| {
        out.push(TrainerObs {
            pid: p.view.pid,
            gpu,
            obs,
        })
    };
    let obs = match d.event {
        Event::Launch { in_comm: false, .. } | Event::GraphLaunch { .. } => Obs::Launch {
            t: d.t_ns,
            stream: d.stream,
        },
        Event::CommOp {
            peer,
            bytes,
            comm,
            op,
            group,
            ..
        } => {
            let sig = sig_of(d.api, peer, bytes, comm);
            let key = p.comms.next_key(comm, sig.kind, peer);
            if group != 0 {
                let g = p.groups.entry(group).or_default();
                match g.iter_mut().find(|x| x.stream == d.stream) {
                    Some(x) => {
                        x.sig = x.sig.join(sig);
                        x.all_keyed &= key.is_some() && x.keys.len() < MAX_KEYS_PER_PART;
                        x.keys.extend(key);
                    }
                    None => g.push(GroupPart {
                        stream: d.stream,
                        sig,
                        keys: key.into_iter().collect(),
                        all_keyed: key.is_some(),
                    }),
                }
                return;
            }
            let id = op_key(op);
            push(Obs::CommIssue {
                t: d.t_ns,
                id,
                stream: d.stream,
                sig,
            });
            if let Some(k) = key {
                push(Obs::CommMatch {
                    id,
                    key: k.key,
                    parties: k.parties,
                    receives: k.receives,
                });
            }
            return;
        }
        Event::CommGroup { depth: 0, group } if d.api == Api::NcclGroupEnd => {
            let Some(parts) = p.groups.remove(&group) else {
                return;
            };
            for (k, part) in parts.iter().enumerate() {
                let id = group_key(group, k);
                push(Obs::CommIssue {
                    t: d.t_ns,
                    id,
                    stream: part.stream,
                    sig: part.sig,
                });
                for m in part.keys.iter().filter(|_| part.all_keyed) {
                    push(Obs::CommMatch {
                        id,
                        key: m.key,
                        parties: m.parties,
                        receives: m.receives,
                    });
                }
            }
            if p.group_streams.len() >= MAX_TRACKED_GROUPS {
                p.group_streams.pop_first();
            }
            p.group_streams
                .insert(group, parts.iter().map(|x| x.stream).collect());
            return;
        }
        Event::CommInit {
            ident,
            comm,
            nranks,
            rank,
        } => {
            p.comms.joined(
                comm,
                Joined {
                    ident,
                    nranks,
                    rank,
                },
            );
            return;
        }
        Event::CommBegin { op, group, .. } => Obs::CommBegin {
            id: timed_key(p, op, group, d.stream),
            t: d.t_ns,
            seen: now,
        },
        Event::CommEnd { op, group, .. } => Obs::CommEnd {
            id: timed_key(p, op, group, d.stream),
            t: d.t_ns,
            seen: now,
        },
        Event::Sync { end_ns, result: 0 } => match sync_on(d.api, d.stream) {
            Some(on) => Obs::Sync {
                t0: d.t_ns,
                t1: end_ns.max(d.t_ns),
                on,
            },
            None => return,
        },
        // NCCL's own event records and waits (inside its calls) order its internal streams.
        Event::EventRecord {
            event,
            in_comm: false,
            ..
        } => Obs::EventRecord {
            t: d.t_ns,
            event,
            stream: d.stream,
        },
        Event::StreamWait {
            event,
            wait,
            in_comm: false,
            ..
        } => Obs::StreamWait {
            t: d.t_ns,
            stream: d.stream,
            event,
            wait: wait as u64,
        },
        Event::WaitBegin { wait, .. } => Obs::WaitReached {
            wait: wait as u64,
            t: d.t_ns,
            seen: now,
        },
        Event::WaitEnd { wait, .. } => Obs::WaitReleased {
            wait: wait as u64,
            t: d.t_ns,
            seen: now,
        },
        // An op that will not be timed; an untimed wait is released by its op's end instead.
        Event::CommUntimed { op, group, .. } => Obs::CommUntimed {
            id: timed_key(p, op, group, d.stream),
        },
        Event::Dropped { count } if count > 0 => Obs::Lost { t: d.t_ns },
        Event::ProcessExit { .. } => Obs::Exit { t: d.t_ns },
        _ => return,
    };
    push(obs);
}

/// Rings as the interposer makes them, for the agent's tests.
#[cfg(test)]
pub(crate) mod test_rings {
    use freeride_abi::ring::{self, Geometry, RingView};
    use freeride_abi::{session, Role};
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    use std::path::{Path, PathBuf};

    /// 64-byte aligned memory to build a ring's bytes in.
    #[repr(C, align(64))]
    #[derive(Clone, Copy)]
    struct Line([u8; 64]);

    /// A ring of `role` for process `pid` (started at `start_ns`) in `dir`.
    pub(crate) fn ring_file(dir: &Path, pid: u32, start_ns: u64, role: Role) -> PathBuf {
        ring_file_with(dir, pid, start_ns, role, &[])
    }

    /// The same, holding `records` (at most [`ring::MIN_CAPACITY`]).
    pub(crate) fn ring_file_with(
        dir: &Path,
        pid: u32,
        start_ns: u64,
        role: Role,
        records: &[freeride_abi::Record],
    ) -> PathBuf {
        let cap = ring::MIN_CAPACITY;
        let size = ring::file_size(cap);
        let mut mem = vec![Line([0; 64]); size.div_ceil(64)];
        // SAFETY: `mem` holds at least file_size(cap) bytes, 64-aligned, and outlives the view.
        let v = unsafe { RingView::new(mem.as_mut_ptr() as *mut u8, Geometry::single(cap)) };
        v.initialize(pid, role as u32, start_ns);
        for r in records {
            assert!(v.push(r), "the test ring is full");
        }
        // SAFETY: the same `size` bytes of `mem`, initialized above.
        let bytes = unsafe { std::slice::from_raw_parts(mem.as_ptr() as *const u8, size) };
        let path = dir.join(session::ring_file_name(pid, start_ns));
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .and_then(|f| f.write_all_at(bytes, 0))
            .unwrap();
        path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trainer that queued many launches at once is read a bounded number of records a step,
    /// and the collector says that more are waiting until they are all read, in order.
    #[test]
    fn a_ring_with_many_records_is_read_in_bounded_steps() {
        let dir = std::env::temp_dir().join(format!("freeride-backlog-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        session::ensure_dir(&dir).unwrap();
        let n = MAX_PER_POLL * 2 + 7;
        let launches: Vec<freeride_abi::Record> = (0..n as u64)
            .map(|i| freeride_abi::Record {
                t_ns: 1_000 + i,
                kind: Kind::Launch as u8,
                api: Api::CuLaunchKernel as u16,
                device: 0,
                ..Default::default()
            })
            .collect();
        let me = std::process::id();
        test_rings::ring_file_with(&dir, me, 1, Role::Trainer, &launches);
        let mut col = Collector::new(&dir);
        let (mut seen, mut steps) = (vec![], vec![]);
        loop {
            let mut obs = vec![];
            col.poll(2_000_000, &mut obs);
            steps.push((obs.len(), col.backlog()));
            seen.extend(obs.iter().filter_map(|o| match o.obs {
                Obs::Launch { t, .. } => Some(t),
                _ => None,
            }));
            if !col.backlog() || steps.len() > 10 {
                break;
            }
        }
        assert_eq!(
            steps,
            [(MAX_PER_POLL, true), (MAX_PER_POLL, true), (7, false)]
        );
        assert_eq!(seen, (0..n as u64).map(|i| 1_000 + i).collect::<Vec<_>>());
        drop(col);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_group_is_one_op_per_stream_it_used() {
        let send = sig_of(Api::NcclSend, 1, 10, 5);
        let recv = sig_of(Api::NcclRecv, 1, 20, 5);
        let g = send.join(recv);
        assert_eq!(g.kind, CommKind::SendRecv);
        assert_eq!(g.bytes, 30);
        assert_eq!(g.peer, 1);
        assert_ne!(group_key(3, 0), group_key(3, 1));
        assert_ne!(group_key(3, 0), op_key(3));
    }

    #[test]
    fn collectives_have_no_peer_but_a_broadcast_has_its_root() {
        assert_eq!(sig_of(Api::NcclAllReduce, 4, 8, 1).peer, -1);
        assert_eq!(sig_of(Api::NcclBroadcast, 4, 8, 1).peer, 4);
        assert_eq!(
            sig_of(Api::NcclReduceScatter, -1, 8, 1).kind,
            CommKind::ReduceScatter
        );
        assert_eq!(sync_on(Api::CuCtxSynchronize, 0), Some(SyncOn::Device));
        assert_eq!(
            sync_on(Api::CudaEventSynchronize, 7),
            Some(SyncOn::Event(7))
        );
        assert_eq!(sync_on(Api::NcclSend, 7), None);
    }
}
