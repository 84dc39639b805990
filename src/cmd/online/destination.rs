//! The destination of one sink, through its read-only [`crate::sinks::Sink::probe`]: what
//! `jetsink run` would open, checked without creating anything.

use super::report::{Outcome, Report};
use crate::config::SinkSpec;
use crate::sinks::{self, Feed, Probe, SinkError};

/// The destination, through its read-only [`crate::sinks::Sink::probe`].
pub(super) async fn check(report: &mut Report, spec: &SinkSpec) {
    let mut sink = sinks::build(&spec.destination);
    sink.attach(&Feed {
        sink: spec.name.clone(),
        stream: spec.source.stream.clone(),
    });
    let place = format!(
        "sink {}: destination {}",
        spec.name,
        spec.destination.describe()
    );
    match sink.probe().await {
        Ok(Probe::Ready(what)) => report.push(Outcome::Ok, format!("{place}: {what}")),
        Ok(Probe::WouldCreate(what)) => {
            report.push(Outcome::WouldCreate, format!("{place}: {what}"))
        }
        Err(e @ SinkError::Misconfigured { .. }) => {
            report.push(Outcome::Mismatch, format!("{place}: {e}"))
        }
        Err(e) => report.push(Outcome::Unavailable, format!("{place}: {e}")),
    }
}
