//! Reads the delivery metadata JetStream puts in a message's `$JS.ACK` reply subject.
//!
//! The NATS client has its own parser, but it splits with a general string searcher and
//! parses each number through `str::parse`: in a profile of a drain it cost more than the
//! rest of normalization. This one walks the bytes once and allocates nothing. Pure, so it
//! is tested against every shape the server sends.
//!
//! Both forms of ADR-15 are accepted, after the `$JS.ACK.` prefix:
//! - v1, 7 tokens: `<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<nanos>.<pending>`;
//! - v2, 9 or more: `<domain>.<account hash>.` then the v1 tokens, then optional tokens
//!   that are ignored.

use thiserror::Error;
use time::OffsetDateTime;

use crate::envelope::Delivery;

const PREFIX: &[u8] = b"$JS.ACK.";

/// Most tokens looked at after the prefix; later ones are ignored, as ADR-15 allows.
const MAX_TOKENS: usize = 10;

/// Why a reply subject is not a JetStream ACK subject.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ReplyError {
    /// It does not start with `$JS.ACK.`.
    #[error("reply subject is not a JetStream ACK subject")]
    NotAck,
    /// It has a token count neither ADR-15 form has.
    #[error("JetStream ACK subject has {0} tokens after $JS.ACK., expected 7 or at least 9")]
    Tokens(usize),
    /// A numeric token is not a number.
    #[error("JetStream ACK subject has a non-numeric {0}")]
    Number(&'static str),
    /// The publish time is out of range.
    #[error("JetStream ACK subject has an out-of-range publish time")]
    Time,
}

/// Parses a `$JS.ACK` reply subject into what normalization needs.
pub fn parse(reply: &str) -> Result<Delivery<'_>, ReplyError> {
    let bytes = reply.as_bytes();
    if !bytes.starts_with(PREFIX) {
        return Err(ReplyError::NotAck);
    }
    let mut tokens: [(usize, usize); MAX_TOKENS] = [(0, 0); MAX_TOKENS];
    let mut count = 0;
    let mut start = PREFIX.len();
    for (i, &b) in bytes.iter().enumerate().skip(PREFIX.len()) {
        if b == b'.' {
            if count < MAX_TOKENS {
                tokens[count] = (start, i);
            }
            count += 1;
            start = i + 1;
        }
    }
    if count < MAX_TOKENS {
        tokens[count] = (start, bytes.len());
    }
    count += 1;
    let first = match count {
        7 => 0,
        n if n >= 9 => 2,
        n => return Err(ReplyError::Tokens(n)),
    };
    let token = |k: usize| {
        let (a, b) = tokens[first + k];
        &reply[a..b]
    };
    let nanos = number(token(5), "publish time")?;
    // Seconds and nanoseconds apart: the time crate's nanosecond constructor divides an
    // i128, which cost more than the rest of the parse.
    let published = i64::try_from(nanos / 1_000_000_000)
        .ok()
        .and_then(|secs| OffsetDateTime::from_unix_timestamp(secs).ok())
        .and_then(|t| t.replace_nanosecond((nanos % 1_000_000_000) as u32).ok())
        .ok_or(ReplyError::Time)?;
    // The pending count (token 6) is checked like the others but not kept: nothing uses it.
    number(token(6), "pending count")?;
    Ok(Delivery {
        stream: token(0),
        consumer: token(1),
        delivered: number(token(2), "delivery count")?,
        stream_sequence: number(token(3), "stream sequence")?,
        consumer_sequence: number(token(4), "consumer sequence")?,
        published,
    })
}

/// A decimal `u64`: ASCII digits only, at least one, no overflow.
fn number(token: &str, what: &'static str) -> Result<u64, ReplyError> {
    if token.is_empty() {
        return Err(ReplyError::Number(what));
    }
    let mut v: u64 = 0;
    for &b in token.as_bytes() {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return Err(ReplyError::Number(what));
        }
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(d)))
            .ok_or(ReplyError::Number(what))?;
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_the_v1_form() {
        let info = parse("$JS.ACK.ORDERS.sink.3.42.57.1700000000123456789.9").unwrap();
        assert_eq!(info.stream, "ORDERS");
        assert_eq!(info.consumer, "sink");
        assert_eq!(info.delivered, 3);
        assert_eq!(info.stream_sequence, 42);
        assert_eq!(info.consumer_sequence, 57);
        assert_eq!(
            info.published,
            OffsetDateTime::from_unix_timestamp_nanos(1_700_000_000_123_456_789).unwrap()
        );
    }

    #[test]
    fn reads_the_v2_form_with_and_without_trailing_tokens() {
        let base = "$JS.ACK.hub.ACCHASH.ORDERS.sink.1.2.3.1700000000000000000.0";
        for reply in [
            base.to_string(),
            format!("{base}.random"),
            format!("{base}.random.more.tokens"),
        ] {
            let info = parse(&reply).unwrap();
            assert_eq!((info.stream, info.consumer), ("ORDERS", "sink"));
            assert_eq!(
                (info.delivered, info.stream_sequence, info.consumer_sequence),
                (1, 2, 3)
            );
        }
    }

    #[test]
    fn refuses_what_is_not_an_ack_subject() {
        assert_eq!(parse("_INBOX.abc"), Err(ReplyError::NotAck));
        assert_eq!(parse("$JS.ACK.a.b.1.2.3.4"), Err(ReplyError::Tokens(6)));
        assert_eq!(parse("$JS.ACK.a.b.c.1.2.3.4.5"), Err(ReplyError::Tokens(8)));
        assert_eq!(
            parse("$JS.ACK.a.b.x.2.3.4.5"),
            Err(ReplyError::Number("delivery count"))
        );
        assert_eq!(
            parse("$JS.ACK.a.b.1..3.4.5"),
            Err(ReplyError::Number("stream sequence"))
        );
        assert_eq!(
            parse("$JS.ACK.a.b.1.2.3.4.99999999999999999999"),
            Err(ReplyError::Number("pending count"))
        );
        assert_eq!(
            parse("$JS.ACK.a.b.1.2.3.+4.5"),
            Err(ReplyError::Number("publish time"))
        );
    }

    proptest! {
        #[test]
        fn every_field_survives_a_round_trip(
            stream in "[A-Za-z0-9_-]{1,16}",
            consumer in "[A-Za-z0-9_-]{1,16}",
            domain in proptest::option::of("[A-Za-z0-9_]{1,8}"),
            trailing in 0usize..3,
            delivered in any::<u64>(),
            sseq in any::<u64>(),
            cseq in any::<u64>(),
            nanos in any::<u64>(),
            pending in any::<u64>(),
        ) {
            let mut reply = String::from("$JS.ACK.");
            if let Some(d) = &domain {
                reply.push_str(&format!("{d}.HASH."));
            }
            reply.push_str(&format!("{stream}.{consumer}.{delivered}.{sseq}.{cseq}.{nanos}.{pending}"));
            if domain.is_some() {
                for t in 0..trailing {
                    reply.push_str(&format!(".t{t}"));
                }
            }
            let info = parse(&reply).unwrap();
            prop_assert_eq!(info.stream, stream.as_str());
            prop_assert_eq!(info.consumer, consumer.as_str());
            prop_assert_eq!(info.delivered, delivered);
            prop_assert_eq!(info.stream_sequence, sseq);
            prop_assert_eq!(info.consumer_sequence, cseq);
            prop_assert_eq!(info.published.unix_timestamp_nanos(), i128::from(nanos));
        }

        #[test]
        fn never_panics_on_any_subject(s in "\\$JS\\.ACK\\.[a-z0-9.]{0,40}") {
            let _ = parse(&s);
        }
    }
}
