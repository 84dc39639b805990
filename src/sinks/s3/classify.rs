//! A failed S3 request → what it means for the batch. Pure: an error in, a class out.
//!
//! No S3 answer is about one message's content: a PUT of a whole object fails for the
//! bucket, the credentials, the network or the store, never for record 17 of it. So
//! nothing here is `Permanent` (splitting a batch would only write the same failure in
//! smaller objects). The only content-caused failure, a key longer than S3 allows because
//! of a long subject token, is found before any request (`key::plan`).
//!
//! - **transient** (held, retried without bound): no answer (connection refused or
//!   reset, timeout), 5xx, 408, 409 (a conflicting operation in progress), 429, and the
//!   codes `SlowDown`, `InternalError`, `ServiceUnavailable`, `RequestTimeout`;
//! - **misconfigured** (held and counted as such until someone fixes the setup): 401,
//!   403 (`InvalidAccessKeyId`, `SignatureDoesNotMatch`, `AccessDenied`), 404
//!   (`NoSuchBucket`), a redirect (`PermanentRedirect`: the wrong region or endpoint), and
//!   every other 4xx (for example 400 `ExpiredToken` or `InvalidRequest`: a request the
//!   store refuses whatever the batch holds).

use object_store::client::{HttpError, HttpErrorKind};

use crate::sinks::contract::SinkError;

/// What a failed request showed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// The HTTP status of the answer, when there was one.
    pub status: Option<u16>,
    /// The S3 error code of the answer's body (`NoSuchBucket`), when there was one.
    pub code: Option<String>,
    /// No answer: the transport failed.
    pub no_answer: bool,
}

/// The class of a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Hold and retry.
    Transient,
    /// Hold, and tell the operator to fix the bucket, credentials, region or endpoint.
    Misconfigured,
}

/// S3 error codes that mean "busy or down", whatever the status.
const TRANSIENT_CODES: [&str; 5] = [
    "SlowDown",
    "InternalError",
    "ServiceUnavailable",
    "RequestTimeout",
    "OperationAborted",
];

/// The error of a failed request `op` (`PUT`, `list`) on `key` in `bucket`: its class,
/// and what failed in words that name the object and never quote the store's text.
pub fn failure(bucket: &str, op: &str, key: &str, err: &object_store::Error) -> SinkError {
    let observed = observe(err);
    let what = format!("{op} s3://{bucket}/{key}: {}", describe(&observed, err));
    match classify(&observed) {
        Class::Transient => SinkError::transient(what),
        Class::Misconfigured => SinkError::Misconfigured {
            message: format!("{what}; check the bucket, credentials, region and endpoint"),
        },
    }
}

/// The class of `o`.
pub fn classify(o: &Observed) -> Class {
    if o.code
        .as_deref()
        .is_some_and(|c| TRANSIENT_CODES.contains(&c))
    {
        return Class::Transient;
    }
    match o.status {
        None => Class::Transient,
        Some(408 | 409 | 429 | 500..=599) => Class::Transient,
        Some(300..=499) => Class::Misconfigured,
        // 2xx with an error body not recognised above, or a status HTTP does not define:
        // the store misbehaves; holding is safe, and retrying may pass.
        Some(_) => Class::Transient,
    }
}

/// What `err` shows: the status (from the error's kind, or the request error's text),
/// the S3 error code (from the answer's body in that text), or a transport failure.
pub fn observe(err: &object_store::Error) -> Observed {
    let mut o = Observed {
        status: match err {
            object_store::Error::NotFound { .. } => Some(404),
            object_store::Error::PermissionDenied { .. } => Some(403),
            object_store::Error::Unauthenticated { .. } => Some(401),
            object_store::Error::Precondition { .. } => Some(412),
            object_store::Error::AlreadyExists { .. } => Some(409),
            object_store::Error::NotModified { .. } => Some(304),
            _ => None,
        },
        ..Observed::default()
    };
    let mut text = String::new();
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(s) = source {
        if let Some(h) = s.downcast_ref::<HttpError>() {
            if !matches!(h.kind(), HttpErrorKind::Decode | HttpErrorKind::Unknown) {
                o.no_answer = true;
            }
        }
        text.push_str(&s.to_string());
        text.push('\n');
        source = s.source();
    }
    if o.status.is_none() {
        o.status = status_in(&text);
    }
    o.code = code_in(&text);
    if o.status.is_some() {
        o.no_answer = false;
    }
    o
}

/// The status in object_store's "Server returned non-2xx status code: 503 ..." text.
pub fn status_in(text: &str) -> Option<u16> {
    let at = text.find("status code: ")? + "status code: ".len();
    let digits = text.get(at..at + 3)?;
    digits.parse().ok().filter(|s| (100..=999).contains(s))
}

/// The `<Code>` of an S3 error body quoted in `text`, if it is a plain identifier.
pub fn code_in(text: &str) -> Option<String> {
    let start = text.find("<Code>")? + "<Code>".len();
    let end = start + text[start..].find("</Code>")?;
    let code = &text[start..end];
    (!code.is_empty() && code.len() <= 64 && code.bytes().all(|b| b.is_ascii_alphanumeric()))
        .then(|| code.to_string())
}

/// A short, secret-free description of what failed: the status and code, or the
/// transport failure's kind. Never the store's message text (which may quote keys and
/// request ids, but is not needed to act).
pub fn describe(o: &Observed, err: &object_store::Error) -> String {
    match (o.status, &o.code) {
        (Some(s), Some(c)) => format!("HTTP {s} {c}"),
        (Some(s), None) => format!("HTTP {s}"),
        (None, Some(c)) => format!("error {c}"),
        (None, None) => {
            let mut last = err.to_string();
            let mut source = std::error::Error::source(err);
            while let Some(s) = source {
                last = s.to_string();
                source = s.source();
            }
            if o.no_answer {
                format!("no answer: {last}")
            } else {
                last
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn answered(status: u16, code: Option<&str>) -> Observed {
        Observed {
            status: Some(status),
            code: code.map(str::to_string),
            no_answer: false,
        }
    }

    #[test]
    fn known_answers() {
        for (status, code, class) in [
            (503, Some("SlowDown"), Class::Transient),
            (503, None, Class::Transient),
            (500, Some("InternalError"), Class::Transient),
            (429, None, Class::Transient),
            (409, Some("OperationAborted"), Class::Transient),
            (400, Some("RequestTimeout"), Class::Transient),
            (200, Some("InternalError"), Class::Transient),
            (403, Some("InvalidAccessKeyId"), Class::Misconfigured),
            (403, Some("SignatureDoesNotMatch"), Class::Misconfigured),
            (403, Some("AccessDenied"), Class::Misconfigured),
            (404, Some("NoSuchBucket"), Class::Misconfigured),
            (401, None, Class::Misconfigured),
            (301, Some("PermanentRedirect"), Class::Misconfigured),
            (400, Some("ExpiredToken"), Class::Misconfigured),
            (400, Some("InvalidRequest"), Class::Misconfigured),
        ] {
            assert_eq!(
                classify(&answered(status, code)),
                class,
                "{status} {code:?}"
            );
        }
        let down = Observed {
            no_answer: true,
            ..Observed::default()
        };
        assert_eq!(classify(&down), Class::Transient);
    }

    #[test]
    fn status_and_code_are_read_from_object_stores_text() {
        let text = "Error performing PUT http://127.0.0.1:5/b/k in 2ms - Server returned non-2xx status code: 404 Not Found: <?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>";
        assert_eq!(status_in(text), Some(404));
        assert_eq!(code_in(text), Some("NoSuchBucket".into()));
        assert_eq!(status_in("no status here"), None);
        assert_eq!(code_in("<Code>has space</Code>"), None);
        assert_eq!(code_in("<Code>unterminated"), None);
    }

    proptest! {
        #[test]
        fn nothing_is_permanent_and_only_4xx_or_redirects_are_setup_mistakes(status in 0u16..1000) {
            let c = classify(&answered(status, None));
            match status {
                408 | 409 | 429 => prop_assert_eq!(c, Class::Transient),
                300..=499 => prop_assert_eq!(c, Class::Misconfigured),
                _ => prop_assert_eq!(c, Class::Transient),
            }
        }

        #[test]
        fn reading_any_text_never_panics(text in any::<String>()) {
            let _ = status_in(&text);
            let _ = code_in(&text);
        }
    }
}
