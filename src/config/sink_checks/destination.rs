//! The sink's `destination`: its `type` read through the registry, then the destination's
//! own checks, each reported under the destination's path.

use serde_json::Value;

use super::paths::SinkPaths;
use crate::config::destination::{self, DestinationConfig};
use crate::config::issue::Issues;

/// Reads and checks the destination; `None` when it could not be read at all.
pub(crate) fn check(value: Value, p: &SinkPaths, issues: &mut Issues) -> Option<DestinationConfig> {
    match destination::parse(&p.destination, value) {
        Ok(d) => {
            issues.extend_under(&p.destination, d.problems());
            Some(d)
        }
        Err(issue) => {
            issues.0.push(issue);
            None
        }
    }
}
