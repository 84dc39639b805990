//! The fault matrix's two database servers as it uses them: a database of its own per test
//! on each (dropped at the end), the stream sequence of every row of the sink's `events`
//! table, and the table renamed away and back for an outage.

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

pub async fn pg_exec(db: &PgDatabase, sql: &str) {
    db.client().await.batch_execute(sql).await.expect(sql);
}
