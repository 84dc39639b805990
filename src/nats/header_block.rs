//! Whether a stored header block is one the NATS client can read.
//!
//! nats-server stores whatever header block a publisher sends, as long as it starts with
//! `NATS/1.0`. async-nats 0.51 is stricter when it *receives* one (`Connection::try_read_op`
//! in its `connection.rs`): a block it cannot parse is a protocol error that drops the
//! whole connection, and a value holding a bare carriage return panics its connection
//! task. Such a message can therefore never be delivered to jetsink through the client;
//! the sink reads it raw by sequence instead and asks this module whether it is the one.
//!
//! The rule mirrors the client's parser step by step, with the same standard-library
//! splitting (`str::lines`, `str::trim*`), so the two cannot disagree on where a line
//! ends:
//! 1. the block is UTF-8;
//! 2. its first line starts with `NATS/1.0`; what follows, trimmed, is empty or a status
//!    (three digits, 100–999) and a description;
//! 3. every later non-empty line holds a `:`; the name before it is visible ASCII
//!    (`is_ascii_graphic`); a line starting with white space continues the previous value;
//! 4. the assembled value (leading space of its first line and trailing space of the whole
//!    removed) holds no carriage return.
//!
//! Nothing else is refused. A valid status on the version line (`NATS/1.0 200`,
//! `NATS/1.0 503 Odd`) parses, and the fetch path hands a stored message carrying one to
//! the sink like any other (it tells a stored message from the server's own status by its
//! `$JS.ACK` reply subject); a block with thousands of header lines parses too, and the
//! pipeline refuses it as a metadata failure (`envelope::MAX_HEADER_VALUES`). Refusing
//! either here would settle, as unreadable, a message the sink may hold or has refused by
//! its own rules: the scan runs while batches are in hand, and on a work-queue stream a
//! TERM deletes. The check is one pass over the block, linear in its length.

/// Why a header block cannot be read by the client; the text goes into the dead-letter
/// copy's `Jetsink-Error` and the logs (it never quotes the block itself).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// Some bytes are not UTF-8.
    #[error("the header block is not UTF-8 (first invalid byte at offset {offset})")]
    NotUtf8 {
        /// Byte offset of the first invalid sequence.
        offset: usize,
    },
    /// The first line does not start with `NATS/1.0`.
    #[error("the header block does not start with a NATS/1.0 version line")]
    NoVersionLine,
    /// The version line carries something that is not a three-digit status.
    #[error("the version line carries an invalid status code")]
    BadStatus,
    /// A header line without a `:`.
    #[error("header line {line} has no ':' between name and value")]
    NoColon {
        /// 1-based line number in the block (the version line is line 1).
        line: usize,
    },
    /// A header name with a character outside visible ASCII (a space, a control
    /// character, a non-ASCII letter).
    #[error("header line {line}: the name holds a character other than visible ASCII (a space, a control character or a non-ASCII letter)")]
    BadName {
        /// 1-based line number in the block.
        line: usize,
    },
    /// A header value with a carriage return inside it.
    #[error("header line {line}: the value holds a carriage return")]
    CarriageReturn {
        /// 1-based line number in the block where the value starts.
        line: usize,
    },
}

/// Checks a raw header block (everything before the payload, `NATS/1.0` line and the
/// final empty line included) the way the client will read it.
pub fn check(block: &[u8]) -> Result<(), Malformed> {
    let text = std::str::from_utf8(block).map_err(|e| Malformed::NotUtf8 {
        offset: e.valid_up_to(),
    })?;
    let mut lines = text.lines().peekable();
    let version = lines.next().ok_or(Malformed::NoVersionLine)?;
    let suffix = version
        .strip_prefix("NATS/1.0")
        .map(str::trim)
        .ok_or(Malformed::NoVersionLine)?;
    let status = suffix
        .split_once(' ')
        .map(|(s, _)| s.trim())
        .unwrap_or(suffix);
    if !status.is_empty() && status_code(status.as_bytes()).is_none() {
        return Err(Malformed::BadStatus);
    }
    let mut line_no = 1;
    while let Some(line) = lines.next() {
        line_no += 1;
        if line.is_empty() {
            continue;
        }
        let start = line_no;
        let (name, value) = line
            .split_once(':')
            .ok_or(Malformed::NoColon { line: start })?;
        if name.contains(|c: char| !c.is_ascii_graphic()) {
            return Err(Malformed::BadName { line: start });
        }
        // The client assembles the value as `value.trim_start()` + every continuation
        // line, then trims the end; a carriage return left inside makes it panic. The
        // value is built the same way, so the two agree on which white space is trimmed.
        let mut assembled = value.trim_start().to_owned();
        while let Some(more) = lines.next_if(|s| s.starts_with(char::is_whitespace)) {
            line_no += 1;
            assembled.push_str(more);
        }
        if assembled.trim_end().contains('\r') {
            return Err(Malformed::CarriageReturn { line: start });
        }
    }
    Ok(())
}

/// The client's status rule: exactly three ASCII digits, the first not zero.
fn status_code(s: &[u8]) -> Option<u16> {
    let [a, b, c] = s else { return None };
    let digit = |x: u8| x.is_ascii_digit().then(|| u16::from(x - b'0'));
    let (a, b, c) = (digit(*a)?, digit(*b)?, digit(*c)?);
    (a != 0).then_some(a * 100 + b * 10 + c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::str::FromStr;

    #[test]
    fn ordinary_blocks_are_accepted() {
        for block in [
            &b"NATS/1.0\r\n\r\n"[..],
            b"NATS/1.0\r\nNats-Msg-Id: a-1\r\nX-Trace: abc def\r\n\r\n",
            b"NATS/1.0\r\nX: \r\n\r\n",
            b"NATS/1.0\r\nX: one\r\n two\r\n\r\n",
            b"NATS/1.0\r\n$Odd_Name.~!: v\r\n\r\n",
            b"NATS/1.0\r\nX: caf\xc3\xa9\r\n\r\n",
            b"NATS/1.0",
            // A status the client parses: the fetch path hands such a stored message over.
            b"NATS/1.0 200\r\n\r\n",
            b"NATS/1.0 200 OK\r\nX: y\r\n\r\n",
            b"NATS/1.0 503 Odd Description\r\n\r\n",
            b"NATS/1.0 100 Idle Heartbeat\r\n\r\n",
        ] {
            assert_eq!(check(block), Ok(()), "{:?}", String::from_utf8_lossy(block));
        }
    }

    #[test]
    fn each_thing_the_client_refuses_is_named() {
        let cases: [(&[u8], Malformed); 10] = [
            (
                b"NATS/1.0\r\nBad Name: x\r\n\r\n",
                Malformed::BadName { line: 2 },
            ),
            (
                b"NATS/1.0\r\nX: \xff\xfe\r\n\r\n",
                Malformed::NotUtf8 { offset: 13 },
            ),
            (b"", Malformed::NoVersionLine),
            (b"HTTP/1.1\r\n\r\n", Malformed::NoVersionLine),
            (b"NATS/1.0 abc\r\n\r\n", Malformed::BadStatus),
            (b"NATS/1.0 099\r\n\r\n", Malformed::BadStatus),
            (b"NATS/1.0 20\r\n\r\n", Malformed::BadStatus),
            (
                b"NATS/1.0\r\nA: b\r\nno colon here\r\n\r\n",
                Malformed::NoColon { line: 3 },
            ),
            (
                b"NATS/1.0\r\nX: a\rb\r\n\r\n",
                Malformed::CarriageReturn { line: 2 },
            ),
            (
                b"NATS/1.0\r\nX\xc3\xa9: v\r\n\r\n",
                Malformed::BadName { line: 2 },
            ),
        ];
        for (block, why) in cases {
            assert_eq!(
                check(block),
                Err(why),
                "{:?}",
                String::from_utf8_lossy(block)
            );
        }
    }

    #[test]
    fn a_carriage_return_in_a_continuation_is_refused_but_trailing_space_is_not() {
        assert_eq!(
            check(b"NATS/1.0\r\nX: a\r\n b\rc\r\n\r\n"),
            Err(Malformed::CarriageReturn { line: 2 })
        );
        assert_eq!(check(b"NATS/1.0\r\nX: a \t\r\n\r\n"), Ok(()));
    }

    #[test]
    fn a_block_with_more_header_lines_than_the_envelope_keeps_is_readable() {
        // The client reads it; the pipeline refuses it by its own rule (a metadata
        // failure), so the scan must not settle it as unreadable.
        let mut block = b"NATS/1.0\r\n".to_vec();
        for i in 0..=crate::envelope::MAX_HEADER_VALUES {
            block.extend_from_slice(format!("H{i}: v\r\n").as_bytes());
        }
        assert_eq!(check(&block), Ok(()));
    }

    fn name() -> impl Strategy<Value = String> {
        "[!-9;-~]{1,20}"
    }

    fn value() -> impl Strategy<Value = String> {
        "[ -~\u{a0}-\u{2fff}]{0,30}"
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        #[test]
        fn any_bytes_are_judged_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = check(&bytes);
        }

        #[test]
        fn blocks_a_well_behaved_client_builds_are_accepted(
            headers in proptest::collection::vec((name(), value()), 0..20)
        ) {
            let mut block = String::from("NATS/1.0\r\n");
            for (n, v) in &headers {
                block.push_str(&format!("{n}: {v}\r\n"));
            }
            block.push_str("\r\n");
            prop_assert_eq!(check(block.as_bytes()), Ok(()));
        }

        /// The status rule is the client's own: a version line with a status and a
        /// description is accepted exactly when async-nats parses the status.
        #[test]
        fn the_status_rule_matches_the_client(code in "[0-9a-z]{1,4}", description in "[ -~]{0,12}") {
            let block = format!("NATS/1.0 {code} {description}\r\nX: y\r\n\r\n");
            let client_ok = async_nats::StatusCode::from_str(&code).is_ok();
            prop_assert_eq!(check(block.as_bytes()).is_ok(), client_ok);
        }

        /// The name rule is the client's own: a one-header block is accepted exactly when
        /// async-nats accepts its name.
        #[test]
        fn the_name_rule_matches_the_client(n in "[^:\r\n]{1,12}") {
            prop_assume!(!n.starts_with(char::is_whitespace));
            let block = format!("NATS/1.0\r\n{n}: v\r\n\r\n");
            let client_ok = async_nats::HeaderName::from_str(&n).is_ok();
            prop_assert_eq!(check(block.as_bytes()).is_ok(), client_ok);
        }

        #[test]
        fn one_bad_line_anywhere_makes_the_block_malformed(
            headers in proptest::collection::vec((name(), value()), 1..20),
            at in any::<prop::sample::Index>(),
        ) {
            let bad = at.index(headers.len());
            let mut block = String::from("NATS/1.0\r\n");
            for (i, (n, v)) in headers.iter().enumerate() {
                if i == bad {
                    block.push_str(&format!("Bad {n}: {v}\r\n"));
                } else {
                    block.push_str(&format!("{n}: {v}\r\n"));
                }
            }
            block.push_str("\r\n");
            prop_assert_eq!(check(block.as_bytes()), Err(Malformed::BadName { line: bad + 2 }));
        }
    }
}
