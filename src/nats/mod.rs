//! Everything that talks to NATS before the runner takes over: connecting, binding a
//! sink's stream and durable consumer, and pulling one bounded batch.

pub mod binding;
pub mod connect;
pub mod fetch;

pub use binding::{bind, BindError, Bound};
pub use connect::{connect, ConnectError};
pub use fetch::{fetch_any, fetch_batch, FetchLimits};
