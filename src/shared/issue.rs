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

/// The longest message an issue prints, in bytes. A message quotes the offending value
/// where that helps, and a value may be as long as a config string (64 KiB): past this, the
/// rest is cut, so a mistake is never printed back whole.
pub const MAX_MESSAGE_BYTES: usize = 1_024;

/// `text` cut to at most `max` bytes at a character boundary, saying how much was cut.
pub fn cut(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}… ({} more bytes not shown)",
        &text[..end],
        text.len() - end
    )
    .into()
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let message = cut(&self.message, MAX_MESSAGE_BYTES);
        if self.path.is_empty() {
            write!(f, "{message}")
        } else {
            write!(f, "{}: {message}", cut(&self.path, MAX_MESSAGE_BYTES))
        }
    }
}

/// Every problem found so far, in the order found: checks push and keep going, so an
/// operator fixes all mistakes in one edit instead of one per restart. Beside them, the
/// warnings: things that work but should be fixed (a key file others may read). They are
/// kept with the config, not logged, because the config is read before logging starts.
#[derive(Debug, Default)]
pub(crate) struct Issues(pub(crate) Vec<Issue>, pub(crate) Vec<Issue>);

impl Issues {
    /// Records a problem at `path`.
    pub(crate) fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(Issue {
            path: path.into(),
            message: message.into(),
        });
    }

    /// Records a warning at `path`: the config is accepted.
    pub(crate) fn warn(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.1.push(Issue {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_message_is_cut_at_a_character_boundary_saying_how_much() {
        let i = Issue {
            path: "api.listen".into(),
            message: format!("must be an address:port, got {:?}", "é".repeat(5_000)),
        };
        let shown = i.to_string();
        assert!(shown.len() < MAX_MESSAGE_BYTES + 100, "{}", shown.len());
        assert!(shown.starts_with("api.listen: must be an address:port, got \"éé"));
        assert!(shown.ends_with("more bytes not shown)"), "{shown}");
        let short = Issue {
            path: String::new(),
            message: "fine".into(),
        };
        assert_eq!(short.to_string(), "fine");
    }
}
