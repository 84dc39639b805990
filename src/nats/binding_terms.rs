//! The terms of binding a sink to its stream and consumer: what the sink asks of them
//! ([`Needs`]) and how binding fails ([`BindError`]). Shared by the binding itself
//! (`binding.rs`) and the checks of an existing consumer (`consumer_checks.rs`).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::SinkSpec;

/// Why a sink could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// The stream does not exist and `create_stream` is not configured (exit 69).
    #[error("sink {sink}: stream {stream} does not exist on the server; create it, or add `source.create_stream` to let jetsink create it")]
    StreamMissing {
        /// Sink name.
        sink: String,
        /// Stream name.
        stream: String,
    },
    /// The existing consumer differs in a way that is unsafe to change (exit 78).
    #[error("sink {sink}: existing consumer {detail}; delete the consumer or change the config")]
    Drift {
        /// Sink name.
        sink: String,
        /// Which consumer, which setting, its value on the server and in the config.
        detail: String,
    },
    /// The sink's consumer would read its own dead-letter copies back (exit 78).
    #[error("sink {sink}: {detail}, so every dead-letter copy would come back to this sink, a loop; give the consumer a filter (`source.subjects`) that excludes the dead-letter subject, or send dead letters to a subject another stream captures")]
    DeadLetterLoop {
        /// Sink name.
        sink: String,
        /// Which stream captures which dead-letter subject, and what the consumer reads.
        detail: String,
    },
    /// The server refused a stream or consumer configuration; restarting cannot help
    /// (exit 78).
    #[error("sink {sink}: {action} refused by the server: {message}; fix the config or the existing stream")]
    Refused {
        /// Sink name.
        sink: String,
        /// What was being done.
        action: String,
        /// The server's description and error code.
        message: String,
    },
    /// The config asks for something this server version cannot do, and the server would
    /// silently do something else instead (exit 78).
    #[error("sink {sink}: {detail}")]
    ServerTooOld {
        /// Sink name.
        sink: String,
        /// What is asked, the server's version, and what would fix it.
        detail: String,
    },
    /// A JetStream API call failed (exit 69 at start-up).
    #[error("sink {sink}: {action} failed: {message}")]
    Api {
        /// Sink name.
        sink: String,
        /// What was being done.
        action: String,
        /// The server's or client's reason.
        message: String,
    },
}

impl BindError {
    /// Whether the error is a configuration problem (exit 78) rather than an unavailable
    /// dependency (exit 69).
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            BindError::Drift { .. }
                | BindError::DeadLetterLoop { .. }
                | BindError::Refused { .. }
                | BindError::ServerTooOld { .. }
        )
    }

    /// The sink that could not be bound.
    pub fn sink(&self) -> &str {
        match self {
            BindError::StreamMissing { sink, .. }
            | BindError::Drift { sink, .. }
            | BindError::DeadLetterLoop { sink, .. }
            | BindError::Refused { sink, .. }
            | BindError::ServerTooOld { sink, .. }
            | BindError::Api { sink, .. } => sink,
        }
    }
}

/// What a sink asks of its consumer and stream, checked against what the server has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs {
    /// Messages per pull (`delivery.batch_size`).
    pub batch: usize,
    /// Payload bytes per pull (`delivery.max_batch_bytes`).
    pub max_bytes: usize,
    /// Longest pull expiry (`delivery.batch_timeout_ms`).
    pub expires: Duration,
    /// The filter of the sink's dead-letter copies, when it dead-letters.
    pub dead_letter: Option<String>,
    /// What the consumer's `metadata` says about its owner (jetsink version, sink name,
    /// config hash), set on servers that keep consumer metadata (2.10+).
    pub owner: BTreeMap<String, String>,
    /// JSON path of the consumer's filter subjects in the config (`source.subjects`, or a
    /// lane's `subjects` in per-lane consumer mode), for messages about them.
    pub subjects_path: String,
}

impl Needs {
    /// What `spec`'s pulls and dead-letter copies need, for the consumer binding that
    /// feeds `lane` (see [`SinkSpec::consumer_bindings`]).
    pub fn of(spec: &SinkSpec, lane: Option<usize>) -> Needs {
        Needs {
            subjects_path: spec.subjects_path_of(lane),
            batch: spec.delivery.batch_size,
            max_bytes: spec.delivery.max_batch_bytes,
            expires: Duration::from_millis(spec.delivery.batch_timeout_ms),
            dead_letter: spec
                .dead_letter
                .as_ref()
                .filter(|d| d.enabled)
                .map(|d| d.capture(&spec.name)),
            owner: BTreeMap::from([
                ("jetsink.version".into(), env!("CARGO_PKG_VERSION").into()),
                ("jetsink.sink".into(), spec.name.clone()),
                ("jetsink.config_hash".into(), spec.config_hash()),
            ]),
        }
    }
}
