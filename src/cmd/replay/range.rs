//! The pure parts of a replay: the range its flags ask for, the stop bound that range
//! comes to on a stream, and the sink as the replay runs it (its own consumer, no
//! reordering). No I/O, so every rule is unit-tested.

use time::OffsetDateTime;

use super::error::ReplayError;
use crate::config::buckets::bucket_wildcard;
use crate::config::SinkSpec;
use crate::nats::replay_consumer::ReplayStart;

/// Where a replay stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The stream's last sequence when the replay starts (no `--to-seq` or `--until`).
    StreamEnd,
    /// `--to-seq`: this stream sequence, included (at most the stream's last sequence
    /// when the replay starts: what is published later is `jetsink run`'s to write).
    Sequence(u64),
    /// `--until`: the last message stored before this time.
    Before(OffsetDateTime),
}

/// The range the flags ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// Where the replay consumer starts.
    pub start: ReplayStart,
    /// Where the replay stops.
    pub end: End,
}

/// An RFC 3339 time given to `flag`.
fn parse_time(flag: &'static str, text: &str) -> Result<OffsetDateTime, ReplayError> {
    crate::cmd::flag_values::rfc3339(text).map_err(|message| ReplayError::Usage { flag, message })
}

/// The range of `--from-seq`/`--since` and `--to-seq`/`--until` (clap makes sure exactly
/// one start and at most one end are given). Pure.
pub fn parse_range(
    from_seq: Option<u64>,
    since: Option<&str>,
    to_seq: Option<u64>,
    until: Option<&str>,
) -> Result<Range, ReplayError> {
    let start = match (from_seq, since) {
        (Some(0), _) => {
            return Err(ReplayError::Usage {
                flag: "--from-seq",
                message: "stream sequences start at 1".into(),
            })
        }
        (Some(n), _) => ReplayStart::Sequence(n),
        (None, Some(t)) => ReplayStart::Time(parse_time("--since", t)?),
        (None, None) => {
            return Err(ReplayError::Usage {
                flag: "--from-seq",
                message: "give --from-seq N or --since TIME".into(),
            })
        }
    };
    let end = match (to_seq, until) {
        (Some(m), _) => End::Sequence(m),
        (None, Some(t)) => End::Before(parse_time("--until", t)?),
        (None, None) => End::StreamEnd,
    };
    match (start, end) {
        (ReplayStart::Sequence(n), End::Sequence(m)) if m < n => Err(ReplayError::Usage {
            flag: "--to-seq",
            message: format!("{m} is before --from-seq {n}"),
        }),
        (ReplayStart::Time(s), End::Before(u)) if u <= s => Err(ReplayError::Usage {
            flag: "--until",
            message: "must be later than --since".into(),
        }),
        _ => Ok(Range { start, end }),
    }
}

/// The last stream sequence the replay writes: `end` on a stream whose last sequence is
/// `last`; for `--until`, `before_until` is the sequence before the first message stored
/// at or after that time (what a consumer starting there reports as delivered). Pure.
pub fn stop_bound(end: End, last: u64, before_until: Option<u64>) -> u64 {
    match end {
        End::StreamEnd => last,
        End::Sequence(m) => m.min(last),
        End::Before(_) => before_until.unwrap_or(last).min(last),
    }
}

/// The filter subjects the replay consumer reads: the sink's, or with random subject
/// buckets every bucket subject. Pure.
pub fn replay_filters(spec: &SinkSpec) -> Vec<String> {
    match &spec.source.buckets {
        Some(b) => vec![bucket_wildcard(&b.prefix)],
        None => spec
            .source
            .subjects
            .iter()
            .filter(|s| !s.is_empty())
            .cloned()
            .collect(),
    }
}

/// The sink as the replay runs it: reading through `consumer` with `filters`, its own
/// metadata, lanes, encryption, dead-letter rules and destination, but without the
/// shuffler (it only reorders a live load), buckets or pinning (the replay has one
/// consumer of its own). A sink in job-queue mode or in per-lane consumer mode is
/// refused: the first would run its jobs again without answering them, the second
/// takes each message's lane from the consumer that delivered it. Pure.
pub fn replay_spec(
    spec: &SinkSpec,
    consumer: String,
    filters: Vec<String>,
) -> Result<SinkSpec, ReplayError> {
    let unsupported = |message: &str| ReplayError::Unsupported {
        sink: spec.name.clone(),
        message: message.into(),
    };
    if spec.results.is_some() {
        return Err(unsupported("is in job-queue mode (`results`): a replay would run its jobs again without publishing their results; submit the jobs again instead"));
    }
    if spec
        .consumer_bindings()
        .iter()
        .any(|(_, lane)| lane.is_some())
    {
        return Err(unsupported("reads in per-lane consumer mode (`delivery.priority_lanes.lanes[].subjects`), where a message's lane is the consumer that delivered it; a replay through one consumer would store other lanes, so it is not supported"));
    }
    let mut s = spec.clone();
    s.source.consumer = consumer;
    s.source.subjects = filters;
    s.source.buckets = None;
    s.source.pinned = None;
    s.source.create_stream = None;
    s.delivery.shuffle = None;
    s.delivery.randomizer.enabled = false;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Whatever an operator types into the four flags ends in a range whose end is not
        /// before its start, or in a usage error naming a flag; never a panic.
        #[test]
        fn any_flags_give_an_ordered_range_or_a_usage_error(
            from in proptest::option::of(0u64..10),
            since in proptest::option::of(".{0,30}|2026-0[1-9]-0[1-9]T0[0-9]:00:00Z"),
            to in proptest::option::of(0u64..10),
            until in proptest::option::of(".{0,30}|2026-0[1-9]-0[1-9]T0[0-9]:00:00Z"),
        ) {
            match parse_range(from, since.as_deref(), to, until.as_deref()) {
                Ok(Range { start: ReplayStart::Sequence(n), end: End::Sequence(m) }) => {
                    proptest::prop_assert!(n >= 1 && m >= n);
                }
                Ok(Range { start: ReplayStart::Time(s), end: End::Before(u) }) => {
                    proptest::prop_assert!(u > s);
                }
                Ok(_) => {}
                Err(ReplayError::Usage { flag, .. }) => {
                    proptest::prop_assert!(flag.starts_with("--"));
                }
                Err(e) => proptest::prop_assert!(false, "not a usage error: {e}"),
            }
        }
    }

    fn sink(extra: serde_json::Value) -> SinkSpec {
        let mut sink = serde_json::json!({
            "source": {"stream": "S", "consumer": "c", "subjects": "a.>"},
            "destination": {"type": "file", "directory": "d"}
        });
        if let (Some(s), Some(e)) = (sink.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                s.insert(k.clone(), v.clone());
            }
        }
        let doc = serde_json::json!({
            "nats": {"servers": ["nats://127.0.0.1:4222"]},
            "sinks": {"s": sink}
        });
        crate::config::Config::from_json_str(&doc.to_string())
            .expect("valid config")
            .sinks
            .remove(0)
    }

    #[test]
    fn a_start_and_an_optional_end_become_the_range() {
        let r = parse_range(Some(5), None, Some(9), None).unwrap();
        assert_eq!(r.start, ReplayStart::Sequence(5));
        assert_eq!(r.end, End::Sequence(9));
        let r = parse_range(None, Some("2026-03-01T12:00:00Z"), None, None).unwrap();
        assert!(matches!(r.start, ReplayStart::Time(t) if t.unix_timestamp() == 1_772_366_400));
        assert_eq!(r.end, End::StreamEnd);
        let r = parse_range(
            None,
            Some("2026-03-01T12:00:00+01:00"),
            None,
            Some("2026-03-01T12:00:00Z"),
        )
        .unwrap();
        assert!(matches!(r.end, End::Before(_)));
    }

    #[test]
    fn wrong_values_name_their_flag() {
        let e = parse_range(Some(0), None, None, None).unwrap_err();
        assert!(e.to_string().starts_with("--from-seq: "), "{e}");
        let e = parse_range(Some(9), None, Some(5), None).unwrap_err();
        assert_eq!(e.to_string(), "--to-seq: 5 is before --from-seq 9");
        let e = parse_range(None, Some("yesterday"), None, None).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--since: \"yesterday\" is not an RFC 3339"),
            "{e}"
        );
        let e = parse_range(Some(1), None, None, Some("2026-13-01T00:00:00Z")).unwrap_err();
        assert!(e.to_string().starts_with("--until: "), "{e}");
        let t = "2026-03-01T12:00:00Z";
        let e = parse_range(None, Some(t), None, Some(t)).unwrap_err();
        assert_eq!(e.to_string(), "--until: must be later than --since");
        assert_eq!(e.exit_code(), crate::exit::USAGE);
    }

    #[test]
    fn the_bound_is_the_stream_end_the_sequence_or_the_last_message_before_until() {
        let t = OffsetDateTime::UNIX_EPOCH;
        assert_eq!(stop_bound(End::StreamEnd, 100, None), 100);
        assert_eq!(stop_bound(End::Sequence(40), 100, None), 40);
        assert_eq!(stop_bound(End::Sequence(400), 100, None), 100);
        assert_eq!(stop_bound(End::Before(t), 100, Some(60)), 60);
        assert_eq!(stop_bound(End::Before(t), 100, Some(140)), 100);
        assert_eq!(stop_bound(End::Before(t), 100, None), 100);
    }

    #[test]
    fn the_replay_spec_reads_its_own_consumer_without_reordering() {
        let spec = sink(serde_json::json!({
            "delivery": {"shuffle": {"buffer": 1000}}
        }));
        let filters = replay_filters(&spec);
        assert_eq!(filters, vec!["a.>"]);
        let r = replay_spec(&spec, "c-replay-1".into(), filters).unwrap();
        assert_eq!(r.source.consumer, "c-replay-1");
        assert!(r.delivery.shuffle.is_none() && !r.delivery.randomizer.enabled);
        assert_eq!(r.source.stream, "S");
        assert_eq!(r.name, spec.name);
    }

    #[test]
    fn buckets_are_read_through_one_wildcard() {
        let spec = sink(serde_json::json!({
            "source": {"stream": "S", "consumer": "c",
                       "buckets": {"prefix": "b", "count": 4}}
        }));
        assert_eq!(replay_filters(&spec), vec!["b.*"]);
        let r = replay_spec(&spec, "x".into(), replay_filters(&spec)).unwrap();
        assert!(r.source.buckets.is_none());
        assert_eq!(r.consumer_bindings().len(), 1);
    }

    #[test]
    fn job_queue_and_per_lane_sinks_are_refused_naming_why() {
        let jobs = sink(serde_json::json!({
            "results": {"subject_prefix": "results"}
        }));
        let e = replay_spec(&jobs, "x".into(), vec![]).unwrap_err();
        assert!(e.to_string().contains("job-queue mode"), "{e}");
        assert_eq!(e.exit_code(), crate::exit::CONFIG);
        let lanes = sink(serde_json::json!({
            "source": {"stream": "S", "consumer": "c"},
            "delivery": {"priority_lanes": {"enabled": true, "default_lane": "routine",
                "lanes": [{"name": "urgent", "weight": 3, "subjects": ["w.urgent"]},
                          {"name": "routine", "weight": 1, "subjects": ["w.routine"]}]}}
        }));
        let e = replay_spec(&lanes, "x".into(), vec![]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("sink s: reads in per-lane consumer mode"),
            "{e}"
        );
    }
}
