//! The dead-letter stream of one sink: created by `dead_letter.create_stream`, or one that
//! captures the dead-letter subject.

use async_nats::jetstream::context::{GetStreamByNameErrorKind, GetStreamErrorKind};
use async_nats::jetstream::{self, ErrorCode};

use super::report::{Outcome, Report};
use crate::config::SinkSpec;

/// The dead-letter stream: created by `dead_letter.create_stream`, or one that captures
/// the dead-letter subject.
pub(super) async fn check(report: &mut Report, js: &jetstream::Context, spec: &SinkSpec) {
    let Some(dl) = spec.dead_letter.as_ref().filter(|d| d.enabled) else {
        return;
    };
    let sink = &spec.name;
    let capture = dl.capture(sink);
    if let Some(cs) = &dl.create_stream {
        match js.get_stream(&cs.name).await {
            Ok(_) => report.push(
                Outcome::Ok,
                format!("sink {sink}: dead-letter stream {} exists", cs.name),
            ),
            Err(e) if matches!(e.kind(), GetStreamErrorKind::JetStream(j) if j.error_code() == ErrorCode::STREAM_NOT_FOUND) => {
                report.push(
                    Outcome::WouldCreate,
                    format!(
                        "sink {sink}: dead-letter stream {} capturing {capture}",
                        cs.name
                    ),
                )
            }
            Err(e) => report.push(
                Outcome::Unavailable,
                format!(
                    "sink {sink}: looking up dead-letter stream {} failed: {e}",
                    cs.name
                ),
            ),
        }
        return;
    }
    match js.stream_by_subject(capture.clone()).await {
        Ok(name) => report.push(
            Outcome::Ok,
            format!("sink {sink}: dead-letter subject {capture} is captured by stream {name}"),
        ),
        Err(e) if e.kind() == GetStreamByNameErrorKind::NotFound => report.push(
            Outcome::Unavailable,
            format!("sink {sink}: no stream captures the dead-letter subject {capture}, and dead_letter.create_stream is not set: dead-letter copies could not be stored"),
        ),
        Err(e) => report.push(
            Outcome::Unavailable,
            format!("sink {sink}: looking up the stream of dead-letter subject {capture} failed: {e}"),
        ),
    }
}
