//! Everything that talks to NATS before the runner takes over: connecting, binding a
//! sink's stream and durable consumer, pulling one bounded batch, reading the delivery
//! metadata of what was pulled, holding the pin of an active/standby priority group, pausing a consumer, and reading stored messages raw when the client cannot
//! (with the rule that says which header blocks it cannot read).

mod ask_again;
pub mod backlog;
pub mod binding;
pub mod binding_terms;
pub mod capacity;
pub mod concurrent_create;
pub mod connect;
pub mod consumer_checks;
pub mod credentials;
pub mod fetch;
pub mod fetch_each;
pub mod fetch_strict;
pub mod header_block;
pub mod inbox;
pub mod linger;
pub mod own_stream;
pub mod pause;
pub mod pin;
pub mod pull;
pub mod raw_read;
pub mod replay_consumer;
pub mod reply;
pub mod server_version;

pub use ask_again::ATTEMPTS as BIND_REQUEST_ATTEMPTS;
pub use binding::{bind, BindError, Bound, Needs};
pub use connect::{connect, ConnectError, Connection, ConnectionMetrics, Drops, Links};
pub use fetch::{fetch_any, fetch_batch, FetchLimits};
pub use fetch_each::fetch_each;
pub use fetch_strict::{fetch_strict, StrictPull};
pub use pin::{Pin, PinChange};
pub use pull::Pulls;
