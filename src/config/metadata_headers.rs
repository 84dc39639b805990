//! The header names of `message_metadata`: each must be a usable header name, and no two
//! fields may read the same header, or one publisher value would land in two fields.

use crate::shared::issue::Issue;

/// The priority headers read when `priority.header` is not set, first present wins:
/// jetsink's own name, then the one the priority-lane document uses.
pub const DEFAULT_PRIORITY_HEADERS: [&str; 2] = ["Jetsink-Priority", "Nats-Sinks-Priority"];

/// The header each field reads (`priority: None` reads [`DEFAULT_PRIORITY_HEADERS`]).
pub(super) struct FieldHeaders<'a> {
    pub(super) priority: Option<&'a String>,
    pub(super) classification: &'a String,
    pub(super) labels: &'a String,
}

/// Checks the section's header names at `path` (the `message_metadata` section).
pub(super) fn check_headers(fields: FieldHeaders<'_>, path: &str, out: &mut Vec<Issue>) {
    let mut headers: Vec<(&str, &String)> = Vec::new();
    let priority_defaults = DEFAULT_PRIORITY_HEADERS.map(String::from);
    match fields.priority {
        Some(h) => headers.push(("priority", h)),
        None => headers.extend(priority_defaults.iter().map(|h| ("priority", h))),
    }
    headers.push(("classification", fields.classification));
    headers.push(("labels", fields.labels));
    for (i, (field, name)) in headers.iter().enumerate() {
        let h_path = if path.is_empty() {
            format!("{field}.header")
        } else {
            format!("{path}.{field}.header")
        };
        if !is_header_name(name) {
            out.push(issue(
                h_path,
                format!(
                    "must be a non-empty header name of printable ASCII without `:` or spaces, got {name:?}"
                ),
            ));
            continue;
        }
        let earlier = headers[..i]
            .iter()
            .find(|(_, other)| other.eq_ignore_ascii_case(name));
        if let Some((other, _)) = earlier {
            out.push(issue(
                h_path,
                format!(
                    "{name:?} is already the header of `{other}` (header names are case-insensitive); each field needs its own header"
                ),
            ));
        }
    }
}

/// A header name: non-empty printable ASCII without spaces or `:`.
fn is_header_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_graphic() && b != b':')
}

fn issue(path: String, message: String) -> Issue {
    Issue { path, message }
}
