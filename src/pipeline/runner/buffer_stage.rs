//! The state of a runner's buffer stage (the shuffler's, or an s3 rollover's): the
//! buffer, the parts of the flush being written, and the clock and rng they are given. The
//! stage's steps are in `buffer.rs`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use async_nats::Subject;
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::time::Instant;

use crate::config::SinkSpec;
use crate::pipeline::batch::Batch;
use crate::pipeline::metrics::{BufferMetrics, SinkMetrics};
use crate::pipeline::shuffle::{Mode, ShuffleBuffer};

/// The buffer stage: the buffer, and the clock and rng it is given. What it holds is kept
/// alive by the sink's keeper, which sees the buffer.
pub(super) struct Shuffle {
    pub(super) buffer: ShuffleBuffer,
    /// `"shuffle"` or `"rollover"`, for the log.
    pub(super) what: &'static str,
    pub(super) metrics: BufferMetrics,
    /// Origin of the buffer's millisecond clock.
    pub(super) origin: Instant,
    pub(super) rng: StdRng,
    /// The parts of the flush being written, the next one last, while the next buffer
    /// fills.
    pub(super) parts: Vec<Batch>,
    /// Their reply subjects, the next one first: the keeper's view of them.
    pub(super) waiting: VecDeque<Arc<Vec<Subject>>>,
}

impl Shuffle {
    /// The buffer stage the sink's settings ask for, if any: `delivery.shuffle` shuffles,
    /// a destination that accumulates gets its batches written whole.
    pub(super) fn for_sink(spec: &SinkSpec, m: &SinkMetrics) -> Option<Shuffle> {
        let batch_size = spec.delivery.batch_size;
        let (buffer, what, metrics) = match (&spec.delivery.shuffle, spec.accumulate()) {
            (Some(cfg), _) => (
                ShuffleBuffer::new(Mode::Shuffle, cfg.buffer, cfg.flush_ms, batch_size),
                "shuffle",
                m.shuffle.clone(),
            ),
            (None, Some(a)) => (
                ShuffleBuffer::new(Mode::Whole, a.messages, a.flush_ms, batch_size)
                    .with_bytes(a.bytes, spec.delivery.max_batch_bytes),
                "rollover",
                m.rollover.clone(),
            ),
            (None, None) => return None,
        };
        Some(Shuffle {
            buffer,
            what,
            metrics,
            origin: Instant::now(),
            rng: StdRng::from_os_rng(),
            parts: Vec::new(),
            waiting: VecDeque::new(),
        })
    }

    pub(super) fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    /// How long the next pull may be waited for: not at all while a flush has parts to
    /// write (a pull that is not ready must not hold them up), else until the buffer's
    /// flush timer fires, if it holds anything.
    pub(super) fn deadline(&self) -> Option<Instant> {
        if !self.parts.is_empty() {
            return Some(Instant::now());
        }
        self.buffer
            .deadline_ms()
            .map(|ms| self.origin + Duration::from_millis(ms))
    }

    /// The `buffered` gauge: the filling buffer and the flush's parts not yet written.
    pub(super) fn show_buffered(&self) {
        let flushing: usize = self.waiting.iter().map(|w| w.len()).sum();
        self.metrics
            .buffered
            .set((self.buffer.len() + flushing) as i64);
    }
}
