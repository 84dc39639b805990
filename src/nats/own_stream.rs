//! The streams jetsink creates for its own copies — dead letters and job results — when
//! the config's `create_stream` asks for them: one way to create them, one error naming
//! the sink, the stream and the setting.

use std::time::Duration;

use async_nats::jetstream::{self, context::CreateStreamError, stream};

use super::concurrent_create::get_or_create;
use crate::config::StorageKind;

/// A stream of jetsink's own copies, as its `create_stream` section describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnStream {
    /// Stream name.
    pub name: String,
    /// The one subject (or wildcard) it captures.
    pub subject: String,
    /// File or memory.
    pub storage: StorageKind,
    /// How long a copy is kept; zero keeps them.
    pub max_age: Duration,
    /// Replicas.
    pub replicas: usize,
    /// Window in which a repeated copy (same `Nats-Msg-Id`) is dropped.
    pub duplicate_window: Duration,
}

/// A stream jetsink should have created could not be (exit 69 at start-up).
#[derive(Debug, thiserror::Error)]
#[error("sink {sink}: creating {role} stream {stream} ({setting}): {source}")]
pub struct CreateStreamFailed {
    /// The sink it is for.
    pub sink: String,
    /// What it holds: `dead-letter` or `results`.
    pub role: &'static str,
    /// The stream's name.
    pub stream: String,
    /// The JSON path of the `create_stream` section.
    pub setting: String,
    /// What the server said.
    #[source]
    pub source: CreateStreamError,
}

/// Creates `own` unless a stream of that name exists (its settings are left as they are).
pub async fn ensure(
    js: &jetstream::Context,
    own: &OwnStream,
    sink: &str,
    role: &'static str,
    setting: String,
) -> Result<(), CreateStreamFailed> {
    let cfg = stream::Config {
        name: own.name.clone(),
        subjects: vec![own.subject.clone()],
        storage: match own.storage {
            StorageKind::File => stream::StorageType::File,
            StorageKind::Memory => stream::StorageType::Memory,
        },
        max_age: own.max_age,
        num_replicas: own.replicas,
        duplicate_window: own.duplicate_window,
        ..Default::default()
    };
    match get_or_create(js, cfg, sink).await {
        Ok(_) => Ok(()),
        Err(source) => Err(CreateStreamFailed {
            sink: sink.to_string(),
            role,
            stream: own.name.clone(),
            setting,
            source,
        }),
    }
}
