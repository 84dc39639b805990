//! Where `jetsink top` reads: the daemon's `/metrics` (through `metrics show`'s bounded
//! reader and parser), its `/readyz`, and with a config the server's consumer info for
//! every sink. The only I/O of the command apart from the terminal.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_nats::jetstream;

use super::rows::{Backlog, Configured, Scrape};
use super::state::Readiness;
use crate::cmd::metrics_show::{self, FetchError, Source};
use crate::config::{Config, SinkSpec};
use crate::metrics::Metrics;
use crate::nats::Links;
use crate::shared::server_url::redacted;

/// The most of `/readyz` read: its answer is a few lines per sink.
const READYZ_LIMIT: usize = 1 << 20;

/// What every mode reads from: the endpoints, the server, the configured sink names.
pub struct Target {
    /// `/metrics`.
    pub metrics_url: String,
    /// `/readyz`.
    pub readyz_url: String,
    /// The NATS side of `--config`.
    pub server: Option<Server>,
    /// The config's sinks (one the daemon does not show yet is still listed).
    pub configured: Vec<Configured>,
    /// Between scrapes.
    pub interval: Duration,
}

/// The `/metrics` and `/readyz` URLs of the daemon `url` names: its metrics URL
/// (`…/metrics`) or its base (`http://host:port`).
pub fn endpoints(url: &str) -> (String, String) {
    let base = url
        .trim_end_matches('/')
        .strip_suffix("/metrics")
        .unwrap_or(url.trim_end_matches('/'));
    (format!("{base}/metrics"), format!("{base}/readyz"))
}

/// The URL a client uses for a daemon listening on `listen`: an unspecified address
/// (`0.0.0.0`, `[::]`) is reached on the loopback of the same family.
pub fn url_of_listen(listen: &str) -> String {
    let (host, port) = listen.rsplit_once(':').unwrap_or((listen, "9464"));
    let host = match host {
        "0.0.0.0" | "" => "127.0.0.1",
        "[::]" => "[::1]",
        h => h,
    };
    format!("http://{host}:{port}/metrics")
}

/// Reads one scrape: `/metrics` must answer (its error is the command's); `/readyz`
/// and the server are best effort, what failed is added to `notes`.
pub async fn scrape(
    metrics_url: &str,
    readyz_url: &str,
    server: Option<&Server>,
    notes: &mut Vec<String>,
) -> Result<(Scrape, Instant), FetchError> {
    let samples = metrics(metrics_url).await?;
    let at = Instant::now();
    let ready = match readyz(readyz_url).await {
        Ok(r) => Some(r),
        Err(e) => {
            notes.push(format!("{}: {e}", redacted(readyz_url)));
            None
        }
    };
    let server = match server {
        Some(s) => Some(s.backlog(notes).await),
        None => None,
    };
    Ok((
        Scrape {
            samples,
            ready,
            server,
        },
        at,
    ))
}

/// `/metrics` alone: what the first scrape of `--once` needs, and when it was read.
pub async fn metrics_only(metrics_url: &str) -> Result<(Scrape, Instant), FetchError> {
    let samples = metrics(metrics_url).await?;
    let scrape = Scrape {
        samples,
        ..Scrape::default()
    };
    Ok((scrape, Instant::now()))
}

/// The samples of `/metrics`, read with `metrics show`'s bound and parser.
async fn metrics(url: &str) -> Result<Vec<crate::shared::prometheus_text::Sample>, FetchError> {
    metrics_show::load(&Source::Url(url.to_string())).await
}

/// `/readyz`'s JSON, which it answers with status 200 or 503.
async fn readyz(url: &str) -> Result<Readiness, String> {
    let client = reqwest::Client::builder()
        .timeout(metrics_show::TIMEOUT)
        .tls_built_in_root_certs(false)
        .build()
        .map_err(|e| format!("cannot read readiness: {}", e.without_url()))?;
    let response = client
        .get(url)
        .send()
        .await
        .map_err(|e| format!("cannot read readiness: {}", e.without_url()))?;
    let status = response.status().as_u16();
    if status != 200 && status != 503 {
        return Err(format!("answered HTTP {status}, expected readiness JSON"));
    }
    let body = crate::files::body::read(response, READYZ_LIMIT, crate::files::body::Over::Refuse)
        .await
        .map_err(|e| e.to_string())?;
    serde_json::from_slice(&body).map_err(|e| format!("not readiness JSON: {e}"))
}

/// The NATS side of a config: one JetStream context per connection its sinks use.
pub struct Server {
    sinks: Vec<SinkSpec>,
    contexts: BTreeMap<String, jetstream::Context>,
    failed: Vec<String>,
}

impl Server {
    /// Connects with the config's NATS settings, once per connection label; a connection
    /// that fails is named in every scrape's notes and its sinks' backlog is read from
    /// the daemon instead.
    pub async fn connect(config: &Config) -> Server {
        let metrics = Metrics::new();
        let links = Links::new(&metrics);
        let mut contexts = BTreeMap::new();
        let mut failed = Vec::new();
        let mut tried = std::collections::BTreeSet::new();
        for spec in &config.sinks {
            let label = spec.connection_label().to_string();
            if !tried.insert(label.clone()) {
                continue;
            }
            match crate::nats::connect(&config.nats, &label, &links, &metrics).await {
                Ok(conn) => {
                    let js = jetstream::ContextBuilder::new()
                        .timeout(Duration::from_millis(config.nats.request_timeout_ms))
                        .build(conn.client.clone());
                    contexts.insert(label, js);
                }
                Err(e) => failed.push(format!("NATS connection {label}: {e}")),
            }
        }
        // A reading command: its connections close with it, quietly.
        links.closing();
        Server {
            sinks: config.sinks.clone(),
            contexts,
            failed,
        }
    }

    /// Each sink's backlog summed over its consumers; a sink whose stream or consumer
    /// cannot be read is left out (its row falls back to the daemon's gauges) and named in
    /// `notes`.
    pub async fn backlog(&self, notes: &mut Vec<String>) -> BTreeMap<String, Backlog> {
        notes.extend(self.failed.iter().cloned());
        let mut out = BTreeMap::new();
        for spec in &self.sinks {
            let Some(js) = self.contexts.get(spec.connection_label()) else {
                continue;
            };
            match sink_backlog(js, spec).await {
                Ok(b) => {
                    out.insert(spec.name.clone(), b);
                }
                Err(e) => notes.push(e),
            }
        }
        out
    }
}

/// One sink's consumers' info, summed.
async fn sink_backlog(js: &jetstream::Context, spec: &SinkSpec) -> Result<Backlog, String> {
    let stream_name = &spec.source.stream;
    let stream = js
        .get_stream(stream_name)
        .await
        .map_err(|e| format!("sink {}: looking up stream {stream_name}: {e}", spec.name))?;
    let mut total = Backlog::default();
    for (source, _) in spec.consumer_bindings() {
        let info = stream.consumer_info(&source.consumer).await.map_err(|e| {
            format!(
                "sink {}: reading consumer {} of stream {stream_name}: {e}",
                spec.name, source.consumer
            )
        })?;
        total.pending = total.pending.saturating_add(info.num_pending);
        total.ack_pending = total
            .ack_pending
            .saturating_add(info.num_ack_pending as u64);
        total.redelivered = total
            .redelivered
            .saturating_add(info.num_redelivered as u64);
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoints_come_from_a_metrics_url_or_a_base() {
        let both = |m: &str, r: &str| (m.to_string(), r.to_string());
        assert_eq!(
            endpoints("http://127.0.0.1:9464/metrics"),
            both(
                "http://127.0.0.1:9464/metrics",
                "http://127.0.0.1:9464/readyz"
            )
        );
        assert_eq!(
            endpoints("http://u:p@h:1/"),
            both("http://u:p@h:1/metrics", "http://u:p@h:1/readyz")
        );
        assert_eq!(
            endpoints("http://h:1/jetsink/metrics/"),
            both("http://h:1/jetsink/metrics", "http://h:1/jetsink/readyz")
        );
    }

    #[test]
    fn an_unspecified_listen_address_is_reached_on_the_loopback() {
        assert_eq!(
            url_of_listen("0.0.0.0:9464"),
            "http://127.0.0.1:9464/metrics"
        );
        assert_eq!(url_of_listen("[::]:9000"), "http://[::1]:9000/metrics");
        assert_eq!(
            url_of_listen("10.0.0.5:9464"),
            "http://10.0.0.5:9464/metrics"
        );
        assert_eq!(url_of_listen("localhost:1"), "http://localhost:1/metrics");
    }
}
