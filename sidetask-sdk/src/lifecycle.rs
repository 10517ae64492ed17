//! The life cycle of a side task: submitted -> created -> paused <-> running -> finished | stopped.
//!
//! * `Submitted`: the task object exists, `init` has not run.
//! * `Created`: `init` succeeded (GPU state, data loaded).
//! * `Paused`: waiting for a grant that fits the next step (keeps its GPU memory, like FreeRide).
//! * `Running`: steps are being run inside a grant.
//! * `Finished`: the task said it is done (from paused or running).
//! * `Stopped`: stopped before finishing (stop requested, SIGTERM, or an error), from any
//!   non-final state.
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum State {
    Submitted = 0,
    Created = 1,
    Paused = 2,
    Running = 3,
    Finished = 4,
    Stopped = 5,
}

impl State {
    pub const ALL: [State; 6] = [
        State::Submitted,
        State::Created,
        State::Paused,
        State::Running,
        State::Finished,
        State::Stopped,
    ];

    pub fn name(self) -> &'static str {
        match self {
            State::Submitted => "submitted",
            State::Created => "created",
            State::Paused => "paused",
            State::Running => "running",
            State::Finished => "finished",
            State::Stopped => "stopped",
        }
    }

    pub fn from_i32(v: i32) -> Option<State> {
        State::ALL.into_iter().find(|s| *s as i32 == v)
    }

    pub fn is_final(self) -> bool {
        matches!(self, State::Finished | State::Stopped)
    }

    /// Whether the machine allows `self -> to`.
    pub fn can_go_to(self, to: State) -> bool {
        use State::*;
        matches!(
            (self, to),
            (Submitted, Created)
                | (Created, Paused)
                | (Paused, Running)
                | (Running, Paused)
                | (Paused | Running, Finished)
                | (Submitted | Created | Paused | Running, Stopped)
        )
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransitionError {
    pub from: State,
    pub to: State,
}

impl fmt::Display for TransitionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid life-cycle transition {} -> {}",
            self.from, self.to
        )
    }
}

impl std::error::Error for TransitionError {}

/// The current state plus the history of transitions (for status and tests).
#[derive(Clone, Debug)]
pub struct Lifecycle {
    state: State,
    transitions: u64,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            state: State::Submitted,
            transitions: 0,
        }
    }
}

impl Lifecycle {
    pub fn state(&self) -> State {
        self.state
    }

    pub fn transitions(&self) -> u64 {
        self.transitions
    }

    /// Moves to `to`, or returns why not (the state is unchanged then).
    pub fn go(&mut self, to: State) -> Result<State, TransitionError> {
        let from = self.state;
        if !from.can_go_to(to) {
            return Err(TransitionError { from, to });
        }
        self.state = to;
        self.transitions += 1;
        Ok(from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_path_and_rejections() {
        let mut l = Lifecycle::default();
        assert!(l.go(State::Running).is_err());
        l.go(State::Created).unwrap();
        assert_eq!(
            l.go(State::Running),
            Err(TransitionError {
                from: State::Created,
                to: State::Running
            })
        );
        l.go(State::Paused).unwrap();
        l.go(State::Running).unwrap();
        l.go(State::Paused).unwrap();
        l.go(State::Running).unwrap();
        l.go(State::Finished).unwrap();
        for s in State::ALL {
            assert!(l.go(s).is_err(), "finished -> {s} must be rejected");
        }
        assert_eq!(l.state(), State::Finished);
        assert_eq!(l.transitions(), 6);
    }

    #[test]
    fn stop_from_every_live_state_only() {
        for s in State::ALL {
            assert_eq!(s.can_go_to(State::Stopped), !s.is_final(), "{s}");
            assert_eq!(State::from_i32(s as i32), Some(s));
        }
        assert!(!State::Created.can_go_to(State::Finished));
        assert!(!State::Submitted.can_go_to(State::Paused));
        assert_eq!(State::from_i32(9), None);
    }
}
