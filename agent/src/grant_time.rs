//! How much of a GPU's bubble time (as the agent saw it) its grant was open, and for how long it was
//! held closed by each reason ([`Held`]), over the agent's life: what `freeride status` and the
//! Prometheus exposition say of each GPU. The time from one step of the agent to the next counts
//! for what the earlier step decided; an open grant counts up to its deadline, and time with a
//! trainer out of a bubble (busy, or its bubble not seen yet) counts nowhere.
use crate::grants::Held;
use crate::inference::Ns;

/// One GPU's granted and held time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GrantTime {
    pub granted_ns: Ns,
    /// Indexed as [`Held::ALL`].
    pub held_ns: [Ns; Held::ALL.len()],
    /// The last step noted, and what it decided.
    last: Option<(Ns, Result<Ns, Held>)>,
}

impl GrantTime {
    /// A step at `now` decided `outcome` (`Ok(until)`: open until then).
    pub fn step(&mut self, now: Ns, outcome: Result<Ns, Held>) {
        if let Some((at, before)) = self.last {
            match before {
                Ok(until) => self.granted_ns += until.min(now).saturating_sub(at),
                Err(Held::NotInBubble) => {}
                Err(why) => self.held_ns[why.index()] += now.saturating_sub(at),
            }
        }
        self.last = Some((now, outcome));
    }

    /// Held time by reason, those with any.
    pub fn held(&self) -> impl Iterator<Item = (Held, Ns)> + '_ {
        Held::ALL
            .iter()
            .zip(self.held_ns)
            .filter(|&(_, ns)| ns > 0)
            .map(|(&h, ns)| (h, ns))
    }

    /// Bubble time the agent saw and decided on: granted plus held.
    pub fn decided_ns(&self) -> Ns {
        self.granted_ns + self.held_ns.iter().sum::<Ns>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_step_counts_until_the_next_for_what_it_decided() {
        let mut t = GrantTime::default();
        t.step(0, Err(Held::NotInBubble));
        t.step(100, Err(Held::LowConfidence));
        t.step(150, Ok(400));
        t.step(300, Ok(500)); // renewed
        t.step(350, Ok(360)); // shortened: lapses at 360
        t.step(450, Err(Held::GuardOfPrediction));
        t.step(470, Err(Held::NotInBubble));
        t.step(900, Err(Held::NotInBubble));
        assert_eq!(t.granted_ns, 150 + 50 + 10);
        assert_eq!(
            t.held().collect::<Vec<_>>(),
            vec![(Held::LowConfidence, 50), (Held::GuardOfPrediction, 20)]
        );
        assert_eq!(t.decided_ns(), 210 + 70);
    }
}
