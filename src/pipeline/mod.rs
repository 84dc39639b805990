//! The stages between a fetched batch and its ACKs: retry policy and the per-sink runner.

pub mod lanes;
pub mod retry;
pub mod runner;

pub use runner::Runner;
