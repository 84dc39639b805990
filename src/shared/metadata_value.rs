//! The rules one metadata value obeys, whether it comes from a header at run time or from
//! the config's defaults and rules at load time: no control characters, trimmed, bounded
//! length, bounded label count. A leaf, so config validation applies the same rules
//! without importing the run-time policy.

use std::fmt;

/// Which metadata field a value or an error belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetadataField {
    /// The priority, the input of lane scheduling.
    Priority,
    /// The classification.
    Classification,
    /// The labels.
    Labels,
}

impl fmt::Display for MetadataField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MetadataField::Priority => "priority",
            MetadataField::Classification => "classification",
            MetadataField::Labels => "labels",
        })
    }
}

/// Why a header value was refused; callers match on this, not on the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetadataErrorKind {
    /// The value (or one label) contains a control character.
    ControlCharacter,
    /// The value (or one label) is longer than its limit.
    TooLong,
    /// The labels header carries more labels than `max_labels`.
    TooManyLabels,
    /// The labels header starts with `[` but is not a JSON list of strings.
    InvalidLabels,
}

/// A header value that fails the metadata rules: a permanent failure of its message.
///
/// Its message names the field, the rule and sizes only: header values are untrusted and
/// may be sensitive, so the value itself never appears.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct MetadataError {
    /// The field whose header was refused.
    pub field: MetadataField,
    /// Which rule it broke.
    pub kind: MetadataErrorKind,
    /// The offending size: for [`MetadataErrorKind::TooManyLabels`] the number of labels,
    /// otherwise the length in characters of the value (or of the one label) refused.
    pub actual: usize,
    /// The limit exceeded, for [`MetadataErrorKind::TooLong`] and
    /// [`MetadataErrorKind::TooManyLabels`].
    pub limit: Option<usize>,
}

impl MetadataError {
    fn new(field: MetadataField, kind: MetadataErrorKind, actual: usize) -> Self {
        MetadataError {
            field,
            kind,
            actual,
            limit: None,
        }
    }

    fn over(field: MetadataField, kind: MetadataErrorKind, actual: usize, limit: usize) -> Self {
        MetadataError {
            limit: Some(limit),
            ..MetadataError::new(field, kind, actual)
        }
    }

    fn describe(&self) -> String {
        let limit = self.limit.unwrap_or(0);
        let what = match self.kind {
            MetadataErrorKind::ControlCharacter => format!(
                "a value of {} characters contains a control character",
                self.actual
            ),
            MetadataErrorKind::TooLong => format!(
                "a value of {} characters is longer than the limit of {limit}",
                self.actual
            ),
            MetadataErrorKind::TooManyLabels => {
                format!("{} labels are more than the limit of {limit}", self.actual)
            }
            MetadataErrorKind::InvalidLabels => format!(
                "a value of {} characters starts with `[` but is not a JSON list of strings",
                self.actual
            ),
        };
        format!("{} header rejected: {what}", self.field)
    }
}

/// A message's normalized metadata, ready for the Envelope.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metadata {
    /// Priority, or `None` when no header, rule or default gave one.
    pub priority: Option<String>,
    /// Classification, or `None` when no header, rule or default gave one.
    pub classification: Option<String>,
    /// Labels in the order given; empty when none.
    pub labels: Vec<String>,
}

/// Checks one header value for `field`: control characters are refused (before trimming),
/// surrounding whitespace is trimmed, a blank value is `Ok(None)` (absent), and a value
/// longer than `max_chars` characters is refused.
pub fn normalize_value(
    field: MetadataField,
    raw: &str,
    max_chars: usize,
) -> Result<Option<String>, MetadataError> {
    let Some(value) = present(field, raw)? else {
        return Ok(None);
    };
    let length = value.chars().count();
    if length > max_chars {
        return Err(MetadataError::over(
            field,
            MetadataErrorKind::TooLong,
            length,
            max_chars,
        ));
    }
    Ok(Some(value.to_string()))
}

/// A header value made safe to store without refusing the message: control characters
/// become U+FFFD, surrounding whitespace is trimmed, and the value is cut to `max_chars`
/// characters; `None` when blank. Used for the priority when lanes are off, where the lane
/// document's checks do not apply and a priority is only stored, never scheduled on. A
/// value [`normalize_value`] accepts comes out unchanged.
pub fn sanitize_value(raw: &str, max_chars: usize) -> Option<String> {
    let value: String = raw
        .trim()
        .chars()
        .map(|c| if c.is_control() { '\u{FFFD}' } else { c })
        .take(max_chars)
        .collect();
    let value = value.trim_end();
    (!value.is_empty()).then(|| value.to_string())
}

/// Parses a labels header value: a JSON list of strings when it starts with `[`, otherwise
/// a `;`-separated list. Labels are trimmed and empty ones dropped; each must be free of
/// control characters and at most `max_label_chars` characters, and there may be at most
/// `max_labels` of them.
pub fn parse_labels(
    raw: &str,
    max_labels: usize,
    max_label_chars: usize,
) -> Result<Vec<String>, MetadataError> {
    let Some(value) = present(MetadataField::Labels, raw)? else {
        return Ok(Vec::new());
    };
    let items: Vec<String> = if value.starts_with('[') {
        serde_json::from_str(value).map_err(|_| {
            MetadataError::new(
                MetadataField::Labels,
                MetadataErrorKind::InvalidLabels,
                value.chars().count(),
            )
        })?
    } else {
        value.split(';').map(str::to_string).collect()
    };
    let mut labels = Vec::with_capacity(items.len());
    for item in &items {
        if let Some(label) = normalize_value(MetadataField::Labels, item, max_label_chars)? {
            labels.push(label);
        }
    }
    if labels.len() > max_labels {
        return Err(MetadataError::over(
            MetadataField::Labels,
            MetadataErrorKind::TooManyLabels,
            labels.len(),
            max_labels,
        ));
    }
    Ok(labels)
}

/// Refuses control characters in `raw`, then trims it; `None` when blank.
pub(crate) fn present(field: MetadataField, raw: &str) -> Result<Option<&str>, MetadataError> {
    if raw.chars().any(char::is_control) {
        return Err(MetadataError::new(
            field,
            MetadataErrorKind::ControlCharacter,
            raw.chars().count(),
        ));
    }
    let value = raw.trim();
    Ok((!value.is_empty()).then_some(value))
}
