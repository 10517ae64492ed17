//! How long a collective can keep the GPU transferring once its last party has arrived, when some
//! of its parties are on other nodes: an upper bound from a pessimistic model of the fabric
//! between nodes, for the one case in which nothing this node sees bounds the transfer.
//!
//! A node's agent sees the begins of its own parties only. When all of them began long before the
//! op ended (they waited for a party on another node, as every stage of a pipeline but the last
//! to reach an iteration's gradient all-reduce does), neither the partners' begins
//! ([`super::partners`]) nor the durations learnt on this node ([`super::transfer`]: every one of
//! them includes the wait) bound the transfer below the op's whole duration, so the whole wait
//! would count as transferring and its bubble would be missed (recall 0.73 on the second node of
//! the zoo's 2-node job). Once the last party arrives, a collective of `bytes` over `n` parties
//! takes at most `2 (n - 1)` steps of its algorithm (a ring all-reduce's count; the other kinds
//! take fewer) and moves at most twice its buffer through each GPU's link. The defaults are far
//! slower than any fabric NCCL is run on (a step of 50 µs, where NVLink, InfiniBand and RoCE take
//! 2-20 µs; 1 GB/s, 10 GbE's rate): the bound only has to be an upper one. An operator on a slower
//! or congested network sets `FREERIDE_FABRIC_STEP_US` and `FREERIDE_FABRIC_MIN_GBPS`.
use super::obs::{CommSig, Ns};
use std::sync::OnceLock;

/// An algorithm step's latency between nodes, at most.
const STEP_NS: Ns = 50_000;
/// The slowest a GPU's link to another node moves data, bytes per second.
const MIN_BYTES_PER_S: f64 = 1e9;

/// The model in use: the defaults, or the operator's (read once).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fabric {
    pub step_ns: Ns,
    pub min_bytes_per_s: f64,
}

impl Default for Fabric {
    fn default() -> Self {
        Fabric {
            step_ns: STEP_NS,
            min_bytes_per_s: MIN_BYTES_PER_S,
        }
    }
}

impl Fabric {
    /// The defaults with what `FREERIDE_FABRIC_STEP_US` and `FREERIDE_FABRIC_MIN_GBPS` say
    /// (positive numbers; anything else leaves the default).
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Fabric {
        let num = |name: &str| {
            var(name)
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|v| v.is_finite() && *v > 0.0)
        };
        let d = Fabric::default();
        Fabric {
            step_ns: num("FREERIDE_FABRIC_STEP_US").map_or(d.step_ns, |us| (us * 1e3) as Ns),
            min_bytes_per_s: num("FREERIDE_FABRIC_MIN_GBPS").map_or(d.min_bytes_per_s, |g| g * 1e9),
        }
    }

    /// The most a collective of `sig` over `parties` can transfer once its last party arrived.
    pub fn collective_bound(&self, sig: &CommSig, parties: u32) -> Ns {
        let steps = 2 * u64::from(parties.max(2) - 1);
        let data = (2.0 * sig.bytes as f64 / self.min_bytes_per_s * 1e9).min(Ns::MAX as f64 / 2.0);
        (steps * self.step_ns).saturating_add(data as Ns)
    }
}

/// The process's model (the environment read on first use).
pub fn fabric() -> &'static Fabric {
    static F: OnceLock<Fabric> = OnceLock::new();
    F.get_or_init(|| Fabric::from_env(|n| std::env::var(n).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::obs::CommKind;

    fn all_reduce(bytes: u64) -> CommSig {
        CommSig {
            comm: 1,
            kind: CommKind::AllReduce,
            peer: -1,
            bytes,
            largest_send: 0,
        }
    }

    #[test]
    fn the_bound_grows_with_parties_and_bytes() {
        let f = Fabric::default();
        // 4 parties: 6 steps of 50 µs; 4 bytes add 8 ns at 1 GB/s.
        assert_eq!(f.collective_bound(&all_reduce(4), 4), 300_008);
        assert_eq!(f.collective_bound(&all_reduce(4), 8), 700_008);
        // 100 MB: 0.2 s more.
        assert_eq!(
            f.collective_bound(&all_reduce(100_000_000), 2),
            100_000 + 200_000_000
        );
    }

    #[test]
    fn the_operator_can_slow_the_model_down() {
        let env = |n: &str| match n {
            "FREERIDE_FABRIC_STEP_US" => Some("200".to_string()),
            "FREERIDE_FABRIC_MIN_GBPS" => Some("0.5".to_string()),
            _ => None,
        };
        let f = Fabric::from_env(env);
        assert_eq!(f.step_ns, 200_000);
        assert_eq!(f.collective_bound(&all_reduce(1_000), 2), 400_000 + 4_000);
        // Nonsense leaves the defaults.
        let bad = |_: &str| Some("-3".to_string());
        assert_eq!(Fabric::from_env(bad), Fabric::default());
    }
}
