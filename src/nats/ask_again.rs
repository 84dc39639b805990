//! A JetStream API request asked again when it timed out while binding.
//!
//! A server busy with many clients binding at once, or a cluster whose meta leader is
//! being elected (just formed, a node restarting), can answer after the request timeout.
//! Start-up then failed with exit 69 although the next request would have been answered.
//! The requests asked again here (stream and consumer lookups, the consumer create) are safe
//! to repeat: a lookup reads, and creating a durable with the same settings is answered
//! with that consumer also when the timed-out request did create it.

use std::future::Future;

use async_nats::jetstream::context::RequestErrorKind;
use async_nats::jetstream::context::{GetStreamError, GetStreamErrorKind, RequestError};

/// How often a request that timed out is asked for in all, before start-up fails (exit 69):
/// each attempt waits up to `nats.request_timeout_ms`.
pub const ATTEMPTS: u32 = 3;

/// Runs `call` until it succeeds, fails other than by `timed_out`, or has run
/// [`ATTEMPTS`] times; `what` names the request in the warning logged before each repeat.
pub(super) async fn ask_again<T, E, F, Fut>(
    sink: &str,
    what: &str,
    timed_out: impl Fn(&E) -> bool,
    mut call: F,
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut attempt = 1;
    loop {
        match call().await {
            Err(e) if timed_out(&e) && attempt < ATTEMPTS => {
                tracing::warn!(sink, attempt, "{what} timed out (a busy server, or a cluster electing its leader); asking again");
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Whether a stream lookup failed because its request timed out (the client wraps the
/// request's own error as the source of a `Request` error).
pub(super) fn stream_lookup_timed_out(e: &GetStreamError) -> bool {
    matches!(e.kind(), GetStreamErrorKind::Request)
        && std::error::Error::source(e)
            .and_then(|s| s.downcast_ref::<RequestError>())
            .is_some_and(|r| r.kind() == RequestErrorKind::TimedOut)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn run<T>(f: impl Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// Timeouts, then an answer: the answer, after as many calls.
    #[test]
    fn a_request_that_timed_out_is_asked_again_until_answered() {
        let calls = Cell::new(0);
        let out: Result<u32, &str> = run(ask_again(
            "s",
            "r",
            |e| *e == "timeout",
            || {
                calls.set(calls.get() + 1);
                let n = calls.get();
                async move {
                    if n < ATTEMPTS {
                        Err("timeout")
                    } else {
                        Ok(n)
                    }
                }
            },
        ));
        assert_eq!(out, Ok(ATTEMPTS));
        assert_eq!(calls.get(), ATTEMPTS);
    }

    /// `ask_again` over a call that always fails with `error`: the outcome and the calls.
    fn always_failing(error: &'static str) -> (Result<(), &'static str>, u32) {
        let calls = Cell::new(0);
        let out = run(ask_again(
            "s",
            "r",
            |e| *e == "timeout",
            || {
                calls.set(calls.get() + 1);
                async move { Err(error) }
            },
        ));
        (out, calls.get())
    }

    /// Only timeouts are asked again, and at most ATTEMPTS times in all.
    #[test]
    fn other_errors_end_at_once_and_timeouts_after_the_last_attempt() {
        assert_eq!(always_failing("refused"), (Err("refused"), 1));
        assert_eq!(always_failing("timeout"), (Err("timeout"), ATTEMPTS));
    }

    /// The client's timed-out request is recognized inside a stream lookup's error, and
    /// nothing else is.
    #[test]
    fn a_stream_lookup_timeout_is_told_from_its_other_failures() {
        let timed_out = GetStreamError::with_source(
            GetStreamErrorKind::Request,
            RequestError::new(RequestErrorKind::TimedOut),
        );
        assert!(stream_lookup_timed_out(&timed_out));
        let no_responders = GetStreamError::with_source(
            GetStreamErrorKind::Request,
            RequestError::new(RequestErrorKind::NoResponders),
        );
        assert!(!stream_lookup_timed_out(&no_responders));
        assert!(!stream_lookup_timed_out(&GetStreamError::new(
            GetStreamErrorKind::EmptyName
        )));
    }
}
