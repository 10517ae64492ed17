//! The per-GPU grant control block of the side-task gate and the SDK.
//!
//! File `grant-<bus id>` in the session directory ([`crate::session::grant_file_name`]: one per
//! physical GPU), [`GRANT_FILE_SIZE`] bytes, written by the agent only, read by side-task
//! interposers on every launch and by the SDK:
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 8 | `magic` = [`GRANT_MAGIC`] ("FRGRANT\x01") |
//! | 8 | 4 | `version` = [`GRANT_LAYOUT_VERSION`] |
//! | 12 | 4 | `device`: the GPU's [`crate::gpu::GpuId`] (version 1: a device ordinal) |
//! | 16 | 4 | `agent_pid` |
//! | 20 | 4 | `state`: [`GRANT_CLOSED`] or [`GRANT_OPEN`] |
//! | 64 | 8 | `epoch`: seqlock word, odd while the agent updates the fields below |
//! | 72 | 8 | `open_until_ns`: CLOCK_MONOTONIC deadline of the current grant |
//! | 80 | 8 | `budget_ns`: GPU time the side tasks may queue in this grant |
//! | 88 | 8 | `mem_budget_bytes`: device memory side tasks may hold |
//! | 96 | 8 | `heartbeat_ns`: last time the agent touched the block (stale => closed) |
//! | 104 | 8 | `min_priority`: side tasks of a lower priority start no work in this grant (0: all) |
//! | 112 | 8 | `side_mem_held_bytes`: device memory all side tasks on this GPU hold, as the agent last saw it |
//! | 120 | 8 | `fresh_ns`: an open grant reads closed once its heartbeat is older than this (0: no such limit; formerly reserved) |
//!
//! `fresh_ns` bounds what a stalled agent leaves open: the agent refreshes the heartbeat on every
//! step (every ~50 µs while a bubble is open), so a grant that goes on without it is one that no
//! longer watches the trainer (the agent descheduled, stopped or slowed), and the trainer may be
//! back before the grant's deadline. Readers apply it with [`Grant::open_at`]. Writers that leave
//! it 0 (older agents) get the readers' own, long, stale limit only.
//!
//! `mem_budget_bytes` is for all the GPU's side tasks together: one process may hold what the
//! others leave of it ([`Grant::mem_limit_for`]).
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub const GRANT_MAGIC: u64 = u64::from_le_bytes(*b"FRGRANT\x01");
/// 2: blocks are named and keyed by the physical GPU ([`crate::gpu::GpuId`]).
pub const GRANT_LAYOUT_VERSION: u32 = 2;
pub const GRANT_FILE_SIZE: usize = 4096;
pub const GRANT_CLOSED: u32 = 0;
pub const GRANT_OPEN: u32 = 1;

#[repr(C, align(64))]
pub struct GrantBlock {
    pub magic: AtomicU64,
    pub version: AtomicU32,
    pub device: AtomicU32,
    pub agent_pid: AtomicU32,
    pub state: AtomicU32,
    _r0: [u64; 5],
    pub epoch: AtomicU64,
    pub open_until_ns: AtomicU64,
    pub budget_ns: AtomicU64,
    pub mem_budget_bytes: AtomicU64,
    pub heartbeat_ns: AtomicU64,
    pub min_priority: AtomicU64,
    pub side_mem_held_bytes: AtomicU64,
    pub fresh_ns: AtomicU64,
}

const _: () = assert!(std::mem::offset_of!(GrantBlock, epoch) == 64);
const _: () = assert!(std::mem::offset_of!(GrantBlock, side_mem_held_bytes) == 112);
const _: () = assert!(std::mem::offset_of!(GrantBlock, fresh_ns) == 120);
const _: () = assert!(std::mem::size_of::<GrantBlock>() <= GRANT_FILE_SIZE);

/// A consistent copy of a grant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Grant {
    pub open: bool,
    pub open_until_ns: u64,
    pub budget_ns: u64,
    pub mem_budget_bytes: u64,
    pub heartbeat_ns: u64,
    pub epoch: u64,
    /// Side tasks of a lower priority start no work in this grant (0: every task may).
    pub min_priority: u64,
    /// Device memory the GPU's side tasks hold together, as the agent last saw it.
    pub side_mem_held_bytes: u64,
    /// An open grant whose heartbeat is older than this reads closed (0: no such limit).
    pub fresh_ns: u64,
}

impl Grant {
    /// Whether the grant lets work start at `now`, for a reader that takes a heartbeat older
    /// than `stale_ns` for a dead agent: open, before its deadline, and its heartbeat no older
    /// than `stale_ns` nor than the agent's `fresh_ns` (when set). Priorities are the reader's
    /// business ([`Grant::min_priority`]).
    pub fn open_at(&self, now: u64, stale_ns: u64) -> bool {
        let age = now.saturating_sub(self.heartbeat_ns);
        let limit = match self.fresh_ns {
            0 => stale_ns,
            f => f.min(stale_ns),
        };
        self.open && age <= limit && now < self.open_until_ns
    }

    /// The device memory a side task that holds `own_held` bytes may hold in all: the GPU's
    /// side-task budget less what the others hold (the agent's total less this task's own bytes;
    /// the agent sees allocations within about a poll period, so two tasks allocating at once can
    /// both pass within that window). 0 when the agent sets no budget.
    pub fn mem_limit_for(&self, own_held: u64) -> u64 {
        if self.mem_budget_bytes == 0 {
            return 0;
        }
        let others = self.side_mem_held_bytes.saturating_sub(own_held);
        self.mem_budget_bytes.saturating_sub(others).max(1)
    }
}

impl GrantBlock {
    /// Reads a consistent snapshot; `None` if the block is invalid or being updated.
    /// A caller must treat `None` as "closed".
    pub fn snapshot(&self) -> Option<Grant> {
        if self.magic.load(Ordering::Acquire) != GRANT_MAGIC
            || self.version.load(Ordering::Relaxed) != GRANT_LAYOUT_VERSION
        {
            return None;
        }
        let e1 = self.epoch.load(Ordering::Acquire);
        if e1 & 1 == 1 {
            return None;
        }
        let g = Grant {
            open: self.state.load(Ordering::Relaxed) == GRANT_OPEN,
            open_until_ns: self.open_until_ns.load(Ordering::Relaxed),
            budget_ns: self.budget_ns.load(Ordering::Relaxed),
            mem_budget_bytes: self.mem_budget_bytes.load(Ordering::Relaxed),
            heartbeat_ns: self.heartbeat_ns.load(Ordering::Relaxed),
            epoch: e1,
            min_priority: self.min_priority.load(Ordering::Relaxed),
            side_mem_held_bytes: self.side_mem_held_bytes.load(Ordering::Relaxed),
            fresh_ns: self.fresh_ns.load(Ordering::Relaxed),
        };
        std::sync::atomic::fence(Ordering::Acquire);
        (self.epoch.load(Ordering::Relaxed) == e1).then_some(g)
    }
}

impl GrantBlock {
    /// The futex word: the low half of `epoch` (little-endian), which changes with every publish.
    fn futex_word(&self) -> *const u32 {
        &self.epoch as *const AtomicU64 as *const u32
    }

    /// Wakes every process waiting in [`GrantBlock::wait_for_change`] (the writer calls it after a
    /// publish). A system call: the agent's side, never a trainer's hook path.
    pub fn wake_all(&self) {
        // SAFETY: the low half of `epoch`, an aligned word of the live block.
        unsafe { crate::futex::wake_all(self.futex_word()) };
    }

    /// Sleeps until the block is published again (its epoch differs from `seen_epoch`) or
    /// `timeout_ns` passes, whichever is first. Spurious wake-ups are possible: re-read after.
    pub fn wait_for_change(&self, seen_epoch: u64, timeout_ns: u64) {
        if self.epoch.load(Ordering::Acquire) != seen_epoch {
            return;
        }
        // SAFETY: as in `wake_all`; it returns at once if the word no longer holds
        // `seen_epoch`'s low half.
        unsafe { crate::futex::wait(self.futex_word(), seen_epoch as u32, timeout_ns) };
    }

    /// The current epoch (pass it to [`GrantBlock::wait_for_change`]).
    pub fn epoch_now(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_grant_reads_closed_once_its_heartbeat_is_older_than_its_freshness() {
        let g = Grant {
            open: true,
            open_until_ns: 10_000,
            heartbeat_ns: 1_000,
            fresh_ns: 500,
            ..Grant::default()
        };
        assert!(g.open_at(1_400, 100_000));
        assert!(g.open_at(1_500, 100_000));
        // The agent went without a step: closed, long before the deadline...
        assert!(!g.open_at(1_501, 100_000));
        // ...until its next heartbeat.
        assert!(Grant {
            heartbeat_ns: 1_600,
            ..g
        }
        .open_at(1_700, 100_000));
        // A reader's own stale limit still applies when shorter, and alone without freshness.
        assert!(!g.open_at(1_400, 300));
        let old_agent = Grant { fresh_ns: 0, ..g };
        assert!(old_agent.open_at(5_000, 100_000));
        assert!(!old_agent.open_at(5_000, 3_000));
        // Past its deadline, or closed: never open.
        assert!(!Grant {
            heartbeat_ns: 9_900,
            ..g
        }
        .open_at(10_000, 100_000));
        assert!(!Grant { open: false, ..g }.open_at(1_100, 100_000));
    }

    #[test]
    fn a_task_may_hold_what_the_others_leave_of_the_gpus_budget() {
        let g = |budget, held| Grant {
            mem_budget_bytes: budget,
            side_mem_held_bytes: held,
            ..Grant::default()
        };
        // No budget set by the agent.
        assert_eq!(g(0, 500).mem_limit_for(10), 0);
        // 100 for all; 60 held in all, 20 of them by this task: the others hold 40.
        assert_eq!(g(100, 60).mem_limit_for(20), 60);
        // The others hold everything: at least one byte, never "no budget".
        assert_eq!(g(100, 150).mem_limit_for(0), 1);
    }
}
