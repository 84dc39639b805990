//! A private MariaDB server that speaks TLS, for the MySQL destination's TLS tests: its own
//! data directory, port and Unix socket in a temp dir, certificates from [`Pki`], and a user
//! `jetsink` that may log in only with a client certificate this CA signed
//! (`REQUIRE X509`, no password) and owns database `test`.
//!
//! The shared server on 127.0.0.1:3306 is never touched. The server is SIGKILLed and its
//! directory removed on `Drop`, also when the test panics.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::{ClientIdentity, Conn, OptsBuilder, SslOpts};

use super::free_port;
use super::pki::Pki;

const MARIADBD: &str = "/usr/sbin/mariadbd";
/// Small InnoDB files: the default redo log alone is 100 MB per test.
const SMALL: [&str; 2] = ["--innodb-log-file-size=8M", "--innodb-buffer-pool-size=32M"];
const SETUP: &[&str] = &[
    "CREATE DATABASE test",
    "CREATE USER 'jetsink'@'%' REQUIRE X509",
    "GRANT ALL ON test.* TO 'jetsink'@'%'",
];

/// A running private MariaDB server with TLS on.
pub struct MariaDbTls {
    pub port: u16,
    pub pki: Pki,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl MariaDbTls {
    /// Creates the data directory, starts the server, waits until root can log in over
    /// the socket, and creates the `jetsink` user and database `test`.
    pub async fn start() -> MariaDbTls {
        let dir = tempfile::tempdir().expect("temp dir for mariadb");
        let pki = Pki::new(dir.path());
        install(dir.path());
        let mut server = MariaDbTls {
            port: free_port(),
            pki,
            dir,
            child: None,
        };
        server.spawn();
        let mut root = server.root_when_ready().await;
        for sql in SETUP {
            root.query_drop(*sql).await.expect(sql);
        }
        let _ = root.disconnect().await;
        server
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("sock")
    }

    fn spawn(&mut self) {
        let d = self.dir.path();
        let arg = |name: &str, p: &Path| format!("--{name}={}", p.display());
        let child = Command::new(MARIADBD)
            .args(["--no-defaults", "--user=root", "--bind-address=127.0.0.1"])
            .args(["--skip-networking=0", "--skip-name-resolve"])
            .args(SMALL)
            .arg(format!("--port={}", self.port))
            .arg(arg("datadir", &self.data()))
            .arg(arg("socket", &self.socket()))
            .arg(arg("pid-file", &d.join("mariadbd.pid")))
            .arg(arg("tmpdir", d))
            .arg(arg("log-error", &d.join("err.log")))
            .arg(arg("ssl-ca", &self.pki.ca))
            .arg(arg("ssl-cert", &self.pki.server_cert))
            .arg(arg("ssl-key", &self.pki.server_key))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mariadbd");
        self.child = Some(child);
    }

    /// The server's error log, for failure messages.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("err.log")).unwrap_or_default()
    }

    /// A root connection over the socket once the server accepts one (20 s at most).
    async fn root_when_ready(&mut self) -> Conn {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match self.root().await {
                Ok(conn) => return conn,
                Err(e) => {
                    if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                        panic!("mariadbd exited ({status}):\n{}", self.log_text());
                    }
                    assert!(
                        Instant::now() < deadline,
                        "mariadbd did not accept root on its socket ({e}):\n{}",
                        self.log_text()
                    );
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Root over the Unix socket (no TLS, no password).
    pub async fn root(&self) -> Result<Conn, mysql_async::Error> {
        let opts = OptsBuilder::default()
            .socket(Some(self.socket().display().to_string()))
            .user(Some("root"))
            .db_name(None::<String>);
        Conn::new(opts).await
    }

    /// User `jetsink` over TCP with TLS verified against the test CA, with the client
    /// certificate when `with_cert`: the way the destination connects.
    pub async fn jetsink(&self, with_cert: bool) -> Result<Conn, mysql_async::Error> {
        let mut ssl = SslOpts::default()
            .with_root_certs(vec![self.pki.ca.clone().into()])
            .with_disable_built_in_roots(true);
        if with_cert {
            ssl = ssl.with_client_identity(Some(ClientIdentity::new(
                self.pki.client_cert.clone().into(),
                self.pki.client_key.clone().into(),
            )));
        }
        let opts = OptsBuilder::default()
            .ip_or_hostname("127.0.0.1")
            .tcp_port(self.port)
            .user(Some("jetsink"))
            .db_name(Some("test"))
            .prefer_socket(false)
            .ssl_opts(Some(ssl));
        Conn::new(opts).await
    }

    /// Rows in `test.<table>` as root (-1 while the table does not exist).
    pub async fn count(&self, table: &str) -> i64 {
        let Ok(mut c) = self.root().await else {
            return -1;
        };
        let n = c
            .query_first::<i64, _>(format!("SELECT COUNT(*) FROM test.{table}"))
            .await
            .ok()
            .flatten()
            .unwrap_or(-1);
        let _ = c.disconnect().await;
        n
    }

    /// The `tls` block of a destination: the test CA, and the client certificate when
    /// `with_cert`.
    pub fn tls(&self, with_cert: bool) -> serde_json::Value {
        let mut tls = serde_json::json!({"enabled": true, "ca_file": self.pki.ca});
        if with_cert {
            tls["cert_file"] = serde_json::json!(self.pki.client_cert);
            tls["key_file"] = serde_json::json!(self.pki.client_key);
        }
        tls
    }

    /// A `mysql` destination on this server as user `jetsink` into database `test`.
    pub fn destination(&self, tls: serde_json::Value) -> serde_json::Value {
        serde_json::json!({
            "type": "mysql",
            "host": "127.0.0.1",
            "port": self.port,
            "user": "jetsink",
            "database": "test",
            "connect_timeout_ms": 5000,
            "tls": tls
        })
    }
}

/// `mariadb-install-db` into `dir/data`, root logging in without a password.
fn install(dir: &Path) {
    let out = Command::new("mariadb-install-db")
        .args(["--no-defaults", "--user=root"])
        .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
        .args(SMALL)
        .arg(format!("--datadir={}", dir.join("data").display()))
        // Concurrent bootstraps sharing /tmp collide on their temporary tables.
        .arg(format!("--tmpdir={}", dir.display()))
        .output()
        .expect("run mariadb-install-db (apt-get install mariadb-server)");
    assert!(
        out.status.success(),
        "mariadb-install-db failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Drop for MariaDbTls {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
