//! A destination that is not there yet: the sink waits for it, trying again with a bounded
//! back-off, while the other sinks run. Its `/readyz` entry says it waits and why (not
//! ready meanwhile), and its heartbeat is fed on every try, so the systemd watchdog does
//! not take a wait for a stuck loop.

use std::time::Duration;

use super::assemble::{self, Opened, Prepared, SinkCtx};
use super::error::DaemonError;
use super::plan::Backoff;
use crate::sinks::SinkError;

/// The first wait after a failed open.
const FIRST_WAIT: Duration = Duration::from_secs(1);
/// The longest wait between two tries.
const LONGEST_WAIT: Duration = Duration::from_secs(30);

/// Whether waiting may cure `e`: a destination that could not be opened for a reason other
/// than its configuration (connection refused, DNS, a timeout, a database starting up or
/// out of connections). A refused login, a table that does not fit the mapping or a bad
/// path is `Misconfigured` and fails start-up with exit 78 instead.
pub fn may_pass(e: &DaemonError) -> bool {
    matches!(e, DaemonError::Open { source, .. } if !matches!(source, SinkError::Misconfigured { .. }))
}

/// Tries to open the destination until it opens (`Some`) or the sink is told to stop
/// (`None`). `first` is the failure that made the sink wait. A failure that no wait cures
/// (a misconfigured table, found once the server is up) is logged as an error and tried
/// again at the longest wait, since the process is already running and an operator may
/// fix it.
pub async fn wait_open(ctx: &SinkCtx, prepared: &Prepared, first: DaemonError) -> Option<Opened> {
    let mut backoff = Backoff::new(FIRST_WAIT, LONGEST_WAIT);
    let mut shutdown = ctx.shutdown.clone();
    let mut why = first;
    loop {
        let wait = match may_pass(&why) {
            true => backoff.next_wait(),
            false => LONGEST_WAIT,
        };
        let reason = match &why {
            DaemonError::Open { source, .. } => source.to_string(),
            other => other.to_string(),
        };
        prepared.health().beat();
        prepared.health().set_waiting(Some(reason));
        if may_pass(&why) {
            tracing::warn!(sink = %ctx.spec.name, error = %why, retry_in_ms = wait.as_millis() as u64, "destination not available; the sink waits for it and tries again (the other sinks run)");
        } else {
            tracing::error!(sink = %ctx.spec.name, error = %why, setting = why.setting().as_deref(), retry_in_ms = wait.as_millis() as u64, "destination refused the sink's settings; fix it (the sink tries again) or change the config and reload");
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = shutdown.wait_for(|s| *s) => return None,
        }
        match assemble::open(&ctx.spec, prepared).await {
            Ok(opened) => {
                prepared.health().set_waiting(None);
                tracing::info!(sink = %ctx.spec.name, "destination available; the sink starts");
                return Some(opened);
            }
            Err(e) => why = e,
        }
    }
}

/// The sink's task: wait for its destination if it was not open, then run.
pub async fn sink_task(ctx: SinkCtx, prepared: Prepared, first: Result<Opened, DaemonError>) {
    let opened = match first {
        Ok(o) => o,
        Err(e) => match wait_open(&ctx, &prepared, e).await {
            Some(o) => o,
            None => {
                tracing::info!(sink = %ctx.spec.name, "stopped while waiting for its destination");
                return;
            }
        },
    };
    assemble::run(ctx, prepared, opened).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open_error(source: SinkError) -> DaemonError {
        DaemonError::Open {
            sink: "pg".into(),
            destination: "postgres".into(),
            setting: "sinks.pg.destination".into(),
            source,
        }
    }

    #[test]
    fn an_outage_may_pass_and_a_misconfiguration_may_not() {
        assert!(may_pass(&open_error(SinkError::transient(
            "connection refused"
        ))));
        assert!(may_pass(&open_error(SinkError::Unclassified {
            message: "x".into()
        })));
        assert!(!may_pass(&open_error(SinkError::Misconfigured {
            message: "password authentication failed".into()
        })));
        assert!(!may_pass(&DaemonError::ShutdownTimeout));
    }
}
