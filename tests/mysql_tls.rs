//! The MySQL/MariaDB destination over TLS with a client certificate, against a private
//! MariaDB server started by the test (`common::mysql_tls`) whose user `jetsink` may log in
//! only with a certificate the test CA signed (`REQUIRE X509`, no password).
//!
//! With the certificate the daemon drains and `validate --online` reports the destination
//! ok; without it the server refuses the user and start-up exits 78, ACKing nothing; a
//! `ca_file` of another CA fails the certificate check (exit 69); a key file with no key
//! in it is exit 78 naming `tls.key_file` and the path. No key material reaches a log.

use crate::common;

use std::time::Duration;

use common::mysql_tls::MariaDbTls;
use common::*;
use mysql_async::prelude::Queryable;
use serde_json::{json, Value};

const N: usize = 1000;

/// A config reading `stream` (subjects `<subject>.>`) into `destination`.
fn daemon_config(server: &NatsServer, stream: &str, subject: &str, destination: Value) -> Value {
    config(
        server,
        stream,
        &format!("{subject}.>"),
        destination,
        json!({"batch_size": 200}),
    )
}

/// Starts the daemon, expects it to exit with `code` at start-up, and returns its log,
/// which must hold no private key.
fn refused(dir: &std::path::Path, cfg: &Value, code: i32) -> String {
    let log = refused_at_start(dir, cfg, code);
    assert!(
        !log.contains("PRIVATE KEY"),
        "key material in the log:\n{log}"
    );
    log
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_certificate_drains_1000_messages_over_tls_and_validate_online_says_ok() {
    let db = MariaDbTls::start().await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let js = server.js().await;
    create_stream(&js, "MYTLS", "mytls.>").await;
    publish_n(&js, "mytls.n", N).await;

    // The user allows nothing but TLS with a certificate the test CA signed.
    let mut conn = db
        .jetsink(true)
        .await
        .expect("jetsink logs in with its certificate");
    let cipher: Option<(String, String)> = conn
        .query_first("SHOW STATUS LIKE 'Ssl_cipher'")
        .await
        .expect("ssl status");
    assert!(cipher.is_some_and(|(_, c)| !c.is_empty()), "a TLS session");
    let _ = conn.disconnect().await;

    let cfg = daemon_config(&server, "MYTLS", "mytls", db.destination(db.tls(true)));
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(30), "1000 rows", || async {
        db.count("jetsink_events").await == N as i64
    })
    .await;
    eventually(Duration::from_secs(10), "consumer drained", || async {
        drained(&js, "MYTLS").await
    })
    .await;
    daemon.stop_cleanly();
    assert_eq!(
        db.count("jetsink_events").await,
        N as i64,
        "each message once"
    );
    assert!(!daemon.log_text().contains("PRIVATE KEY"));

    let (code, out, err) = jetsink(
        &[
            "validate",
            "--config",
            &path.display().to_string(),
            "--online",
        ],
        dir.path(),
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("ok: sink main: destination")
                && l.contains("table jetsink_events fits and this user may write it")),
        "{out}{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_client_certificate_the_user_is_refused_and_start_up_exits_78_acking_nothing() {
    let db = MariaDbTls::start().await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let js = server.js().await;
    create_stream(&js, "MYNOCERT", "mynocert.>").await;
    publish_n(&js, "mynocert.n", 10).await;
    assert!(
        db.jetsink(false).await.is_err(),
        "REQUIRE X509 refuses a TLS login without a certificate"
    );

    let cfg = daemon_config(
        &server,
        "MYNOCERT",
        "mynocert",
        db.destination(db.tls(false)),
    );
    let log = refused(dir.path(), &cfg, 78);
    assert!(log.contains("sink main: cannot open destination"), "{log}");
    assert!(log.contains("1045"), "access denied: {log}");
    assert_eq!(
        consumer_state(&js, "MYNOCERT", "jetsink").await,
        (10, 0),
        "nothing delivered, nothing ACKed"
    );
    assert_eq!(db.count("jetsink_events").await, -1, "no table was created");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ca_file_of_another_ca_fails_certificate_verification_and_exits_69_saying_so() {
    let db = MariaDbTls::start().await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut tls = db.tls(true);
    tls["ca_file"] = json!(db.pki.other_ca);
    let cfg = daemon_config(&server, "MYCA", "myca", db.destination(tls));
    let log = refused(dir.path(), &cfg, 69);
    assert!(log.contains("sink main: cannot open destination"), "{log}");
    assert!(log.contains("certificate"), "{log}");
    assert!(log.contains("tls.ca_file"), "a hint where to look: {log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_file_that_holds_no_key_exits_78_naming_tls_key_file_and_its_path() {
    let db = MariaDbTls::start().await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let not_a_key = dir.path().join("client-key.txt");
    std::fs::write(&not_a_key, "S3CRET-NOT-A-KEY\n").expect("write");
    let mut tls = db.tls(true);
    tls["key_file"] = json!(not_a_key);
    let cfg = daemon_config(&server, "MYKEY", "mykey", db.destination(tls));
    let log = refused(dir.path(), &cfg, 78);
    assert!(log.contains("tls.key_file"), "{log}");
    assert!(log.contains(&not_a_key.display().to_string()), "{log}");
    assert!(!log.contains("S3CRET"), "{log}");
}
