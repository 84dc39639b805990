//! Which job a message is: its id, read from the place the sink's `results.job_id` names,
//! and checked to be one safe subject token, since it becomes the last token of the
//! result's subject. Pure.

use crate::config::results::JobIdSource;
use crate::envelope::{Envelope, MSG_ID_HEADER};

/// The longest job id accepted.
pub const MAX_JOB_ID_LEN: usize = 256;

/// The error class of a job refused for its id (the `Jetsink-Error-Class` of its
/// dead-letter copy).
pub const INVALID_JOB_ID: &str = "invalid_job_id";

/// Why a message has no usable job id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidJobId {
    /// The header or key that names the job is missing or empty.
    #[error("no job id: the message has no {0} (results.job_id)")]
    Missing(String),
    /// The id cannot be a single subject token.
    #[error("job id {shown:?} is not a single safe subject token (1-{MAX_JOB_ID_LEN} printable ASCII characters without '.', '*', '>' or spaces)")]
    Unsafe {
        /// The id, cut to 64 characters for the log.
        shown: String,
    },
}

/// The job id of `e`, or why it has none.
pub fn job_id(e: &Envelope, source: &JobIdSource) -> Result<String, InvalidJobId> {
    let found = match source {
        JobIdSource::MessageId => e.message_id.clone(),
        JobIdSource::IdempotencyKey => Some(e.idempotency_key.clone()),
        JobIdSource::Header(name) => header(e, name),
    };
    let id = found.filter(|v| !v.is_empty()).ok_or_else(|| {
        InvalidJobId::Missing(match source {
            JobIdSource::MessageId => format!("{MSG_ID_HEADER} header"),
            JobIdSource::IdempotencyKey => "idempotency key".into(),
            JobIdSource::Header(n) => format!("{n} header"),
        })
    })?;
    check(&id)?;
    Ok(id)
}

/// Checks that `id` is one safe subject token.
pub fn check(id: &str) -> Result<(), InvalidJobId> {
    if is_safe_token(id) {
        Ok(())
    } else {
        Err(InvalidJobId::Unsafe {
            shown: id.chars().take(64).collect(),
        })
    }
}

/// 1 to [`MAX_JOB_ID_LEN`] printable ASCII characters, none of them `.`, `*` or `>`: a
/// token that cannot split the result's subject or turn it into a wildcard.
pub fn is_safe_token(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_JOB_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'.' | b'*' | b'>'))
}

/// The last value of header `name` (matched case-insensitively).
fn header(e: &Envelope, name: &str) -> Option<String> {
    e.headers
        .iter()
        .rev()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .and_then(|(_, v)| v.last().cloned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::IdempotencyKey;
    use crate::envelope::{normalize, Delivery};
    use proptest::prelude::*;
    use time::OffsetDateTime;

    fn env(headers: Vec<(&'static str, &'static str)>) -> Envelope {
        normalize(
            "jobs.run",
            Delivery {
                stream: "JOBS",
                consumer: "w",
                stream_sequence: 7,
                consumer_sequence: 1,
                delivered: 1,
                published: OffsetDateTime::UNIX_EPOCH,
            },
            headers,
            bytes::Bytes::new(),
            IdempotencyKey::StreamSequence,
        )
    }

    #[test]
    fn the_id_comes_from_the_configured_place() {
        let e = env(vec![("Job-Id", "j-1"), ("Nats-Msg-Id", "m-1")]);
        assert_eq!(job_id(&e, &JobIdSource::MessageId).unwrap(), "m-1");
        assert_eq!(
            job_id(&e, &JobIdSource::Header("job-id".into())).unwrap(),
            "j-1"
        );
        assert_eq!(job_id(&e, &JobIdSource::IdempotencyKey).unwrap(), "JOBS:7");
    }

    #[test]
    fn a_missing_or_unsafe_id_is_refused() {
        let e = env(vec![]);
        assert!(matches!(
            job_id(&e, &JobIdSource::MessageId),
            Err(InvalidJobId::Missing(_))
        ));
        for bad in ["a.b", "*", ">", "a b", "", "é"] {
            assert!(check(bad).is_err(), "{bad:?}");
        }
        assert!(check(&"x".repeat(MAX_JOB_ID_LEN + 1)).is_err());
        for good in ["a", "job-42", "JOBS:7", "0f3a_b=c"] {
            assert!(check(good).is_ok(), "{good:?}");
        }
    }

    proptest! {
        #[test]
        fn a_safe_id_is_exactly_one_subject_token(id in "\\PC{0,300}") {
            let safe = is_safe_token(&id);
            if safe {
                let subject = format!("jobs.results.{id}");
                prop_assert_eq!(subject.split('.').count(), 3);
                prop_assert!(crate::shared::names::check_subject(&subject).is_ok());
                prop_assert!(!id.contains('*') && !id.contains('>'));
            }
            prop_assert_eq!(safe, check(&id).is_ok());
        }
    }
}
