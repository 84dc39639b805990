//! The checks of one sink, by section, run in a fixed order so issues come out in the same
//! order on every run: dead letter, planned sections, lanes, metadata, randomizer, source,
//! delivery, destination (then what depends on the destination and other sections: the
//! rollover, batches in flight, an upsert by arrival order).
//!
//! Each section is its own file and imports only leaves ([`paths`], the config's `issue`
//! and `names`) and the section types it checks, never this module or `validate`.

mod arrival;
mod dead_letter;
mod delivery;
mod destination;
mod in_flight;
mod lanes;
mod metadata;
mod paths;
mod results;
mod source;

pub(crate) use paths::SinkPaths;

use std::sync::Arc;

use super::encryption;
use super::model::SinkSpec;
use super::raw::RawSink;
use crate::crypto::Encryption;
use crate::shared::issue::Issues;

/// The filter subjects of every consumer the sink binds, as the config names them: one
/// per bucket, or one per lane subject in per-lane consumer mode, or the source's
/// subjects; `""` for a consumer without a filter.
fn consumer_filters(raw: &RawSink) -> Vec<String> {
    let lanes = &raw.delivery.priority_lanes;
    let per_lane: Vec<String> = if lanes.enabled {
        lanes
            .lanes
            .iter()
            .flat_map(|l| l.subjects.clone())
            .collect()
    } else {
        Vec::new()
    };
    if !per_lane.is_empty() {
        return per_lane;
    }
    raw.source
        .bindings()
        .into_iter()
        .flat_map(|s| {
            if s.subjects.is_empty() {
                vec![String::new()]
            } else {
                s.subjects
            }
        })
        .collect()
}

/// Checks one sink and, when its destination could be read, turns it into the model;
/// every problem goes into `issues` either way.
/// `default` is the top-level `encryption` stage (already built, its problems reported at
/// `encryption.*`), used when the sink has no section of its own.
pub(crate) fn check_sink(
    name: String,
    p: SinkPaths,
    mut raw: RawSink,
    default: Option<(&Arc<Encryption>, &str)>,
    issues: &mut Issues,
) -> Option<SinkSpec> {
    // Before any check reads them: a job-queue sink's unset AckWait and MaxDeliver are the
    // job-queue document's, not the general defaults.
    let job_defaults = raw.source.settle_defaults(raw.results.is_some());
    dead_letter::check(
        raw.dead_letter.as_ref(),
        &name,
        &consumer_filters(&raw),
        &p,
        issues,
    );
    let encryption = match &raw.encryption {
        Some(cfg) => {
            let at = p.key("encryption");
            encryption::build(cfg, &at, issues).map(|e| (e, at))
        }
        None => default.map(|(e, at)| (Arc::clone(e), at.to_string())),
    };
    if let Some((_, at)) = &encryption {
        encryption::check_destination(&raw.destination, &p.destination, at, issues);
    }
    results::check(raw.results.as_ref(), &consumer_filters(&raw), &p, issues);
    lanes::check(&raw.delivery, &raw.source, &p, issues);
    metadata::check(
        raw.message_metadata.as_ref(),
        &raw.delivery.priority_lanes,
        &p,
        issues,
    );
    delivery::check_randomizer(&raw.delivery, &raw.source, &p, issues);
    delivery::check_shuffle(&raw.delivery, &raw.source, &p, issues);
    source::check(&raw.source, &raw.delivery, &p, issues);
    delivery::check(&raw.delivery, raw.source.ack_wait_ms(), &p, issues);
    let destination = destination::check(raw.destination, raw.delivery.batch_size, &p, issues)?;
    delivery::check_rollover(&destination, &raw.delivery, &raw.source, &p, issues);
    in_flight::check(
        &destination,
        &raw.delivery,
        raw.results.is_some(),
        &p,
        issues,
    );
    arrival::check(&destination, &raw.delivery, &raw.source, &p, issues);
    Some(SinkSpec {
        name,
        source: raw.source,
        delivery: raw.delivery,
        metadata: raw.message_metadata,
        dead_letter: raw.dead_letter,
        destination,
        results: raw.results,
        job_defaults,
        encryption: encryption.map(|(e, _)| e),
        subjects_path: p.subjects.clone(),
        lanes_path: p.lanes(),
        paths: crate::config::model::SectionPaths {
            source: p.source.clone(),
            delivery: p.delivery.clone(),
            destination: p.destination.clone(),
            section: p.section.clone(),
        },
    })
}
