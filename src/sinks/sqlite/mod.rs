//! SQLite destination (placeholder until implemented).
use super::{Sink, SinkError};
use crate::config::SqliteConfig;
use crate::envelope::Envelope;
use async_trait::async_trait;
/// SQLite.
pub struct SqliteSink {
    _c: SqliteConfig,
}
impl SqliteSink {
    /// New, unopened.
    pub fn new(c: SqliteConfig) -> Self {
        SqliteSink { _c: c }
    }
}
#[async_trait]
impl Sink for SqliteSink {
    async fn open(&mut self) -> Result<(), SinkError> {
        Err(SinkError::transient("todo"))
    }
    async fn write_batch(&mut self, _b: &[Envelope]) -> Result<(), SinkError> {
        Err(SinkError::transient("todo"))
    }
    async fn health(&mut self) -> Result<(), SinkError> {
        Err(SinkError::transient("todo"))
    }
}
