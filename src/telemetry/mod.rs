//! OpenTelemetry traces of what jetsink writes (`telemetry.otlp`, off by default).
//!
//! Producers that trace put a W3C `traceparent` header on their messages. With
//! `telemetry.otlp` on, each message's write becomes a span whose parent is the producer's
//! span, and each write of a batch one span linked to its messages' spans, exported over
//! OTLP (HTTP/protobuf or gRPC) by the SDK's batch processor on a thread of its own.
//! Sampling follows `sampler`/`sample_ratio`; a span that is not sampled is never built.
//! Export is best effort by design: a collector that is down or slow never holds a write
//! or an ACK; what could not be sent is counted (`jetsink_trace_spans_*_total`) and
//! logged.
//!
//! - [`spans`]: the message and batch spans the settler records;
//! - `export`: the exporter with its results counted;
//! - `http`: the HTTP exporter's client on the daemon's runtime.

mod export;
mod http;
pub mod spans;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider,
};
use opentelemetry_sdk::Resource;

use crate::config::telemetry::{OtlpConfig, OtlpProtocol, SamplerKind};
use crate::metrics::Metrics;
pub use spans::{BatchSpans, Outcome, SinkTracer};

/// Longest the final export at shutdown may take: inside the 5 s the daemon allows
/// itself beyond `shutdown_timeout_ms`, beside the listeners' wind-down.
const FINAL_EXPORT: std::time::Duration = std::time::Duration::from_secs(3);

/// Most links on a batch's span: one per message of the largest batch a sink may pull.
const MAX_LINKS: u32 = 10_000;

/// Why the exporter could not be set up; the daemon refuses to start (exit 78).
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The exporter refused its settings.
    #[error("telemetry.otlp: cannot set up the {protocol} exporter for {endpoint}: {reason}")]
    Exporter {
        /// `http/protobuf` or `grpc`.
        protocol: &'static str,
        /// The URL, without credentials.
        endpoint: String,
        /// What the exporter said.
        reason: String,
    },
}

/// The running exporter: hands out one tracer per sink and flushes at shutdown.
pub struct Telemetry {
    provider: SdkTracerProvider,
    metrics: Metrics,
    /// `telemetry.otlp.timeout_ms`.
    timeout: std::time::Duration,
}

impl Telemetry {
    /// Sets up the exporter and the SDK's pipeline. Must run on the daemon's runtime.
    pub fn start(cfg: &OtlpConfig, metrics: &Metrics) -> Result<Telemetry, TelemetryError> {
        let url = cfg.url();
        let (protocol, built) = match cfg.protocol {
            OtlpProtocol::HttpProtobuf => ("http/protobuf", http_exporter(cfg, &url)),
            OtlpProtocol::Grpc => ("grpc", grpc_exporter(cfg, &url)),
        };
        let described = cfg.describe();
        let exporter = built.map_err(|reason| TelemetryError::Exporter {
            protocol,
            endpoint: described.clone(),
            reason,
        })?;
        let counts = export_counts(metrics);
        let exporter = export::Counted::new(exporter, counts, described.clone());
        let batch = BatchConfigBuilder::default()
            .with_max_queue_size(cfg.max_queue)
            .with_scheduled_delay(cfg.interval())
            .with_max_export_batch_size(cfg.max_queue.min(512))
            .build();
        let ratio = Sampler::TraceIdRatioBased(cfg.sample_ratio);
        let sampler = match cfg.sampler {
            SamplerKind::ParentBased => Sampler::ParentBased(Box::new(ratio)),
            SamplerKind::Ratio => ratio,
        };
        let provider = SdkTracerProvider::builder()
            .with_span_processor(
                BatchSpanProcessor::builder(exporter)
                    .with_batch_config(batch)
                    .build(),
            )
            .with_sampler(sampler)
            .with_max_links_per_span(MAX_LINKS)
            .with_resource(
                Resource::builder_empty()
                    .with_service_name(cfg.service_name.clone())
                    .with_attribute(opentelemetry::KeyValue::new(
                        "service.version",
                        env!("CARGO_PKG_VERSION"),
                    ))
                    .build(),
            )
            .build();
        tracing::info!(exporter = %described, "exporting traces over OTLP");
        Ok(Telemetry {
            provider,
            metrics: metrics.clone(),
            timeout: cfg.timeout(),
        })
    }

    /// The tracer of one sink; its recorded spans are counted under its name.
    pub fn tracer(&self, sink: &str) -> SinkTracer {
        let recorded = recorded(&self.metrics, sink);
        SinkTracer::new(self.provider.tracer("jetsink"), sink, recorded)
    }

    /// Exports what is queued and stops the exporter, for at most [`FINAL_EXPORT`] (or
    /// the export timeout, if shorter): a collector that does not answer must not turn a
    /// clean stop into a shutdown timeout. Runs off the runtime's worker threads, since
    /// the SDK's shutdown blocks.
    pub async fn finish(self) {
        let provider = self.provider;
        let bound = self.timeout.min(FINAL_EXPORT);
        let done = tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(bound)).await;
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "traces still queued at shutdown may be lost"),
            Err(e) => tracing::warn!(error = %e, "the trace exporter's shutdown failed"),
        }
    }
}

/// Registers the trace metric families for `sink`: what a daemon with `telemetry.otlp`
/// exports, for the check that every exported family is documented.
pub fn register_metrics(metrics: &Metrics, sink: &str) {
    export_counts(metrics);
    recorded(metrics, sink);
}

fn export_counts(metrics: &Metrics) -> export::ExportCounts {
    export::ExportCounts {
        exported: metrics.counter(
            "jetsink_trace_spans_exported_total",
            "Spans the OTLP receiver accepted.",
            &[],
        ),
        failed: metrics.counter(
            "jetsink_trace_spans_failed_total",
            "Spans in OTLP exports that failed; they are lost (traces are best effort).",
            &[],
        ),
    }
}

fn recorded(metrics: &Metrics, sink: &str) -> prometheus::IntCounter {
    metrics.counter(
        "jetsink_trace_spans_total",
        "Spans recorded (sampled) for export, message and batch spans alike.",
        &[("sink", sink)],
    )
}

fn http_exporter(cfg: &OtlpConfig, url: &str) -> Result<opentelemetry_otlp::SpanExporter, String> {
    let client = http::RuntimeClient::new(cfg.timeout()).map_err(|e| e.to_string())?;
    let headers: HashMap<String, String> = cfg.headers.clone().into_iter().collect();
    opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(url)
        .with_timeout(cfg.timeout())
        .with_headers(headers)
        .build()
        .map_err(|e| e.to_string())
}

fn grpc_exporter(cfg: &OtlpConfig, url: &str) -> Result<opentelemetry_otlp::SpanExporter, String> {
    let mut metadata = tonic::metadata::MetadataMap::new();
    for (name, value) in &cfg.headers {
        let key = tonic::metadata::MetadataKey::from_bytes(name.to_ascii_lowercase().as_bytes())
            .map_err(|_| format!("header {name:?} is not a valid gRPC metadata key"))?;
        let value = value
            .parse()
            .map_err(|_| format!("header {name:?} has a value gRPC metadata cannot hold"))?;
        metadata.insert(key, value);
    }
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(url)
        .with_timeout(cfg.timeout())
        .with_metadata(metadata);
    if url.starts_with("https://") {
        builder =
            builder.with_tls_config(tonic::transport::ClientTlsConfig::new().with_native_roots());
    }
    builder.build().map_err(|e| e.to_string())
}
