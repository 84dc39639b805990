//! When the current JSON Lines file is closed and a new one started: a pure function of
//! the file's size and age and the configured limits.

use std::time::{Duration, SystemTime};

/// Why the current file is closed before the next batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rotation {
    /// It reached `rotate_bytes`.
    Size,
    /// It is at least `rotate_interval_ms` old.
    Age,
}

/// The rotation decision, a pure function of the current file and the clock.
///
/// `size` is the file's length, `created` when it was created, `now` the clock. A limit of
/// 0 is off. An empty file is never rotated: starting another empty file would only leave
/// an empty file behind.
pub(crate) fn rotation_due(
    size: u64,
    created: SystemTime,
    now: SystemTime,
    rotate_bytes: u64,
    rotate_interval_ms: u64,
) -> Option<Rotation> {
    if size == 0 {
        return None;
    }
    if rotate_bytes > 0 && size >= rotate_bytes {
        return Some(Rotation::Size);
    }
    let age = now.duration_since(created).unwrap_or(Duration::ZERO);
    if rotate_interval_ms > 0 && age >= Duration::from_millis(rotate_interval_ms) {
        return Some(Rotation::Age);
    }
    None
}
