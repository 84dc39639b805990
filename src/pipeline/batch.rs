//! Turns a pulled set of JetStream messages into the batch a destination writes: normalize
//! each message, apply message metadata, order by priority lane, encrypt (when the sink
//! has an `encryption` section), and set aside the messages whose metadata is refused.
//!
//! All of it is CPU work without I/O, so the puller does it for the next batch in the
//! background while the current batch is written. Each message keeps only its reply
//! subject for acknowledgement: the payload moves into the envelope without a copy.

use std::sync::Arc;

use async_nats::Subject;

use crate::config::IdempotencyKey;
use crate::crypto::Encryption;
use crate::envelope::{self, Envelope};
use crate::metadata::{MetadataField, MetadataPolicy};
use crate::nats::reply;
use crate::pipeline::lanes::{LanePolicy, LaneStats};
use crate::pipeline::randomizer::Randomizer;

/// Messages ready to write, with the reply subjects that acknowledge them (same order).
#[derive(Debug, Default)]
pub struct Batch {
    /// What the destination writes, in write order.
    pub envelopes: Vec<Envelope>,
    /// The `$JS.ACK` subject of each envelope.
    pub replies: Vec<Subject>,
}

impl Batch {
    /// Moves the messages `pick` chooses into a batch of their own, in order; the rest
    /// stay, in order.
    pub fn split_off(&mut self, pick: impl Fn(&Envelope) -> bool) -> Batch {
        let mut picked = Batch::default();
        let mut kept = Batch::default();
        let pairs = std::mem::take(&mut self.envelopes)
            .into_iter()
            .zip(std::mem::take(&mut self.replies));
        for (e, r) in pairs {
            let to = if pick(&e) { &mut picked } else { &mut kept };
            to.envelopes.push(e);
            to.replies.push(r);
        }
        *self = kept;
        picked
    }

    /// Appends `other`'s messages.
    pub fn extend(&mut self, other: Batch) {
        self.envelopes.extend(other.envelopes);
        self.replies.extend(other.replies);
    }
}

/// Why a message was refused before reaching the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedBy {
    /// Its priority, classification or labels broke the metadata rules.
    Metadata,
    /// Its priority broke the lane policy (too long, control characters, unknown with
    /// `unknown_priority_action: reject`).
    Lane,
}

/// A message refused before the write: a permanent failure of that message alone.
#[derive(Debug)]
pub struct Refused {
    /// The message.
    pub envelope: Envelope,
    /// Its `$JS.ACK` subject.
    pub reply: Subject,
    /// Which stage refused it.
    pub by: RefusedBy,
    /// Why, without the offending value.
    pub reason: String,
}

/// The outcome of preparing one pull.
#[derive(Debug, Default)]
pub struct Prepared {
    /// Messages pulled (written or refused).
    pub pulled: usize,
    /// Their payload bytes as pulled, which the pull-ahead slot counts against
    /// `delivery.max_batch_bytes`.
    pub bytes: usize,
    /// The ordered batch to write.
    pub batch: Batch,
    /// Messages refused by metadata or lane rules.
    pub refused: Vec<Refused>,
    /// Lane scheduling counts, when lanes are enabled.
    pub lanes: Option<LaneStats>,
    /// With a stop bound (`jetsink replay`): the reply subjects of messages past it, not
    /// prepared and not counted in `pulled`; the runner acknowledges them unwritten.
    pub beyond: Vec<Subject>,
}

impl Prepared {
    /// Every reply subject held, written or refused.
    pub fn all_replies(&self) -> impl Iterator<Item = &Subject> {
        self.batch
            .replies
            .iter()
            .chain(self.refused.iter().map(|r| &r.reply))
    }
}

/// The configured stages of one sink: what the background pull runs, and the randomizer,
/// which the runner's delay stage applies because its decisions need the runner's window.
#[derive(Debug)]
pub struct Stages {
    /// Normalize, metadata and lanes, run by the background pull.
    pub(super) prepare: Prepare,
    /// Delayed-NAK randomizer; `None` when disabled.
    pub(super) randomizer: Option<Randomizer>,
}

/// The preparation of one sink's pulls, shared with background pulls.
#[derive(Debug)]
pub(super) struct Prepare {
    /// Sink name, for logs.
    pub(super) sink: String,
    /// Idempotency key choice.
    pub(super) key: IdempotencyKey,
    /// Metadata rules; `None` leaves priority, classification and labels empty.
    pub(super) metadata: Option<MetadataPolicy>,
    /// Lane policy; `None` keeps the pulled order.
    pub(super) lanes: Option<LanePolicy>,
    /// Per-lane consumer mode: each consumer's name with its lane index. A message's lane
    /// is the lane of the consumer that delivered it. A handful of entries, one per lane:
    /// scanned, cheaper per message than hashing the name.
    pub(super) consumer_lane: Vec<(String, usize)>,
    /// Payload encryption; `None` stores payloads in clear.
    pub(super) encryption: Option<Arc<Encryption>>,
    /// The last stream sequence to write (`jetsink replay`); messages past it are set
    /// aside in [`Prepared::beyond`]. `None` for `jetsink run`.
    pub(super) stop_after: Option<u64>,
}

impl Prepare {
    /// Prepares pulled messages for writing.
    pub(super) fn prepare(&self, messages: Vec<async_nats::Message>) -> Prepared {
        let bytes = messages.iter().map(|m| m.payload.len()).sum();
        let (messages, beyond) = self.split_at_bound(messages);
        let pulled = messages.len();
        let mut items: Vec<(Envelope, Subject)> = Vec::with_capacity(pulled);
        let mut refused = Vec::new();
        for m in messages {
            if let Some((e, reply)) = self.normalize(m) {
                match too_many_headers(&e) {
                    Some(reason) => refused.push(Refused {
                        envelope: e,
                        reply,
                        by: RefusedBy::Metadata,
                        reason,
                    }),
                    None => items.push((e, reply)),
                }
            }
        }
        let (items, lane_stats) = self.judge(items, &mut refused);
        let items = self.encrypt(items, &mut refused);
        let (envelopes, replies) = items.into_iter().unzip();
        Prepared {
            pulled,
            bytes,
            batch: Batch { envelopes, replies },
            refused,
            lanes: lane_stats,
            beyond,
        }
    }

    /// The lane of the consumer named `consumer` in per-lane consumer mode.
    fn lane_of_consumer(&self, consumer: &str) -> Option<usize> {
        self.consumer_lane
            .iter()
            .find(|(name, _)| name == consumer)
            .map(|&(_, lane)| lane)
    }

    /// With a stop bound: the messages up to it, and the reply subjects of those past it.
    /// A message whose stream sequence cannot be read stays in, for `normalize` to skip
    /// with its warning.
    fn split_at_bound(
        &self,
        messages: Vec<async_nats::Message>,
    ) -> (Vec<async_nats::Message>, Vec<Subject>) {
        let Some(bound) = self.stop_after else {
            return (messages, Vec::new());
        };
        let mut beyond = Vec::new();
        let within = messages
            .into_iter()
            .filter_map(|m| {
                let past = m
                    .reply
                    .as_ref()
                    .and_then(|r| reply::parse(r.as_str()).ok())
                    .is_some_and(|d| d.stream_sequence > bound);
                match (past, &m.reply) {
                    (true, Some(r)) => {
                        beyond.push(r.clone());
                        None
                    }
                    _ => Some(m),
                }
            })
            .collect();
        (within, beyond)
    }

    /// The metadata and lane stages over normalized messages: what they keep, in lane
    /// order, with what they refuse appended to `refused`. Pure.
    fn judge(
        &self,
        mut items: Vec<(Envelope, Subject)>,
        refused: &mut Vec<Refused>,
    ) -> (Vec<(Envelope, Subject)>, Option<LaneStats>) {
        let lanes_on = self.lanes.as_ref().is_some_and(LanePolicy::enabled);
        if let Some(policy) = &self.metadata {
            let mut kept = Vec::with_capacity(items.len());
            for (mut e, reply) in items {
                match policy.apply(&e.subject, &e.headers) {
                    Ok(meta) => {
                        e.priority = meta.priority;
                        e.classification = meta.classification;
                        e.labels = meta.labels;
                        kept.push((e, reply));
                    }
                    Err(err) => refused.push(Refused {
                        envelope: e,
                        reply,
                        // With lanes on, a bad priority breaks the lane policy (the seed
                        // counts it as a lane rejection).
                        by: if lanes_on && err.field == MetadataField::Priority {
                            RefusedBy::Lane
                        } else {
                            RefusedBy::Metadata
                        },
                        reason: err.to_string(),
                    }),
                }
            }
            items = kept;
        }
        let mut lane_stats = None;
        if let Some(lanes) = self.lanes.as_ref().filter(|l| l.enabled()) {
            // Priorities the metadata check already refused were judged by the lane policy
            // too: count them among the messages it evaluated, as they are among its
            // rejections, so `messages` ≥ `defaulted` + `rejected` holds per delivery.
            let refused_early = refused
                .iter()
                .filter(|r| matches!(r.by, RefusedBy::Lane))
                .count() as u64;
            let mut outcome = lanes.order(items, |(e, _)| e.priority.as_deref());
            outcome.stats.messages += refused_early;
            lane_stats = Some(outcome.stats);
            for ((e, reply), err) in outcome.rejected {
                refused.push(Refused {
                    envelope: e,
                    reply,
                    by: RefusedBy::Lane,
                    reason: err.to_string(),
                });
            }
            items = outcome.ordered;
            for ((e, _), lane) in items.iter_mut().zip(outcome.lanes) {
                let lane = self.lane_of_consumer(&e.consumer).unwrap_or(lane);
                e.lane = lanes.lane_name(lane).map(str::to_string);
            }
        }
        (items, lane_stats)
    }

    /// Seals the payload (and listed headers) of every kept message, after metadata and
    /// lanes have read them in clear. A message that cannot be sealed (the OS generator
    /// failed) is refused, never written in clear.
    fn encrypt(
        &self,
        items: Vec<(Envelope, Subject)>,
        refused: &mut Vec<Refused>,
    ) -> Vec<(Envelope, Subject)> {
        let Some(enc) = &self.encryption else {
            return items;
        };
        let mut kept = Vec::with_capacity(items.len());
        let mut sealer = enc.sealer(items.iter().map(|(e, _)| e));
        let total = items.len();
        for (i, (mut e, reply)) in items.into_iter().enumerate() {
            match enc.seal_with(&mut e, &mut sealer, total - i) {
                Ok(()) => kept.push((e, reply)),
                Err(err) => {
                    tracing::error!(sink = %self.sink, subject = %e.subject, stream_sequence = e.stream_sequence, error = %err, "payload encryption failed");
                    refused.push(Refused {
                        envelope: e,
                        reply,
                        by: RefusedBy::Metadata,
                        reason: format!("payload encryption failed: {err}"),
                    });
                }
            }
        }
        kept
    }

    fn normalize(&self, m: async_nats::Message) -> Option<(Envelope, Subject)> {
        let async_nats::Message {
            subject,
            reply,
            payload,
            headers,
            ..
        } = m;
        let Some(reply) = reply else {
            tracing::warn!(sink = %self.sink, subject = %subject, "skipping a message without a reply subject");
            return None;
        };
        let delivery = match reply::parse(reply.as_str()) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(sink = %self.sink, subject = %subject, error = %e, "skipping a message without JetStream metadata");
                return None;
            }
        };
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        if let Some(h) = &headers {
            for (name, values) in h.iter() {
                for v in values {
                    pairs.push((name.as_ref(), v.as_str()));
                }
            }
            // HeaderMap has no order; sort by name so stored headers are deterministic.
            pairs.sort_by(|a, b| a.0.cmp(b.0));
        }
        let e = envelope::normalize(subject.as_str(), delivery, pairs, payload, self.key);
        Some((e, reply))
    }
}

/// Why a message carries too many headers to be handled, or `None`: over
/// [`envelope::MAX_HEADER_VALUES`] it is refused before any stage looks at its headers.
fn too_many_headers(e: &Envelope) -> Option<String> {
    let n = e.header_values();
    (n > envelope::MAX_HEADER_VALUES).then(|| {
        format!(
            "too many headers: {n} header values (in {} names), at most {} are accepted",
            e.headers.len(),
            envelope::MAX_HEADER_VALUES
        )
    })
}

impl Stages {
    /// Builds the stages a sink's config asks for. Metadata is read when the sink has a
    /// `message_metadata` section or enables lanes (which need a priority).
    /// `spec` comes from a validated config, so nothing here can fail.
    pub fn for_sink(spec: &crate::config::SinkSpec) -> Stages {
        let lanes_on = spec.delivery.priority_lanes.enabled;
        let metadata = match (&spec.metadata, lanes_on) {
            // The priority checks belong to lanes (the lane document scopes them there);
            // without lanes a bad priority is stored sanitized, not refused.
            (Some(m), _) => Some(MetadataPolicy::new(m).checking_priority(lanes_on)),
            (None, true) => Some(MetadataPolicy::new(&Default::default())),
            (None, false) => None,
        };
        let lanes = lanes_on.then(|| LanePolicy::new(&spec.delivery.priority_lanes));
        let randomizer = spec
            .delivery
            .randomizer
            .enabled
            .then(|| Randomizer::new(&spec.delivery.randomizer));
        let consumer_lane = spec
            .consumer_bindings()
            .into_iter()
            .filter_map(|(source, lane)| lane.map(|l| (source.consumer, l)))
            .collect();
        Stages {
            prepare: Prepare {
                sink: spec.name.clone(),
                key: spec.delivery.idempotency_key,
                metadata,
                lanes,
                consumer_lane,
                encryption: spec.encryption.clone(),
                stop_after: None,
            },
            randomizer,
        }
    }

    /// These stages for `jetsink replay`: nothing past stream sequence `bound` is
    /// written (it is set aside for the runner to acknowledge unwritten), and no
    /// randomizer, whose delays only spread a live load.
    pub fn replaying_up_to(mut self, bound: u64) -> Stages {
        self.prepare.stop_after = Some(bound);
        self.randomizer = None;
        self
    }

    /// Prepares messages exactly as a pull's would be (normalize, metadata, lanes,
    /// encryption), for a tool that writes a destination without NATS (`jetsink bench`'s
    /// destination-only pass): the batch to write, and how many were refused.
    pub fn prepare_messages(&self, messages: Vec<async_nats::Message>) -> (Batch, usize) {
        let p = self.prepare.prepare(messages);
        (p.batch, p.refused.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_headers(n: usize) -> Envelope {
        let names: Vec<String> = (0..n).map(|i| format!("X-H{}", i % 300)).collect();
        envelope::normalize(
            "a.b",
            envelope::Delivery {
                stream: "S",
                consumer: "c",
                stream_sequence: 1,
                consumer_sequence: 1,
                delivered: 1,
                published: time::OffsetDateTime::UNIX_EPOCH,
            },
            names.iter().map(|n| (n.as_str(), "v")),
            bytes::Bytes::new(),
            IdempotencyKey::StreamSequence,
        )
    }

    #[test]
    fn a_message_over_the_header_cap_is_refused_naming_the_count_and_the_cap() {
        assert_eq!(
            too_many_headers(&with_headers(envelope::MAX_HEADER_VALUES)),
            None
        );
        let why =
            too_many_headers(&with_headers(envelope::MAX_HEADER_VALUES + 1)).expect("refused");
        assert!(why.contains("1025 header values"), "{why}");
        assert!(why.contains("at most 1024"), "{why}");
    }

    fn delivered(seq: u64) -> async_nats::Message {
        async_nats::Message {
            subject: Subject::from("a.b"),
            reply: Some(Subject::from(format!("$JS.ACK.S.c.1.{seq}.{seq}.0.0"))),
            payload: bytes::Bytes::new(),
            headers: None,
            status: None,
            description: None,
            length: 0,
        }
    }

    #[test]
    fn a_replay_bound_sets_aside_what_lies_past_it_and_turns_the_randomizer_off() {
        let spec = crate::config::Config::from_json_str(
            r#"{"nats": {"servers": ["nats://127.0.0.1:4222"]},
                "sinks": {"s": {
                    "source": {"stream": "S", "consumer": "c"},
                    "delivery": {"randomizer": {"enabled": true}},
                    "destination": {"type": "file", "directory": "d"}}}}"#,
        )
        .unwrap()
        .sinks
        .remove(0);
        let run = Stages::for_sink(&spec);
        assert!(run.randomizer.is_some());
        let all = run.prepare.prepare((1..=5).map(delivered).collect());
        assert_eq!((all.pulled, all.beyond.len()), (5, 0), "no bound for run");
        let replay = Stages::for_sink(&spec).replaying_up_to(3);
        assert!(replay.randomizer.is_none());
        let p = replay.prepare.prepare((1..=5).map(delivered).collect());
        assert_eq!(p.pulled, 3);
        let kept: Vec<u64> = p
            .batch
            .envelopes
            .iter()
            .map(|e| e.stream_sequence)
            .collect();
        assert_eq!(kept, vec![1, 2, 3]);
        let beyond: Vec<&str> = p.beyond.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            beyond,
            vec!["$JS.ACK.S.c.1.4.4.0.0", "$JS.ACK.S.c.1.5.5.0.0"]
        );
    }

    fn prioritized(seq: u64, priority: &str) -> (Envelope, Subject) {
        let e = envelope::normalize(
            "a.b",
            envelope::Delivery {
                stream: "S",
                consumer: "c",
                stream_sequence: seq,
                consumer_sequence: seq,
                delivered: 1,
                published: time::OffsetDateTime::UNIX_EPOCH,
            },
            [("Jetsink-Priority", priority)],
            bytes::Bytes::new(),
            IdempotencyKey::StreamSequence,
        );
        (e, Subject::from(format!("r.{seq}")))
    }

    #[test]
    fn lane_counters_count_every_judged_delivery_including_priorities_refused_by_the_metadata_check(
    ) {
        let cfg = crate::config::Config::from_json_str(
            r#"{"nats": {"servers": ["nats://127.0.0.1:4222"]},
                "sinks": {"s": {
                    "source": {"stream": "S", "consumer": "c"},
                    "delivery": {"priority_lanes": {"enabled": true, "default_lane": "routine",
                        "lanes": [{"name": "urgent", "priorities": ["urgent"], "weight": 3},
                                  {"name": "routine", "priorities": ["routine"]}]}},
                    "destination": {"type": "file", "directory": "d"}}}}"#,
        )
        .unwrap();
        let stages = Stages::for_sink(&cfg.sinks[0]);
        let items = vec![
            prioritized(1, "routine"),
            prioritized(2, "urgent"),
            prioritized(3, "unheard-of"),
            prioritized(4, "bad\u{1}value"),
        ];
        let mut refused = Vec::new();
        let (kept, stats) = stages.prepare.judge(items, &mut refused);
        let stats = stats.expect("lanes are on");
        assert_eq!(kept.len(), 3);
        assert_eq!(refused.len(), 1);
        assert!(matches!(refused[0].by, RefusedBy::Lane));
        // Four deliveries judged: one defaulted, one rejected (counted by the settler as
        // jetsink_priority_lane_rejected_total when it disposes of it).
        assert_eq!(stats.messages, 4);
        assert_eq!(stats.defaulted, 1);
        assert!(stats.messages >= stats.defaulted + refused.len() as u64);
        // Lane order: urgent first.
        assert_eq!(kept[0].0.stream_sequence, 2);
    }
}
