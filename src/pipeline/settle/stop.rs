//! The shutdown signal of one runner, and the deadline it sets for the messages in hand.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// How long past its shutdown deadline a sink may still send the ACKs of committed
/// batches and hand back what it pulled ahead; well inside the 5 s the process adds to the
/// largest `shutdown_timeout_ms` before it gives up on its sinks.
pub(crate) const FINISH_GRACE: Duration = Duration::from_secs(2);

/// The shutdown signal of one runner, and the deadline it sets for the batch in hand.
pub(crate) struct Stop {
    rx: watch::Receiver<bool>,
    deadline: Option<Instant>,
    /// `delivery.shutdown_timeout_ms`.
    timeout: Duration,
}

impl Stop {
    /// Watches `rx`; a batch still held `timeout` after the signal is abandoned.
    pub(crate) fn new(rx: watch::Receiver<bool>, timeout: Duration) -> Stop {
        Stop {
            rx,
            deadline: None,
            timeout,
        }
    }

    /// Whether shutdown was signalled; the first time it is seen, the deadline starts.
    pub(crate) fn stopping(&mut self) -> bool {
        if self.deadline.is_none() && *self.rx.borrow() {
            self.deadline = Some(Instant::now() + self.timeout);
        }
        self.deadline.is_some()
    }

    /// Whether shutdown was signalled, without starting the deadline.
    pub(super) fn signalled(&self) -> bool {
        self.deadline.is_some() || *self.rx.borrow()
    }

    /// Whether the deadline for the batch in hand has passed.
    pub(super) fn expired(&mut self) -> bool {
        self.stopping() && self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// When the wind-down after the loop must end: `wait` from now, but never later than
    /// [`FINISH_GRACE`] past the shutdown deadline, so the last ACKs and the NAK of the
    /// batch pulled ahead fit inside the process's own deadline (the largest
    /// `shutdown_timeout_ms` plus 5 s) instead of outliving it.
    pub(crate) fn finish_by(&mut self, wait: Duration) -> Instant {
        let by = Instant::now() + wait;
        match self.deadline {
            Some(d) => by.min(d + FINISH_GRACE),
            None => by,
        }
    }

    /// The signal, for waits that end early at shutdown.
    pub(crate) fn receiver(&mut self) -> &mut watch::Receiver<bool> {
        &mut self.rx
    }

    /// Sleeps until `until`, the deadline, or the signal, whichever comes first.
    pub(super) fn nap_until(&self, until: Instant) -> impl Future<Output = ()> {
        let until = self.deadline.map_or(until, |d| until.min(d));
        let mut rx = self.rx.clone();
        let watch_signal = self.deadline.is_none();
        async move {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => {}
                _ = rx.wait_for(|s| *s), if watch_signal => {}
            }
        }
    }

    /// Resolves when the shutdown deadline has passed (the signal, then the timeout);
    /// never without a signal. A write still running then is cut short.
    pub(super) fn deadline_passed(&self) -> impl Future<Output = ()> {
        let known = self.deadline;
        let timeout = self.timeout;
        let mut rx = self.rx.clone();
        async move {
            let deadline = match known {
                Some(d) => d,
                None => {
                    if rx.wait_for(|s| *s).await.is_err() {
                        return std::future::pending().await;
                    }
                    Instant::now() + timeout
                }
            };
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// Runs `work` to its end, firing `cut` once when `deadline` passes meanwhile, so a
/// destination that can stop work in progress does ([`crate::sinks::CutShort`]).
pub(super) async fn cut_at<F: Future>(
    cut: &watch::Sender<bool>,
    deadline: impl Future<Output = ()>,
    work: F,
) -> F::Output {
    tokio::pin!(work, deadline);
    let mut fired = false;
    loop {
        tokio::select! {
            out = &mut work => return out,
            () = &mut deadline, if !fired => {
                fired = true;
                cut.send_replace(true);
            }
        }
    }
}
