//! The sink's `dead_letter` section.

use super::paths::SinkPaths;
use crate::config::dead_letter::{self, DeadLetterConfig};
use crate::shared::issue::Issues;
use crate::shared::subject_match::overlap;

/// Checks the dead-letter section, when present. `filters` are the filter subjects of
/// every consumer the sink binds (empty strings for "every subject of the stream").
pub(crate) fn check(
    dl: Option<&DeadLetterConfig>,
    sink: &str,
    filters: &[String],
    p: &SinkPaths,
    issues: &mut Issues,
) {
    let Some(dl) = dl else { return };
    let found = dead_letter::validate(dl, &p.key("dead_letter"));
    let valid = found.is_empty();
    issues.0.extend(found);
    if valid && dl.enabled {
        if let Some(why) = read_back(dl, sink, filters) {
            issues.push(format!("{}.subject", p.key("dead_letter")), why);
        }
    }
}

/// Why the sink's own consumers would read its dead-letter copies back (each copy would
/// be written or refused again, and a refused one copied again, forever), or `None`.
/// Only the filters the config names can be checked here; a consumer without a filter
/// reads whatever its stream captures, which the bind checks against the live stream.
pub(crate) fn read_back(dl: &DeadLetterConfig, sink: &str, filters: &[String]) -> Option<String> {
    let named: Vec<&str> = filters
        .iter()
        .map(String::as_str)
        .filter(|f| !f.is_empty())
        .collect();
    let template = dl.subject.replace("{sink}", sink);
    let copies: Vec<String> = match template.strip_suffix(".{subject}") {
        Some(prefix) if filters.iter().any(String::is_empty) => vec![format!("{prefix}.>")],
        Some(prefix) => named.iter().map(|f| format!("{prefix}.{f}")).collect(),
        None => vec![template.clone()],
    };
    for copy in &copies {
        if let Some(f) = named.iter().find(|f| overlap(copy, f)) {
            return Some(format!(
                "dead-letter copies ({copy}) would be read back by the sink's own consumer filter {f}, a loop; choose a subject outside the source's filter subjects, got {:?}",
                dl.subject
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dl(subject: &str) -> DeadLetterConfig {
        DeadLetterConfig {
            subject: subject.into(),
            ..Default::default()
        }
    }

    fn filters(f: &[&str]) -> Vec<String> {
        f.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_dead_letter_subject_under_the_source_filter_is_a_loop() {
        let why = read_back(&dl("orders.dlq.{sink}"), "db", &filters(&["orders.>"])).expect("loop");
        assert!(why.contains("orders.dlq.db"), "{why}");
        assert!(why.contains("orders.>"), "{why}");
        assert!(read_back(&dl("{sink}.dlq"), "orders", &filters(&["orders.*"])).is_some());
    }

    #[test]
    fn the_original_subject_inside_the_template_is_matched_as_a_filter() {
        // Copies of `orders.<x>` go to `orders.dead.<...>`: read back by `orders.>`.
        assert!(read_back(&dl("orders.dead.{subject}"), "db", &filters(&["orders.>"])).is_some());
        // Copies of `orders.*` go to `dlq.orders.*`, which `orders.*` never matches.
        assert!(read_back(&dl("dlq.{subject}"), "db", &filters(&["orders.*"])).is_none());
        // ... but `*.*.*` reads them back.
        assert!(read_back(&dl("dlq.{subject}"), "db", &filters(&["orders.*", "*.*.*"])).is_some());
    }

    #[test]
    fn the_default_subject_and_unknown_filters_pass() {
        let d = DeadLetterConfig::default();
        assert!(read_back(&d, "db", &filters(&["orders.>"])).is_none());
        assert!(read_back(&dl("orders.dlq"), "db", &filters(&[""])).is_none());
    }
}
