//! The sink's `dead_letter` section, and the sections a later release fills
//! (`encryption`, `results`), which are refused rather than ignored.

use serde_json::Value;

use super::paths::SinkPaths;
use crate::config::dead_letter::{self, DeadLetterConfig};
use crate::config::issue::Issues;

/// Checks the dead-letter section, when present.
pub(crate) fn check(dl: Option<&DeadLetterConfig>, p: &SinkPaths, issues: &mut Issues) {
    if let Some(dl) = dl {
        issues
            .0
            .extend(dead_letter::validate(dl, &p.key("dead_letter")));
    }
}

/// Refuses the sections this version accepts in the file but does not implement.
pub(crate) fn check_planned(
    encryption: Option<&Value>,
    results: Option<&Value>,
    p: &SinkPaths,
    issues: &mut Issues,
) {
    for (key, present) in [
        ("encryption", encryption.is_some()),
        ("results", results.is_some()),
    ] {
        if present {
            issues.push(p.key(key), "not supported yet by this version of jetsink");
        }
    }
}
