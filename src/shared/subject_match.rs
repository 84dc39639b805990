//! Whether two NATS subject filters can match the same subject, so a dead-letter subject
//! that the sink's own consumer would read back (a loop) is refused before it happens.
//!
//! A leaf like [`super::names`]: pure, no I/O, nothing imported from the rest of `config`.
//! Filters follow NATS rules: dot-separated tokens, `*` matches exactly one token, `>`
//! (only as the last token) one or more.

/// Whether some subject matches both filters `a` and `b` (wildcards allowed on both
/// sides). Symmetric; a concrete subject is a filter without wildcards.
pub fn overlap(a: &str, b: &str) -> bool {
    let mut x = a.split('.');
    let mut y = b.split('.');
    loop {
        match (x.next(), y.next()) {
            (None, None) => return true,
            // `>` takes this token and any that follow, at least one: both sides have one.
            (Some(">"), Some(_)) | (Some(_), Some(">")) => return true,
            (Some(s), Some(t)) => {
                if s != "*" && t != "*" && s != t {
                    return false;
                }
            }
            // One side has tokens left that the other cannot match.
            _ => return false,
        }
    }
}

/// Whether every subject `narrow` matches also matches `wide`: a stream capturing `wide`
/// stores everything a consumer filtering `narrow` reads.
pub fn covers(wide: &str, narrow: &str) -> bool {
    let mut x = wide.split('.');
    let mut y = narrow.split('.');
    loop {
        match (x.next(), y.next()) {
            (None, None) => return true,
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(t)) if t != ">" => {}
            (Some(s), Some(t)) if s == t && s != ">" => {}
            _ => return false,
        }
    }
}

/// Why a stream jetsink creates cannot capture `subject`, when it cannot: it could
/// capture the server's own API subjects. nats-server 2.9 refuses a stream inside
/// `$JS.API.>`; 2.10 and later refuse one that can match any subject of `$JS.>` (but
/// `$JS.EVENT.>`), `$JSC.>` or `$SYS.>`, and `>` itself, unless the stream has no-ack,
/// which jetsink never sets. The rule here is the later, wider one, so a config that
/// validates creates its streams on every server.
pub fn reserved_capture(subject: &str) -> Option<&'static str> {
    if subject == ">" {
        return Some("a stream capturing every subject would capture the server's API subjects too; the server refuses it");
    }
    let api = (overlap(subject, "$JS.>") && !covers("$JS.EVENT.>", subject))
        || overlap(subject, "$JSC.>");
    if api {
        return Some(
            "it can match JetStream API subjects ($JS.>, $JSC.>); the server refuses such a stream",
        );
    }
    overlap(subject, "$SYS.>")
        .then_some("it can match system subjects ($SYS.>); the server refuses such a stream")
}

/// Whether the concrete `subject` matches `filter`.
pub fn matches(filter: &str, subject: &str) -> bool {
    !subject.split('.').any(|t| t == "*" || t == ">") && overlap(filter, subject)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_stream_may_not_capture_the_servers_api_subjects() {
        for refused in [
            ">",
            "$JS.API.x",
            "$JS.x",
            "$JS.>",
            "$JSC.x",
            "$SYS.x",
            "*.x",
            "*.>",
            "$JS.*",
        ] {
            assert!(reserved_capture(refused).is_some(), "{refused}");
        }
        for allowed in [
            "orders.>",
            "*",
            "$JS.EVENT.x",
            "$JS.EVENT.>",
            "$KV.x",
            "_INBOX.x",
            "$JS",
            "a.*.>",
        ] {
            assert_eq!(reserved_capture(allowed), None, "{allowed}");
        }
    }

    #[test]
    fn a_wider_filter_covers_a_narrower_one() {
        assert!(covers("orders.>", "orders.eu.*"));
        assert!(covers("orders.>", "orders.eu"));
        assert!(covers("orders.*", "orders.eu"));
        assert!(covers("a.b", "a.b"));
        assert!(covers(">", "a.>"));
        assert!(!covers("orders.*", "orders.>"));
        assert!(!covers("orders.*", "orders.eu.x"));
        assert!(!covers("orders.eu", "orders.*"));
        assert!(!covers("orders.>", "orders"));
        assert!(!covers("a.b", "a.c"));
    }

    #[test]
    fn wildcards_follow_nats_rules() {
        assert!(matches("orders.>", "orders.eu"));
        assert!(matches("orders.>", "orders.eu.de"));
        assert!(!matches("orders.>", "orders"));
        assert!(matches("orders.*", "orders.eu"));
        assert!(!matches("orders.*", "orders.eu.de"));
        assert!(!matches("orders.eu", "orders.us"));
        assert!(overlap("dlq.main.>", "dlq.*.orders"));
        assert!(overlap(">", "a"));
        assert!(!overlap("a.*", "b.>"));
        assert!(!overlap("a.*.c", "a.b"));
        assert!(overlap("*.b", "a.*"));
    }

    fn token() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => "[ab]".prop_map(|s| s.to_string()),
            1 => Just("*".to_string()),
        ]
    }

    fn filter() -> impl Strategy<Value = String> {
        (prop::collection::vec(token(), 1..5), any::<bool>()).prop_map(|(mut t, tail)| {
            if tail {
                t.push(">".into());
            }
            t.join(".")
        })
    }

    /// A subject both filters match, built token by token, when `overlap` says one exists.
    fn witness(a: &str, b: &str) -> String {
        let x: Vec<&str> = a.split('.').collect();
        let y: Vec<&str> = b.split('.').collect();
        let mut out = Vec::new();
        for i in 0..x.len().max(y.len()) {
            let s = x.get(i).copied().unwrap_or(">");
            let t = y.get(i).copied().unwrap_or(">");
            if s == ">" && t == ">" {
                out.push("z");
                break;
            }
            out.push(match (s, t) {
                ("*" | ">", "*" | ">") => "z",
                ("*" | ">", lit) | (lit, _) => lit,
            });
            if s == ">" || t == ">" {
                // The other side's remaining tokens decide the rest.
                let rest = if s == ">" { &y[i + 1..] } else { &x[i + 1..] };
                out.extend(
                    rest.iter()
                        .map(|r| if *r == "*" || *r == ">" { "z" } else { r }),
                );
                break;
            }
        }
        out.join(".")
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        #[test]
        fn overlap_is_symmetric(a in filter(), b in filter()) {
            prop_assert_eq!(overlap(&a, &b), overlap(&b, &a));
        }

        #[test]
        fn a_subject_both_match_means_they_overlap(
            a in filter(),
            b in filter(),
            s in prop::collection::vec("[abz]", 1..7),
        ) {
            let s = s.join(".");
            if matches(&a, &s) && matches(&b, &s) {
                prop_assert!(overlap(&a, &b), "{} and {} both match {}", a, b, s);
            }
        }

        #[test]
        fn what_the_narrow_filter_matches_the_wide_one_matches(
            a in filter(),
            b in filter(),
            s in prop::collection::vec("[abz]", 1..7),
        ) {
            let s = s.join(".");
            if covers(&a, &b) && matches(&b, &s) {
                prop_assert!(matches(&a, &s), "{} covers {} but not {}", a, b, s);
            }
            if covers(&a, &b) {
                prop_assert!(overlap(&a, &b), "{} covers {} without overlapping", a, b);
            }
        }

        #[test]
        fn an_overlap_has_a_subject_both_match(a in filter(), b in filter()) {
            if overlap(&a, &b) {
                let w = witness(&a, &b);
                prop_assert!(matches(&a, &w) && matches(&b, &w), "{} {} {}", a, b, w);
            }
        }

        #[test]
        fn any_input_is_answered_without_panicking(a in ".{0,40}", b in ".{0,40}") {
            let _ = overlap(&a, &b);
            let _ = matches(&a, &b);
        }
    }
}
