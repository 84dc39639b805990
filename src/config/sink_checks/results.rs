//! The sink's `results` section: its own rules, and that the sink's consumers cannot read
//! its results back (each result would become a job, forever).

use super::paths::SinkPaths;
use crate::config::results::{self, ResultsConfig};
use crate::shared::issue::Issues;
use crate::shared::subject_match::overlap;

/// Checks the results section, when present. `filters` are the filter subjects of every
/// consumer the sink binds (empty strings for "every subject of the stream").
pub(crate) fn check(
    cfg: Option<&ResultsConfig>,
    filters: &[String],
    p: &SinkPaths,
    issues: &mut Issues,
) {
    let Some(cfg) = cfg else { return };
    let path = p.key("results");
    let found = results::validate(cfg, &path);
    let valid = found.is_empty();
    issues.0.extend(found);
    if !valid {
        return;
    }
    let capture = cfg.capture();
    if let Some(f) = filters
        .iter()
        .find(|f| !f.is_empty() && overlap(&capture, f))
    {
        issues.push(
            format!("{path}.subject_prefix"),
            format!(
                "results ({capture}) would be read back as jobs by the sink's own consumer filter {f}; choose a prefix outside the source's filter subjects"
            ),
        );
    }
}
