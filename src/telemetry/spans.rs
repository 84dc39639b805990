//! The spans of a sink's writes: one per message, a child of the producer's span (its
//! `traceparent`), from its first write attempt to its outcome; and one per write of a
//! batch (or of a part of it), linked to the spans of the messages it carried.
//!
//! A span that the sampler drops costs a sampling decision and nothing else: attributes
//! are only set on spans that record, so tracing at a low ratio stays off the hot path.

use std::borrow::Cow;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use opentelemetry::trace::{
    Link, Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SdkTracer, Span};
use prometheus::IntCounter;

use crate::envelope::Envelope;
use crate::shared::traceparent;

/// How a message's span ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// Committed by the destination, then ACKed.
    Committed,
    /// Handed back to the server (NAK) for a later delivery.
    HandedBack(&'a str),
    /// Refused by the destination: dead-lettered, or handed back without a queue.
    Refused(&'a str),
    /// Left for redelivery at shutdown.
    Abandoned,
}

impl Outcome<'_> {
    fn name(&self) -> &'static str {
        match self {
            Outcome::Committed => "committed",
            Outcome::HandedBack(_) => "handed_back",
            Outcome::Refused(_) => "refused",
            Outcome::Abandoned => "abandoned",
        }
    }
}

/// One sink's tracer.
#[derive(Clone)]
pub struct SinkTracer {
    tracer: SdkTracer,
    sink: Arc<str>,
    /// Spans started that record (and so are queued for export when they end).
    recorded: IntCounter,
}

impl SinkTracer {
    pub(super) fn new(tracer: SdkTracer, sink: &str, recorded: IntCounter) -> SinkTracer {
        SinkTracer {
            tracer,
            sink: sink.into(),
            recorded,
        }
    }

    /// The spans of a batch of `n` messages, none started yet.
    pub fn batch(&self, n: usize) -> BatchSpans {
        BatchSpans {
            tracer: self.clone(),
            spans: Mutex::new((0..n).map(|_| None).collect()),
        }
    }
}

/// The message spans of the batch in hand, by position.
pub struct BatchSpans {
    tracer: SinkTracer,
    spans: Mutex<Vec<Option<Span>>>,
}

impl BatchSpans {
    /// Starts, at `at`, the span of each message at `positions` that has none yet (its
    /// first write attempt), as a child of its producer's span when it carries a valid
    /// `traceparent` (read from the headers as published, before any encryption).
    pub fn start(&self, envelopes: &[Envelope], positions: &[usize], at: SystemTime) {
        let t = &self.tracer;
        let name = format!("write {}", t.sink);
        let mut spans = self.spans.lock().unwrap_or_else(PoisonError::into_inner);
        for &p in positions {
            let (Some(slot @ None), Some(e)) = (spans.get_mut(p), envelopes.get(p)) else {
                continue;
            };
            let parent = parent_of(e);
            let span = t
                .tracer
                .span_builder(Cow::Owned(name.clone()))
                .with_kind(SpanKind::Consumer)
                .with_start_time(at)
                .start_with_context(&t.tracer, &parent);
            let mut span = span;
            if span.is_recording() {
                t.recorded.inc();
                span.set_attributes(message_attributes(e, &t.sink));
            }
            *slot = Some(span);
        }
    }

    /// Records one write of the messages at `positions`, from `started` to now, as a span
    /// linked to each of their recorded spans; `error` when it failed.
    pub fn wrote(&self, positions: &[usize], started: SystemTime, error: Option<&str>) {
        let links: Vec<Link> = {
            let spans = self.spans.lock().unwrap_or_else(PoisonError::into_inner);
            positions
                .iter()
                .filter_map(|&p| spans.get(p).and_then(Option::as_ref))
                .filter(|s| s.is_recording())
                .map(|s| Link::with_context(s.span_context().clone()))
                .collect()
        };
        if links.is_empty() {
            return;
        }
        let t = &self.tracer;
        let linked = links.len() as i64;
        let mut span = t
            .tracer
            .span_builder(format!("write batch {}", t.sink))
            .with_kind(SpanKind::Client)
            .with_start_time(started)
            .with_links(links)
            .start_with_context(&t.tracer, &Context::new());
        if !span.is_recording() {
            return;
        }
        t.recorded.inc();
        span.set_attributes([
            KeyValue::new("jetsink.sink", t.sink.to_string()),
            KeyValue::new("jetsink.batch.messages", positions.len() as i64),
            KeyValue::new("jetsink.batch.linked", linked),
        ]);
        if let Some(e) = error {
            span.set_status(Status::error(e.to_string()));
        }
        span.end();
    }

    /// Ends the spans of the messages at `positions` with `outcome`.
    pub fn end(&self, positions: impl IntoIterator<Item = usize>, outcome: Outcome<'_>) {
        let now = SystemTime::now();
        let mut spans = self.spans.lock().unwrap_or_else(PoisonError::into_inner);
        for p in positions {
            let Some(mut span) = spans.get_mut(p).and_then(Option::take) else {
                continue;
            };
            if span.is_recording() {
                span.set_attribute(KeyValue::new("jetsink.outcome", outcome.name()));
                match outcome {
                    Outcome::Refused(why) | Outcome::HandedBack(why) => {
                        span.set_status(Status::error(why.to_string()))
                    }
                    Outcome::Committed | Outcome::Abandoned => {}
                }
            }
            span.end_with_timestamp(now);
        }
    }
}

impl Drop for BatchSpans {
    /// A span whose message left the batch without an outcome here (refused before the
    /// write, say) is ended unset rather than leaked.
    fn drop(&mut self) {
        let spans = self.spans.get_mut().unwrap_or_else(PoisonError::into_inner);
        for mut span in spans.drain(..).flatten() {
            span.end();
        }
    }
}

/// The producer's span as the parent context, or an empty context (a root span).
fn parent_of(e: &Envelope) -> Context {
    let headers = e.clear_headers();
    let Some(tp) = traceparent::find(headers) else {
        return Context::new();
    };
    let state = traceparent::header(headers, traceparent::TRACESTATE_HEADER)
        .and_then(|s| TraceState::from_str(s).ok())
        .unwrap_or_default();
    let parent = SpanContext::new(
        TraceId::from_bytes(tp.trace_id_bytes()),
        SpanId::from_bytes(tp.parent_id_bytes()),
        TraceFlags::new(tp.flags),
        true,
        state,
    );
    Context::new().with_remote_span_context(parent)
}

/// What a recorded message span says of its message (OpenTelemetry's messaging
/// conventions where they apply). Never the payload or header values.
fn message_attributes(e: &Envelope, sink: &str) -> Vec<KeyValue> {
    let mut out = vec![
        KeyValue::new("messaging.system", "nats"),
        KeyValue::new("messaging.operation.type", "process"),
        KeyValue::new("messaging.destination.name", e.subject.clone()),
        KeyValue::new("messaging.consumer.group.name", e.consumer.clone()),
        KeyValue::new("jetsink.sink", sink.to_string()),
        KeyValue::new("jetsink.stream", e.stream.clone()),
        KeyValue::new("jetsink.stream_sequence", e.stream_sequence as i64),
        KeyValue::new("jetsink.delivered", e.delivered as i64),
    ];
    if let Some(id) = &e.message_id {
        out.push(KeyValue::new("messaging.message.id", id.clone()));
    }
    out
}
