//! Payload encryption at rest end to end, against a real nats-server: through SQLite, the
//! file destination, PostgreSQL and MySQL the stored payload holds no plaintext and
//! `jetsink decrypt` returns the original; a ciphertext moved to another row, a flipped
//! bit and an unknown key id fail clearly; after rotation rows of both keys decrypt; a bad
//! key file stops start-up with exit 78 naming it; listed headers are sealed too; the
//! dead-letter copy of a refused message carries the clear payload.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::HeaderMap;
use common::*;
use serde_json::{json, Value};

const SECRET: &str = "4111-1111-1111-1111";

fn keygen(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let (code, out, err) = jetsink(&["keygen", "--out", path.to_str().unwrap()], dir);
    assert_eq!(code, 0, "{out}{err}");
    path
}

fn encryption(active: &str, keys: &[(&str, &Path)]) -> Value {
    json!({
        "active_key": active,
        "keys": keys.iter().map(|(id, f)| json!({"id": id, "file": f})).collect::<Vec<_>>(),
        "headers": ["Authorization"]
    })
}

fn with_encryption(mut cfg: Value, enc: Value) -> Value {
    cfg["sinks"]["main"]["encryption"] = enc;
    cfg
}

async fn publish_secrets(server: &NatsServer, subject: &str, from: usize, count: usize) {
    let js = server.js().await;
    for i in from..from + count {
        let mut h = HeaderMap::new();
        h.insert("Authorization", format!("Bearer tok-{i}").as_str());
        js.publish_with_headers(
            subject.to_string(),
            h,
            format!("{{\"card\":\"{SECRET}\",\"i\":{i}}}").into(),
        )
        .await
        .expect("publish")
        .await
        .expect("puback");
    }
}

/// Runs `jetsink decrypt` over `input`; (exit code, stdout records, stderr).
fn decrypt(dir: &Path, config: &Path, input: &str) -> (i32, Vec<Value>, String) {
    let file = dir.join("decrypt-input.jsonl");
    std::fs::write(&file, input).unwrap();
    let (code, out, err) = jetsink(
        &[
            "decrypt",
            "--config",
            config.to_str().unwrap(),
            "--sink",
            "main",
            file.to_str().unwrap(),
        ],
        dir,
    );
    let records = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("decrypt prints JSON lines"))
        .collect();
    (code, records, err)
}

fn assert_no_plaintext(bytes: &[u8]) {
    assert!(
        !bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
        "the stored data holds the plaintext"
    );
    assert!(
        !bytes
            .windows(8)
            .any(|w| w == b"tok-0\",\"" || w == b"Bearer t"),
        "a sealed header is stored in clear"
    );
}

fn assert_clear(records: &[Value], n: usize) {
    assert_eq!(records.len(), n);
    for r in records {
        assert_eq!(r["payload_encoding"], "json", "{r}");
        assert_eq!(r["payload"]["card"], SECRET, "{r}");
        let i = r["payload"]["i"].as_u64().unwrap();
        let auth = &r["headers"]["Authorization"][0];
        assert_eq!(auth, &json!(format!("Bearer tok-{i}")), "{r}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn file_records_hold_no_plaintext_decrypt_and_resist_moves_bit_flips_and_unknown_keys() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    create_stream(&server.js().await, "ENC", "enc.>").await;
    let key_a = keygen(dir.path(), "a.key");
    let out = dir.path().join("out");
    let cfg = with_encryption(
        config(
            &server,
            "ENC",
            "enc.>",
            json!({"type": "file", "directory": out}),
            json!({"batch_size": 10}),
        ),
        encryption("a", &[("a", &key_a)]),
    );
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    publish_secrets(&server, "enc.x", 0, 5).await;
    eventually(Duration::from_secs(20), "5 records", || {
        let out = out.clone();
        async move { jsonl_lines(&out).len() == 5 }
    })
    .await;
    daemon.stop_cleanly();
    let lines = jsonl_lines(&out);
    let mut raw = Vec::new();
    for entry in std::fs::read_dir(&out).unwrap() {
        raw.extend(std::fs::read(entry.unwrap().path()).unwrap_or_default());
    }
    assert_no_plaintext(&raw);
    assert!(lines
        .iter()
        .all(|l| l["payload_encoding"] == "aes256gcm-v1"));
    assert_eq!(lines[0]["subject"], "enc.x", "envelope fields stay clear");

    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let (code, records, err) = decrypt(dir.path(), &path, &text);
    assert_eq!(code, 0, "{err}");
    assert_clear(&records, 5);

    // The payload of row 1 moved into row 2 fails, naming row 2's binding.
    let mut moved = lines[1].clone();
    moved["payload"] = lines[0]["payload"].clone();
    let (code, records, err) = decrypt(dir.path(), &path, &format!("{moved}\n"));
    assert_eq!(code, 1);
    assert!(records.is_empty());
    let seq = moved["stream_sequence"].as_u64().unwrap();
    assert!(
        err.contains(&format!("stream ENC sequence {seq}"))
            && err.contains("authentication failed"),
        "{err}"
    );

    // One flipped bit in the ciphertext fails.
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut bytes = b64.decode(lines[2]["payload"].as_str().unwrap()).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x04;
    let mut flipped = lines[2].clone();
    flipped["payload"] = json!(b64.encode(&bytes));
    let (code, _, err) = decrypt(dir.path(), &path, &format!("{flipped}\n"));
    assert_eq!(code, 1);
    assert!(err.contains("authentication failed"), "{err}");

    // A ring without key `a` names the missing id.
    let key_b = keygen(dir.path(), "b.key");
    std::fs::create_dir_all(dir.path().join("other")).unwrap();
    let other = write_config(
        &dir.path().join("other"),
        &with_encryption(cfg.clone(), encryption("b", &[("b", &key_b)])),
    );
    let (code, _, err) = decrypt(dir.path(), &other, &text);
    assert_eq!(code, 1);
    assert!(err.contains("no key with id `a`"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn after_rotation_sqlite_rows_sealed_with_the_old_and_the_new_key_both_decrypt() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let key_a = keygen(dir.path(), "a.key");
    let key_b = keygen(dir.path(), "b.key");
    create_stream(&server.js().await, "ROT", "rot.>").await;
    let db = dir.path().join("enc.db");
    let base = config(
        &server,
        "ROT",
        "rot.>",
        json!({"type": "sqlite", "path": db, "table": "events"}),
        json!({"batch_size": 10}),
    );
    let first = write_config(
        dir.path(),
        &with_encryption(base.clone(), encryption("a", &[("a", &key_a)])),
    );
    let mut daemon = Daemon::start(&first, dir.path());
    publish_secrets(&server, "rot.x", 0, 3).await;
    eventually(Duration::from_secs(20), "3 rows", || {
        let db = db.clone();
        async move { sqlite_count(&db, "events") == 3 }
    })
    .await;
    daemon.stop_cleanly();

    let rotated = write_config(
        dir.path(),
        &with_encryption(base, encryption("b", &[("a", &key_a), ("b", &key_b)])),
    );
    let mut daemon = Daemon::start(&rotated, dir.path());
    publish_secrets(&server, "rot.x", 3, 3).await;
    eventually(Duration::from_secs(20), "6 rows", || {
        let db = db.clone();
        async move { sqlite_count(&db, "events") == 6 }
    })
    .await;
    daemon.stop_cleanly();

    assert_no_plaintext(&std::fs::read(&db).unwrap());
    let conn = rusqlite::Connection::open(&db).unwrap();
    let mut stmt = conn
        .prepare("SELECT stream, stream_sequence, subject, headers, payload FROM events ORDER BY stream_sequence")
        .unwrap();
    use base64::Engine as _;
    let rows: Vec<Value> = stmt
        .query_map([], |r| {
            let payload: Vec<u8> = r.get(4)?;
            Ok(json!({
                "stream": r.get::<_, String>(0)?,
                "stream_sequence": r.get::<_, i64>(1)?,
                "subject": r.get::<_, String>(2)?,
                "headers": r.get::<_, String>(3)?,
                "payload": base64::engine::general_purpose::STANDARD.encode(&payload),
            }))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key_ids: Vec<String> = rows
        .iter()
        .map(|r| {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(r["payload"].as_str().unwrap())
                .unwrap();
            String::from_utf8_lossy(&bytes[5..6]).into_owned()
        })
        .collect();
    assert_eq!(key_ids, ["a", "a", "a", "b", "b", "b"]);
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    let (code, records, err) = decrypt(dir.path(), &rotated, &text);
    assert_eq!(code, 0, "{err}");
    assert_clear(&records, 6);
}

#[test]
fn a_key_file_of_the_wrong_length_stops_start_up_with_exit_78_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("short.key");
    std::fs::write(&bad, "c2hvcnQ=\n").unwrap();
    let cfg = json!({
        "nats": {"servers": ["nats://127.0.0.1:1"]},
        "http": {"enabled": false},
        "sinks": {"main": {
            "source": {"stream": "S", "consumer": "c"},
            "encryption": {"active_key": "a", "keys": [{"id": "a", "file": bad}]},
            "destination": {"type": "file", "directory": dir.path().join("out")}
        }}
    });
    let path = write_config(dir.path(), &cfg);
    for command in ["run", "validate"] {
        let (code, out, err) = jetsink(&[command, "--config", path.to_str().unwrap()], dir.path());
        assert_eq!(code, 78, "{command}: {out}{err}");
        assert!(
            err.contains("sinks.main.encryption.keys[0].file")
                && err.contains(&bad.display().to_string())
                && err.contains("decodes to 5 bytes"),
            "{command}: {err}"
        );
        assert!(
            !err.contains("c2hvcnQ"),
            "the key text is never printed: {err}"
        );
    }
}

#[test]
fn validate_shows_key_ids_and_fingerprints_never_key_material() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path(), "a.key");
    let text = std::fs::read_to_string(&key).unwrap();
    let cfg = json!({
        "nats": {"servers": ["nats://127.0.0.1:4222"]},
        "encryption": {"active_key": "a", "keys": [{"id": "a", "file": key}]},
        "sinks": {"main": {
            "source": {"stream": "S", "consumer": "c"},
            "destination": {"type": "file", "directory": dir.path().join("out")}
        }}
    });
    let path = write_config(dir.path(), &cfg);
    let (code, out, err) = jetsink(
        &["validate", "--config", path.to_str().unwrap()],
        dir.path(),
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("encryption:  AES-256-GCM, active key a; keys a (fingerprint "),
        "{out}"
    );
    assert!(!out.contains(text.trim()), "{out}");
}

async fn database_round_trip(destination: Value, export: impl Fn(&str) -> String) {
    let server = NatsServer::start();
    create_stream(&server.js().await, "DBENC", "dbenc.>").await;
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path(), "a.key");
    let cfg = with_encryption(
        config(
            &server,
            "DBENC",
            "dbenc.>",
            destination,
            json!({"batch_size": 10}),
        ),
        encryption("a", &[("a", &key)]),
    );
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    publish_secrets(&server, "dbenc.x", 0, 4).await;
    let js = server.js().await;
    eventually(Duration::from_secs(30), "4 messages acknowledged", || {
        let js = js.clone();
        async move {
            let Ok(stream) = js.get_stream("DBENC").await else {
                return false;
            };
            match stream.consumer_info("jetsink").await {
                Ok(info) => info.ack_floor.stream_sequence >= 4,
                Err(_) => false,
            }
        }
    })
    .await;
    daemon.stop_cleanly();
    let text = export("SELECT 1");
    assert_no_plaintext(text.as_bytes());
    let (code, records, err) = decrypt(dir.path(), &path, &text);
    assert_eq!(code, 0, "{err}\n{text}");
    assert_clear(&records, 4);
}

fn command_output(program: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_rows_hold_no_plaintext_and_decrypt() {
    let db = format!("jetsink_enc_{}", std::process::id());
    let psql = |db: &str, sql: &str| {
        command_output(
            "psql",
            &["-h", "127.0.0.1", "-U", "postgres", "-d", db, "-XAtqc", sql],
        )
    };
    psql("postgres", &format!("DROP DATABASE IF EXISTS {db}"));
    psql("postgres", &format!("CREATE DATABASE {db}"));
    let dest = json!({"type": "postgres", "host": "127.0.0.1", "port": 5432, "user": "postgres", "database": db, "table": "events"});
    database_round_trip(dest, |_| {
        psql(
            &db,
            "SELECT row_to_json(t) FROM (SELECT stream, stream_sequence, subject, headers, payload FROM events) t",
        )
    })
    .await;
    psql("postgres", &format!("DROP DATABASE {db}"));
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_rows_hold_no_plaintext_and_decrypt() {
    let db = format!("jetsink_enc_{}", std::process::id());
    let mysql = |sql: &str| {
        command_output(
            "mysql",
            &["-h", "127.0.0.1", "-u", "root", "-N", "-B", "-r", "-e", sql],
        )
    };
    mysql(&format!(
        "DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db}"
    ));
    let dest = json!({"type": "mysql", "host": "127.0.0.1", "port": 3306, "user": "root", "database": db, "table": "events"});
    database_round_trip(dest, |_| {
        mysql(&format!(
            "SELECT JSON_OBJECT('stream', stream, 'stream_sequence', stream_sequence, 'subject', subject, 'headers', headers, 'payload', CONCAT('\\\\x', LOWER(HEX(payload)))) FROM {db}.events"
        ))
    })
    .await;
    mysql(&format!("DROP DATABASE {db}"));
}

#[tokio::test(flavor = "multi_thread")]
async fn key_rules_seal_two_subjects_with_two_keys_both_decrypt_and_start_up_logs_the_setup() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    create_stream(&server.js().await, "RULES", "rules.>").await;
    let key_a = keygen(dir.path(), "a.key");
    let key_eu = keygen(dir.path(), "eu.key");
    let out = dir.path().join("out");
    let mut enc = encryption("a", &[("a", &key_a), ("eu", &key_eu)]);
    enc["rules"] = json!([{"subjects": ["rules.eu.>"], "key_id": "eu"}]);
    let cfg = with_encryption(
        config(
            &server,
            "RULES",
            "rules.>",
            json!({"type": "file", "directory": out}),
            json!({"batch_size": 10}),
        ),
        enc,
    );
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    publish_secrets(&server, "rules.eu.pay", 0, 3).await;
    publish_secrets(&server, "rules.us.pay", 3, 3).await;
    eventually(Duration::from_secs(20), "6 records", || {
        let out = out.clone();
        async move { jsonl_lines(&out).len() == 6 }
    })
    .await;
    daemon.stop_cleanly();
    let log = daemon.log_text();
    let validated = {
        let (code, out, err) = jetsink(
            &["validate", "--config", path.to_str().unwrap()],
            dir.path(),
        );
        assert_eq!(code, 0, "{out}{err}");
        out
    };
    let line = log
        .lines()
        .find(|l| l.contains("payload encryption on"))
        .unwrap_or_else(|| panic!("no encryption start-up line in:\n{log}"));
    for part in ["AES-256-GCM", "active_key=a", "keys=2", "rules=1"] {
        assert!(line.contains(part), "{part} missing from {line}");
    }
    let fp = line
        .split("active_fingerprint")
        .nth(1)
        .and_then(|rest| {
            rest.split(|c: char| !c.is_ascii_hexdigit())
                .find(|t| t.len() == 16)
        })
        .unwrap_or_else(|| panic!("no fingerprint in {line}"));
    assert!(
        validated.contains(&format!("a (fingerprint {fp})")),
        "the logged fingerprint is the active key's: {line}\n{validated}"
    );
    for key in [&key_a, &key_eu] {
        let text = std::fs::read_to_string(key).unwrap();
        assert!(!log.contains(text.trim()), "key material in the log");
    }

    let lines = jsonl_lines(&out);
    use base64::Engine as _;
    for l in &lines {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(l["payload"].as_str().unwrap())
            .unwrap();
        let id = String::from_utf8_lossy(&bytes[5..5 + bytes[4] as usize]).into_owned();
        let subject = l["subject"].as_str().unwrap();
        let want = if subject.starts_with("rules.eu.") {
            "eu"
        } else {
            "a"
        };
        assert_eq!(id, want, "key of {subject}");
    }
    assert_no_plaintext(
        lines
            .iter()
            .map(|l| l.to_string())
            .collect::<String>()
            .as_bytes(),
    );
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let (code, records, err) = decrypt(dir.path(), &path, &text);
    assert_eq!(code, 0, "{err}");
    assert_clear(&records, 6);
}

#[test]
fn a_key_rule_naming_an_unknown_key_stops_start_up_with_exit_78_naming_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path(), "a.key");
    let cfg = json!({
        "nats": {"servers": ["nats://127.0.0.1:1"]},
        "http": {"enabled": false},
        "sinks": {"main": {
            "source": {"stream": "S", "consumer": "c"},
            "encryption": {"active_key": "a", "keys": [{"id": "a", "file": key}],
                           "rules": [{"subjects": ["s.eu.>"], "key_id": "nope"}]},
            "destination": {"type": "file", "directory": dir.path().join("out")}
        }}
    });
    let path = write_config(dir.path(), &cfg);
    for command in ["run", "validate"] {
        let (code, out, err) = jetsink(&[command, "--config", path.to_str().unwrap()], dir.path());
        assert_eq!(code, 78, "{command}: {out}{err}");
        assert!(
            err.contains("sinks.main.encryption.rules[0].key_id") && err.contains("\"nope\""),
            "{command}: {err}"
        );
    }
}
