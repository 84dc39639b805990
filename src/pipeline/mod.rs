//! The stages between a fetched batch and its ACKs: preparation (normalize, metadata,
//! lanes), retry policy, acknowledgements, and the per-sink runner.

pub mod acks;
pub mod batch;
pub mod lanes;
pub mod retry;
pub mod runner;

pub use batch::Stages;
pub use runner::{Observers, Runner};
