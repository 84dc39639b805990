//! The supervise phase: every sink loop runs to its end. The first that panics is logged
//! with its sink's name and turns `stop` true, so the others settle their batches and stop,
//! and the process exits non-zero for the service manager to restart it, instead of
//! running on with one sink dead.

use std::collections::HashMap;

use tokio::sync::watch;
use tokio::task::JoinSet;

use super::error::DaemonError;

/// Runs every sink loop to its end, calling `started` once all are spawned; the first
/// panic, if any.
pub async fn supervise<F>(
    loops: impl IntoIterator<Item = (String, F)>,
    stop: &watch::Sender<bool>,
    started: impl FnOnce(),
) -> Option<DaemonError>
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let mut set = JoinSet::new();
    let mut names = HashMap::new();
    for (name, sink_loop) in loops {
        names.insert(set.spawn(sink_loop).id(), name);
    }
    started();
    let mut failure = None;
    while let Some(res) = set.join_next().await {
        if let Err(e) = res {
            let sink = names.get(&e.id()).map_or("?", String::as_str);
            tracing::error!(sink = %sink, error = %e, "sink loop panicked; stopping every sink so the service manager restarts jetsink (unacked messages will be redelivered)");
            failure.get_or_insert_with(|| DaemonError::Panicked {
                sink: sink.to_string(),
                message: e.to_string(),
            });
            stop.send_replace(true);
        }
    }
    failure
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    type SinkLoop = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

    /// A sink loop that runs until `stop` turns true, like a runner.
    async fn until_stopped(
        mut rx: watch::Receiver<bool>,
        stopped: Arc<std::sync::atomic::AtomicBool>,
    ) {
        let _ = rx.wait_for(|s| *s).await;
        stopped.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    #[tokio::test]
    async fn a_panicking_sink_stops_the_others_and_fails_the_process_naming_the_sink() {
        let (tx, rx) = watch::channel(false);
        let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let healthy = Box::pin(until_stopped(rx, stopped.clone()));
        let broken = Box::pin(async { panic!("boom") });
        let loops: Vec<(String, SinkLoop)> =
            vec![("orders".into(), healthy), ("audit".into(), broken)];
        // A failure guard only: without the stop, the healthy loop would wait forever.
        let failure = tokio::time::timeout(Duration::from_secs(60), supervise(loops, &tx, || {}))
            .await
            .expect("the healthy sink was told to stop");
        let e = failure.expect("the panic is returned");
        assert!(e.to_string().contains("sink audit"), "{e}");
        assert_eq!(e.sink(), Some("audit"));
        assert_eq!(e.exit_code(), crate::exit::FAILURE);
        assert!(*tx.borrow(), "stop was signalled");
        assert!(
            stopped.load(std::sync::atomic::Ordering::SeqCst),
            "the healthy sink settled and stopped"
        );
    }

    #[tokio::test]
    async fn sinks_that_end_normally_are_no_failure() {
        let (tx, _rx) = watch::channel(false);
        let loops = ["orders", "audit"].map(|n| (n.to_string(), async {}));
        assert!(supervise(loops, &tx, || {}).await.is_none());
        assert!(!*tx.borrow());
    }
}
