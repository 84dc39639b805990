//! `jetsink metrics get NAME [FILE | --url URL] [--label k=v …] [--default N]`: prints one
//! metric's value and nothing else, for scripts (`if [ "$(jetsink metrics get …)" -gt 0 ]`).
//! `get FILE NAME`, the priority-lane source document's order, reads the same
//! ([`super::order`]).
//!
//! The name matches with or without the `jetsink_` prefix. Values are never summed across
//! label sets (a sum of a gauge per sink is rarely what a script means): when several
//! label sets remain after `--label`, the command names them and exits 1. An absent metric
//! prints `--default` when given (exit 0), else exits 1 saying so. [`pick`] is the pure
//! selection, tested without a daemon.

use std::path::PathBuf;

use super::{load, order, Sample, Source, PREFIX};

/// What [`pick`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Picked {
    /// Exactly one sample: its value.
    Value(String),
    /// No sample of that name carries those labels.
    Absent,
    /// Several label sets match: their display names, to pass one with `--label`.
    Ambiguous(Vec<String>),
}

/// The one sample named `name` (with or without the `jetsink_` prefix) that carries every
/// `labels` pair.
pub fn pick(samples: &[Sample], name: &str, labels: &[(String, String)]) -> Picked {
    let named = |s: &Sample| s.name == name || s.name.strip_prefix(PREFIX) == Some(name);
    let matching: Vec<&Sample> = samples
        .iter()
        .filter(|s| named(s) && labels.iter().all(|l| s.labels.contains(l)))
        .collect();
    match matching.as_slice() {
        [] => Picked::Absent,
        [one] => Picked::Value(one.value.clone()),
        many => Picked::Ambiguous(many.iter().map(|s| s.display_name()).collect()),
    }
}

/// A `--label` value: `key=value`.
fn label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected key=value, got {text:?}")),
    }
}

/// A `--default` value: a number, as a metric's value would be.
fn number(text: &str) -> Result<String, String> {
    match text.parse::<f64>() {
        Ok(_) => Ok(text.to_string()),
        Err(_) => Err(format!("expected a number, got {text:?}")),
    }
}

/// `jetsink metrics get`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// The metric's name, with or without the `jetsink_` prefix, e.g.
    /// jetsink_messages_acked_total.
    name: String,
    /// A snapshot file the daemon writes (`metrics.snapshot_file`) to read instead of
    /// the endpoint. FILE NAME works too: an existing file, or the argument that cannot be
    /// a metric name, is the file.
    #[arg(conflicts_with = "url")]
    file: Option<String>,
    /// The daemon's metrics endpoint (plain HTTP). Default
    /// http://127.0.0.1:9464/metrics.
    #[arg(long)]
    url: Option<String>,
    /// Keep only the label set with this label (repeatable), e.g. --label sink=orders.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = label)]
    labels: Vec<(String, String)>,
    /// Print this when the metric is absent (exit 0) instead of failing.
    #[arg(long, value_parser = number)]
    default: Option<String>,
}

/// `jetsink metrics get`: prints the value (exit 0); an absent metric without `--default`
/// or several matching label sets exit 1 with the reason on stderr; a source that cannot
/// be read exits as `metrics show` does.
pub async fn execute(args: Args) -> u8 {
    let Args {
        name,
        file,
        url,
        labels,
        default,
    } = args;
    let (name, file) = match order::name_and_file(&name, file.as_deref(), |p| {
        std::path::Path::new(p).is_file()
    }) {
        Ok((n, f)) => (n.to_string(), f.map(PathBuf::from)),
        Err(e) => {
            eprintln!("error: {e}");
            return crate::exit::USAGE;
        }
    };
    let source = Source::of(file, url);
    let samples = match load(&source).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return e.exit_code();
        }
    };
    let from = match &source {
        Source::Url(u) => crate::shared::server_url::redacted(u),
        Source::File(f) => f.display().to_string(),
    };
    match (pick(&samples, &name, &labels), default) {
        (Picked::Value(v), _) | (Picked::Absent, Some(v)) => {
            super::super::emit(&v);
            crate::exit::OK
        }
        (Picked::Absent, None) => {
            eprintln!("error: {from}: no metric {name} with these labels (pass --default to print a value instead)");
            crate::exit::FAILURE
        }
        (Picked::Ambiguous(names), _) => {
            eprintln!(
                "error: {from}: {name} has {} label sets; pick one with --label: {}",
                names.len(),
                names.join(", ")
            );
            crate::exit::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::prometheus_text::parse;

    const TEXT: &str = "# TYPE jetsink_messages_acked_total counter\n\
        jetsink_messages_acked_total{sink=\"a\"} 3\n\
        jetsink_messages_acked_total{sink=\"b\"} 5\n\
        # TYPE jetsink_up gauge\njetsink_up 1\n";

    fn l(k: &str, v: &str) -> (String, String) {
        (k.to_string(), v.to_string())
    }

    #[test]
    fn one_sample_is_picked_by_name_with_or_without_the_prefix() {
        let s = parse(TEXT).unwrap();
        assert_eq!(pick(&s, "jetsink_up", &[]), Picked::Value("1".into()));
        assert_eq!(pick(&s, "up", &[]), Picked::Value("1".into()));
        assert_eq!(
            pick(&s, "messages_acked_total", &[l("sink", "b")]),
            Picked::Value("5".into())
        );
    }

    #[test]
    fn several_label_sets_are_named_not_summed() {
        let s = parse(TEXT).unwrap();
        assert_eq!(
            pick(&s, "jetsink_messages_acked_total", &[]),
            Picked::Ambiguous(vec![
                "jetsink_messages_acked_total{sink=\"a\"}".into(),
                "jetsink_messages_acked_total{sink=\"b\"}".into(),
            ])
        );
    }

    #[test]
    fn an_absent_name_or_label_is_absent() {
        let s = parse(TEXT).unwrap();
        assert_eq!(pick(&s, "jetsink_nope", &[]), Picked::Absent);
        assert_eq!(
            pick(&s, "messages_acked_total", &[l("sink", "c")]),
            Picked::Absent
        );
        assert_eq!(
            pick(&s, "acked_total", &[]),
            Picked::Absent,
            "no partial match"
        );
    }

    #[test]
    fn labels_and_defaults_are_checked_as_they_are_parsed() {
        assert_eq!(label("sink=a=b"), Ok(l("sink", "a=b")));
        assert!(label("sink").is_err() && label("=a").is_err());
        assert_eq!(number("0"), Ok("0".into()));
        assert!(number("zero").is_err());
    }
}
