//! JSON Lines file destination (placeholder until implemented).
use super::{Sink, SinkError};
use crate::config::FileConfig;
use crate::envelope::Envelope;
use async_trait::async_trait;
/// JSON Lines files.
pub struct FileSink {
    _c: FileConfig,
}
impl FileSink {
    /// New, unopened.
    pub fn new(c: FileConfig) -> Self {
        FileSink { _c: c }
    }
}
#[async_trait]
impl Sink for FileSink {
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
