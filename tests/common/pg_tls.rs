//! A private PostgreSQL server that only takes TLS connections, for the TLS tests: the
//! shared server on 5432 must not be reconfigured, so each test starts its own cluster in
//! a temp directory on a free port, with certificates the test generates (rcgen).
//!
//! `pg_hba.conf` lets user `jetsink` in only over TLS with a client certificate whose CN
//! is `jetsink` (`cert`), lets `postgres` in over TLS or the unix socket (the test's own
//! checks), and rejects every plain TCP connection.
//!
//! PostgreSQL refuses to run as root, and CI runs as root: then `initdb` and `postgres`
//! run as the `postgres` user through `runuser`, and the directory is handed to that user.
//! The guard stops the server (through its `postmaster.pid`, since `runuser` stands
//! between) and removes the directory on `Drop`, also when the test panics.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::free_port;

/// The database user the client certificate is for (its CN) and the database it owns.
pub const USER: &str = "jetsink";

pub use super::pki::Pki;

/// A running private PostgreSQL cluster with TLS on; stopped and removed on `Drop`.
pub struct PgTlsServer {
    pub port: u16,
    pub pki: Pki,
    child: Option<Child>,
    data: PathBuf,
    /// The temp directory: data directory, socket, certificates and server log.
    dir: tempfile::TempDir,
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The newest installed server's `bin` directory (`/usr/lib/postgresql/<version>/bin`).
fn server_bin() -> PathBuf {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL server binaries in /usr/lib/postgresql (apt-get install postgresql)")
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let version = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .expect("a /usr/lib/postgresql/<version>/bin/postgres")
}

/// `program` from the server's bin directory, run as `postgres` when the test is root.
fn server_command(program: &str) -> Command {
    let path = server_bin().join(program);
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(path);
        c
    } else {
        Command::new(path)
    }
}

impl PgTlsServer {
    /// Initialises and starts the cluster, and creates role `jetsink` and its database.
    pub async fn start() -> PgTlsServer {
        let dir = tempfile::tempdir().expect("temp dir for postgres");
        let pki = Pki::new(dir.path());
        let mut server = PgTlsServer {
            port: free_port(),
            pki,
            child: None,
            data: dir.path().join("data"),
            dir,
        };
        server.init();
        server.spawn();
        server.wait_ready().await;
        let admin = server.admin().await;
        // CREATE DATABASE cannot share a statement batch (an implicit transaction).
        for sql in [
            format!("CREATE ROLE {USER} LOGIN"),
            format!("CREATE DATABASE {USER} OWNER {USER}"),
        ] {
            admin
                .batch_execute(&sql)
                .await
                .expect("create role and database jetsink");
        }
        server
    }

    fn init(&self) {
        if is_root() {
            let status = Command::new("chown")
                .args(["-R", "postgres:"])
                .arg(self.dir.path())
                .status()
                .expect("run chown");
            assert!(status.success(), "chown the postgres test directory");
        }
        let out = server_command("initdb")
            .arg("-D")
            .arg(&self.data)
            .args(["-U", "postgres", "--auth=trust", "--no-sync"])
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let hba = format!(
            "local all all trust\n\
             hostssl all {USER} 127.0.0.1/32 cert\n\
             hostssl all postgres 127.0.0.1/32 trust\n\
             host all all 127.0.0.1/32 reject\n"
        );
        // Written as whoever runs the test; the server only reads it.
        std::fs::write(self.data.join("pg_hba.conf"), hba).expect("write pg_hba.conf");
    }

    fn spawn(&mut self) {
        let log = std::fs::File::create(self.log_path()).expect("postgres log");
        let setting = |name: &str, value: &Path| format!("{name}={}", value.display());
        let child = server_command("postgres")
            .arg("-D")
            .arg(&self.data)
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(self.dir.path())
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "ssl=on"])
            .args(["-c", "fsync=off", "-c", "max_connections=20"])
            .arg("-c")
            .arg(setting("ssl_cert_file", &self.pki.server_cert))
            .arg("-c")
            .arg(setting("ssl_key_file", &self.pki.server_key))
            .arg("-c")
            .arg(setting("ssl_ca_file", &self.pki.ca))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start postgres");
        self.child = Some(child);
    }

    /// Waits until the server takes a connection on its unix socket.
    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self.try_admin().await.is_some() {
                return;
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "the private postgres did not start ({exited:?}):\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    /// The server's log, for failure messages.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    async fn try_admin(&self) -> Option<tokio_postgres::Client> {
        let (client, conn) = tokio_postgres::Config::new()
            .host_path(self.dir.path())
            .port(self.port)
            .user("postgres")
            .dbname("postgres")
            .connect(tokio_postgres::NoTls)
            .await
            .ok()?;
        tokio::spawn(conn);
        Some(client)
    }

    /// A superuser connection over the unix socket.
    pub async fn admin(&self) -> tokio_postgres::Client {
        self.try_admin()
            .await
            .unwrap_or_else(|| panic!("connect to the private postgres:\n{}", self.log_text()))
    }

    /// A single number from `sql`, run as the superuser in database `jetsink`.
    pub async fn number(&self, sql: &str) -> i64 {
        let (client, conn) = tokio_postgres::Config::new()
            .host_path(self.dir.path())
            .port(self.port)
            .user("postgres")
            .dbname(USER)
            .connect(tokio_postgres::NoTls)
            .await
            .expect("connect to database jetsink");
        tokio::spawn(conn);
        client
            .query_one(sql, &[])
            .await
            .expect("query")
            .get::<_, i64>(0)
    }

    /// Rows in `table` of database `jetsink`, or -1 while it does not exist.
    pub async fn count(&self, table: &str) -> i64 {
        let exists = self
            .number(&format!(
                "SELECT count(*) FROM pg_class WHERE relname = '{table}'"
            ))
            .await;
        if exists == 0 {
            return -1;
        }
        self.number(&format!("SELECT count(*) FROM {table}")).await
    }

    /// Connections of user `jetsink` that use TLS and presented a client certificate.
    pub async fn client_cert_connections(&self) -> i64 {
        self.number(&format!(
            "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) \
             WHERE ssl AND client_dn IS NOT NULL AND usename = '{USER}'"
        ))
        .await
    }

    /// A `postgres` destination for user `jetsink` on this server with `tls` enabled and
    /// trusting the test CA; `tls` is merged into the `tls` block (`null` removes a key).
    pub fn destination(&self, tls: Value) -> Value {
        let mut block = json!({
            "enabled": true,
            "ca_file": self.pki.ca,
            "cert_file": self.pki.client_cert,
            "key_file": self.pki.client_key,
        });
        for (k, v) in tls.as_object().expect("tls overrides are an object") {
            if v.is_null() {
                block.as_object_mut().map(|b| b.remove(k));
            } else {
                block[k] = v.clone();
            }
        }
        json!({
            "type": "postgres",
            "host": "127.0.0.1",
            "port": self.port,
            "user": USER,
            "database": USER,
            "table": "events",
            "connect_timeout_ms": 2000,
            "tls": block,
        })
    }

    /// A path in the server's temp directory, for extra files a test writes.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Drop for PgTlsServer {
    /// Immediate shutdown (SIGQUIT) of the postmaster, which ends its backends; SIGKILL
    /// for whatever still runs after 10 s.
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Some(pid) = pid_of_postmaster(&self.data) {
            let _ = Command::new("kill").args(["-QUIT", &pid]).status();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(pid) = pid_of_postmaster(&self.data) {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The postmaster's process id: the first line of `postmaster.pid`.
fn pid_of_postmaster(data: &Path) -> Option<String> {
    std::fs::read_to_string(data.join("postmaster.pid"))
        .ok()
        .and_then(|t| t.lines().next().map(str::to_string))
}
