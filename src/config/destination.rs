//! The `destination` object, read generically: its `type` picks a destination from the
//! registry ([`crate::sinks`]), which owns every destination's settings and
//! checks. This file knows no destination by name.
//!
//! The object is dispatched on its `type` key by hand rather than through an internally
//! tagged serde enum, because serde buffers tagged content and would lose the JSON path of
//! an error inside it.

use serde_json::Value;

use crate::shared::issue::Issue;
use crate::sinks::parse_destination;
pub use crate::sinks::{DestinationConfig, KINDS, PLANNED};

/// Reads a `destination` object found at `path`.
pub fn parse(path: &str, value: Value) -> Result<DestinationConfig, Issue> {
    let supported = KINDS.join(", ");
    let kind = match value.get("type") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(Issue {
                path: format!("{path}.type"),
                message: format!("must be a string, got {other}"),
            })
        }
        None if value.is_object() => {
            return Err(Issue {
                path: path.to_string(),
                message: format!("missing `type` (one of: {supported})"),
            })
        }
        None => {
            return Err(Issue {
                path: path.to_string(),
                message: format!("must be an object with a `type`, got {value}"),
            })
        }
    };
    let mut body = value;
    if let Some(obj) = body.as_object_mut() {
        obj.remove("type");
    }
    if let Some(parsed) = parse_destination(&kind, path, body) {
        return parsed;
    }
    let message = if PLANNED.contains(&kind.as_str()) {
        format!("destination type `{kind}` is not supported yet (supported: {supported})")
    } else {
        format!("unknown destination type `{kind}` (supported: {supported})")
    };
    Err(Issue {
        path: format!("{path}.type"),
        message,
    })
}
