//! The machine's PostgreSQL (127.0.0.1:5432, user postgres, trust) for tests that need a
//! database of their own: one way to connect, and a database dropped when the test ends.

use std::time::Duration;

use tokio_postgres::{Client, NoTls};

use super::conformance::{on_own_runtime, unique_name};

/// What a test says when the server is not there.
pub const PG_START: &str =
    "PostgreSQL is not reachable on 127.0.0.1:5432 as user postgres; start it with \
     `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`";

/// A client of `database` as user postgres.
pub async fn pg_connect(database: &str) -> Client {
    let (client, conn) = tokio_postgres::Config::new()
        .host("127.0.0.1")
        .port(5432)
        .user("postgres")
        .dbname(database)
        .connect_timeout(Duration::from_secs(5))
        .connect(NoTls)
        .await
        .unwrap_or_else(|e| panic!("{PG_START} ({e})"));
    tokio::spawn(conn);
    client
}

/// A database of its own for one test, dropped with its connections at the end.
pub struct PgDatabase {
    /// Its name, unique to the test run.
    pub name: String,
}

impl PgDatabase {
    /// Creates a database named after `tag`.
    pub async fn create(tag: &str) -> PgDatabase {
        let name = unique_name(tag);
        pg_connect("postgres")
            .await
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create test database");
        PgDatabase { name }
    }

    /// A client of this database.
    pub async fn client(&self) -> Client {
        pg_connect(&self.name).await
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let name = self.name.clone();
        on_own_runtime(async move {
            let _ = pg_connect("postgres")
                .await
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .await;
        });
    }
}
