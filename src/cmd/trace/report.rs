//! What `jetsink trace` found, from each source of truth, and its two renderings: aligned
//! lines for a person and JSON for a script. Pure: the lookups fill it in (`look`).
//!
//! Nothing here holds a payload or a header value other than jetsink's own `Jetsink-*`
//! context headers of a dead-letter copy: the original's headers are listed by name.

use serde::Serialize;

use super::position::Position;

/// Everything found about one message.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The sink asked about.
    pub sink: String,
    /// Its stream.
    pub stream: String,
    /// The stream sequence traced.
    pub sequence: u64,
    /// The message as the stream holds it; `None` when the stream does not hold it.
    pub message: Option<Message>,
    /// The stream's first and last sequence now.
    pub stream_first: u64,
    /// See `stream_first`.
    pub stream_last: u64,
    /// Each consumer of the sink.
    pub consumers: Vec<Consumer>,
    /// What the destination says.
    pub destination: Destination,
    /// What the dead-letter stream holds; `None` without a `dead_letter` section.
    pub dead_letter: Option<DeadLetter>,
}

/// The message in the stream.
#[derive(Debug, Clone, Serialize)]
pub struct Message {
    /// Its subject.
    pub subject: String,
    /// When the server stored it (RFC 3339).
    pub published: String,
    /// Its payload size in bytes (the payload itself is never shown).
    pub payload_bytes: usize,
    /// Its header names.
    pub headers: Vec<String>,
    /// The trace id of its W3C `traceparent` header, when valid: the id of the trace its
    /// write's span joined and the `trace_id` its stored row or record carries.
    pub trace_id: Option<String>,
    /// The idempotency key the sink writes it under.
    pub idempotency_key: String,
}

/// One consumer of the sink.
#[derive(Debug, Clone, Serialize)]
pub struct Consumer {
    /// Its durable name.
    pub name: String,
    /// Whether it exists (`jetsink run` creates it at its first start).
    pub exists: bool,
    /// Where the message stands for it; `None` when it does not exist or the stream does
    /// not hold the message.
    pub position: Option<Position>,
    /// Its filter subjects (none: every subject of the stream).
    pub filters: Vec<String>,
    /// Stream sequence of its last delivery.
    pub delivered: u64,
    /// Its ack floor, as a stream sequence.
    pub ack_floor: u64,
    /// Messages delivered and not ACKed, over the consumer.
    pub ack_pending: usize,
    /// Messages delivered more than once and not ACKed, over the consumer.
    pub redelivered: usize,
}

/// What the destination says.
#[derive(Debug, Clone, Serialize)]
pub struct Destination {
    /// The destination, described.
    pub target: String,
    /// `stored`, `absent`, `cannot_ask` or `error`.
    pub state: &'static str,
    /// Where it is stored, where it looked, or why it cannot tell.
    pub detail: String,
    /// The delivery that wrote it, when the destination keeps it.
    pub delivered: Option<u64>,
}

/// What the dead-letter stream holds.
#[derive(Debug, Clone, Serialize)]
pub struct DeadLetter {
    /// `dead_lettered`, `not_found` or `error`.
    pub state: &'static str,
    /// The dead-letter stream, when one captures the subject.
    pub stream: Option<String>,
    /// The subject searched.
    pub subject: String,
    /// The copy's sequence in the dead-letter stream.
    pub copy_sequence: Option<u64>,
    /// The copy's `Jetsink-*` headers (name, value), the reason among them.
    pub headers: Vec<(String, String)>,
    /// How the search went, or why it failed.
    pub detail: String,
}

impl Report {
    /// One line: the verdict over every source.
    pub fn summary(&self) -> String {
        let Some(_) = &self.message else {
            return format!(
                "not in stream {} (it holds sequences {} to {})",
                self.stream, self.stream_first, self.stream_last
            );
        };
        let mut parts: Vec<String> = Vec::new();
        let ours: Vec<&Consumer> = self
            .consumers
            .iter()
            .filter(|c| c.position != Some(Position::NotThisConsumers))
            .collect();
        match ours.as_slice() {
            [] => parts.push("not this sink's (no consumer of the sink takes its subject)".into()),
            cs => {
                for c in cs {
                    parts.push(match c.position {
                        Some(p) => p.describe().split(':').next().unwrap_or("").to_string(),
                        None => format!("consumer {} does not exist yet", c.name),
                    });
                }
            }
        }
        match self.destination.state {
            "stored" => parts.push("stored".into()),
            "absent" => parts.push("not stored".into()),
            "cannot_ask" => parts.push("destination cannot be asked".into()),
            _ => parts.push("destination unreadable".into()),
        }
        if let Some(dl) = self
            .dead_letter
            .as_ref()
            .filter(|d| d.state == "dead_lettered")
        {
            let reason = dl
                .headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(crate::dlq::copy::REASON))
                .map(|(_, v)| format!(" (reason {v})"))
                .unwrap_or_default();
            parts.push(format!("dead-lettered{reason}"));
        }
        parts.join(", ")
    }

    /// The aligned lines for a person.
    pub fn human(&self) -> String {
        let mut out = Vec::new();
        let mut line = |label: &str, text: String| out.push(format!("{label:<12} {text}"));
        line("sink", self.sink.clone());
        line("summary", self.summary());
        match &self.message {
            Some(m) => {
                let mut headers = match m.headers.as_slice() {
                    [] => "no headers".to_string(),
                    h => format!("headers {}", h.join(", ")),
                };
                if let Some(id) = &m.trace_id {
                    headers.push_str(&format!(", trace id {id}"));
                }
                line(
                    "message",
                    format!(
                        "stream {} seq {}, subject {}, published {}, {} payload bytes, {headers}",
                        self.stream, self.sequence, m.subject, m.published, m.payload_bytes
                    ),
                );
                line("key", m.idempotency_key.clone());
            }
            None => line(
                "message",
                format!(
                    "stream {} holds no sequence {} (first {}, last {}): never written, or removed by limits, a purge or a delete",
                    self.stream, self.sequence, self.stream_first, self.stream_last
                ),
            ),
        }
        for c in &self.consumers {
            line("consumer", consumer_line(c));
        }
        let d = &self.destination;
        let written = d
            .delivered
            .map(|n| format!(" (written by delivery {n})"))
            .unwrap_or_default();
        line(
            "destination",
            format!(
                "{}: {}: {}{written}",
                d.target,
                d.state.replace('_', " "),
                d.detail
            ),
        );
        match &self.dead_letter {
            None => line("dead-letter", "no dead_letter section".into()),
            Some(dl) => {
                let head = match dl.copy_sequence {
                    Some(seq) => format!(
                        "dead-lettered: stream {} seq {seq}, subject {}",
                        dl.stream.as_deref().unwrap_or("?"),
                        dl.subject
                    ),
                    None => format!("{}: {}", dl.state.replace('_', " "), dl.detail),
                };
                line("dead-letter", head);
                for (name, value) in &dl.headers {
                    line("", format!("{name}: {value}"));
                }
            }
        }
        out.join("\n")
    }
}

/// One consumer's line.
fn consumer_line(c: &Consumer) -> String {
    if !c.exists {
        return format!(
            "{}: does not exist (`jetsink run` creates it at its first start)",
            c.name
        );
    }
    let p = c
        .position
        .map_or("no position: the stream does not hold the message", |p| {
            p.describe()
        });
    let filters = match c.filters.as_slice() {
        [] => "every subject".to_string(),
        f => f.join(", "),
    };
    format!(
        "{}: {} (delivered up to {}, ack floor {}, {} unACKed and {} redelivered over the consumer; filter {filters}; per-message delivery counts are not in consumer info)",
        c.name,
        p,
        c.delivered,
        c.ack_floor,
        c.ack_pending,
        c.redelivered
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        Report {
            sink: "orders".into(),
            stream: "ORDERS".into(),
            sequence: 3,
            message: Some(Message {
                subject: "orders.new".into(),
                published: "2026-01-01T00:00:00Z".into(),
                payload_bytes: 12,
                headers: vec!["Nats-Msg-Id".into()],
                trace_id: None,
                idempotency_key: "ORDERS:3".into(),
            }),
            stream_first: 1,
            stream_last: 9,
            consumers: vec![Consumer {
                name: "orders-sink".into(),
                exists: true,
                position: Some(Position::Acked),
                filters: vec![],
                delivered: 9,
                ack_floor: 9,
                ack_pending: 0,
                redelivered: 0,
            }],
            destination: Destination {
                target: "sqlite x.db".into(),
                state: "absent",
                detail: "looked".into(),
                delivered: None,
            },
            dead_letter: Some(DeadLetter {
                state: "dead_lettered",
                stream: Some("DLQ".into()),
                subject: "jetsink.dlq.orders".into(),
                copy_sequence: Some(1),
                headers: vec![("Jetsink-Reason".into(), "destination".into())],
                detail: String::new(),
            }),
        }
    }

    #[test]
    fn the_summary_joins_the_verdict_of_every_source() {
        assert_eq!(
            report().summary(),
            "ACKed, not stored, dead-lettered (reason destination)"
        );
        let mut gone = report();
        gone.message = None;
        assert_eq!(
            gone.summary(),
            "not in stream ORDERS (it holds sequences 1 to 9)"
        );
    }

    #[test]
    fn the_human_form_lists_header_names_and_jetsink_values_only() {
        let text = report().human();
        assert!(text.contains("headers Nats-Msg-Id\n"), "{text}");
        let mut traced = report();
        if let Some(m) = traced.message.as_mut() {
            m.trace_id = Some("4bf92f3577b34da6a3ce929d0e0e4736".into());
        }
        let text = traced.human();
        assert!(
            text.contains("headers Nats-Msg-Id, trace id 4bf92f3577b34da6a3ce929d0e0e4736\n"),
            "{text}"
        );
        assert!(text.contains("Jetsink-Reason: destination"), "{text}");
        for l in text.lines() {
            assert_eq!(
                l.chars().nth(12),
                Some(' '),
                "values start in one column: {l}"
            );
        }
    }
}
