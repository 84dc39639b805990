//! The JSON Lines write path of [`FileSink`]: what of a batch the files do not hold yet
//! ([`Catalog`]), encoded in the batch's order and appended with one write and one
//! fdatasync; the rest committed without a second line. And the catalog's loading at
//! each open.

use std::path::Path;

use super::held::Catalog;
use super::naming;
use super::record;
use super::sink::{FileSink, RETAINED_BUFFER_BYTES};
use crate::envelope::{rfc3339, Envelope};
use crate::sinks::contract::SinkError;
use crate::sinks::util::io_error;

impl FileSink {
    /// Catalogs what the prefix's files hold; `current` is the file appended to next.
    pub(super) fn load_catalog(&mut self, current: &Path) -> Result<(), SinkError> {
        let dir = self.dir.path();
        let (catalog, read) = Catalog::load(
            self.stream.clone(),
            dir,
            &self.config.prefix,
            self.since,
            Some(current),
        )
        .map_err(|e| {
            io_error(
                &format!("cannot catalog the files of {}", dir.display()),
                &e,
            )
        })?;
        if read > 1 {
            tracing::info!(directory = %dir.display(), files = read, "read JSON Lines files without a seal to learn which messages they hold; sealed them");
        }
        self.catalog = catalog;
        Ok(())
    }

    /// Writes what of `batch` the files do not hold yet, in the batch's order; the
    /// positions of the rest (held, or a second copy of a message in the batch).
    pub(super) fn write_new(&mut self, batch: &[Envelope]) -> Result<Vec<usize>, SinkError> {
        let now = (self.clock)();
        if let Some(p) = self.parquet.as_mut() {
            return p.write(batch, now);
        }
        let held = self
            .catalog
            .held(self.dir.path(), batch.iter().map(|e| e.stream_sequence))
            .map_err(|e| {
                io_error(
                    &format!("cannot read the seals of {}", self.dir.path().display()),
                    &e,
                )
            })?;
        let mut seen = std::collections::HashSet::with_capacity(batch.len());
        let mut already = Vec::new();
        let mut written = Vec::with_capacity(batch.len());
        self.buffer.clear();
        let written_at = rfc3339(naming::utc(now));
        for (index, envelope) in batch.iter().enumerate() {
            let seq = envelope.stream_sequence;
            if held.contains(&seq) || !seen.insert(seq) {
                already.push(index);
                continue;
            }
            record::encode(envelope, &written_at, &mut self.buffer).map_err(|e| {
                SinkError::Permanent {
                    index: Some(index),
                    message: format!("cannot encode message as a JSON line: {e}"),
                }
            })?;
            written.push(seq);
        }
        if !already.is_empty() {
            tracing::debug!(directory = %self.dir.path().display(), messages = already.len(), "messages delivered again are in the directory's files; not written again");
        }
        let result = match written.is_empty() {
            true => Ok(()),
            false => self.append_buffer(now, written.len()),
        };
        if self.buffer.capacity() > RETAINED_BUFFER_BYTES {
            self.buffer = Vec::new();
        }
        result?;
        self.catalog.appended(&written);
        Ok(already)
    }
}
