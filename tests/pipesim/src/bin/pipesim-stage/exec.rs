//! Runs a rank's programs (`pipesim::program`) with the CUDA runtime and NCCL, one action after
//! the other on the host thread, as a training process's Python thread does.
use crate::comm::{Comm, PipeComm};
use crate::cuda::{self, check, Event, Stream};
use crate::kernels::Kernels;
use crate::mark::Marks;
use pipesim::program::{Action, CommId, CommSpec, JobPlan, Program};

/// What the programs run on.
pub struct Executor<'a> {
    pub nccl: &'a PipeComm,
    pub plan: &'a JobPlan,
    pub rank: u32,
    /// By stream id.
    pub streams: Vec<Stream>,
    /// By event id (created as programs need them).
    pub events: Vec<Event>,
    /// By communicator id: the ones this rank joined.
    pub comms: Vec<Option<Comm>>,
    pub kernels: Kernels,
    pub marks: Marks,
    /// Launches so far (rotates the launch paths).
    pub launches: usize,
}

pub fn new_stream() -> Result<Stream, String> {
    let mut s = std::ptr::null_mut();
    // SAFETY: out-pointer to a local.
    check("cudaStreamCreateWithFlags", unsafe {
        cuda::cudaStreamCreateWithFlags(&mut s, cuda::STREAM_NON_BLOCKING)
    })?;
    Ok(s)
}

fn new_event() -> Result<Event, String> {
    let mut e = std::ptr::null_mut();
    // SAFETY: out-pointer to a local.
    check("cudaEventCreateWithFlags", unsafe {
        cuda::cudaEventCreateWithFlags(&mut e, cuda::EVENT_DISABLE_TIMING)
    })?;
    Ok(e)
}

impl Executor<'_> {
    fn comm(&self, id: CommId) -> Result<(Comm, &CommSpec), String> {
        let spec = &self.plan.comms[id];
        match self.comms.get(id).copied().flatten() {
            Some(c) => Ok((c, spec)),
            None => Err(format!(
                "rank {} is not in communicator {}",
                self.rank, spec.name
            )),
        }
    }

    /// Runs iteration `it`'s program.
    pub fn run(&mut self, p: &Program, it: u32) -> Result<(), String> {
        while self.events.len() < p.events {
            self.events.push(new_event()?);
        }
        for step in &p.steps {
            self.step(&step.action, it)
                .map_err(|e| format!("{e} (at {})", step.origin))?;
        }
        Ok(())
    }

    fn step(&mut self, a: &Action, it: u32) -> Result<(), String> {
        match a {
            Action::Graph => self.kernels.launch_graph()?,
            Action::Kernels { stream, phase, ns } => {
                if *stream != pipesim::program::COMPUTE {
                    return Err("compute kernels go on the compute stream only".into());
                }
                for &d in ns {
                    self.kernels.launch(*phase, d, self.launches)?;
                    self.launches += 1;
                }
            }
            Action::Record { stream, event } => {
                // SAFETY: live event and stream handles.
                check("cudaEventRecord", unsafe {
                    cuda::cudaEventRecord(self.events[*event], self.streams[*stream])
                })?
            }
            Action::Wait { stream, event } => {
                // SAFETY: live stream and event handles.
                check("cudaStreamWaitEvent", unsafe {
                    cuda::cudaStreamWaitEvent(self.streams[*stream], self.events[*event], 0)
                })?
            }
            Action::P2p {
                comm,
                stream,
                grouped,
                ops,
            } => {
                let (c, spec) = self.comm(*comm)?;
                let s = self.streams[*stream];
                if *grouped {
                    self.nccl.group_start()?;
                }
                for op in ops {
                    let peer = spec
                        .index_of(op.peer)
                        .ok_or_else(|| format!("rank {} is not in {}", op.peer, spec.name))?;
                    if op.send {
                        self.nccl.send(c, peer, op.bytes, s)?;
                    } else {
                        self.nccl.recv(c, peer, op.bytes, s)?;
                    }
                }
                if *grouped {
                    self.nccl.group_end()?;
                }
            }
            Action::Collective {
                comm,
                stream,
                kind,
                bytes,
            } => {
                let (c, _) = self.comm(*comm)?;
                self.nccl
                    .collective(*kind, c, *bytes, self.streams[*stream])?;
            }
            Action::SyncDevice => {
                // SAFETY: no arguments.
                check("cudaDeviceSynchronize", unsafe {
                    cuda::cudaDeviceSynchronize()
                })?
            }
            Action::SyncStream(s) => {
                // SAFETY: a live stream.
                check("cudaStreamSynchronize", unsafe {
                    cuda::cudaStreamSynchronize(self.streams[*s])
                })?
            }
            Action::Sleep { ns } => std::thread::sleep(std::time::Duration::from_nanos(*ns)),
            Action::Mark => {
                self.marks.write(it)?;
                for c in self.comms.iter().flatten() {
                    self.nccl.async_error(*c)?;
                }
            }
        }
        Ok(())
    }
}
