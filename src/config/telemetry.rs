//! The `telemetry` section: OpenTelemetry traces of every message's write, exported over
//! OTLP (opt-in; off when the section or its `otlp` part is absent). See
//! docs/operations.md, "Trace context".

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::shared::issue::Issues;
use crate::shared::server_url::redacted;

/// Shortest export timeout and interval, in milliseconds.
const MIN_MS: u64 = 100;
/// Longest export timeout and interval: one minute.
const MAX_MS: u64 = 60_000;
/// Most spans queued for export before new ones are dropped (and counted).
const MAX_QUEUE: usize = 1_000_000;

/// Where traces go.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Export spans to an OpenTelemetry collector (or any OTLP receiver); off when absent.
    #[serde(default)]
    pub otlp: Option<OtlpConfig>,
}

/// How spans reach the collector.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum OtlpProtocol {
    /// Protobuf over HTTP (`POST <endpoint>/v1/traces`), usually port 4318.
    #[default]
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    /// gRPC (`opentelemetry.proto.collector.trace.v1.TraceService/Export`), usually 4317.
    #[serde(rename = "grpc")]
    Grpc,
}

/// Which messages' spans are recorded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SamplerKind {
    /// Follow the producer: a message whose `traceparent` says "sampled" is recorded, one
    /// that says "not sampled" is not, and one without a valid `traceparent` is recorded
    /// at `sample_ratio` (OpenTelemetry's default sampler).
    #[default]
    ParentBased,
    /// `sample_ratio` of all traces, decided by the trace id alone (OpenTelemetry's
    /// `TraceIdRatioBased`): the producer's flag is not consulted, and every service
    /// using the same ratio keeps the same traces.
    Ratio,
}

/// The OTLP exporter.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OtlpConfig {
    /// The receiver, `http://` or `https://`: for `http/protobuf` the collector's base URL
    /// (jetsink posts to `<endpoint>/v1/traces` unless the URL already ends so), for
    /// `grpc` its address, e.g. `http://127.0.0.1:4317`.
    pub endpoint: String,
    /// `http/protobuf` (default) or `grpc`.
    #[serde(default)]
    pub protocol: OtlpProtocol,
    /// `parent_based` (default) or `ratio`.
    #[serde(default)]
    pub sampler: SamplerKind,
    /// The share of traces recorded, 0.0 to 1.0. Default 1.0.
    #[serde(default = "default_ratio")]
    pub sample_ratio: f64,
    /// The `service.name` resource attribute of every span. Default `jetsink`.
    #[serde(default = "default_service_name")]
    pub service_name: String,
    /// Extra request headers (HTTP) or metadata (gRPC), e.g. a collector's API key. Never
    /// logged.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// How long one export may take, in milliseconds. Default 10000, 100 to 60000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// How often queued spans are exported, in milliseconds. Default 5000, 100 to 60000.
    #[serde(default = "default_interval_ms")]
    pub export_interval_ms: u64,
    /// Most spans waiting for export; beyond it new spans are dropped, never slowing a
    /// write. The queue is reserved when the daemon starts, about 0.4 KB per span, so the
    /// default is OpenTelemetry's 2048; raise it for full sampling at high rates. At most
    /// 1000000.
    #[serde(default = "default_max_queue")]
    pub max_queue: usize,
}

fn default_ratio() -> f64 {
    1.0
}
fn default_service_name() -> String {
    "jetsink".into()
}
fn default_timeout_ms() -> u64 {
    10_000
}
fn default_interval_ms() -> u64 {
    5_000
}
fn default_max_queue() -> usize {
    2_048
}

impl OtlpConfig {
    /// The export timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// The export interval.
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.export_interval_ms)
    }

    /// The URL spans are sent to: for HTTP the signal path appended to a base URL.
    pub fn url(&self) -> String {
        let base = self.endpoint.trim_end_matches('/');
        match self.protocol {
            OtlpProtocol::HttpProtobuf if !base.ends_with("/v1/traces") => {
                format!("{base}/v1/traces")
            }
            _ => base.to_string(),
        }
    }

    /// A secret-free line for `validate`: where, how, and how much.
    pub fn describe(&self) -> String {
        let protocol = match self.protocol {
            OtlpProtocol::HttpProtobuf => "http/protobuf",
            OtlpProtocol::Grpc => "grpc",
        };
        let sampler = match self.sampler {
            SamplerKind::ParentBased => "parent-based",
            SamplerKind::Ratio => "by trace id",
        };
        format!(
            "otlp {protocol} to {} ({sampler}, ratio {}), service {}",
            redacted(&self.url()),
            self.sample_ratio,
            self.service_name
        )
    }
}

/// Checks the section, every problem at its JSON path.
pub(crate) fn check(cfg: &TelemetryConfig, issues: &mut Issues) {
    let Some(o) = &cfg.otlp else { return };
    let scheme_ok = o.endpoint.starts_with("http://") || o.endpoint.starts_with("https://");
    let host = o
        .endpoint
        .split_once("://")
        .map(|(_, rest)| rest)
        .unwrap_or("");
    if !scheme_ok || host.is_empty() || host.starts_with('/') {
        issues.push(
            "telemetry.otlp.endpoint",
            format!(
                "must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:4318, got {:?}",
                redacted(&o.endpoint)
            ),
        );
    } else if o.url().parse::<http::Uri>().is_err() {
        issues.push(
            "telemetry.otlp.endpoint",
            format!("is not a valid URL: {:?}", redacted(&o.endpoint)),
        );
    }
    if !(0.0..=1.0).contains(&o.sample_ratio) {
        issues.push(
            "telemetry.otlp.sample_ratio",
            format!("must be between 0.0 and 1.0, got {}", o.sample_ratio),
        );
    }
    if o.service_name.trim().is_empty() {
        issues.push("telemetry.otlp.service_name", "must not be empty");
    }
    for (name, value) in &o.headers {
        let path = format!("telemetry.otlp.headers.{name}");
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            issues.push(&path, "is not a valid header name");
        } else if o.protocol == OtlpProtocol::Grpc && name.to_ascii_lowercase().ends_with("-bin") {
            // gRPC reserves the suffix for binary metadata; the exporter would refuse it.
            issues.push(
                &path,
                "a gRPC metadata name ending in -bin carries binary values; give a text header",
            );
        } else if http::HeaderValue::from_str(value).is_err() {
            // The value is a secret as often as not: say what is wrong, never what it is.
            issues.push(&path, "has a character a header value cannot hold");
        }
    }
    issues.range(
        "telemetry.otlp.timeout_ms".into(),
        o.timeout_ms,
        MIN_MS,
        MAX_MS,
    );
    issues.range(
        "telemetry.otlp.export_interval_ms".into(),
        o.export_interval_ms,
        MIN_MS,
        MAX_MS,
    );
    issues.range(
        "telemetry.otlp.max_queue".into(),
        o.max_queue as u64,
        1,
        MAX_QUEUE as u64,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(json: &str) -> Vec<String> {
        let cfg: TelemetryConfig = serde_json::from_str(json).unwrap();
        let mut issues = Issues::default();
        check(&cfg, &mut issues);
        issues.0.iter().map(|i| i.to_string()).collect()
    }

    #[test]
    fn an_endpoint_alone_takes_the_documented_defaults() {
        let cfg: TelemetryConfig =
            serde_json::from_str(r#"{"otlp": {"endpoint": "http://127.0.0.1:4318"}}"#).unwrap();
        let o = cfg.otlp.unwrap();
        assert_eq!(o.protocol, OtlpProtocol::HttpProtobuf);
        assert_eq!(o.sampler, SamplerKind::ParentBased);
        assert_eq!(o.sample_ratio, 1.0);
        assert_eq!(o.service_name, "jetsink");
        assert_eq!(
            (o.timeout_ms, o.export_interval_ms, o.max_queue),
            (10_000, 5_000, 2_048)
        );
        assert_eq!(o.url(), "http://127.0.0.1:4318/v1/traces");
    }

    #[test]
    fn the_http_signal_path_is_added_once_and_grpc_keeps_the_address() {
        let url = |json: &str| serde_json::from_str::<OtlpConfig>(json).unwrap().url();
        assert_eq!(
            url(r#"{"endpoint": "https://c.example/v1/traces"}"#),
            "https://c.example/v1/traces"
        );
        assert_eq!(
            url(r#"{"endpoint": "https://c.example/otel/"}"#),
            "https://c.example/otel/v1/traces"
        );
        assert_eq!(
            url(r#"{"endpoint": "http://c:4317", "protocol": "grpc"}"#),
            "http://c:4317"
        );
    }

    #[test]
    fn each_bad_setting_is_refused_at_its_path() {
        let problems = checked(
            r#"{"otlp": {"endpoint": "c.example:4318", "sample_ratio": 1.5, "service_name": " ",
                "timeout_ms": 5, "export_interval_ms": 60001, "max_queue": 0,
                "headers": {"bad name": "x", "x-key": "line\nbreak"}}}"#,
        );
        for path in [
            "telemetry.otlp.endpoint",
            "telemetry.otlp.sample_ratio",
            "telemetry.otlp.service_name",
            "telemetry.otlp.timeout_ms",
            "telemetry.otlp.export_interval_ms",
            "telemetry.otlp.max_queue",
            "telemetry.otlp.headers.bad name",
            "telemetry.otlp.headers.x-key",
        ] {
            assert!(
                problems.iter().any(|p| p.starts_with(path)),
                "{path} in {problems:?}"
            );
        }
        assert!(
            !problems.iter().any(|p| p.contains("line")),
            "a header value is never shown"
        );
    }

    #[test]
    fn a_binary_metadata_name_is_refused_for_grpc_only() {
        let grpc = checked(
            r#"{"otlp": {"endpoint": "http://c:4317", "protocol": "grpc", "headers": {"X-Key-Bin": "v"}}}"#,
        );
        assert!(
            grpc.iter()
                .any(|p| p.starts_with("telemetry.otlp.headers.X-Key-Bin: a gRPC")),
            "{grpc:?}"
        );
        let http =
            checked(r#"{"otlp": {"endpoint": "http://c:4318", "headers": {"X-Key-Bin": "v"}}}"#);
        assert!(http.is_empty(), "{http:?}");
    }

    #[test]
    fn an_unknown_protocol_or_key_is_refused_by_the_parser() {
        for json in [
            r#"{"otlp": {"endpoint": "http://c", "protocol": "http/json"}}"#,
            r#"{"otlp": {"endpoint": "http://c", "sampling": 0.5}}"#,
        ] {
            assert!(
                serde_json::from_str::<TelemetryConfig>(json).is_err(),
                "{json}"
            );
        }
    }

    #[test]
    fn credentials_in_the_url_are_never_described() {
        let o: OtlpConfig =
            serde_json::from_str(r#"{"endpoint": "https://me:s3cret@c.example"}"#).unwrap();
        assert!(!o.describe().contains("s3cret"), "{}", o.describe());
    }
}
