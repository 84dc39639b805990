//! Job-queue mode: a sink whose `results` section is set treats each message as a job and
//! publishes the job's result to a results stream before acknowledging it — the one
//! ordering rule of the job-queue design (docs/job-queue.md): a crash before the publish
//! redelivers the job, a crash between publish and ACK publishes the same result again,
//! which the results stream drops by its `Nats-Msg-Id`.
//!
//! [`id`] and [`result`] are pure; [`publish`] talks to NATS. The pipeline decides when a
//! result is due and acknowledges; [`client`] is the client side, shared by `jetsink
//! submit` ([`crate::cmd::submit`]) and the HTTP job API ([`crate::api`]).

pub mod client;
pub mod id;
pub mod metrics;
pub mod publish;
pub mod result;

pub use id::{InvalidJobId, INVALID_JOB_ID};
pub use metrics::JobMetrics;
pub use publish::ResultPublisher;
pub use result::{JobResult, Status};
