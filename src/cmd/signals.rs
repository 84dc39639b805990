//! The daemon's signals: the first SIGTERM or SIGINT asks every sink to settle and stop;
//! SIGHUP is logged and ignored, since its default action would kill the process with
//! the batches in hand. Shared by `jetsink run` and `jetsink quickstart`.

use std::sync::Arc;

use tokio::sync::watch;

/// Turns the first SIGTERM or SIGINT into `stop`, in a background task.
pub fn stop_on(stop: Arc<watch::Sender<bool>>) {
    tokio::spawn(wait_for_signal(stop));
}

/// Logs each SIGHUP and otherwise ignores it. Without a handler, SIGHUP's default action
/// kills the process at once, dropping the batches in hand; a habitual `kill -HUP` or
/// `systemctl reload` must never do that. There is no configuration reload (yet), so the
/// daemon keeps running with the config it started with.
async fn log_hangups() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(mut s) => {
            while s.recv().await.is_some() {
                tracing::warn!("SIGHUP received: jetsink has no configuration reload and keeps running with the config it started with; restart it to apply a changed config");
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot listen for SIGHUP"),
    }
    std::future::pending::<()>().await
}

/// Turns the first SIGTERM or SIGINT into the shutdown signal; SIGHUP is logged and
/// ignored meanwhile.
async fn wait_for_signal(tx: Arc<watch::Sender<bool>>) {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await
            }
        }
    };
    tokio::select! {
        _ = term => tracing::info!("SIGTERM received; stopping"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received; stopping"),
        () = log_hangups() => {}
    }
    tx.send_replace(true);
}
