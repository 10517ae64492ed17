//! Which ops of different processes are one collective or one send/receive pair, exactly: from
//! the communicators' identities (the interposer's `comm_init` records: an identity the same in
//! every process that joined the communicator, the rank count and the process's rank) and NCCL's
//! ordering rules. Every rank of a communicator issues its collectives in the same order, and the
//! sends from rank a to rank b are received by b's receives from a in the order both were issued.
//! So the n-th collective on a communicator is one collective on all its ranks, and the n-th send
//! from a to b goes with b's n-th receive from a: each op gets a *match key* (a hash of the
//! identity, the pair or "collective", and n) that its partners in other processes get too, and
//! how many parties share it (2 for a send/receive pair, the rank count for a collective).
//!
//! Counting per process from its records: a process whose ring lost records (full) may count
//! wrong from then on, and its keys may then name other ops than its partners'; what the agent
//! does with a match (close a grant at the transfer's start, see [`crate::inference::gpus`])
//! errs only towards a shorter grant then. Ops on a communicator whose `comm_init` the agent did
//! not see (made before the preload, or by a libfreeride.so without the record) get no key.
use crate::inference::obs::CommKind;
use std::collections::HashMap;

/// A communicator as one process joined it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Joined {
    pub ident: u64,
    pub nranks: u32,
    pub rank: u32,
}

/// Communicators a process may have at once (past this the table starts again; a framework makes
/// a few per parallel dimension).
const MAX_COMMS: usize = 4096;
/// Sequence counters kept per process (per communicator: one for collectives, one per ordered
/// pair of ranks that exchanged point-to-point ops).
const MAX_COUNTERS: usize = 65_536;

/// One process's communicators and op counters.
#[derive(Debug, Default)]
pub struct Communicators {
    joined: HashMap<u64, Joined>,
    /// (handle, from rank, to rank; -1, -1 for collectives) -> ops counted so far.
    counters: HashMap<(u64, i32, i32), u32>,
}

/// An op's match key and how many processes' ops share it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatchKey {
    pub key: u64,
    pub parties: u32,
    /// The op is the pair's receive.
    pub receives: bool,
}

fn mix(h: u64, v: u64) -> u64 {
    // splitmix64 of the running hash and the value: keys of different ops differ.
    let mut z = (h ^ v).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Communicators {
    /// The process joined communicator `handle` (a `comm_init` record).
    pub fn joined(&mut self, handle: u64, j: Joined) {
        if self.joined.len() >= MAX_COMMS && !self.joined.contains_key(&handle) {
            self.joined.clear();
        }
        // A handle reused for a new communicator starts its counts again.
        self.counters.retain(|k, _| k.0 != handle);
        self.joined.insert(handle, j);
    }

    /// The match key of the next op of `kind` with `peer` (a rank; the root of a broadcast) on
    /// communicator `handle`, or `None` when the communicator is unknown or the op has no
    /// partner to match (a send to itself, a peer outside the communicator).
    pub fn next_key(&mut self, handle: u64, kind: CommKind, peer: i32) -> Option<MatchKey> {
        let j = *self.joined.get(&handle)?;
        let me = j.rank as i32;
        let p2p = matches!(kind, CommKind::Send | CommKind::Recv);
        let (from, to, parties) = match kind {
            CommKind::Send => (me, peer, 2),
            CommKind::Recv => (peer, me, 2),
            CommKind::AllReduce
            | CommKind::AllGather
            | CommKind::ReduceScatter
            | CommKind::Broadcast => (-1, -1, j.nranks),
            CommKind::SendRecv | CommKind::Grouped => return None,
        };
        if p2p && (peer == me || peer < 0 || peer as u32 >= j.nranks) {
            return None;
        }
        if parties < 2 {
            return None;
        }
        if self.counters.len() >= MAX_COUNTERS && !self.counters.contains_key(&(handle, from, to)) {
            // Forgetting counts would mismatch keys: past the bound, stop matching this process.
            return None;
        }
        let n = self.counters.entry((handle, from, to)).or_insert(0);
        let seq = *n;
        *n = n.wrapping_add(1);
        let h = mix(
            mix(mix(j.ident, from as u32 as u64), to as u32 as u64),
            seq as u64,
        );
        Some(MatchKey {
            key: h,
            parties,
            receives: kind == CommKind::Recv,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_ranks() -> (Communicators, Communicators) {
        let (mut a, mut b) = (Communicators::default(), Communicators::default());
        a.joined(
            0x10,
            Joined {
                ident: 77,
                nranks: 2,
                rank: 0,
            },
        );
        b.joined(
            0x99,
            Joined {
                ident: 77,
                nranks: 2,
                rank: 1,
            },
        );
        (a, b)
    }

    #[test]
    fn the_nth_send_matches_the_nth_receive_and_the_nth_collective_the_nth() {
        let (mut a, mut b) = two_ranks();
        let s0 = a.next_key(0x10, CommKind::Send, 1).unwrap();
        let s1 = a.next_key(0x10, CommKind::Send, 1).unwrap();
        // Rank 1 sends to 0 in between: another pair, it does not shift the counts.
        let back = b.next_key(0x99, CommKind::Send, 0).unwrap();
        let r0 = b.next_key(0x99, CommKind::Recv, 0).unwrap();
        let r1 = b.next_key(0x99, CommKind::Recv, 0).unwrap();
        assert_eq!((s0.key, s1.key), (r0.key, r1.key));
        assert_ne!(s0.key, s1.key);
        assert_eq!((s0.parties, r0.parties), (2, 2));
        assert!(!s0.receives && r0.receives && !back.receives);
        let back_received = a.next_key(0x10, CommKind::Recv, 1).unwrap();
        assert_eq!(back.key, back_received.key);
        assert!(back_received.receives);
        assert_ne!(back.key, s0.key);
        let ca = a.next_key(0x10, CommKind::AllReduce, -1).unwrap();
        let cb = b.next_key(0x99, CommKind::AllGather, -1).unwrap();
        assert_eq!(ca, cb);
        assert_eq!(ca.parties, 2);
        assert!(!ca.receives);
    }

    #[test]
    fn unknown_communicators_and_impossible_peers_get_no_key() {
        let (mut a, _) = two_ranks();
        assert_eq!(a.next_key(0x11, CommKind::Send, 1), None);
        assert_eq!(a.next_key(0x10, CommKind::Send, 0), None);
        assert_eq!(a.next_key(0x10, CommKind::Send, 2), None);
        assert_eq!(a.next_key(0x10, CommKind::Grouped, -1), None);
        // Another communicator with the same ranks: other keys.
        let mut c = Communicators::default();
        c.joined(
            0x10,
            Joined {
                ident: 78,
                nranks: 2,
                rank: 0,
            },
        );
        assert_ne!(
            c.next_key(0x10, CommKind::Send, 1),
            a.next_key(0x10, CommKind::Send, 1)
        );
    }

    #[test]
    fn a_handle_reused_for_a_new_communicator_counts_again() {
        let (mut a, _) = two_ranks();
        let first = a.next_key(0x10, CommKind::Send, 1).unwrap();
        a.next_key(0x10, CommKind::Send, 1).unwrap();
        a.joined(
            0x10,
            Joined {
                ident: 77,
                nranks: 2,
                rank: 0,
            },
        );
        assert_eq!(a.next_key(0x10, CommKind::Send, 1).unwrap(), first);
    }
}
