//! The spans a batch produces, recorded by an exporter that keeps them in memory: their
//! parents, links, outcomes and what sampling leaves out.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use opentelemetry::trace::{SpanKind, Status, TraceId, TracerProvider as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, SpanData, SpanExporter};

use super::spans::{Outcome, SinkTracer};
use crate::envelope::{normalize, Delivery, Envelope};
use crate::shared::idempotency::IdempotencyKey;

#[derive(Debug, Clone, Default)]
struct Kept(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Kept {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.lock().unwrap().extend(batch);
        Ok(())
    }
}

fn tracer(sampler: Sampler) -> (SinkTracer, Kept, SdkTracerProvider) {
    let kept = Kept::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(kept.clone())
        .with_sampler(sampler)
        .build();
    let counter = prometheus::IntCounter::new("spans", "spans").unwrap();
    let t = SinkTracer::new(provider.tracer("jetsink"), "orders", counter);
    (t, kept, provider)
}

const SAMPLED: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const NOT_SAMPLED: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";

fn envelope(seq: u64, traceparent: Option<&'static str>) -> Envelope {
    normalize(
        "orders.new",
        Delivery {
            stream: "ORDERS",
            consumer: "jetsink",
            stream_sequence: seq,
            consumer_sequence: seq,
            delivered: 1,
            published: time::OffsetDateTime::UNIX_EPOCH,
        },
        traceparent.map(|t| ("traceparent", t)),
        bytes::Bytes::from_static(b"{}"),
        IdempotencyKey::StreamSequence,
    )
}

#[test]
fn a_message_span_is_a_child_of_its_traceparent_and_the_batch_span_links_it() {
    let (t, kept, _p) = tracer(Sampler::AlwaysOn);
    let batch = [envelope(1, Some(SAMPLED)), envelope(2, None)];
    let spans = t.batch(batch.len());
    let at = SystemTime::now();
    spans.start(&batch, &[0, 1], at);
    spans.wrote(&[0, 1], at, None);
    spans.end([0], Outcome::Committed);
    spans.end([1], Outcome::Refused("bad row"));
    let all = kept.0.lock().unwrap().clone();
    let child = all
        .iter()
        .find(|s| s.name == "write orders" && s.parent_span_is_remote)
        .unwrap();
    assert_eq!(
        child.span_context.trace_id(),
        TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
    );
    assert_eq!(format!("{}", child.parent_span_id), "00f067aa0ba902b7");
    assert_eq!(child.span_kind, SpanKind::Consumer);
    assert_eq!(child.start_time, at);
    let root = all
        .iter()
        .find(|s| s.name == "write orders" && !s.parent_span_is_remote)
        .unwrap();
    assert_eq!(root.status, Status::error("bad row"));
    let outcome = |s: &SpanData| {
        s.attributes
            .iter()
            .find(|kv| kv.key.as_str() == "jetsink.outcome")
            .map(|kv| kv.value.to_string())
    };
    assert_eq!(outcome(child).as_deref(), Some("committed"));
    assert_eq!(outcome(root).as_deref(), Some("refused"));
    let batch_span = all.iter().find(|s| s.name == "write batch orders").unwrap();
    let linked: Vec<_> = batch_span
        .links
        .iter()
        .map(|l| l.span_context.span_id())
        .collect();
    assert_eq!(
        linked,
        vec![child.span_context.span_id(), root.span_context.span_id()]
    );
}

#[test]
fn a_producer_that_did_not_sample_is_followed_and_no_batch_span_is_made_for_nothing() {
    let (t, kept, _p) = tracer(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)));
    let batch = [envelope(1, Some(NOT_SAMPLED))];
    let spans = t.batch(1);
    spans.start(&batch, &[0], SystemTime::now());
    spans.wrote(&[0], SystemTime::now(), Some("timeout"));
    spans.end([0], Outcome::Committed);
    assert!(kept.0.lock().unwrap().is_empty(), "nothing recorded");
}

#[test]
fn a_retried_message_keeps_its_first_start_and_a_dropped_batch_ends_what_is_open() {
    let (t, kept, _p) = tracer(Sampler::AlwaysOn);
    let batch = [envelope(1, Some(SAMPLED))];
    let first = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1);
    {
        let spans = t.batch(1);
        spans.start(&batch, &[0], first);
        spans.wrote(&[0], first, Some("destination down"));
        spans.start(&batch, &[0], SystemTime::now());
        spans.wrote(&[0], SystemTime::now(), None);
    }
    let all = kept.0.lock().unwrap().clone();
    let message: Vec<_> = all.iter().filter(|s| s.name == "write orders").collect();
    assert_eq!(
        message.len(),
        1,
        "one span per message, however many attempts"
    );
    assert_eq!(message[0].start_time, first);
    let writes: Vec<_> = all
        .iter()
        .filter(|s| s.name == "write batch orders")
        .collect();
    assert_eq!(writes.len(), 2, "one span per attempt");
    assert!(writes
        .iter()
        .any(|w| w.status == Status::error("destination down")));
}
