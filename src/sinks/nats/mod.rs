//! NATS republish destination: each message is published, with its headers, to a subject
//! made from a template, into a JetStream stream on the same or other NATS servers, and a
//! batch counts committed only once every copy has its PubAck.
//!
//! The module is split so the decisions can be tested without a server:
//! - [`template`] (pure) parses the subject template and renders one subject per message;
//! - [`copy`] (pure) builds a copy's headers: the original's, the source's stream and
//!   sequence, and `Nats-Msg-Id` = `<stream>:<sequence>`;
//! - [`classify`] (pure) turns the outcome of each publish into the batch's result;
//! - [`batch`] (pure) marks the copies of an atomic batch and reads the server's replies
//!   into the batch's verdict; `atomic` sends one atomic batch and collects its replies;
//! - `sink` holds [`NatsRepublishSink`], the only part doing I/O: its own connection
//!   (never the source's: a connection is a fault domain), the target and loop checks at
//!   open, and the pipelined publish — every copy sent, then every PubAck awaited.
//!
//! # Delivery guarantee
//!
//! At least once on the wire, exactly once in the target stream within its duplicate
//! window: a redelivered message, or a batch published again after a failure, carries the
//! same `Nats-Msg-Id`, and the target stores it once. Past the duplicate window a
//! redelivery is stored again.

mod atomic;
pub mod batch;
pub mod classify;
pub mod config;
mod connect_error;
pub mod copy;
mod sink;
pub mod template;

pub use config::NatsRepublishConfig;
pub use sink::NatsRepublishSink;
