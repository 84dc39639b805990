//! The pure parts of the job API: how long a request may wait, which id it names, which
//! sink a path names for the metric label, and the answer a result gets. No I/O.

use std::time::Duration;

use axum::http::StatusCode;

use crate::config::api::ApiConfig;
use crate::jobs::{id, Status};

/// Why a request is refused with 400.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadRequest {
    /// `?timeout_ms=` is not a positive whole number.
    #[error("timeout_ms must be a whole number of milliseconds from 1, got {0:?}")]
    Timeout(String),
    /// The job id is not one safe subject token.
    #[error("{0}")]
    Id(String),
    /// `Idempotency-Key` given more than once: which one is the job's is not to be guessed.
    #[error("Idempotency-Key is given {0} times; send it once")]
    TwoKeys(usize),
}

impl BadRequest {
    /// The `error` field of the JSON body.
    pub fn code(&self) -> &'static str {
        match self {
            BadRequest::Timeout(_) => "bad_timeout",
            BadRequest::Id(_) => "bad_id",
            BadRequest::TwoKeys(_) => "duplicate_idempotency_key",
        }
    }
}

/// The wait budget of a request: `asked` (the `timeout_ms` query value) cut to
/// `max_timeout_ms`, or `default_timeout_ms`.
pub fn budget(cfg: &ApiConfig, asked: Option<&str>) -> Result<Duration, BadRequest> {
    let ms = match asked {
        None => cfg.default_timeout_ms,
        Some(text) => match text.parse::<u64>() {
            Ok(ms) if ms > 0 => ms.min(cfg.max_timeout_ms),
            _ => return Err(BadRequest::Timeout(text.chars().take(32).collect())),
        },
    };
    Ok(Duration::from_millis(ms))
}

/// The job id a request names (`Idempotency-Key` header or path), checked to be one safe
/// subject token; `None` when it names none.
pub fn job_id(raw: Option<&[u8]>) -> Result<Option<String>, BadRequest> {
    let Some(raw) = raw else { return Ok(None) };
    let text =
        std::str::from_utf8(raw).map_err(|_| BadRequest::Id("job id: not UTF-8 text".into()))?;
    id::check(text).map_err(|e| BadRequest::Id(format!("job id: {e}")))?;
    Ok(Some(text.to_string()))
}

/// The job id the `Idempotency-Key` header values name (all of them, in order): `None`
/// without one, refused when given twice.
pub fn key_header<'a>(
    values: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Option<String>, BadRequest> {
    let values: Vec<&[u8]> = values.into_iter().collect();
    match values.as_slice() {
        [] => Ok(None),
        [one] => job_id(Some(one)),
        many => Err(BadRequest::TwoKeys(many.len())),
    }
}

/// The sink a request path names, when it is one of `known`; else the empty label, so
/// unknown names cannot grow the metric's label set.
pub fn sink_label<'a>(path: &str, known: impl IntoIterator<Item = &'a str>) -> &'a str {
    let named = path
        .strip_prefix("/v1/sinks/")
        .and_then(|rest| rest.split('/').next());
    match named {
        Some(n) => known.into_iter().find(|k| *k == n).unwrap_or(""),
        None => "",
    }
}

/// The status a result is answered with: 200 committed, 422 dead-lettered.
pub fn status_of(s: Status) -> StatusCode {
    match s {
        Status::Committed => StatusCode::OK,
        Status::DeadLettered => StatusCode::UNPROCESSABLE_ENTITY,
    }
}

/// The `Retry-After` of a 503, in whole seconds: the client may ask again at once in
/// principle, but a second keeps a retry loop from spinning.
pub const RETRY_AFTER_SECONDS: u64 = 1;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cfg() -> ApiConfig {
        ApiConfig {
            default_timeout_ms: 2_000,
            max_timeout_ms: 10_000,
            ..ApiConfig::default()
        }
    }

    #[test]
    fn the_budget_is_the_default_or_the_ask_capped() {
        assert_eq!(budget(&cfg(), None), Ok(Duration::from_millis(2_000)));
        assert_eq!(budget(&cfg(), Some("300")), Ok(Duration::from_millis(300)));
        assert_eq!(
            budget(&cfg(), Some("999999")),
            Ok(Duration::from_millis(10_000))
        );
        for bad in ["0", "-1", "1.5", "", "soon", "99999999999999999999999"] {
            assert!(
                matches!(budget(&cfg(), Some(bad)), Err(BadRequest::Timeout(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_job_id_is_one_subject_token() {
        assert_eq!(job_id(None), Ok(None));
        assert_eq!(job_id(Some(b"order-7")), Ok(Some("order-7".into())));
        for bad in [&b"a.b"[..], b"*", b"", b"a b", b"\xff"] {
            let e = job_id(Some(bad)).unwrap_err();
            assert_eq!(e.code(), "bad_id", "{bad:?}");
        }
    }

    #[test]
    fn a_second_idempotency_key_is_refused_naming_the_header() {
        assert_eq!(key_header([]), Ok(None));
        assert_eq!(key_header([&b"a1"[..]]), Ok(Some("a1".into())));
        let e = key_header([&b"a1"[..], b"a2"]).unwrap_err();
        assert_eq!(e.code(), "duplicate_idempotency_key");
        assert_eq!(
            e.to_string(),
            "Idempotency-Key is given 2 times; send it once"
        );
        assert_eq!(key_header([&b"a1"[..], b"a1"]), Err(BadRequest::TwoKeys(2)));
        assert_eq!(key_header([&b"a.b"[..]]).unwrap_err().code(), "bad_id");
    }

    #[test]
    fn only_configured_sinks_become_labels() {
        let known = ["grader", "audit"];
        assert_eq!(sink_label("/v1/sinks/grader/jobs", known), "grader");
        assert_eq!(sink_label("/v1/sinks/audit/jobs/x", known), "audit");
        assert_eq!(sink_label("/v1/sinks/nope/jobs", known), "");
        assert_eq!(sink_label("/metrics", known), "");
        assert_eq!(status_of(Status::Committed), StatusCode::OK);
        assert_eq!(
            status_of(Status::DeadLettered),
            StatusCode::UNPROCESSABLE_ENTITY
        );
    }

    proptest! {
        #[test]
        fn a_budget_never_exceeds_the_cap(ask in "\\PC{0,24}") {
            if let Ok(d) = budget(&cfg(), Some(&ask)) {
                prop_assert!(d > Duration::ZERO && d <= Duration::from_millis(10_000));
            }
        }
    }
}
