//! Files an operator names, hostile or mistaken: a config or key file that is a device,
//! a FIFO or huge is refused with exit 78 naming the path (and the config key), at once
//! and without reading it; a config string that is too long or holds a NUL is refused by
//! `validate` naming its path, never printed back; a key file others may read is a warning
//! that reaches `validate`'s output and `run`'s log; a damaged sealed value makes
//! `decrypt` fail instead of printing it as clear text.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::json;

/// A failure guard only: every command here ends at once when it works.
const GUARD: Duration = Duration::from_secs(60);

fn good(path: &str) -> serde_json::Value {
    json!({
        "nats": {"servers": ["nats://127.0.0.1:4222"]},
        "sinks": {"orders": {
            "source": {"stream": "ORDERS", "subjects": "orders.>", "consumer": "jetsink"},
            "destination": {"type": "sqlite", "path": path}
        }}
    })
}

/// `jetsink validate --config <config>` in `dir`: (exit code, stdout + stderr).
fn validate_file(dir: &Path, config: &str) -> (i32, String) {
    let (code, out, err) = jetsink_within(&["validate", "--config", config], dir, GUARD)
        .unwrap_or_else(|| panic!("validate --config {config} did not exit"));
    (code, format!("{out}{err}"))
}

fn validate_value(dir: &Path, cfg: &serde_json::Value) -> (i32, String) {
    let path = write_config(dir, cfg);
    validate_file(dir, path.to_str().unwrap())
}

#[test]
fn validate_refuses_dev_zero_as_its_config_at_once_with_78_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let (code, text) = validate_file(dir.path(), "/dev/zero");
    assert_eq!(code, 78, "{text}");
    assert_eq!(
        text.trim_end(),
        "error: config file /dev/zero is a character device, not a regular file"
    );
}

#[test]
fn a_fifo_or_a_directory_as_the_config_is_refused_without_waiting_for_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("config.fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo");
    let (code, text) = validate_file(dir.path(), fifo.to_str().unwrap());
    assert_eq!(code, 78, "{text}");
    assert!(text.contains("is a FIFO, not a regular file"), "{text}");
    let (code, text) = validate_file(dir.path(), dir.path().to_str().unwrap());
    assert_eq!(code, 78, "{text}");
    assert!(
        text.contains("is a directory, not a regular file"),
        "{text}"
    );
}

#[test]
fn a_50_mb_config_is_refused_naming_the_bound_and_not_printed_back() {
    let dir = tempfile::tempdir().unwrap();
    let big = "x".repeat(50 << 20);
    let (code, text) = validate_value(dir.path(), &good(&big));
    assert_eq!(code, 78, "{}", &text[..text.len().min(500)]);
    assert!(
        text.contains("is larger than 4 MiB, the most a config file may hold"),
        "{}",
        &text[..text.len().min(500)]
    );
    assert!(text.len() < 1_000, "{} bytes printed", text.len());
}

#[test]
fn a_long_string_in_the_config_is_refused_naming_its_path_and_not_printed_back() {
    let dir = tempfile::tempdir().unwrap();
    let long = format!("data/{}.db", "p".repeat(100_000));
    let (code, text) = validate_value(dir.path(), &good(&long));
    assert_eq!(code, 78, "{}", &text[..text.len().min(500)]);
    assert!(
        text.contains("sinks.orders.destination.path: a string of 100008 bytes; a config string holds at most 65536"),
        "{}",
        &text[..text.len().min(500)]
    );
    assert!(text.len() < 1_000, "{} bytes printed", text.len());
}

#[test]
fn a_nul_in_the_sqlite_path_is_refused_by_validate_with_78() {
    let dir = tempfile::tempdir().unwrap();
    let (code, text) = validate_value(dir.path(), &good("data/o\u{0}.db"));
    assert_eq!(code, 78, "{text}");
    assert!(
        text.contains("sinks.orders.destination.path: a string holds a NUL character"),
        "{text}"
    );
}

/// A config whose sink encrypts with the key in `key_file`.
fn encrypted(key_file: &str) -> serde_json::Value {
    let mut cfg = good("data/o.db");
    cfg["encryption"] = json!({"active_key": "k1", "keys": [{"id": "k1", "file": key_file}]});
    cfg
}

fn write_key(dir: &Path, mode: u32) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("k1.key");
    std::fs::write(&path, "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

#[test]
fn key_files_that_are_devices_fifos_or_too_large_are_refused_naming_their_key() {
    let dir = tempfile::tempdir().unwrap();
    let (code, text) = validate_value(dir.path(), &encrypted("/dev/zero"));
    assert_eq!(code, 78, "{text}");
    assert!(
        text.contains(
            "encryption.keys[0].file: key file /dev/zero is a character device, not a regular file"
        ),
        "{text}"
    );
    let fifo = dir.path().join("k.fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo");
    let (code, text) = validate_value(dir.path(), &encrypted(fifo.to_str().unwrap()));
    assert_eq!(code, 78, "{text}");
    assert!(text.contains("is a FIFO, not a regular file"), "{text}");
    let big = dir.path().join("big.key");
    std::fs::write(&big, "A".repeat(5_000)).unwrap();
    let (code, text) = validate_value(dir.path(), &encrypted(big.to_str().unwrap()));
    assert_eq!(code, 78, "{text}");
    assert!(
        text.contains("is larger than 4 KiB, the most a key file may hold"),
        "{text}"
    );
    assert!(!text.contains("AAAAAAAA"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_api_token_file_that_is_a_device_is_refused_by_validate_online_and_run_with_78_naming_it(
) {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(
        &server,
        "ORDERS",
        "orders.>",
        json!({"type": "sqlite", "path": "data/o.db"}),
        json!({}),
    );
    cfg["api"] = json!({"listen": format!("127.0.0.1:{}", free_port()), "token_file": "/dev/zero"});
    let path = write_config(dir.path(), &cfg);
    let (code, out, err) = jetsink_within(
        &["validate", "--online", "--config", path.to_str().unwrap()],
        dir.path(),
        GUARD,
    )
    .expect("validate --online exits");
    assert_eq!(
        code, 78,
        "validate --online refuses what run would: {out}{err}"
    );
    assert!(
        out.contains("FAIL: api.token_file: /dev/zero is a character device, not a regular file"),
        "{out}{err}"
    );
    let log = refused_at_start(dir.path(), &cfg, 78);
    assert!(
        log.contains("api.token_file: /dev/zero is a character device, not a regular file"),
        "{log}"
    );
}

#[test]
fn a_key_file_others_may_read_is_a_warning_validate_prints() {
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), 0o644);
    let (code, text) = validate_value(dir.path(), &encrypted(key.to_str().unwrap()));
    assert_eq!(code, 0, "a warning, not a refusal: {text}");
    assert!(
        text.contains(&format!(
            "warning: encryption.keys[0].file: key file {} is readable by group or others (mode 644); chmod 600 it",
            key.display()
        )),
        "{text}"
    );
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let (code, text) = validate_value(dir.path(), &encrypted(key.to_str().unwrap()));
    assert_eq!(code, 0, "{text}");
    assert!(!text.contains("warning"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_file_others_may_read_is_warned_about_in_runs_log() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), 0o640);
    let mut cfg = config(
        &server,
        "ORDERS",
        "orders.>",
        json!({"type": "sqlite", "path": "data/o.db"}),
        json!({}),
    );
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    cfg["encryption"] = json!({"active_key": "k1", "keys": [{"id": "k1", "file": key}]});
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    let listen = cfg["http"]["listen"].as_str().unwrap().to_string();
    eventually(Duration::from_secs(30), "jetsink is ready", || {
        let listen = listen.clone();
        async move {
            metric_value(&listen, "jetsink_nats_connected")
                .await
                .is_some()
        }
    })
    .await;
    let log = daemon.log_text();
    assert!(
        log.contains("is readable by group or others (mode 640); chmod 600 it")
            && log.contains("encryption.keys[0].file"),
        "{log}"
    );
    daemon.stop_cleanly();
}

#[test]
fn decrypt_fails_on_a_sealed_value_with_a_digit_cut_or_an_unknown_version() {
    use jetsink::crypto::binding::{Binding, Part};
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), 0o600);
    let config = write_config(dir.path(), &encrypted(key.to_str().unwrap()));
    let ring = jetsink::crypto::KeyRing::new([("k1".to_string(), [7u8; 32])], "k1").unwrap();
    let binding = Binding {
        stream: "ORDERS",
        stream_sequence: 9,
        subject: "orders.eu",
        part: Part::Payload,
    };
    let sealed = jetsink::crypto::cipher::seal(
        &ring,
        &jetsink::crypto::OsNonces::new(),
        &binding,
        b"{\"card\":\"4111\"}",
    )
    .unwrap();
    let hex: String = sealed.iter().map(|b| format!("{b:02x}")).collect();
    let record = |payload: &str| {
        json!({"stream": "ORDERS", "stream_sequence": 9, "subject": "orders.eu", "payload": payload})
            .to_string()
    };
    let decrypt = |line: String| {
        std::fs::write(dir.path().join("rows.jsonl"), line).unwrap();
        jetsink_within(
            &[
                "decrypt",
                "--config",
                config.to_str().unwrap(),
                "--sink",
                "orders",
                "rows.jsonl",
            ],
            dir.path(),
            GUARD,
        )
        .expect("decrypt exits")
    };
    let (code, out, err) = decrypt(record(&format!("\\x{hex}")));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("4111"), "the whole value opens: {out}");
    let cut = format!("\\x{}{}", &hex[..30], &hex[31..]);
    let (code, out, err) = decrypt(record(&cut));
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("cut or altered"), "{err}");
    assert!(out.is_empty(), "nothing printed as clear text: {out}");
    let mut other = sealed.to_vec();
    other[3] = 9;
    let hex9: String = other.iter().map(|b| format!("{b:02x}")).collect();
    let (code, _, err) = decrypt(record(&format!("\\x{hex9}")));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("format version 9"), "{err}");
    let (code, _, err) = decrypt(record("\\x4a5345"));
    assert_eq!(code, 1, "the magic alone: {err}");
}
