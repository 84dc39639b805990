//! How a sink task is watched: its end (and whether it panicked, with the sink's name) is
//! reported to the fleet, which stops every sink on a panic so the process exits non-zero
//! for the service manager to restart it, instead of running on with one sink dead; and a
//! `done` signal lets a reload wait for one sink to have settled before it starts its
//! successor.

use tokio::sync::{mpsc, watch};

/// A sink task's end.
pub struct Ended {
    /// The sink.
    pub name: String,
    /// The panic's message, if the task panicked.
    pub panic: Option<String>,
}

/// Spawns `task` for sink `name`; its end is sent on `ended`, and the answer turns true
/// after that.
pub fn spawn<F>(name: String, task: F, ended: mpsc::UnboundedSender<Ended>) -> watch::Receiver<bool>
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let (done_tx, done) = watch::channel(false);
    let task = tokio::spawn(task);
    tokio::spawn(async move {
        let panic = task.await.err().map(|e| e.to_string());
        if let Some(message) = &panic {
            tracing::error!(sink = %name, error = %message, "sink loop panicked; stopping every sink so the service manager restarts jetsink (unacked messages will be redelivered)");
        }
        let _ = ended.send(Ended { name, panic });
        done_tx.send_replace(true);
    });
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_sink_task_is_reported_with_its_name_before_it_counts_as_done() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut done = spawn("audit".into(), async { panic!("boom") }, tx);
        let _ = done.wait_for(|d| *d).await;
        let ended = rx.try_recv().expect("the end was reported before done");
        assert_eq!(ended.name, "audit");
        assert!(ended.panic.expect("a panic").contains("boom"));
    }

    #[tokio::test]
    async fn a_sink_task_that_ends_normally_is_no_panic() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut done = spawn("orders".into(), async {}, tx);
        let _ = done.wait_for(|d| *d).await;
        let ended = rx.try_recv().expect("reported");
        assert_eq!(ended.name, "orders");
        assert!(ended.panic.is_none());
    }
}
