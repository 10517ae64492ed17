//! Online bubble inference for one GPU's trainer, from what the interposer streams out.
//!
//! The inputs are [`Obs`]ervations in the host clock (CLOCK_MONOTONIC ns): compute launches issued by the
//! host, communication ops issued by the host, and the GPU-side begin/end of those ops (driver events
//! recorded around each op on its stream, polled by the interposer). No schedule is assumed:
//! * [`detector`] turns them into live bubbles: a bubble opens when a communication op that the compute
//!   stream has to wait for begins on the GPU (the compute queued before it has drained) and closes
//!   when it ends, or when the host queues compute that does not wait for it.
//! * [`pattern`] learns the iteration's repeating sequence of communication ops and, for each position
//!   in it, how long the bubble that opens there lasts: the prediction handed out when a bubble opens.
//! * [`score`] measures predicted bubbles against ground truth (precision, recall).
pub mod detector;
pub mod obs;
pub mod pattern;
#[cfg(test)]
pub mod replay;
pub mod score;

pub use detector::{Bubble, Detector};
pub use obs::{CommSig, Ns, Obs};
pub use pattern::{Pattern, Prediction};
