//! When a communication op's transfer begins, from its partners on the node: the ops of other
//! processes that are the same collective or the other end of its send/receive pair, known
//! exactly by their match keys ([`crate::comm_match`], `Obs::CommMatch`). Data moves once every
//! party to a key has begun on its GPU (a receive's kernel waits for its send's; a collective's
//! for its last rank's, as ring and tree algorithms do for all but their first steps, and as the
//! test bed's simulated GPU models it): from the latest of their begins, each party's GPU is busy
//! transferring. So
//! * when the last party of a key begins, every party's op is transferring from then (a live
//!   signal, [`Partners::began`]: a grant over it closes at once, instead of when the op's end is
//!   read);
//! * when the receiving end of a send/receive pair ends, the pair's data has arrived: its
//!   sender's GPU is done moving it ([`Partners::ended`]; a group that sent to it and still waits
//!   for its own receive's data is idle again, until the learnt time that data comes);
//! * when an op ends, its transfer cannot have begun before the latest begin of its key's parties
//!   seen on this node ([`Partners::floor`]: a party on another node is not seen, so the floor is
//!   lower, never wrong): the bubble before it lasted at least until then. That holds for receives and
//!   collectives; a send (alone or in a group) moves data from its own begin into the receiver's
//!   buffers, so the timeline takes no floor for an op that sends.
//!
//! A group's work on one stream has the keys of its ops, and only when every op of it had one
//! (see the collector), so "all its keys completed" means all of its data's movements are known;
//! it transfers from its first key's completion.
use super::obs::{CommSig, Ns};
use super::peers::Who;
use std::collections::{HashMap, VecDeque};

/// Keys remembered (the newest); a key's parties issue their ops within a few iterations of each
/// other.
const MAX_KEYS: usize = 16_384;
/// Ops with keys, in flight or issued, remembered at most (past this the table starts again).
const MAX_UNITS: usize = 16_384;
/// Ended ops kept waiting for their keys to complete (a party's begin read late).
const MAX_ENDED: usize = 4096;

#[derive(Debug)]
struct KeyState {
    parties: u32,
    /// (timeline, op id, its GPU begin once seen).
    members: Vec<(Who, u64, Option<Ns>)>,
    /// When every party had begun (the latest begin).
    done: Option<Ns>,
    /// Its data has all arrived (a receiving party's op, which sent nothing, ended).
    delivered: bool,
}

#[derive(Debug, Default)]
struct Unit {
    keys: Vec<u64>,
    /// The keys it receives (their data has all arrived once it ends).
    receives: Vec<u64>,
    /// The earliest completion among its keys, and how many completed.
    first_done: Option<Ns>,
    done: usize,
    /// It ended (GPU time, and its signature) before all its keys completed: when they do, what
    /// it transferred is known after the fact.
    ended: Option<(Ns, CommSig)>,
}

/// What a begin teaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taught {
    /// What op `id` of `who` (in flight) transfers now, after a change of its keys: from GPU
    /// time `t` at the latest (`Some`), or nothing for any key (`None`,
    /// [`Partners::transferring`]).
    Transferring { who: Who, id: u64, t: Option<Ns> },
    /// An op of `sig` of `who` that had ended (its partner's begin was read after its end)
    /// transferred for at most `ns`: a bound for the ops of its kind (a collective's
    /// transfer; for a receive, its end less its send's begin; nothing for a send).
    Transferred { who: Who, sig: CommSig, ns: Ns },
}

/// The earliest an op can have begun transferring. `others`: for an op of one key all of whose parties began, the
/// latest begin of the others (for a receive, its send's: the data moved between that and the
/// receive's end, a bound for point-to-point transfers even when the receive itself came late
/// and moved nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Floor {
    pub t: Ns,
    pub others: Option<Ns>,
    /// `Some(n)`: a key of it has `n` parties, some of which were never seen on this node (they
    /// are on other nodes): its transfer may have begun after `t`, when the last of them arrived.
    pub remote: Option<u32>,
}

/// How much was matched: ops that got a match key, and keys all of whose parties began here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MatchStats {
    pub keyed_ops: u64,
    pub completed_keys: u64,
}

impl MatchStats {
    pub fn add(&mut self, o: MatchStats) {
        self.keyed_ops += o.keyed_ops;
        self.completed_keys += o.completed_keys;
    }
}

#[derive(Debug, Default)]
pub struct Partners {
    keys: HashMap<u64, KeyState>,
    order: VecDeque<u64>,
    units: HashMap<(Who, u64), Unit>,
    /// Units that ended waiting for their keys, oldest first.
    ended: VecDeque<(Who, u64)>,
    stats: MatchStats,
}

impl Partners {
    /// Op `id` of `who` has match key `key`, shared by `parties` processes' ops; `receives`: it
    /// is the key's receiving end (the receive of a send/receive pair).
    pub fn matched(&mut self, who: Who, id: u64, key: u64, parties: u32, receives: bool) {
        if self.units.len() >= MAX_UNITS && !self.units.contains_key(&(who, id)) {
            self.units.clear();
        }
        if !self.keys.contains_key(&key) {
            if self.order.len() >= MAX_KEYS {
                if let Some(old) = self.order.pop_front() {
                    self.keys.remove(&old);
                }
            }
            self.order.push_back(key);
        }
        let k = self.keys.entry(key).or_insert_with(|| KeyState {
            parties,
            members: Vec::new(),
            done: None,
            delivered: false,
        });
        // A key with more members than parties was miscounted (lost records): it teaches
        // nothing more.
        if k.members.len() < k.parties as usize && !k.members.iter().any(|m| m.0 == who) {
            k.members.push((who, id, None));
        }
        let u = self.units.entry((who, id)).or_default();
        if u.keys.is_empty() {
            self.stats.keyed_ops += 1;
        }
        u.keys.push(key);
        if receives {
            u.receives.push(key);
        }
    }

    pub fn stats(&self) -> MatchStats {
        self.stats
    }

    /// Op `id` of `who` began on the GPU at `t`: what that teaches (itself included).
    pub fn began(&mut self, who: Who, id: u64, t: Ns) -> Vec<Taught> {
        let mut out = vec![];
        // The parties in flight of the keys that completed.
        let mut in_flight = vec![];
        let Some(keys) = self.units.get(&(who, id)).map(|u| u.keys.clone()) else {
            return out;
        };
        for key in keys {
            let Some(k) = self.keys.get_mut(&key) else {
                continue;
            };
            for m in k.members.iter_mut().filter(|m| m.0 == who && m.1 == id) {
                m.2.get_or_insert(t);
            }
            if k.done.is_some()
                || k.members.len() < k.parties as usize
                || k.members.iter().any(|m| m.2.is_none())
            {
                continue;
            }
            let done = k.members.iter().filter_map(|m| m.2).max().unwrap_or(t);
            k.done = Some(done);
            self.stats.completed_keys += 1;
            let members = k.members.clone();
            for &(w, i, _) in &members {
                let Some(u) = self.units.get_mut(&(w, i)) else {
                    continue;
                };
                u.done += 1;
                let first = u.first_done.map_or(done, |f| f.min(done));
                u.first_done = Some(first);
                match u.ended {
                    None => in_flight.push((w, i)),
                    Some((end, sig)) if u.done == u.keys.len() => {
                        let others = members
                            .iter()
                            .filter(|m| (m.0, m.1) != (w, i))
                            .filter_map(|m| m.2)
                            .max();
                        let from = if sig.collective() {
                            Some(first)
                        } else if !sig.has_send() && u.keys.len() == 1 {
                            others
                        } else {
                            None
                        };
                        if let Some(from) = from {
                            out.push(Taught::Transferred {
                                who: w,
                                sig,
                                ns: end.saturating_sub(from),
                            });
                        }
                        self.units.remove(&(w, i));
                    }
                    Some(_) => {}
                }
            }
        }
        in_flight.sort_unstable();
        in_flight.dedup();
        for (w, i) in in_flight {
            out.push(Taught::Transferring {
                who: w,
                id: i,
                t: self.transferring(w, i),
            });
        }
        out
    }

    /// Since when op `id` of `who` transfers for one of its keys: the earliest completion of a
    /// key whose data has not all arrived yet (`None`: no such key).
    pub fn transferring(&self, who: Who, id: u64) -> Option<Ns> {
        let u = self.units.get(&(who, id))?;
        u.keys
            .iter()
            .filter_map(|key| self.keys.get(key))
            .filter(|k| !k.delivered)
            .filter_map(|k| k.done)
            .min()
    }

    /// When the first receiver of op `id` of `who`'s sends began: the earliest completion of a
    /// key it sends on (`None`: no such key completed, or it has none).
    pub fn receiver_began(&self, who: Who, id: u64) -> Option<Ns> {
        let u = self.units.get(&(who, id))?;
        u.keys
            .iter()
            .filter(|key| !u.receives.contains(key))
            .filter_map(|key| self.keys.get(key))
            .filter_map(|k| k.done)
            .min()
    }

    /// The earliest op `id` of `who` can have begun transferring, from the begins of its keys'
    /// parties seen so far (`None`: it has no key, or none of them began).
    pub fn floor(&self, who: Who, id: u64) -> Option<Floor> {
        let u = self.units.get(&(who, id))?;
        let mut t: Option<Ns> = None;
        for key in &u.keys {
            let latest = self
                .keys
                .get(key)
                .and_then(|k| k.members.iter().filter_map(|m| m.2).max());
            // A key forgotten (evicted) says nothing: the floor cannot be known.
            let latest = latest?;
            t = Some(t.map_or(latest, |x| x.min(latest)));
        }
        let others = match u.keys.as_slice() {
            [key] => self
                .keys
                .get(key)
                .filter(|k| k.done.is_some())
                .and_then(|k| {
                    k.members
                        .iter()
                        .filter(|m| (m.0, m.1) != (who, id))
                        .filter_map(|m| m.2)
                        .max()
                }),
            _ => None,
        };
        let remote = u
            .keys
            .iter()
            .filter_map(|key| self.keys.get(key))
            .filter(|k| k.members.len() < k.parties as usize)
            .map(|k| k.parties)
            .max();
        Some(Floor {
            t: t?,
            others,
            remote,
        })
    }

    /// For each key of op `id` of `who` all of whose parties were issued here and that has not
    /// completed: its parties that have not begun (what must begin before its data can move).
    pub fn waiting_for(&self, who: Who, id: u64) -> Vec<Vec<(Who, u64)>> {
        let Some(u) = self.units.get(&(who, id)) else {
            return vec![];
        };
        u.keys
            .iter()
            .filter_map(|key| self.keys.get(key))
            .filter(|k| k.done.is_none() && k.members.len() == k.parties as usize)
            .map(|k| {
                k.members
                    .iter()
                    .filter(|m| m.2.is_none())
                    .map(|m| (m.0, m.1))
                    .collect()
            })
            .collect()
    }

    /// Whether op `id` of `who` (in flight) has match keys.
    pub fn has(&self, who: Who, id: u64) -> bool {
        self.units
            .get(&(who, id))
            .is_some_and(|u| !u.keys.is_empty() && u.ended.is_none())
    }

    /// Op `id` of `who` ended (`end`: at that GPU time, with its signature, when it was timed) or
    /// will never be timed. One whose keys did not all complete yet is kept a while: its
    /// partners' begins may be read after its end. An op that ended has all the data of the keys
    /// it receives: what that changes for their other parties in flight.
    pub fn ended(&mut self, who: Who, id: u64, end: Option<(Ns, CommSig)>) -> Vec<Taught> {
        let mut out = vec![];
        if end.is_some() {
            let keys = self
                .units
                .get(&(who, id))
                .map_or(vec![], |u| u.receives.clone());
            let mut others = vec![];
            for key in keys {
                if let Some(k) = self.keys.get_mut(&key) {
                    k.delivered = true;
                    others.extend(k.members.iter().map(|m| (m.0, m.1)));
                }
            }
            others.retain(|&m| m != (who, id));
            others.sort_unstable();
            others.dedup();
            for (w, i) in others {
                if self.units.get(&(w, i)).is_some_and(|u| u.ended.is_none()) {
                    out.push(Taught::Transferring {
                        who: w,
                        id: i,
                        t: self.transferring(w, i),
                    });
                }
            }
        }
        self.forget_ended(who, id, end);
        out
    }

    fn forget_ended(&mut self, who: Who, id: u64, end: Option<(Ns, CommSig)>) {
        let Some(u) = self.units.get_mut(&(who, id)) else {
            return;
        };
        match end {
            Some(e) if u.done < u.keys.len() && u.ended.is_none() => {
                u.ended = Some(e);
                if self.ended.len() >= MAX_ENDED {
                    if let Some(old) = self.ended.pop_front() {
                        if self.units.get(&old).is_some_and(|u| u.ended.is_some()) {
                            self.units.remove(&old);
                        }
                    }
                }
                self.ended.push_back((who, id));
            }
            _ => {
                self.units.remove(&(who, id));
            }
        }
    }

    /// Keeps the ops of the processes `live` says are still there.
    pub fn retain(&mut self, live: impl Fn(u32) -> bool) {
        self.units.retain(|k, _| live(k.0 .0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::obs::GpuId;

    const A: Who = (1, GpuId(0x1100));
    const B: Who = (2, GpuId(0x1200));
    const C: Who = (3, GpuId(0x1300));

    #[test]
    fn a_pair_transfers_from_the_later_begin_on_both_sides() {
        let mut p = Partners::default();
        p.matched(A, 10, 0xaa, 2, false);
        // The receiver began first: nothing yet.
        assert!(p.began(A, 10, 1_000).is_empty());
        // Its sender's op is issued and begins later.
        p.matched(B, 20, 0xaa, 2, false);
        let out = p.began(B, 20, 5_000);
        assert_eq!(
            out,
            vec![
                Taught::Transferring {
                    who: A,
                    id: 10,
                    t: Some(5_000)
                },
                Taught::Transferring {
                    who: B,
                    id: 20,
                    t: Some(5_000)
                }
            ]
        );
        // Told once.
        assert!(p.began(B, 20, 6_000).is_empty());
        assert_eq!(
            p.stats(),
            MatchStats {
                keyed_ops: 2,
                completed_keys: 1
            }
        );
        let floor = |others| {
            Some(Floor {
                t: 5_000,
                others: Some(others),
                remote: None,
            })
        };
        assert_eq!(
            (p.floor(A, 10), p.floor(B, 20)),
            (floor(5_000), floor(1_000))
        );
        assert_eq!(p.floor(A, 99), None);
    }

    #[test]
    fn a_collective_waits_for_every_party_and_a_remote_one_never_completes() {
        let mut p = Partners::default();
        for (w, id) in [(A, 1), (B, 2)] {
            p.matched(w, id, 0xc0, 3, false);
        }
        assert!(p.began(A, 1, 100).is_empty());
        assert!(p.began(B, 2, 200).is_empty());
        p.matched(C, 3, 0xc0, 3, false);
        let out = p.began(C, 3, 150);
        assert_eq!(out.len(), 3);
        assert!(out
            .iter()
            .all(|b| matches!(b, Taught::Transferring { t: Some(200), .. })));
        // Four parties, three local: never complete; the floor is the latest local begin.
        for (w, id, t) in [(A, 4, 300), (B, 5, 900), (C, 6, 400)] {
            p.matched(w, id, 0xc1, 4, false);
            assert!(p.began(w, id, t).is_empty());
        }
        assert_eq!(
            p.floor(A, 4),
            Some(Floor {
                t: 900,
                others: None,
                remote: Some(4)
            })
        );
    }

    #[test]
    fn a_group_is_busy_from_its_first_completed_key() {
        let mut p = Partners::default();
        // B sends to A and receives from C in one group (two keys).
        p.matched(B, 7, 0x01, 2, false);
        p.matched(B, 7, 0x02, 2, false);
        p.matched(A, 1, 0x01, 2, false);
        p.matched(C, 3, 0x02, 2, false);
        p.began(B, 7, 1_000);
        let out = p.began(A, 1, 2_000);
        let at = |out: &[Taught], w: Who| {
            out.iter().find_map(|x| match *x {
                Taught::Transferring { who, t, .. } if who == w => t,
                _ => None,
            })
        };
        assert_eq!(at(&out, B), Some(2_000));
        assert_eq!(at(&out, A), Some(2_000));
        let out = p.began(C, 3, 1_500);
        // Busy from the earlier completion (2 000 > 1 500: the second key completed first in
        // GPU time, seen later).
        assert_eq!(at(&out, B), Some(1_500));
        assert_eq!(
            p.floor(B, 7),
            Some(Floor {
                t: 1_500,
                others: None,
                remote: None
            })
        );
    }

    #[test]
    fn a_groups_sends_wait_for_their_receivers_not_for_its_receives() {
        let mut p = Partners::default();
        // B's group sends on 0x01 (to A) and receives on 0x02 (from C).
        p.matched(B, 7, 0x01, 2, false);
        p.matched(B, 7, 0x02, 2, true);
        p.matched(A, 1, 0x01, 2, true);
        p.matched(C, 3, 0x02, 2, false);
        p.began(C, 3, 500);
        p.began(B, 7, 1_000);
        // Its receive's sender was there: under way, but no receiver of its send yet.
        assert_eq!(p.transferring(B, 7), Some(1_000));
        assert_eq!(p.receiver_began(B, 7), None);
        p.began(A, 1, 4_000);
        assert_eq!(p.receiver_began(B, 7), Some(4_000));
        // A receive has no send of its own.
        assert_eq!(p.receiver_began(A, 1), None);
    }

    #[test]
    fn ended_and_gone_ops_teach_nothing() {
        let mut p = Partners::default();
        p.matched(A, 1, 0x05, 2, false);
        p.matched(B, 2, 0x05, 2, false);
        assert!(p.has(A, 1) && !p.has(A, 2));
        p.ended(A, 1, None);
        assert!(!p.has(A, 1));
        assert!(p.began(A, 1, 10).is_empty());
        p.retain(|pid| pid != 2);
        assert!(p.began(B, 2, 10).is_empty());
    }

    #[test]
    fn a_partners_begin_read_after_the_ops_end_still_teaches_its_transfer() {
        let mut p = Partners::default();
        let sig = CommSig {
            comm: 3,
            kind: crate::inference::obs::CommKind::AllGather,
            peer: -1,
            bytes: 64,
            largest_send: 0,
        };
        p.matched(A, 1, 0x07, 2, false);
        p.matched(B, 2, 0x07, 2, false);
        p.began(A, 1, 1_000);
        // A's op ended at 9 000 before B's begin (at 6 000) was read.
        p.ended(A, 1, Some((9_000, sig)));
        assert!(!p.has(A, 1));
        let out = p.began(B, 2, 6_000);
        assert!(out.contains(&Taught::Transferred {
            who: A,
            sig,
            ns: 3_000
        }));
        assert!(out.contains(&Taught::Transferring {
            who: B,
            id: 2,
            t: Some(6_000)
        }));
        // Taught once, and the ended op is forgotten.
        assert!(!p.units.contains_key(&(A, 1)));
        // A receive that ended before its send's begin was read: bounded by the send's begin
        // (9 000 - 4 000); the send, which may have moved its data from its own begin, teaches
        // nothing.
        let recv = CommSig {
            kind: crate::inference::obs::CommKind::Recv,
            peer: 1,
            ..sig
        };
        let send = CommSig {
            kind: crate::inference::obs::CommKind::Send,
            peer: 0,
            ..sig
        };
        p.matched(A, 3, 0x09, 2, false);
        p.matched(B, 4, 0x09, 2, false);
        p.began(A, 3, 1_000);
        p.ended(A, 3, Some((9_000, recv)));
        let out = p.began(B, 4, 4_000);
        assert!(out.contains(&Taught::Transferred {
            who: A,
            sig: recv,
            ns: 5_000
        }));
        p.matched(A, 6, 0x0a, 2, false);
        p.matched(B, 7, 0x0a, 2, false);
        p.began(A, 6, 1_000);
        p.ended(A, 6, Some((9_000, send)));
        let out = p.began(B, 7, 4_000);
        assert!(!out.iter().any(|t| matches!(t, Taught::Transferred { .. })));
        // An untimed end (no times) keeps nothing.
        p.matched(A, 5, 0x08, 2, false);
        p.ended(A, 5, None);
        assert!(!p.units.contains_key(&(A, 5)));
    }

    #[test]
    fn a_receive_that_ended_frees_its_sender() {
        let mut p = Partners::default();
        let recv = CommSig {
            comm: 3,
            kind: crate::inference::obs::CommKind::Recv,
            peer: 1,
            bytes: 64,
            largest_send: 0,
        };
        // B sends to A (0x01) and receives from C (0x02) in one group; C sends to B alone.
        p.matched(B, 7, 0x01, 2, false);
        p.matched(B, 7, 0x02, 2, true);
        p.matched(A, 1, 0x01, 2, true);
        p.matched(C, 3, 0x02, 2, false);
        for (w, id, t) in [(B, 7, 1_000), (A, 1, 2_000), (C, 3, 3_000)] {
            p.began(w, id, t);
        }
        assert_eq!(p.transferring(B, 7), Some(2_000));
        // A's receive ended: B's send to it is done; B still waits for C's data (from 3 000).
        let out = p.ended(A, 1, Some((5_000, recv)));
        assert_eq!(
            out,
            vec![Taught::Transferring {
                who: B,
                id: 7,
                t: Some(3_000)
            }]
        );
        // B's group ended, so C's send to it is done: nothing moves for C any more.
        let out = p.ended(B, 7, Some((6_000, recv)));
        assert_eq!(
            out,
            vec![Taught::Transferring {
                who: C,
                id: 3,
                t: None
            }]
        );
        assert_eq!(p.transferring(C, 3), None);
        // An untimed end delivers nothing.
        p.matched(A, 8, 0x03, 2, true);
        p.matched(C, 9, 0x03, 2, false);
        p.began(A, 8, 7_000);
        p.began(C, 9, 7_500);
        assert!(p.ended(A, 8, None).is_empty());
        assert_eq!(p.transferring(C, 9), Some(7_500));
    }
}
