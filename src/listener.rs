//! How both HTTP listeners (`http`: `/metrics` and health; `api`: the job API) accept and
//! serve connections, with limits an unauthenticated client cannot get around.
//!
//! A client needs no token to open a connection, so every limit applies before a request
//! is read: a kernel accept queue of `accept_backlog`; at most `max_connections` served at
//! once (the accept loop takes a slot before it accepts, so past the limit connections wait
//! in the kernel's queue, and past that the kernel refuses them — no file descriptor is
//! spent on them); a request head that must be complete within `header_read_timeout_ms`
//! (hyper's own timer, which also runs while a kept-alive connection waits for its next
//! request); and a kept-alive connection closed once it has waited `idle_timeout_ms`
//! without a request. Each listener has its own slots, so a flood of the API cannot take
//! the ones `/metrics` answers on. HTTP parsing is hyper's; this module only wires the
//! connection builder, counts, and stops.
//!
//! The process's open-file limit must hold every connection both listeners allow:
//! [`raise_open_files_limit`] lifts the soft limit to the hard one at start, and says when
//! even that is too small.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tower::ServiceExt;

use crate::config::http::Limits;

/// The largest read buffer of a connection: a request head (request line and headers)
/// must fit in it (hyper answers 431 otherwise), and it bounds what an idle or slow
/// connection can make the process hold.
const MAX_BUF_BYTES: usize = 16 * 1024;

/// How long connections may take to finish after shutdown began.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Binds `listen` (an `address:port`, checked by validation) with a listen backlog of
/// `backlog`, now, so a taken port fails start-up rather than later.
pub fn bind(listen: &str, backlog: u32) -> std::io::Result<TcpListener> {
    let addr: std::net::SocketAddr = listen
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // As std's TcpListener::bind does: a restart may bind while old connections linger.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

/// The connection metric families of both listeners, label `listener` (`http`, `api`).
#[derive(Clone)]
pub struct ListenerMetrics {
    open: IntGaugeVec,
    accepted: IntCounterVec,
    timeouts: IntCounterVec,
}

impl ListenerMetrics {
    /// Registers the families in `registry`.
    pub fn register(registry: &Registry) -> Result<ListenerMetrics, prometheus::Error> {
        let open = IntGaugeVec::new(
            Opts::new(
                "jetsink_http_connections",
                "Connections open now on an HTTP listener (http: /metrics and health, api: the job API); at most its max_connections.",
            ),
            &["listener"],
        )?;
        let accepted = IntCounterVec::new(
            Opts::new(
                "jetsink_http_connections_accepted_total",
                "Connections an HTTP listener accepted.",
            ),
            &["listener"],
        )?;
        let timeouts = IntCounterVec::new(
            Opts::new(
                "jetsink_http_connection_timeouts_total",
                "Connections an HTTP listener closed because a request head did not arrive within header_read_timeout_ms (kind=header) or a kept-alive connection stayed idle for idle_timeout_ms (kind=idle).",
            ),
            &["listener", "kind"],
        )?;
        registry.register(Box::new(open.clone()))?;
        registry.register(Box::new(accepted.clone()))?;
        registry.register(Box::new(timeouts.clone()))?;
        // Every series at zero from the start, so dashboards and alerts see them.
        for l in ["http", "api"] {
            let _ = open.with_label_values(&[l]);
            let _ = accepted.with_label_values(&[l]);
            for kind in ["header", "idle"] {
                let _ = timeouts.with_label_values(&[l, kind]);
            }
        }
        Ok(ListenerMetrics {
            open,
            accepted,
            timeouts,
        })
    }
}

/// One listener's handles.
#[derive(Clone)]
struct Counters {
    name: &'static str,
    metrics: Option<ListenerMetrics>,
}

impl Counters {
    fn accepted(&self) {
        if let Some(m) = &self.metrics {
            m.accepted.with_label_values(&[self.name]).inc();
        }
    }
    fn open(&self, by: i64) {
        if let Some(m) = &self.metrics {
            m.open.with_label_values(&[self.name]).add(by);
        }
    }
    fn timeout(&self, kind: &str) {
        if let Some(m) = &self.metrics {
            m.timeouts.with_label_values(&[self.name, kind]).inc();
        }
    }
}

/// Serves `app` on `listener` within `limits` until `shutdown` turns true, then lets the
/// connections finish their requests for up to 5 s. `name` labels the metrics and logs.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    name: &'static str,
    metrics: Option<ListenerMetrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    let counters = Counters { name, metrics };
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut connections = JoinSet::new();
    loop {
        // A slot first: at the limit, connections wait in the kernel's accept queue.
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = shutdown.wait_for(|s| *s) => break,
        };
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.wait_for(|s| *s) => break,
        };
        match accepted {
            Ok((stream, _)) => {
                counters.accepted();
                connections.spawn(connection(
                    stream,
                    app.clone(),
                    limits,
                    permit,
                    counters.clone(),
                    shutdown.clone(),
                ));
            }
            Err(e) => accept_failed(name, &e).await,
        }
        while connections.try_join_next().is_some() {}
    }
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_GRACE, drained).await.is_err() {
        tracing::warn!(
            listener = name,
            "HTTP connections still open {} s after shutdown began; closing them",
            SHUTDOWN_GRACE.as_secs()
        );
    }
}

/// A failed accept: with no file descriptor left (EMFILE, ENFILE) the same accept would
/// fail again at once, so wait a moment instead of spinning; anything else is one
/// connection's trouble (reset before it was accepted).
async fn accept_failed(name: &str, e: &std::io::Error) {
    let out_of_files = matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
    if out_of_files {
        tracing::warn!(listener = name, error = %e, "cannot accept an HTTP connection: no file descriptor left (raise LimitNOFILE, or lower max_connections)");
        tokio::time::sleep(Duration::from_millis(100)).await;
    } else {
        tracing::debug!(listener = name, error = %e, "accepting an HTTP connection failed");
    }
}

/// Serves one connection, holding its slot until it ends.
async fn connection(
    stream: TcpStream,
    app: Router,
    limits: Limits,
    _slot: OwnedSemaphorePermit,
    counters: Counters,
    mut shutdown: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    counters.open(1);
    let activity = Activity::new();
    let busy = activity.clone();
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let app = app.clone();
        let request = busy.begin();
        async move {
            let answer = app.oneshot(req.map(axum::body::Body::new)).await;
            drop(request);
            answer
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(MAX_BUF_BYTES);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let idle = activity.idle_for(limits.idle_timeout);
    tokio::pin!(idle);
    enum End {
        Done(Result<(), hyper::Error>),
        Idle,
        Shutdown,
    }
    let end = tokio::select! {
        r = conn.as_mut() => End::Done(r),
        () = &mut idle => End::Idle,
        _ = shutdown.wait_for(|s| *s) => End::Shutdown,
    };
    let result = match end {
        End::Done(r) => r,
        End::Idle | End::Shutdown => {
            if matches!(end, End::Idle) {
                counters.timeout("idle");
            }
            // Finishes a request in progress, then closes; an idle connection closes now.
            conn.as_mut().graceful_shutdown();
            match tokio::time::timeout(SHUTDOWN_GRACE, conn.as_mut()).await {
                Ok(r) => r,
                Err(_) => Ok(()),
            }
        }
    };
    if let Err(e) = result {
        if e.is_timeout() {
            counters.timeout("header");
        }
        tracing::debug!(listener = counters.name, error = %e, "HTTP connection ended with an error");
    }
    counters.open(-1);
}

/// Whether a connection has a request in progress, and how many it has finished.
#[derive(Clone)]
struct Activity(Arc<watch::Sender<(usize, u64)>>);

/// One request in progress; finished when dropped.
struct Busy(Activity);

impl Drop for Busy {
    fn drop(&mut self) {
        (self.0).0.send_modify(|(running, done)| {
            *running = running.saturating_sub(1);
            *done += 1;
        });
    }
}

impl Activity {
    fn new() -> Activity {
        Activity(Arc::new(watch::channel((0, 0)).0))
    }

    fn begin(&self) -> Busy {
        self.0.send_modify(|(running, _)| *running += 1);
        Busy(self.clone())
    }

    /// Resolves once the connection has answered at least one request and then had none
    /// in progress for `limit`. Before its first request a connection is hyper's header
    /// timer's to end.
    async fn idle_for(&self, limit: Duration) {
        let mut rx = self.0.subscribe();
        loop {
            let (running, done) = *rx.borrow_and_update();
            if running == 0 && done > 0 {
                tokio::select! {
                    () = tokio::time::sleep(limit) => return,
                    _ = rx.changed() => {}
                }
            } else if rx.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }
}

/// What `run` does for the listeners before binding them: raise the open-file limit to
/// what they may need, and register their metrics (`None` if already registered).
pub fn start_up(config: &crate::config::Config, registry: &Registry) -> Option<ListenerMetrics> {
    let http = if config.http.enabled {
        config.http.max_connections
    } else {
        0
    };
    let api = config.api.as_ref().map_or(0, |a| a.max_connections);
    raise_open_files_limit(http as u64 + api as u64 + 256);
    ListenerMetrics::register(registry).ok()
}

/// Raises the soft open-file limit to the hard one (the usual `LimitNOFILE` of 1024 soft
/// is far below what the listeners allow), and warns when `needed` descriptors — the
/// listeners' connections and a margin for NATS, destinations and files — do not fit even
/// so: past the limit an accept fails instead of waiting in the queue.
pub fn raise_open_files_limit(needed: u64) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let soft = match (limit.current, limit.maximum) {
        (Some(cur), Some(max)) if cur < max => {
            match setrlimit(
                Resource::Nofile,
                Rlimit {
                    current: Some(max),
                    maximum: Some(max),
                },
            ) {
                Ok(()) => Some(max),
                Err(e) => {
                    tracing::warn!(error = %e, soft = cur, hard = max, "cannot raise the open-file limit");
                    Some(cur)
                }
            }
        }
        (cur, _) => cur,
    };
    if let Some(soft) = soft.filter(|s| *s < needed) {
        tracing::warn!(
            open_files = soft,
            needed,
            "the open-file limit is below what http.max_connections and api.max_connections allow (plus 256 for NATS and destinations): raise LimitNOFILE or lower max_connections, or a flood of connections leaves none for the rest"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_connection_is_idle_only_after_a_request_and_none_in_progress() {
        let a = Activity::new();
        let idle = a.idle_for(Duration::from_secs(5));
        tokio::pin!(idle);
        // Before any request: never idle by this timer.
        assert!(tokio::time::timeout(Duration::from_secs(60), &mut idle)
            .await
            .is_err());
        let req = a.begin();
        assert!(
            tokio::time::timeout(Duration::from_secs(60), &mut idle)
                .await
                .is_err(),
            "a request in progress is not idle"
        );
        drop(req);
        assert!(
            tokio::time::timeout(Duration::from_secs(6), &mut idle)
                .await
                .is_ok(),
            "idle once the request ended"
        );
    }
}
