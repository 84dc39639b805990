//! The sink's `source`: stream and consumer names, filter subjects, consumer settings,
//! random subject buckets and the stream created when missing.

use super::paths::SinkPaths;
use crate::config::buckets;
use crate::config::pinned;
use crate::config::raw::{DeliveryConfig, SourceConfig};
use crate::shared::issue::Issues;
use crate::shared::names::{check_subject, is_valid_name};
use crate::shared::subject_match::overlap;

/// Checks the source; `d` is the sink's delivery section, whose batch size and lane
/// subjects constrain it.
pub(crate) fn check(s: &SourceConfig, d: &DeliveryConfig, p: &SinkPaths, issues: &mut Issues) {
    check_name(&s.stream, &p.stream, "stream", issues);
    check_name(&s.consumer, &p.consumer, "consumer", issues);
    check_subjects(s, p, issues);
    check_consumer_settings(s, d, p, issues);
    check_connection_group(s, p, issues);
    if let Some(pinned) = &s.pinned {
        check_pinned(pinned, s, d, p, issues);
    }
    if let Some(b) = &s.buckets {
        check_buckets(b, s, p, issues);
    }
    if let Some(cs) = &s.create_stream {
        check_create_stream(cs, s, d, p, issues);
    }
}

/// The filter subjects: each valid, no two overlapping.
fn check_subjects(s: &SourceConfig, p: &SinkPaths, issues: &mut Issues) {
    // Several subjects make one consumer with `filter_subjects` (nats-server 2.10+; on an
    // older server start-up refuses them, naming its version). The server refuses
    // overlapping filters, so they are refused here first, with both paths.
    for (i, a) in s.subjects.iter().enumerate() {
        for (j, b) in s.subjects.iter().enumerate().skip(i + 1) {
            if check_subject(a).is_ok() && check_subject(b).is_ok() && overlap(a, b) {
                issues.push(
                    format!("{}[{j}]", p.subjects),
                    format!("{b:?} overlaps {}[{i}] ({a:?}): a message would match two filters of one consumer; give subjects that do not overlap", p.subjects),
                );
            }
        }
    }
    for (i, subj) in s.subjects.iter().enumerate() {
        let path = if p.section.is_empty() {
            p.subjects.clone()
        } else {
            format!("{}[{i}]", p.subjects)
        };
        if let Err(why) = check_subject(subj) {
            issues.push(path, format!("{why}: {subj:?}"));
        }
    }
}

/// AckWait, MaxDeliver, MaxAckPending and the backoff steps.
fn check_consumer_settings(
    s: &SourceConfig,
    d: &DeliveryConfig,
    p: &SinkPaths,
    issues: &mut Issues,
) {
    issues.range(
        format!("{}.ack_wait_ms", p.source),
        s.ack_wait_ms(),
        1_000,
        43_200_000,
    );
    if s.max_deliver() == 0 || s.max_deliver() < -1 {
        issues.push(
            format!("{}.max_deliver", p.source),
            format!(
                "must be -1 (unlimited) or at least 1, got {}",
                s.max_deliver()
            ),
        );
    }
    if s.max_ack_pending != -1 && s.max_ack_pending < d.batch_size as i64 {
        issues.push(
            format!("{}.max_ack_pending", p.source),
            format!(
                "must be -1 (unlimited) or at least delivery.batch_size ({}), got {}",
                d.batch_size, s.max_ack_pending
            ),
        );
    }
    if !s.backoff_ms.is_empty() {
        if s.max_deliver() != -1 && s.backoff_ms.len() as i64 >= s.max_deliver() {
            issues.push(
                format!("{}.backoff_ms", p.source),
                format!(
                    "needs fewer steps ({}) than max_deliver ({})",
                    s.backoff_ms.len(),
                    s.max_deliver()
                ),
            );
        }
        for (i, b) in s.backoff_ms.iter().enumerate() {
            issues.range(format!("{}.backoff_ms[{i}]", p.source), *b, 1, 43_200_000);
        }
    }
}

/// `connection_group`: a name that becomes a metric label.
fn check_connection_group(s: &SourceConfig, p: &SinkPaths, issues: &mut Issues) {
    if let Some(g) = &s.connection_group {
        let ok = !g.is_empty()
            && g.len() <= 64
            && g.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !ok {
            issues.push(
                format!("{}.connection_group", p.source),
                format!("connection group names must be 1-64 letters, digits, `_` or `-` (they become metric labels), got {g:?}"),
            );
        }
    }
}

/// `pinned`, against what would give the sink more than one consumer.
fn check_pinned(
    pinned: &crate::config::pinned::PinnedConfig,
    s: &SourceConfig,
    d: &DeliveryConfig,
    p: &SinkPaths,
    issues: &mut Issues,
) {
    let per_lane = d.priority_lanes.enabled
        && d.priority_lanes
            .lanes
            .iter()
            .any(|l| !l.subjects.is_empty());
    let several = if s.buckets.is_some() {
        Some(format!("{}.buckets", p.source))
    } else if per_lane {
        Some(format!(
            "per-lane consumers ({}.lanes[].subjects)",
            p.lanes()
        ))
    } else {
        None
    };
    pinned::check(
        pinned,
        &format!("{}.pinned", p.source),
        d.batch_timeout_ms,
        several.as_deref(),
        issues,
    );
}

/// `buckets`, and the filter subject that must then stay empty or the wildcard.
fn check_buckets(
    b: &crate::config::buckets::BucketsConfig,
    s: &SourceConfig,
    p: &SinkPaths,
    issues: &mut Issues,
) {
    let path = format!("{}.buckets", p.source);
    issues.0.extend(buckets::validate_buckets(b, &path));
    issues.0.extend(match b.groups {
        None => buckets::validate_bucket_consumer(&s.consumer, b.count, &p.consumer),
        Some(g) => buckets::validate_group_consumer(&s.consumer, g, &p.consumer),
    });
    let wildcard = buckets::bucket_wildcard(&b.prefix);
    if !s.subjects.is_empty() && s.subjects != [wildcard.clone()] {
        issues.push(
            p.subjects.clone(),
            format!("with buckets, leave it empty or set it to {wildcard:?} (each bucket consumer filters its own subject)"),
        );
    }
}

/// `create_stream`: its subjects (or the source's, which it would capture), replicas and
/// windows.
fn check_create_stream(
    cs: &crate::config::raw::CreateStreamConfig,
    s: &SourceConfig,
    d: &DeliveryConfig,
    p: &SinkPaths,
    issues: &mut Issues,
) {
    let base = format!("{}.create_stream", p.source);
    let per_lane = d
        .priority_lanes
        .lanes
        .iter()
        .any(|l| !l.subjects.is_empty());
    if cs.subjects.is_empty() && s.subjects.is_empty() && s.buckets.is_none() && !per_lane {
        issues.push(
            format!("{base}.subjects"),
            "needed when the source has no filter subject",
        );
    }
    for (i, subj) in cs.subjects.iter().enumerate() {
        if let Err(why) = check_subject(subj) {
            issues.push(format!("{base}.subjects[{i}]"), format!("{why}: {subj:?}"));
        } else if let Some(why) = crate::shared::subject_match::reserved_capture(subj) {
            issues.push(format!("{base}.subjects[{i}]"), format!("{subj:?}: {why}"));
        }
    }
    if cs.subjects.is_empty() {
        // The stream is created with the source's own filter subjects.
        for subj in &s.subjects {
            if let Some(why) = crate::shared::subject_match::reserved_capture(subj) {
                issues.push(
                    p.subjects.clone(),
                    format!("{subj:?} would be the subject of the stream create_stream makes, and {why}"),
                );
            }
        }
    }
    issues.range(format!("{base}.replicas"), cs.replicas, 1, 5);
    issues.range(
        format!("{base}.duplicate_window_ms"),
        cs.duplicate_window_ms,
        0,
        604_800_000,
    );
    if cs.max_age_ms != 0 && cs.duplicate_window_ms > cs.max_age_ms {
        issues.push(
            format!("{base}.duplicate_window_ms"),
            format!(
                "must not exceed max_age_ms ({}), got {}",
                cs.max_age_ms, cs.duplicate_window_ms
            ),
        );
    }
}

/// Stream and consumer names: no whitespace, `.`, `*`, `>`, path separators or controls.
fn check_name(name: &str, path: &str, what: &str, issues: &mut Issues) {
    if name.is_empty() {
        issues.push(path, format!("{what} name must not be empty"));
        return;
    }
    if !is_valid_name(name) {
        issues.push(
            path,
            format!(
                "{what} name must be at most 255 characters without spaces, `.`, `*`, `>`, `/` or `\\`, got {name:?}"
            ),
        );
    }
}
