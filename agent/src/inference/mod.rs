//! Online bubble inference for the node's trainers, from what the interposer streams out.
//!
//! The inputs are [`Obs`]ervations (the contract in [`obs`]) of each trainer process on each
//! physical GPU: compute launches and communication ops as the host queued them, on which streams,
//! the events recorded and the stream waits on them, the GPU-side begin and end of each op and of
//! each timed wait, and the host's synchronizes. No schedule and no marker are assumed:
//! * [`timeline`] follows one (process, GPU): which stream waits for what, how far the GPU got, and
//!   so its bubbles, time in which nothing of the trainer can run and nothing transfers
//!   ([`streams`], [`transfer`]);
//! * [`pattern`] learns the recurring sequence of communication ops by aligning it with itself and,
//!   for each position, how long the bubble that opens there lasts: the prediction a grant is sized by;
//!   [`anchors`] predicts a bubble's end from another stage's resumption, and [`sizes`] scales
//!   both by the bytes their bubbles followed where micro-batches' sizes vary;
//! * [`gpus`] keeps the node's timelines and each GPU's state (several trainers on one GPU are idle
//!   only when all are; [`peers`] bounds transfer times with the other processes' ops, and
//!   [`partners`] says when an op's transfer began from its exact partners' begins; [`fabric`]
//!   bounds a collective's transfer when some of its parties are on other nodes);
//! * [`score`] measures bubbles and grants against ground truth.
pub mod anchors;
pub mod bubble;
pub mod fabric;
pub mod gpus;
pub mod obs;
pub mod partners;
pub mod pattern;
pub mod peers;
#[cfg(test)]
pub mod replay;
pub mod score;
pub mod sizes;
pub mod streams;
pub mod timeline;
pub mod transfer;

pub use bubble::{Bubble, OpenBubble};
pub use obs::{CommSig, GpuId, Ns, Obs};
pub use pattern::{Pattern, Prediction};
pub use timeline::Timeline;
