//! The sink's `delivery.priority_lanes` section, and per-lane consumer mode
//! (`lanes[].subjects`), which changes what the source may say.

use super::paths::SinkPaths;
use crate::config::raw::{DeliveryConfig, SourceConfig};
use crate::shared::issue::Issues;
use crate::shared::names::check_subject;
use crate::shared::subject_match::overlap;

/// Checks the lanes and, in per-lane consumer mode, their subjects against the source.
pub(crate) fn check(d: &DeliveryConfig, source: &SourceConfig, p: &SinkPaths, issues: &mut Issues) {
    let lanes_path = p.lanes();
    issues.0.extend(crate::config::lanes::validate_lanes(
        &d.priority_lanes,
        &lanes_path,
    ));
    let lane_subjects: Vec<(usize, &String)> = d
        .priority_lanes
        .lanes
        .iter()
        .enumerate()
        .flat_map(|(i, l)| l.subjects.iter().map(move |s| (i, s)))
        .collect();
    if lane_subjects.is_empty() {
        return;
    }
    if !d.priority_lanes.enabled {
        issues.push(
            format!("{lanes_path}.enabled"),
            "lanes[].subjects (per-lane consumer mode) needs enabled: true",
        );
    }
    if source.buckets.is_some() {
        issues.push(
            format!("{}.buckets", p.source),
            "cannot be combined with lanes[].subjects (per-lane consumer mode)",
        );
    }
    if !source.subjects.is_empty() {
        issues.push(
            p.subjects.clone(),
            "leave it empty in per-lane consumer mode: each lane subject gets its own consumer",
        );
    }
    // Lane subjects already checked, with their paths: two that overlap (equal, or one
    // wildcard covering the other's subjects) would give a message one consumer per
    // matching lane, so it would be written once per lane.
    let mut seen: Vec<(&String, String)> = Vec::new();
    for (i, lane) in d.priority_lanes.lanes.iter().enumerate() {
        let name = format!("{}-lane-{}-0", source.consumer, lane.name);
        if name.len() > 255 {
            issues.push(
                p.consumer.clone(),
                format!("derived lane consumer names such as {name:?} exceed 255 characters"),
            );
        }
        if lane.subjects.is_empty() {
            issues.push(
                format!("{lanes_path}.lanes[{i}].subjects"),
                "in per-lane consumer mode every lane needs at least one subject",
            );
        }
        for (j, subj) in lane.subjects.iter().enumerate() {
            let path = format!("{lanes_path}.lanes[{i}].subjects[{j}]");
            if let Err(why) = check_subject(subj) {
                issues.push(path, format!("{why}: {subj:?}"));
                continue;
            }
            if let Some((other, other_path)) = seen.iter().find(|(o, _)| overlap(o, subj)) {
                issues.push(
                    path.clone(),
                    format!(
                        "subject {subj:?} overlaps {other:?} at {other_path}: a message matching both would be delivered to two lane consumers and written twice"
                    ),
                );
            }
            seen.push((subj, path));
        }
    }
}
