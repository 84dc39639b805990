//! Opens the NATS connections: one per sink, or one per `source.connection_group`.
//!
//! A connection is a fault domain. The client drops a connection whenever it cannot read
//! what the server sent (a message whose header block it cannot parse is enough), and every
//! pull and every ACK on that connection fails with it; giving each sink its own keeps one
//! sink's bad input from touching the others. Operators who want fewer connections group
//! sinks explicitly and accept that they share that fate.
//!
//! The first connect must succeed within `connect_timeout_ms` or start-up fails with exit
//! 69; after that the client reconnects by itself, with a capped, jittered delay (so
//! several connections, or several jetsink instances, do not reconnect in lockstep).
//! `jetsink_nats_connection_up{connection}` and `jetsink_nats_reconnects_total{connection}`
//! follow each connection; `jetsink_nats_connected` is 1 only while every one is up. Each
//! connection also counts its drops ([`Drops`]), which tells a sink that a pull may have
//! been cut short by the connection rather than by time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::{Client, ConnectErrorKind, ConnectOptions, Event};
use rand::Rng;

use super::credentials;
use crate::metrics::Metrics;
use crate::shared::nats_security::NatsConfig;

/// Why the first connection failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// An environment variable or file named by the config is missing, unreadable or
    /// does not hold what its key says (exit 78).
    #[error("nats.{key}: {message}")]
    Credentials {
        /// The config key that names the secret.
        key: &'static str,
        /// What is missing (never the secret itself).
        message: String,
    },
    /// The servers did not accept a connection.
    #[error("cannot connect to NATS at {servers} as {identity}: {source}{hint}")]
    Unreachable {
        /// The configured server list.
        servers: String,
        /// The secret-free description of the identity presented.
        identity: String,
        /// The client's reason.
        source: async_nats::ConnectError,
        /// What the reason usually means, for the operator.
        hint: &'static str,
    },
}

/// How many times one connection has dropped since it opened. A pull watches it to end
/// at once when its connection drops mid-pull (instead of waiting out its local timeout),
/// and a sink compares the count before and after: a change means a pull may have lost
/// messages with the connection, which a plain timeout never does.
#[derive(Debug, Clone)]
pub struct Drops(Arc<tokio::sync::watch::Sender<u64>>);

impl Default for Drops {
    fn default() -> Self {
        Drops(Arc::new(tokio::sync::watch::Sender::new(0)))
    }
}

impl Drops {
    /// Drops so far.
    pub fn count(&self) -> u64 {
        *self.0.borrow()
    }

    /// A receiver that sees the next drop (`changed()` resolves when one happens).
    pub fn watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.0.subscribe()
    }

    fn record(&self) {
        self.0.send_modify(|n| *n += 1);
    }
}

/// One open connection, the sinks that use it name it by its label.
#[derive(Clone)]
pub struct Connection {
    /// The `connection` label: the connection group, or the sink's name.
    pub label: String,
    /// The client.
    pub client: Client,
    /// Its drop count.
    pub drops: Drops,
}

/// One NATS connection's metric handles, `label` being its group or sink name.
#[derive(Clone)]
pub struct ConnectionMetrics {
    /// 1 while up (`jetsink_nats_connection_up`).
    pub up: prometheus::IntGauge,
    /// Reconnects after a drop (`jetsink_nats_reconnects_total`).
    pub reconnects: prometheus::IntCounter,
}

impl ConnectionMetrics {
    /// The handles of the connection named `label`.
    pub fn new(metrics: &Metrics, label: &str) -> ConnectionMetrics {
        let l = [("connection", label)];
        ConnectionMetrics {
            up: metrics.gauge(
                "jetsink_nats_connection_up",
                "1 while this NATS connection is up, 0 while it is reconnecting or closed, per connection (its group name, or the sink's name).",
                &l,
            ),
            reconnects: metrics.counter(
                "jetsink_nats_reconnects_total",
                "Times a NATS connection was re-established after it dropped, per connection (its group name, or the sink's name).",
                &l,
            ),
        }
    }
}

/// The up/down state of every connection, folded into the process-wide
/// `jetsink_nats_connected` (1 only while all are up), which the deployed alerts use.
#[derive(Clone)]
pub struct Links {
    up: Arc<Mutex<BTreeMap<String, bool>>>,
    /// `jetsink_nats_connected`.
    connected: prometheus::IntGauge,
    /// Set once jetsink closes its connections itself, so their `Closed` events are
    /// expected rather than a client that gave up.
    closing: Arc<std::sync::atomic::AtomicBool>,
    /// The first connection whose client stopped reconnecting (`nats.max_reconnects`
    /// exhausted) while jetsink was running.
    gone: Arc<tokio::sync::watch::Sender<Option<String>>>,
    /// Whether a connection closed for good stops the daemon (the source connections) or
    /// only its destination, which connects again at its next write (a republish target).
    stops_daemon: bool,
}

/// See [`Links::closing_on_drop`].
pub struct ClosingOnDrop(Links);

impl Drop for ClosingOnDrop {
    fn drop(&mut self) {
        self.0.closing();
    }
}

impl Links {
    /// No connection yet.
    pub fn new(metrics: &Metrics) -> Links {
        Links {
            up: Arc::default(),
            connected: metrics.gauge(
                "jetsink_nats_connected",
                "1 while the NATS connection is up, 0 while it is reconnecting.",
                &[],
            ),
            closing: Arc::default(),
            gone: Arc::new(tokio::sync::watch::Sender::new(None)),
            stops_daemon: true,
        }
    }

    /// The links of a destination's own connection (the republish target): a client that
    /// gives up is reported in [`Links::gone`] for the destination to connect again, and
    /// does not stop the daemon.
    pub fn for_destination(metrics: &Metrics) -> Links {
        Links {
            stops_daemon: false,
            ..Links::new(metrics)
        }
    }

    /// Marks the connections as closed on purpose from now on (shutdown, the end of a
    /// one-shot command): their `Closed` events are then logged at debug level only.
    pub fn closing(&self) {
        self.closing
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// A guard that marks the connections as closed on purpose when it is dropped, so a
    /// function that returns early (a start-up refusal) closes them quietly too.
    pub fn closing_on_drop(&self) -> ClosingOnDrop {
        ClosingOnDrop(self.clone())
    }

    /// Sees the first connection that closed for good while jetsink was running: the
    /// daemon stops then (exit 69), since its sinks can no longer pull or acknowledge.
    pub fn gone(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.gone.subscribe()
    }

    fn closed(&self, label: &str) {
        if self.closing.load(std::sync::atomic::Ordering::Acquire) {
            tracing::debug!(connection = %label, "NATS connection closed");
            return;
        }
        if self.stops_daemon {
            tracing::error!(connection = %label, "NATS connection closed for good: the client stopped reconnecting (nats.max_reconnects reached); jetsink stops");
        } else {
            tracing::warn!(connection = %label, "NATS connection closed for good: the client stopped reconnecting (nats.max_reconnects reached); the destination connects again at its next write");
        }
        self.gone.send_if_modified(|g| {
            if g.is_none() {
                *g = Some(label.to_string());
                true
            } else {
                false
            }
        });
    }

    fn set(&self, label: &str, up: bool) {
        // A poisoned lock still holds a usable map of booleans.
        let mut map = self.up.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(label.to_string(), up);
        let all = map.values().all(|u| *u);
        self.connected.set(i64::from(all));
    }
}

/// The delay before reconnect attempt `attempts`: 50 ms doubling per attempt, capped at
/// `max`, then drawn uniformly from its upper half, so connections that dropped together
/// spread their attempts instead of hitting the server in lockstep.
pub fn reconnect_delay<R: Rng + ?Sized>(attempts: usize, max: Duration, rng: &mut R) -> Duration {
    let exp = 2u64
        .saturating_pow(attempts.min(16) as u32)
        .saturating_mul(50);
    let ceiling = Duration::from_millis(exp).min(max);
    let ms = ceiling.as_millis() as u64;
    Duration::from_millis(rng.random_range(ms / 2..=ms))
}

/// What a failed first connect usually means, from the client's error kind and reason:
/// the reason ("Connection refused (os error 111)", "invalid peer certificate:
/// UnknownIssuer") names the symptom, this names the likely cause and the setting to look
/// at. The client reports failures inside the TLS handshake as I/O errors, so the
/// reason's words decide: a refused connection means nothing listens there; TLS words
/// mean certificates; a connection the server closed or reset means, on a connection
/// that got that far, a server that wanted something first — most often a client
/// certificate.
pub fn hint(kind: ConnectErrorKind, reason: &str) -> &'static str {
    let reason = reason.to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| reason.contains(w));
    match kind {
        ConnectErrorKind::Io if has(&["invalidcontenttype"]) => " (the server answered the TLS handshake in clear: it does not expect TLS first (drop nats.tls.handshake_first, or set handshake_first in the server's tls block), or it is not a TLS server)",
        ConnectErrorKind::Tls => TLS_HINT,
        ConnectErrorKind::Io if has(&["certificate", "tls", "alert", "handshake"]) => TLS_HINT,
        ConnectErrorKind::Io if has(&["refused"]) => " (nothing listens there: is the NATS server running, and are the host and port in nats.servers right?)",
        ConnectErrorKind::Dns => " (the host name does not resolve: is the host in nats.servers right?)",
        ConnectErrorKind::Io if has(&["reset", "closed", "end of file", "eof", "broken pipe"]) => " (the server closed the connection during the handshake: a server that verifies clients does so without a client certificate (nats.tls.cert_file, key_file))",
        ConnectErrorKind::AuthorizationViolation => " (the server refused the credentials: check the user and password, token, NKEY seed or creds file the config names)",
        ConnectErrorKind::Authentication => " (the credentials could not answer the server's challenge: check nats.nkey_seed_file or nats.creds_file)",
        ConnectErrorKind::TimedOut => " (no answer within nats.connect_timeout_ms: the server may be down or filtered, or expect the TLS handshake first (nats.tls.handshake_first))",
        _ => "",
    }
}

const TLS_HINT: &str = " (TLS failed: check that nats.tls.ca_file signs the server's certificate for the host in the URL, and nats.tls.cert_file/key_file when the server verifies clients)";

/// Connects with the configured identity, timeouts and reconnect policy; `label` names
/// the connection in metrics, logs and the server's connection list.
pub async fn connect(
    cfg: &NatsConfig,
    label: &str,
    links: &Links,
    metrics: &Metrics,
) -> Result<Connection, ConnectError> {
    let (mut opts, identity) =
        credentials::apply(ConnectOptions::new(), &cfg.auth, cfg.tls.as_ref())
            .await
            .map_err(|e| ConnectError::Credentials {
                key: e.key,
                message: e.message,
            })?;
    let max_delay = Duration::from_millis(cfg.reconnect_delay_max_ms);
    let drops = Drops::default();
    let gauges = ConnectionMetrics::new(metrics, label);
    let (events_drops, events_links, events_gauges, name) = (
        drops.clone(),
        links.clone(),
        gauges.clone(),
        label.to_string(),
    );
    // Whether the connection was lost since it was last up: the next `Connected` is a
    // reconnect (the first one, at start-up, is not).
    let lost = Arc::new(AtomicBool::new(false));
    opts = opts
        .name(format!("{}/{label}", cfg.name))
        .connection_timeout(Duration::from_millis(cfg.connect_timeout_ms))
        .request_timeout(Some(Duration::from_millis(cfg.request_timeout_ms)))
        .max_reconnects(cfg.max_reconnects)
        .reconnect_delay_callback(move |attempts| {
            reconnect_delay(attempts, max_delay, &mut rand::rng())
        })
        .event_callback(move |event| {
            let (drops, links, name, gauges, lost) = (
                events_drops.clone(),
                events_links.clone(),
                name.clone(),
                events_gauges.clone(),
                lost.clone(),
            );
            async move {
                match event {
                    Event::Connected => {
                        gauges.up.set(1);
                        links.set(&name, true);
                        if lost.swap(false, Ordering::AcqRel) {
                            gauges.reconnects.inc();
                        }
                        tracing::info!(connection = %name, "NATS connection (re)established");
                    }
                    Event::Disconnected => {
                        drops.record();
                        lost.store(true, Ordering::Release);
                        gauges.up.set(0);
                        links.set(&name, false);
                        tracing::warn!(connection = %name, "NATS connection lost; reconnecting");
                    }
                    Event::Closed => {
                        // Emitted when jetsink itself drops the client at shutdown;
                        // `Links` knows it is expected then.
                        gauges.up.set(0);
                        links.set(&name, false);
                        links.closed(&name);
                    }
                    // The client gave up reconnecting (`nats.max_reconnects`): it emits
                    // this, not `Closed`, and never connects again.
                    Event::ClientError(async_nats::ClientError::MaxReconnects) => {
                        gauges.up.set(0);
                        links.set(&name, false);
                        links.closed(&name);
                    }
                    Event::SlowConsumer(sid) => {
                        tracing::warn!(connection = %name, sid, "NATS slow consumer: a subscription dropped messages")
                    }
                    other => tracing::info!(connection = %name, event = %other, "NATS event"),
                }
            }
        });
    let client =
        opts.connect(cfg.servers.clone())
            .await
            .map_err(|source| ConnectError::Unreachable {
                servers: cfg.servers.join(","),
                identity: identity.clone(),
                hint: hint(source.kind(), &source.to_string()),
                source,
            })?;
    tracing::info!(connection = %label, auth = %identity, "NATS connection opened");
    gauges.up.set(1);
    links.set(label, true);
    Ok(Connection {
        label: label.to_string(),
        client,
        drops,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn the_delay_doubles_up_to_the_cap_and_keeps_its_upper_half() {
        let mut rng = StdRng::seed_from_u64(7);
        let max = Duration::from_millis(2_000);
        for attempts in 0..40 {
            let ceiling = Duration::from_millis(50 * 2u64.pow(attempts.min(16) as u32)).min(max);
            for _ in 0..50 {
                let d = reconnect_delay(attempts, max, &mut rng);
                assert!(d <= ceiling && d >= ceiling / 2, "{attempts}: {d:?}");
            }
        }
    }

    #[test]
    fn connections_that_drop_together_do_not_retry_in_lockstep() {
        let mut rng = StdRng::seed_from_u64(11);
        let max = Duration::from_secs(5);
        let delays: std::collections::BTreeSet<Duration> =
            (0..20).map(|_| reconnect_delay(6, max, &mut rng)).collect();
        assert!(delays.len() > 10, "{delays:?}");
    }

    #[test]
    fn a_certificate_failure_reported_as_io_points_at_the_tls_settings() {
        let h = hint(
            ConnectErrorKind::Io,
            "IO error: invalid peer certificate: UnknownIssuer",
        );
        assert!(h.contains("nats.tls.ca_file"), "{h}");
        assert!(hint(ConnectErrorKind::Tls, "").contains("nats.tls.ca_file"));
        let h = hint(
            ConnectErrorKind::AuthorizationViolation,
            "authorization violation",
        );
        assert!(h.contains("refused the credentials"), "{h}");
        assert!(hint(ConnectErrorKind::Io, "connection reset").contains("client certificate"));
    }

    #[test]
    fn a_refused_connection_points_at_the_server_and_the_url_not_at_certificates() {
        let h = hint(
            ConnectErrorKind::Io,
            "IO error: Connection refused (os error 111)",
        );
        assert!(h.contains("is the NATS server running"), "{h}");
        assert!(!h.contains("certificate"), "{h}");
        let h = hint(
            ConnectErrorKind::Dns,
            "DNS error: failed to lookup address information: Name or service not known",
        );
        assert!(h.contains("does not resolve"), "{h}");
        let h = hint(
            ConnectErrorKind::Io,
            "IO error: received corrupt message of type InvalidContentType",
        );
        assert!(h.contains("does not expect TLS first"), "{h}");
        let h = hint(
            ConnectErrorKind::Io,
            "IO error: received fatal alert: BadCertificate",
        );
        assert!(h.contains("nats.tls.cert_file"), "{h}");
        assert_eq!(hint(ConnectErrorKind::Io, "something else entirely"), "");
    }

    #[test]
    fn the_process_is_connected_only_while_every_connection_is_up() {
        let m = Metrics::new();
        let links = Links::new(&m);
        links.set("a", true);
        links.set("b", true);
        assert!(m.render().contains("jetsink_nats_connected 1"));
        links.set("b", false);
        assert!(m.render().contains("jetsink_nats_connected 0"));
        links.set("b", true);
        assert!(m.render().contains("jetsink_nats_connected 1"));
    }
}
