//! The fault matrix's two database servers as it uses them: a database of its own per test
//! on each (dropped at the end), the stream sequence of every row of the sink's `events`
//! table, the table renamed away and back for an outage, and locked against writes so
//! batches wait in flight.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder};

use crate::common::conformance::{on_own_runtime, unique_name};
use crate::common::pg::PgDatabase;

async fn mysql(database: Option<&str>) -> Conn {
    let opts = OptsBuilder::default()
        .ip_or_hostname("127.0.0.1")
        .tcp_port(3306)
        .user(Some("root"))
        .db_name(database);
    tokio::time::timeout(Duration::from_secs(10), Conn::new(opts))
        .await
        .expect("MariaDB on 127.0.0.1:3306 answers within 10 s")
        .expect("connect to MariaDB on 127.0.0.1:3306 as root")
}

/// A MySQL/MariaDB database of one test, dropped at the end.
pub struct MyDatabase {
    pub name: String,
}

impl MyDatabase {
    pub async fn create(tag: &str) -> MyDatabase {
        let name = unique_name(tag);
        mysql(None)
            .await
            .query_drop(format!("CREATE DATABASE {name}"))
            .await
            .expect("create the test database");
        MyDatabase { name }
    }

    pub async fn exec(&self, sql: &str) {
        let mut c = mysql(Some(&self.name)).await;
        c.query_drop(sql).await.expect(sql);
        let _ = c.disconnect().await;
    }

    /// The stream sequence of every row of `events` (none while it is missing).
    pub async fn sequences(&self) -> Vec<u64> {
        let mut c = mysql(Some(&self.name)).await;
        let rows = c
            .query::<u64, _>("SELECT stream_sequence FROM events")
            .await
            .unwrap_or_default();
        let _ = c.disconnect().await;
        rows
    }
}

impl MyDatabase {
    /// Keeps every other session from writing `events` until the connection is unlocked.
    pub async fn lock(&self) -> Conn {
        let mut c = mysql(Some(&self.name)).await;
        c.query_drop("LOCK TABLES events READ")
            .await
            .expect("lock events");
        c
    }

    /// Sessions of this database waiting for a table lock: writes held by [`Self::lock`].
    pub async fn lock_waiters(&self) -> i64 {
        let mut c = mysql(Some(&self.name)).await;
        let n = c
            .query_first::<i64, _>(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                 WHERE DB = DATABASE() AND STATE LIKE 'Waiting for table%'",
            )
            .await
            .ok()
            .flatten()
            .unwrap_or(0);
        let _ = c.disconnect().await;
        n
    }
}

impl Drop for MyDatabase {
    fn drop(&mut self) {
        let name = self.name.clone();
        on_own_runtime(async move {
            let mut c = mysql(None).await;
            let _ = c
                .query_drop(format!("DROP DATABASE IF EXISTS {name}"))
                .await;
            let _ = c.disconnect().await;
        });
    }
}

/// The stream sequence of every row of `events` in `db` (none while it is missing).
pub async fn pg_sequences(db: &PgDatabase) -> Vec<u64> {
    db.client()
        .await
        .query("SELECT stream_sequence FROM events", &[])
        .await
        .map(|rows| rows.iter().map(|r| r.get::<_, i64>(0) as u64).collect())
        .unwrap_or_default()
}

/// A session holding `events` against writes (SHARE conflicts with the ROW EXCLUSIVE lock
/// INSERT and COPY take) until its transaction ends.
pub async fn pg_lock(db: &PgDatabase) -> tokio_postgres::Client {
    let c = db.client().await;
    c.batch_execute("BEGIN; LOCK TABLE events IN SHARE MODE")
        .await
        .expect("lock events");
    c
}

/// Sessions of `db` waiting for a lock: writes held by [`pg_lock`].
pub async fn pg_lock_waiters(db: &PgDatabase) -> i64 {
    db.client()
        .await
        .query_one(
            "SELECT COUNT(*) FROM pg_stat_activity \
             WHERE wait_event_type = 'Lock' AND datname = current_database()",
            &[],
        )
        .await
        .map(|r| r.get::<_, i64>(0))
        .unwrap_or(0)
}

pub async fn pg_exec(db: &PgDatabase, sql: &str) {
    db.client().await.batch_execute(sql).await.expect(sql);
}
