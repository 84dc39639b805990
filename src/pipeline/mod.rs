//! The stages between a fetched batch and its ACKs: preparation (normalize, metadata,
//! lanes), retry policy, acknowledgements, and the per-sink runner.

pub mod acks;
pub mod batch;
pub mod disposal;
pub mod lanes;
pub mod randomizer;
pub mod retry;
pub mod runner;

pub use batch::Stages;
pub use runner::{Binding, Observers, Runner};
