//! A config problem located by its JSON path, the collector every check pushes into, and
//! the serde step that keeps the path of a wrong type.
//!
//! This is a leaf: it imports nothing from the rest of `config`, so every section's checks
//! can use it without importing the module that assembles them.

use std::fmt;

/// One problem in a config file, located by its JSON path (`sinks.orders.delivery.batch_size`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// Dotted JSON path; `[i]` for array elements; empty for the document root.
    pub path: String,
    /// What is wrong, including the offending value where that helps.
    pub message: String,
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every problem found so far, in the order found: checks push and keep going, so an
/// operator fixes all mistakes in one edit instead of one per restart.
#[derive(Debug, Default)]
pub(crate) struct Issues(pub(crate) Vec<Issue>);

impl Issues {
    /// Records a problem at `path`.
    pub(crate) fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(Issue {
            path: path.into(),
            message: message.into(),
        });
    }

    /// Records "must be between `lo` and `hi`" at `path` when `v` is outside.
    pub(crate) fn range<T: PartialOrd + fmt::Display>(&mut self, path: String, v: T, lo: T, hi: T) {
        if v < lo || v > hi {
            self.push(path, format!("must be between {lo} and {hi}, got {v}"));
        }
    }

    /// Records every `(key, message)` a destination reports, under the destination's path.
    pub(crate) fn extend_under(&mut self, base: &str, problems: Vec<(String, String)>) {
        for (key, message) in problems {
            self.push(format!("{base}.{key}"), message);
        }
    }
}

/// Deserializes `value` as `T`, reporting a failure at `prefix` + the path inside `value`.
pub(crate) fn deserialize_at<T: serde::de::DeserializeOwned>(
    prefix: &str,
    value: serde_json::Value,
) -> Result<T, Issue> {
    serde_path_to_error::deserialize(value).map_err(|err| {
        let inner = err.path().to_string();
        let path = match (prefix.is_empty(), inner.as_str()) {
            (_, ".") => prefix.to_string(),
            (true, _) => inner,
            (false, _) if inner.starts_with('[') => format!("{prefix}{inner}"),
            (false, _) => format!("{prefix}.{inner}"),
        };
        Issue {
            path,
            message: err.into_inner().to_string(),
        }
    })
}
