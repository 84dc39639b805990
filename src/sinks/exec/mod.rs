//! The `exec` destination: the job-queue worker. Each message is a job: a configured
//! program (an argv, no shell) runs once per message with the payload on stdin, in a
//! clean environment, up to `concurrency` at a time; exit 0 commits the job and its
//! standard output becomes the result's `output`.
//!
//! Split by job: [`config`] holds the settings and their checks; [`classify`] turns how a
//! child ended into a per-message [`Outcome`](super::Outcome) and [`capture`] bounds what
//! it printed (both pure, unit- and proptested); [`sink`] starts, feeds, times and kills
//! the children. The runner settles each job by its own outcome (`Written::Each`).

pub mod capture;
pub mod classify;
pub mod config;
pub mod sink;
#[cfg(test)]
mod tests;

pub use config::ExecConfig;
pub use sink::ExecSink;
