//! The two faults of the matrix that act on the destinations rather than on the
//! processes: each destination taken away and given back, and a replay overlapping what
//! the sinks wrote.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::databases::pg_exec;
use super::flow::{states, Publisher, POLL};
use super::sinks::Dest;
use super::world::World;
use crate::common::Daemon;

impl World {
    /// Takes every destination away until each sink has held its batch past an AckWait
    /// (three rounds of `+WPI` after its first failure; the exec script: a job told to come
    /// back later that came back), then gives them back: directories renamed away and back,
    /// tables renamed away and back, moto's proxy refusing connections, the republish
    /// target's server killed and restarted on its store, the HTTP receiver answering 503,
    /// the exec script exiting 75. Messages keep coming meanwhile, so a sink that had
    /// written all it had when its destination went away gets more to fail on.
    pub(super) async fn outage(&mut self, daemon: &mut Daemon, publisher: &Publisher) {
        let errors = "jetsink_sink_errors_total";
        let kept_alive = "jetsink_progress_acks_total";
        let (errors_before, rounds_before) = (
            self.sink_metric(errors).await,
            self.sink_metric(kept_alive).await,
        );
        self.take_away(true).await;
        let deadline = Instant::now() + self.patience();
        loop {
            publisher.allow(publisher.published() + 20);
            let (failed, rounds) = (
                self.sink_metric(errors).await,
                self.sink_metric(kept_alive).await,
            );
            let waiting: Vec<&str> = self
                .dests
                .iter()
                .filter(|d| match d {
                    Dest::Exec => !self.exec_retried(),
                    d => failed[d] <= errors_before[d] || rounds[d] < rounds_before[d] + 3.0,
                })
                .map(|d| d.sink())
                .collect();
            if waiting.is_empty() {
                break;
            }
            let log = daemon.log_text();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            if let Some(status) = daemon.exited() {
                panic!("jetsink exited ({status}) during the outage; its last lines: {tail:#?}");
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {waiting:?} to fail past an AckWait; jetsink's last \
                 lines: {tail:#?}"
            );
            tokio::time::sleep(POLL).await;
        }
        self.take_away(false).await;
    }

    /// Whether the exec script was told to come back later for a job that came back.
    fn exec_retried(&self) -> bool {
        let tried = std::fs::read_to_string(self.path("exec/tempfail")).unwrap_or_default();
        let mut keys: Vec<&str> = tried.lines().collect();
        let all = keys.len();
        keys.sort();
        keys.dedup();
        keys.len() < all
    }

    async fn take_away(&mut self, away: bool) {
        for d in self.dests.clone() {
            match d {
                Dest::Sqlite => self.rename("data/sqlite", away),
                Dest::Jsonl => self.rename("data/jsonl", away),
                Dest::ParquetFile => self.rename("data/parquet", away),
                // Both S3 sinks write through one proxy: below.
                Dest::S3Jsonl | Dest::S3Parquet => {}
                Dest::Postgres => {
                    let (from, to) = renamed(away);
                    let sql = format!("ALTER TABLE {from} RENAME TO {to}");
                    pg_exec(self.pg.as_ref().unwrap(), &sql).await;
                }
                Dest::Mysql => {
                    let (from, to) = renamed(away);
                    let sql = format!("RENAME TABLE {from} TO {to}");
                    self.my.as_ref().unwrap().exec(&sql).await;
                }
                Dest::Nats => match away {
                    true => self.target.as_mut().unwrap().kill(),
                    false => self.target.as_mut().unwrap().restart(),
                },
                Dest::Http => {
                    let r = self.receiver.as_ref().unwrap();
                    r.unavailable.store(away, Ordering::SeqCst);
                }
                Dest::Exec => match away {
                    true => std::fs::write(self.path("exec/outage"), "").unwrap(),
                    false => std::fs::remove_file(self.path("exec/outage")).unwrap(),
                },
            }
        }
        match (&self.s3_proxy, away) {
            (Some(proxy), true) => proxy.down(),
            (Some(proxy), false) => proxy.up(),
            (None, _) => {}
        }
    }

    fn rename(&self, rel: &str, away: bool) {
        let (here, there) = (self.path(rel), self.path(&format!("{rel}-away")));
        let (from, to) = if away { (here, there) } else { (there, here) };
        std::fs::rename(&from, &to)
            .unwrap_or_else(|e| panic!("rename {} to {}: {e}", from.display(), to.display()));
    }

    /// After a SIGTERM: lets the publisher go past every sink's ACK floor, then replays each
    /// sink over `floor / 2 + 1 ..= ` the stream's last message, all at once.
    pub(super) async fn replay_overlapping(&self, publisher: &Publisher, notes: &mut Vec<String>) {
        let floors = states(&self.js, &self.dests)
            .await
            .expect("consumer states");
        let top = floors.values().map(|s| s.ack_floor).max().unwrap_or(0);
        let to = (top + 150).min(self.n);
        publisher.allow(to);
        crate::common::eventually(self.patience(), "published past every floor", || async {
            publisher.published() >= to
        })
        .await;
        let replays = self.dests.iter().map(|d| {
            let from = floors[d].ack_floor / 2 + 1;
            async move { (*d, from, self.replay(*d, from, to).await) }
        });
        for (d, from, (code, out)) in futures::future::join_all(replays).await {
            println!(
                "replay of {} over {from}..={to}: exit {code}: {}",
                d.sink(),
                out.trim()
            );
            if code != 0 {
                notes.push(format!("replay of {} exited {code}: {out}", d.sink()));
            }
        }
    }
}

fn renamed(away: bool) -> (&'static str, &'static str) {
    match away {
        true => ("events", "events_away"),
        false => ("events_away", "events"),
    }
}
