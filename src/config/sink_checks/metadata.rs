//! The sink's `message_metadata` section, alone and against the lanes that read its
//! priority.

use super::paths::SinkPaths;
use crate::config::lanes::{self, PriorityLanesConfig};
use crate::config::metadata::{self, MessageMetadataConfig};
use crate::shared::issue::Issues;

/// Checks the metadata section (or its defaults, when absent) and that the lanes can use
/// the priorities it yields.
pub(crate) fn check(
    m: Option<&MessageMetadataConfig>,
    lanes: &PriorityLanesConfig,
    p: &SinkPaths,
    issues: &mut Issues,
) {
    let metadata_path = p.key("message_metadata");
    if let Some(m) = m {
        issues
            .0
            .extend(metadata::validate_metadata(m, &metadata_path));
    }
    let effective = m.cloned().unwrap_or_default();
    issues.0.extend(lanes::validate_metadata_for_lanes(
        &effective,
        &metadata_path,
        lanes,
        &p.lanes(),
    ));
}
