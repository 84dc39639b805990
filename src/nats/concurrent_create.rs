//! Creating a stream that another process may be creating at the same moment: several
//! instances of one sink, or job-queue workers, started together, each creating the work
//! stream and the dead-letter or results stream their config asks for.
//!
//! The client's `get_or_create_stream` looks the stream up and creates it when missing.
//! Between the two, another process can create it, and nats-server then refuses this
//! create: "stream name already in use" (10058), or "subjects overlap with an existing
//! stream" (10065) when the other create was further along (seen on 2.9.10, three workers
//! started at once; the second failed to start). Both mean the stream is there now, so it
//! is looked up again and used as it is, as if it had been there first.

use async_nats::jetstream::{
    self,
    context::{CreateStreamError, CreateStreamErrorKind},
    stream,
};

/// JetStream's "stream name already in use with a different configuration".
const STREAM_NAME_IN_USE: u64 = 10058;
/// JetStream's "subjects overlap with an existing stream".
const SUBJECTS_OVERLAP: u64 = 10065;

/// The server's own error behind a failed create, if it answered with one.
pub(crate) fn stream_error(e: &CreateStreamError) -> Option<jetstream::Error> {
    match e.kind() {
        CreateStreamErrorKind::JetStream(j) => Some(j),
        _ => None,
    }
}

/// Whether a create refused with this JetStream error code may have lost a race with
/// another process creating the same stream.
fn maybe_created_meanwhile(code: u64) -> bool {
    matches!(code, STREAM_NAME_IN_USE | SUBJECTS_OVERLAP)
}

/// The stream `cfg` names: looked up, created when missing, or, when the create lost a
/// race with another process, the one that process created. `sink` is for the log line.
pub(crate) async fn get_or_create(
    js: &jetstream::Context,
    cfg: stream::Config,
    sink: &str,
) -> Result<stream::Stream, CreateStreamError> {
    let name = cfg.name.clone();
    let e = match js.get_or_create_stream(cfg).await {
        Ok(s) => return Ok(s),
        Err(e) => e,
    };
    let raced = stream_error(&e).is_some_and(|j| maybe_created_meanwhile(j.error_code().0));
    if !raced {
        return Err(e);
    }
    match js.get_stream(&name).await {
        Ok(s) => {
            tracing::info!(sink, stream = %name, "stream created meanwhile by another process; using it");
            Ok(s)
        }
        Err(_) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_name_in_use_and_subjects_overlap_are_read_as_a_lost_race() {
        assert!(maybe_created_meanwhile(10058));
        assert!(maybe_created_meanwhile(10065));
        // Stream limits, invalid configs and the like fail the create as they are.
        for code in [10023, 10027, 10052, 10074] {
            assert!(!maybe_created_meanwhile(code), "{code}");
        }
    }
}
