//! A child's standard output, kept up to a bound: the first `max` bytes are kept, the
//! rest counted and discarded, and the kept bytes end on a UTF-8 boundary. Pure.

use crate::sinks::contract::Output;

/// Collects a stream's chunks up to a bound.
#[derive(Debug, Clone)]
pub struct Bounded {
    max: usize,
    kept: Vec<u8>,
    total: u64,
}

impl Bounded {
    /// Keeps at most `max` bytes.
    pub fn new(max: usize) -> Bounded {
        Bounded {
            max,
            kept: Vec::new(),
            total: 0,
        }
    }

    /// Takes the next chunk: what fits is kept, all of it is counted.
    pub fn push(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        let room = self.max - self.kept.len();
        self.kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }

    /// Bytes seen so far, kept or not.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The output: the kept bytes (a sequence cut by the bound is dropped, invalid UTF-8
    /// replaced), and whether anything was discarded.
    pub fn finish(mut self) -> Output {
        let truncated = self.total > self.kept.len() as u64;
        if truncated {
            if let Err(e) = std::str::from_utf8(&self.kept) {
                if e.error_len().is_none() {
                    self.kept.truncate(e.valid_up_to());
                }
            }
        }
        Output {
            text: String::from_utf8_lossy(&self.kept).into_owned(),
            truncated,
        }
    }
}
