//! The daemon's signals: the first SIGTERM or SIGINT asks every sink to settle and stop;
//! SIGHUP asks for a configuration reload where the caller takes reloads (`jetsink run`),
//! and is logged and ignored elsewhere (`jetsink quickstart`), since its default action
//! would kill the process with the batches in hand.

use std::sync::Arc;

use tokio::sync::{mpsc, watch};

/// Turns the first SIGTERM or SIGINT into `stop`, and each SIGHUP into a reload request
/// on `reloads` (logged and ignored without), in a background task.
pub fn stop_on(stop: Arc<watch::Sender<bool>>, reloads: Option<mpsc::Sender<()>>) {
    tokio::spawn(wait_for_signal(stop, reloads));
}

/// Answers each SIGHUP. Without a handler, SIGHUP's default action kills the process at
/// once, dropping the batches in hand; a habitual `kill -HUP` or `systemctl reload` must
/// never do that. A request sent while one waits is merged into it: the reload that
/// follows reads the file as it is then.
async fn hangups(reloads: Option<mpsc::Sender<()>>) {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(mut s) => {
            while s.recv().await.is_some() {
                match &reloads {
                    Some(tx) => {
                        tracing::info!("SIGHUP received; reloading the config");
                        let _ = tx.try_send(());
                    }
                    None => tracing::warn!("SIGHUP received: this command does not reload its config and keeps running with the one it started with"),
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot listen for SIGHUP"),
    }
    std::future::pending::<()>().await
}

/// Turns the first SIGTERM or SIGINT into the shutdown signal; SIGHUP is answered
/// meanwhile.
async fn wait_for_signal(tx: Arc<watch::Sender<bool>>, reloads: Option<mpsc::Sender<()>>) {
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
        () = hangups(reloads) => {}
    }
    tx.send_replace(true);
}

/// How often `run --watch-config` reads the config file.
pub const WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Sends a reload request whenever the content of `path` differs from what it was at the
/// last read, reading it every [`WATCH_EVERY`]. Reading the content (through any symlink)
/// instead of watching the file's events sees a Kubernetes ConfigMap update, which swaps
/// the `..data` symlink of the mounted directory and never writes the file itself. A file
/// that cannot be read is logged once and read again; the reload that follows its return
/// reports whatever is wrong with it.
pub fn watch_file(path: std::path::PathBuf, reloads: mpsc::Sender<()>) {
    tokio::spawn(async move {
        let mut seen = tokio::fs::read(&path).await.ok();
        let mut unreadable = false;
        let mut ticks = tokio::time::interval(WATCH_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match tokio::fs::read(&path).await {
                Ok(now) => {
                    unreadable = false;
                    if seen.as_deref() != Some(now.as_slice()) {
                        tracing::info!(config = %path.display(), "the config file changed; reloading it");
                        seen = Some(now);
                        if reloads.try_send(()).is_err() && reloads.is_closed() {
                            return;
                        }
                    }
                }
                Err(e) if !unreadable => {
                    unreadable = true;
                    tracing::warn!(config = %path.display(), error = %e, "cannot read the watched config file; keeping the running config");
                }
                Err(_) => {}
            }
        }
    });
}
