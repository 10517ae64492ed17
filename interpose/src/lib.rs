//! libfreeride.so — the LD_PRELOAD interposer (issue 3).
//!
//! * [`hooks`]: the one table of hooked names and all wrappers (runtime, driver, NCCL, dlsym).
//! * [`dl`]: our `dlsym` (exact caller semantics for names we do not hook) and real-symbol lookup.
//! * [`rt`]: process state (lazy init state machine, rings, fork/exit handling) and the hook path.
//! * [`comm`]: GPU-side timing of NCCL ops: driver event pool and the lazily started poller.
//! * [`trace`]: `FREERIDE_TRACE` JSON-lines writer thread ([`trace_exit`]: the lines of a process that
//!   never initializes).
//! * [`session_check`]: the one line about an unusable session directory.
//! * [`gpus`]: the process's GPUs by identity (device ordinal -> PCI bus id, once per device).
//! * [`waits`]: which stream waits for what (per stream its last comm op, per event its latest
//!   record), for the stream-wait and event-record hooks.
//! * [`gate`]: the side-task gate: launches held to their GPU's grant, memory to its budget.
//! * [`memtable`]: the fixed lock-free table the memory hooks and the gate keep allocations in.
//!
//! Hook-path rules: no allocation, no lock, no system call, no panic; a per-thread re-entrancy
//! guard; one atomic state check, a clock read, a push into a preallocated ring, the real call.
#![allow(clippy::missing_safety_doc)]

pub mod comm;
pub mod dl;
pub mod gate;
pub mod gpus;
pub mod hooks;
pub mod lanes;
pub mod memtable;
pub mod rt;
pub mod session_check;
pub mod trace;
pub mod trace_exit;
pub mod waits;
