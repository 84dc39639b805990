//! The names every layer shares, and nothing else: a leaf module that imports no other part
//! of jetsink, so the configuration, the envelope, the destinations and the NATS side can
//! all use it without pointing at each other.
//!
//! - [`issue`]: a problem found in the config, with its JSON path (and the collector);
//! - [`names`]: stream, consumer and subject name rules;
//! - [`subject_match`]: whether two subject filters can match one subject (pure);
//! - [`server_url`]: credentials written into a NATS server URL, found and redacted;
//! - [`idempotency`]: what makes a write idempotent, and the message-id header;
//! - [`nats_security`]: the NATS connection settings: TLS and the one authentication
//!   method, where each secret lives;
//! - [`metadata_value`]: the rules one metadata value obeys, for the config checks and the
//!   runtime alike;
//! - [`prometheus_text`]: the Prometheus text exposition format read into samples, for
//!   `metrics show` and the metrics snapshot file (pure);
//! - [`traceparent`]: the W3C `traceparent` header a producer sets, read (pure).

pub mod idempotency;
pub mod issue;
pub mod metadata_value;
pub mod names;
pub mod nats_security;
pub mod prometheus_text;
pub mod server_url;
pub mod subject_match;
pub mod traceparent;
