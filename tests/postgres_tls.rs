//! The PostgreSQL destination over TLS against a private server (`common::pg_tls`) that
//! lets user `jetsink` in only with a client certificate (`pg_hba` method `cert`) and
//! rejects plain connections: the certificate logs in and a backlog drains; without it the
//! server refuses the login (exit 78) and nothing is ACKed; a CA that did not sign the
//! server fails verification (exit 69, an unreachable destination at start-up); a key file
//! without a key, or with another certificate's key, is named with its path (exit 78);
//! `validate --online` reports the destination ok. No log shows key material.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::pg_tls::{PgTlsServer, Pki};
use common::*;
use serde_json::{json, Value};

const N: usize = 1_000;

/// A config reading `stream` (`<subject prefix>.>`) into `destination` in batches of 100.
fn tls_config(server: &NatsServer, stream: &str, destination: Value) -> Value {
    let subjects = format!("{}.>", stream.to_lowercase());
    config(
        server,
        stream,
        &subjects,
        destination,
        json!({"batch_size": 100, "batch_timeout_ms": 100}),
    )
}

/// Fails the test when `text` holds any line of the PEM key in `key_file`.
fn assert_no_key_material(text: &str, key_file: &Path) {
    let key = std::fs::read_to_string(key_file).expect("read the client key");
    assert!(!text.contains("PRIVATE KEY"), "{text}");
    for line in key.lines().filter(|l| !l.starts_with("-----")) {
        assert!(!text.contains(line), "key material in:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_certificate_logs_in_over_tls_drains_1000_messages_and_validates_online_ok() {
    let pg = PgTlsServer::start().await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "PGTLS", "pgtls.>").await;
    publish_n(&js, "pgtls.x", N).await;
    let cfg = tls_config(&server, "PGTLS", pg.destination(json!({})));
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    eventually(
        Duration::from_secs(30),
        "1,000 rows and a drained consumer",
        || async { pg.count("events").await == N as i64 && drained(&js, "PGTLS").await },
    )
    .await;
    // pg_hba lets `jetsink` in only with `cert`; this also shows the session is TLS.
    assert!(
        pg.client_cert_connections().await >= 1,
        "no TLS connection with a client certificate from jetsink:\n{}",
        daemon.log_text()
    );
    daemon.stop_cleanly();
    assert_eq!(pg.count("events").await, N as i64);
    assert_no_key_material(&daemon.log_text(), &pg.pki.client_key);

    let path = write_config(dir.path(), &cfg);
    let args = ["validate", "--config", path.to_str().unwrap(), "--online"];
    let (code, out, err) = jetsink(&args, dir.path());
    let out = format!("{out}{err}");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("ok: sink main: destination postgres"), "{out}");
    assert!(out.contains("table \"events\" fits"), "{out}");
    assert!(
        out.contains("0 would create, 0 would update, 0 failed"),
        "{out}"
    );
    assert_no_key_material(&out, &pg.pki.client_key);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_client_certificate_the_login_is_refused_with_exit_78_and_nothing_is_acked() {
    let pg = PgTlsServer::start().await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "PGNOCERT", "pgnocert.>").await;
    publish_n(&js, "pgnocert.x", 10).await;
    let destination = pg.destination(json!({"cert_file": null, "key_file": null}));
    let log = refused_at_start(
        dir.path(),
        &tls_config(&server, "PGNOCERT", destination),
        78,
    );
    assert!(log.contains("sink main: cannot open destination"), "{log}");
    assert!(
        log.contains("connection requires a valid client certificate"),
        "{log}"
    );
    // The consumer exists and holds all 10: none delivered, none ACKed.
    assert_eq!(
        consumer_state(&js, "PGNOCERT", "jetsink").await,
        (10, 0),
        "{log}"
    );
    assert_eq!(pg.count("events").await, -1, "the login never got in");
    assert_no_key_material(&log, &pg.pki.client_key);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ca_that_did_not_sign_the_server_fails_verification_with_exit_69() {
    let pg = PgTlsServer::start().await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "PGOTHERCA", "pgotherca.>").await;
    publish_n(&js, "pgotherca.x", 10).await;
    let destination = pg.destination(json!({"ca_file": pg.pki.other_ca}));
    let log = refused_at_start(
        dir.path(),
        &tls_config(&server, "PGOTHERCA", destination),
        69,
    );
    assert!(log.contains("sink main: cannot open destination"), "{log}");
    assert!(
        log.contains("TLS handshake")
            && log.contains("invalid peer certificate: UnknownIssuer")
            && log.contains("check tls.ca_file"),
        "a hint where to look: {log}"
    );
    assert_eq!(
        consumer_state(&js, "PGOTHERCA", "jetsink").await,
        (10, 0),
        "{log}"
    );
    assert_no_key_material(&log, &pg.pki.client_key);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_file_without_a_key_or_with_another_certificates_key_exits_78_naming_its_path() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    // Nothing listens: the key is read before connecting.
    let destination = |key_file: &Path| {
        json!({
            "type": "postgres", "host": "127.0.0.1", "port": free_port(),
            "user": "jetsink", "database": "jetsink", "connect_timeout_ms": 1000,
            "tls": {"enabled": true, "ca_file": pki.ca, "cert_file": pki.client_cert,
                    "key_file": key_file}
        })
    };
    let not_a_key = dir.path().join("not-a-key.pem");
    std::fs::copy(&pki.client_cert, &not_a_key).expect("copy a certificate");
    let cfg = tls_config(&server, "PGNOKEY", destination(&not_a_key));
    let log = refused_at_start(dir.path(), &cfg, 78);
    let named = format!(
        "tls.key_file {} holds no PEM private key",
        not_a_key.display()
    );
    assert!(log.contains(&named), "{log}");

    // The server's key is a key, but not the client certificate's.
    let path = write_config(
        dir.path(),
        &tls_config(&server, "PGNOKEY", destination(&pki.server_key)),
    );
    let args = ["validate", "--config", path.to_str().unwrap(), "--online"];
    let (code, out, err) = jetsink(&args, dir.path());
    let out = format!("{out}{err}");
    assert_eq!(code, 78, "{out}");
    let named = format!(
        "tls.key_file {} does not fit tls.cert_file",
        pki.server_key.display()
    );
    assert!(out.contains(&named), "{out}");
    assert_no_key_material(&out, &pki.server_key);
}
