//! The stages between a fetched batch and its ACKs: preparation (normalize, metadata,
//! lanes), retry policy, acknowledgements, the per-sink runner, and what it knows of a
//! pause of its consumers.
//!
//! Only [`Runner`], [`Stages`] and what builds them are public: the acknowledger and the
//! disposal policy are private to this module, so "only the runner acknowledges" holds by
//! visibility, not by convention.

mod acks;
mod batch;
mod delay;
mod disposal;
pub mod documented;
mod isolate;
mod keeper;
pub mod lanes;
pub mod linger;
pub mod metrics;
pub mod outstanding;
pub mod pause;
mod puller;
pub mod randomizer;
mod reconfirm;
mod retry;
mod room;
mod runner;
mod settle;
#[cfg(test)]
mod settle_props;
#[cfg(test)]
mod settle_tests;
mod shuffle;
#[cfg(test)]
mod testing;

pub use batch::Stages;
pub use metrics::{BufferMetrics, LaneMetrics, SinkMetrics};
pub use runner::{Binding, Observers, Runner};
