//! Bubbles as the inference reports them.
use super::obs::Ns;

/// A bubble, once closed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bubble {
    /// GPU-side begin and end (host clock).
    pub start: Ns,
    pub end: Ns,
    /// When the agent learnt of its begin and of its end.
    pub opened_seen: Ns,
    pub closed_seen: Ns,
    /// The end predicted when it opened, if its position was learnt.
    pub predicted_end: Option<Ns>,
    pub confidence: f64,
    /// Cut short by the process's exit (its forecast voided).
    pub cut_by_exit: bool,
}

/// The bubble open now, as the scheduler sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OpenBubble {
    pub start: Ns,
    pub opened_seen: Ns,
    pub predicted_end: Option<Ns>,
    /// The earliest end seen lately at this position (`start` + the shortest recent length).
    pub shortest_end: Option<Ns>,
    /// Typical deviation of the bubble's length at this position (0 when not predicted).
    pub spread_ns: Ns,
    pub confidence: f64,
    /// Compute is queued behind a wait on communication: the bubble ends on the GPU (when the
    /// communication completes), not when the host queues more compute.
    pub blocked: bool,
    /// The earliest time a communication op in flight may start transferring (and keep the GPU
    /// busy), as learnt: no grant past it.
    pub busy_from: Option<Ns>,
}
