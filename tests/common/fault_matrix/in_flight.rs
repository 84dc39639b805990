//! The SIGTERM of the `batches_in_flight: 2` column, which must land while both batches of
//! each database sink are in flight: the tables are locked against writes until both of a
//! sink's writers wait on the lock, jetsink gets its SIGTERM, and only then are the locks
//! released, so the stop has two batches to finish or hand back.

use std::process::Command;

use mysql_async::prelude::Queryable;

use super::databases::{pg_lock, pg_lock_waiters};
use super::flow::Publisher;
use super::sinks::Dest;
use super::world::World;
use crate::common::Daemon;

impl World {
    /// SIGTERM with two batches of every database sink waiting on a locked table; the
    /// destinations seen with two writes waiting at once.
    pub(super) async fn term_with_two_batches_waiting(
        &self,
        daemon: &mut Daemon,
        publisher: &Publisher,
    ) -> Vec<Dest> {
        let pg = match (self.dests.contains(&Dest::Postgres), &self.pg) {
            (true, Some(db)) => Some(pg_lock(db).await),
            _ => None,
        };
        let my = match (self.dests.contains(&Dest::Mysql), &self.my) {
            (true, Some(db)) => Some(db.lock().await),
            _ => None,
        };
        // Enough behind the locks for two batches each.
        publisher.allow(publisher.published() + 300);
        daemon
            .eventually(
                self.patience(),
                "two writes of each sink waiting",
                || async {
                    let pg_waiting = match (&pg, &self.pg) {
                        (Some(_), Some(db)) => pg_lock_waiters(db).await >= 2,
                        _ => true,
                    };
                    let my_waiting = match (&my, &self.my) {
                        (Some(_), Some(db)) => db.lock_waiters().await >= 2,
                        _ => true,
                    };
                    pg_waiting && my_waiting
                },
            )
            .await;
        let both: Vec<Dest> = [(Dest::Postgres, pg.is_some()), (Dest::Mysql, my.is_some())]
            .into_iter()
            .filter_map(|(d, locked)| locked.then_some(d))
            .collect();
        let _ = Command::new("kill")
            .args(["-TERM", &daemon.pid().to_string()])
            .status();
        if let Some(c) = pg {
            c.batch_execute("ROLLBACK").await.expect("unlock events");
        }
        if let Some(mut c) = my {
            c.query_drop("UNLOCK TABLES").await.expect("unlock events");
            let _ = c.disconnect().await;
        }
        both
    }
}
