//! Tells systemd (`Type=notify`) when jetsink is ready, when it starts to stop, and — with
//! `WatchdogSec=` — that its sinks are alive.
//!
//! The watchdog is the point: a ping sent by a timer proves only that the timer runs. So
//! each ping is decided from the sinks' own heartbeats ([`Health::liveness`], the same
//! test `/healthz` answers): while any sink's loop has not turned for
//! [`crate::health::STALL_AFTER`], no ping is sent, and systemd restarts the service once
//! `WatchdogSec` passes without one. The decision ([`Watchdog::tick`]) is pure, with the
//! clock passed in; the socket protocol is the `sd-notify` crate's. Without
//! `NOTIFY_SOCKET` (not started by systemd) nothing is sent and no task runs.

use std::time::{Duration, Instant};

use sd_notify::NotifyState;
use tokio::sync::watch;

use crate::health::Health;

/// What systemd asked for, read once from the environment at start-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Systemd {
    /// Whether `NOTIFY_SOCKET` names a socket to notify.
    pub notify: bool,
    /// `WATCHDOG_USEC` when it is meant for this process (`WATCHDOG_PID` unset or ours).
    pub watchdog: Option<Duration>,
}

impl Systemd {
    /// Reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID`.
    pub fn from_env() -> Systemd {
        let notify = std::env::var_os("NOTIFY_SOCKET").is_some_and(|s| !s.is_empty());
        Systemd {
            notify,
            watchdog: if notify {
                sd_notify::watchdog_enabled().filter(|d| !d.is_zero())
            } else {
                None
            },
        }
    }

    /// How often the watchdog is considered: half the timeout, as systemd recommends, so
    /// one late ping does not cost a restart.
    pub fn ping_every(&self) -> Option<Duration> {
        self.watchdog.map(|d| (d / 2).max(Duration::from_millis(1)))
    }
}

/// One watchdog decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ping {
    /// Every sink beat recently: send `WATCHDOG=1`.
    Alive,
    /// The sinks beat again after a stall: send `WATCHDOG=1` and clear the status.
    Recovered,
    /// A sink stalled: send no ping, set the status to the problems (shown by
    /// `systemctl status`), and log them once.
    Stalled(Vec<String>),
    /// Still stalled, already reported: send nothing.
    StillStalled,
}

/// The watchdog's memory between ticks: whether the last one found a stall, so a stall
/// is logged once and not at every tick.
#[derive(Debug, Default)]
pub struct Watchdog {
    stalled: bool,
}

impl Watchdog {
    /// Decides one tick from the sinks' heartbeats as of `now`.
    pub fn tick(&mut self, health: &Health, now: Instant) -> Ping {
        let report = health.liveness(now);
        match (report.ok, self.stalled) {
            (true, false) => Ping::Alive,
            (true, true) => {
                self.stalled = false;
                Ping::Recovered
            }
            (false, false) => {
                self.stalled = true;
                Ping::Stalled(report.problems)
            }
            (false, true) => Ping::StillStalled,
        }
    }
}

/// Sends one notification; a failure is logged, never fatal (systemd then decides:
/// a missing READY times out the start, a missing ping restarts the service).
fn send(state: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(state) {
        tracing::warn!(error = %e, "cannot notify systemd (NOTIFY_SOCKET)");
    }
}

/// Notifies readiness at once, then keeps the watchdog fed from the sinks' heartbeats
/// until `shutdown` turns true, and notifies `STOPPING=1` then. Call it once every sink's
/// runner has started; it returns at once when systemd asked for nothing.
pub async fn serve(systemd: Systemd, health: Health, mut shutdown: watch::Receiver<bool>) {
    if !systemd.notify {
        return;
    }
    send(&[NotifyState::Ready, NotifyState::Status("running")]);
    tracing::info!(watchdog = ?systemd.watchdog, "notified systemd: ready");
    let stopped = async {
        let _ = shutdown.wait_for(|s| *s).await;
    };
    tokio::pin!(stopped);
    match systemd.ping_every() {
        Some(every) => {
            let mut watchdog = Watchdog::default();
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = &mut stopped => break,
                    _ = ticks.tick() => feed(&mut watchdog, &health),
                }
            }
        }
        None => stopped.await,
    }
    send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
}

/// Acts on one watchdog decision.
fn feed(watchdog: &mut Watchdog, health: &Health) {
    match watchdog.tick(health, Instant::now()) {
        Ping::Alive => send(&[NotifyState::Watchdog]),
        Ping::Recovered => {
            tracing::info!("every sink is alive again; systemd watchdog pings resume");
            send(&[NotifyState::Watchdog, NotifyState::Status("running")]);
        }
        Ping::Stalled(problems) => {
            let status = problems.join("; ");
            tracing::error!(problems = %status, "a sink loop is stuck; systemd watchdog pings stop, so systemd restarts jetsink after WatchdogSec");
            send(&[NotifyState::Status(&status)]);
        }
        Ping::StillStalled => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::STALL_AFTER;

    #[test]
    fn the_watchdog_is_fed_only_while_every_sink_beats() {
        let health = Health::default();
        let orders = health.sink("orders");
        let audit = health.sink("audit");
        let t0 = Instant::now();
        orders.beat();
        audit.beat();
        let mut w = Watchdog::default();
        assert_eq!(w.tick(&health, t0), Ping::Alive);
        // Time passes, nothing beats: a timer alone would go on pinging.
        let later = t0 + STALL_AFTER + Duration::from_secs(5);
        match w.tick(&health, later) {
            Ping::Stalled(problems) => {
                assert_eq!(problems.len(), 2, "{problems:?}");
                assert!(problems[0].contains("sink audit"), "{problems:?}");
            }
            other => panic!("expected a stall, got {other:?}"),
        }
        assert_eq!(w.tick(&health, later), Ping::StillStalled);
        // Both loops turn again: the pings resume.
        orders.beat();
        audit.beat();
        assert_eq!(w.tick(&health, Instant::now()), Ping::Recovered);
        assert_eq!(w.tick(&health, Instant::now()), Ping::Alive);
    }

    #[test]
    fn pings_go_out_at_half_the_watchdog_timeout() {
        let s = Systemd {
            notify: true,
            watchdog: Some(Duration::from_secs(60)),
        };
        assert_eq!(s.ping_every(), Some(Duration::from_secs(30)));
        let none = Systemd {
            notify: true,
            watchdog: None,
        };
        assert_eq!(none.ping_every(), None);
    }
}
