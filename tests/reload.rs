//! Reloading the config of a running daemon (SIGHUP) and destinations that are late (issue
//! 51): a sink added by a reload drains its stream while the running sink is untouched (no
//! redelivery, same process); a reload that removes one sink and changes another writes
//! every message once; an invalid file, or one changing a restart-only setting, changes
//! nothing and is counted as failed; a PostgreSQL sink whose port is closed waits (the
//! process up, `/readyz` naming it) while an SQLite sink drains, and drains once the port
//! opens; a refused login is still exit 78 at start, and `--fail-fast` keeps exit 69.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::pg::PgDatabase;
use common::*;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(90);

/// A sink reading `stream` (which the test creates) into SQLite table `events` of `db`.
fn sqlite_sink(stream: &str, subject: &str, db: &str, batch: u32) -> Value {
    json!({
        "source": {"stream": stream, "subjects": subject, "consumer": "jetsink", "ack_wait_ms": 30000},
        "delivery": {"batch_size": batch},
        "destination": {"type": "sqlite", "path": db, "table": "events"}
    })
}

fn daemon_config(server: &NatsServer, listen: &str, sinks: Value) -> Value {
    json!({
        "nats": {"servers": [server.url()], "connect_timeout_ms": 2000},
        "http": {"listen": listen},
        "logging": {"level": "info"},
        "sinks": sinks
    })
}

/// Rows of `events` in `db`, and how many of them were written from a redelivery.
fn rows(db: &Path) -> (u64, u64) {
    let total = sqlite_count(db, "events");
    let Ok(conn) = rusqlite::Connection::open(db) else {
        return (total, 0);
    };
    let again = conn
        .query_row("SELECT COUNT(*) FROM events WHERE delivered > 1", [], |r| {
            r.get::<_, i64>(0)
        })
        .unwrap_or(0);
    (total, again as u64)
}

async fn reloads(listen: &str, result: &str) -> f64 {
    let series = format!("jetsink_config_reloads_total{{result=\"{result}\"}}");
    metric_value(listen, &series).await.unwrap_or(-1.0)
}

async fn readyz(listen: &str) -> Option<(u16, String)> {
    http(reqwest::Method::GET, &format!("http://{listen}/readyz")).await
}

/// Streams `A`..: one per name, each capturing `<name lowercased>.>`.
async fn streams(js: &async_nats::jetstream::Context, names: &[&str]) {
    for n in names {
        create_stream(js, n, &format!("{}.>", n.to_lowercase())).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sink_added_by_sighup_drains_its_stream_and_the_running_sink_sees_no_redelivery() {
    let server = NatsServer::start();
    let js = server.js().await;
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    streams(&js, &["RA", "RB"]).await;
    let one = json!({"a": sqlite_sink("RA", "ra.>", "data/a.db", 50)});
    let config = write_config(dir.path(), &daemon_config(&server, &listen, one));
    let mut daemon = Daemon::start(&config, dir.path());
    daemon.wait_for_log(WAIT, "sink running").await;
    let pid = daemon.pid();
    publish_n(&js, "ra.x", 300).await;
    publish_n(&js, "rb.x", 200).await;

    let two = json!({
        "a": sqlite_sink("RA", "ra.>", "data/a.db", 50),
        "b": sqlite_sink("RB", "rb.>", "data/b.db", 50),
    });
    write_config(dir.path(), &daemon_config(&server, &listen, two));
    daemon.hangup();
    // Messages keep flowing into the running sink while the reload is applied.
    publish_n(&js, "ra.x", 300).await;

    let (a, b) = (dir.path().join("data/a.db"), dir.path().join("data/b.db"));
    daemon
        .eventually(WAIT, "the added sink drains its stream", || async {
            sqlite_count(&b, "events") == 200
        })
        .await;
    daemon
        .eventually(WAIT, "the running sink writes all 600", || async {
            sqlite_count(&a, "events") == 600 && drained(&js, "RA").await
        })
        .await;
    assert_eq!(reloads(&listen, "ok").await, 1.0);
    assert_eq!(reloads(&listen, "failed").await, 0.0);
    let info = consumer_info(&js, "RA", "jetsink").await;
    assert_eq!(info.num_redelivered, 0, "the running sink was not touched");
    assert_eq!(info.delivered.stream_sequence, 600);
    assert_eq!(rows(&a), (600, 0), "each row once, none from a redelivery");
    assert_eq!(daemon.pid(), pid);
    assert!(daemon.exited().is_none(), "{}", daemon.log_text());
    daemon.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_removing_one_sink_and_changing_another_writes_every_message_once() {
    let server = NatsServer::start();
    let js = server.js().await;
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    streams(&js, &["KA", "KB", "KC"]).await;
    let all = json!({
        "a": sqlite_sink("KA", "ka.>", "data/a.db", 50),
        "b": sqlite_sink("KB", "kb.>", "data/b.db", 50),
        "c": sqlite_sink("KC", "kc.>", "data/c.db", 50),
    });
    let config = write_config(dir.path(), &daemon_config(&server, &listen, all.clone()));
    let mut daemon = Daemon::start(&config, dir.path());
    for s in ["ka.x", "kb.x", "kc.x"] {
        publish_n(&js, s, 300).await;
    }
    let db = |n: &str| dir.path().join(format!("data/{n}.db"));
    daemon
        .eventually(WAIT, "every sink writes its first 300", || async {
            ["a", "b", "c"]
                .iter()
                .all(|n| sqlite_count(&db(n), "events") == 300)
        })
        .await;

    // b removed, c with another batch size, a unchanged; messages keep coming meanwhile.
    let fewer = json!({
        "a": sqlite_sink("KA", "ka.>", "data/a.db", 50),
        "c": sqlite_sink("KC", "kc.>", "data/c.db", 7),
    });
    write_config(dir.path(), &daemon_config(&server, &listen, fewer));
    daemon.hangup();
    for s in ["ka.x", "kb.x", "kc.x"] {
        publish_n(&js, s, 300).await;
    }
    daemon
        .eventually(WAIT, "the reload is applied", || async {
            reloads(&listen, "ok").await == 1.0
        })
        .await;
    daemon
        .eventually(WAIT, "a and c write all 600", || async {
            sqlite_count(&db("a"), "events") == 600
                && sqlite_count(&db("c"), "events") == 600
                && drained(&js, "KC").await
        })
        .await;
    // The removed sink pulls nothing more: no pull of it waits in the server, and what is
    // published after its removal stays in its stream. (A batch that was arriving as it
    // stopped is, as at SIGTERM, handed back or redelivered after AckWait.)
    let b = consumer_info(&js, "KB", "jetsink").await;
    assert_eq!(b.num_waiting, 0, "{b:?}");
    assert!(b.num_pending > 0, "{b:?}");
    let (_, body) = readyz(&listen).await.expect("readyz answers");
    assert!(
        !body.contains("sink b"),
        "the removed sink left /readyz: {body}"
    );
    let pending = |sink: &str| {
        format!("jetsink_consumer_pending_messages{{consumer=\"jetsink\",sink=\"{sink}\"}}")
    };
    assert_eq!(
        metric_value(&listen, &pending("b")).await,
        None,
        "the removed sink's backlog series are gone"
    );
    assert!(metric_value(&listen, &pending("a")).await.is_some());

    // b back: it writes what was published while it was gone, each message once.
    write_config(dir.path(), &daemon_config(&server, &listen, all));
    daemon.hangup();
    daemon
        .eventually(WAIT, "b drains once it is back", || async {
            sqlite_count(&db("b"), "events") == 600 && drained(&js, "KB").await
        })
        .await;
    assert_eq!(
        rows(&db("a")),
        (600, 0),
        "the unchanged sink: no redelivery"
    );
    assert_eq!(consumer_info(&js, "KA", "jetsink").await.num_redelivered, 0);
    for n in ["b", "c"] {
        assert_eq!(rows(&db(n)).0, 600, "sink {n}: every message once");
    }
    assert_eq!(reloads(&listen, "ok").await, 2.0);
    daemon.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_invalid_file_or_a_restart_only_change_on_sighup_changes_nothing() {
    let server = NatsServer::start();
    let js = server.js().await;
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    streams(&js, &["IV"]).await;
    let sinks = json!({"a": sqlite_sink("IV", "iv.>", "data/a.db", 50)});
    let good = daemon_config(&server, &listen, sinks.clone());
    let config = write_config(dir.path(), &good);
    let mut daemon = Daemon::start(&config, dir.path());
    daemon.wait_for_log(WAIT, "sink running").await;
    let pid = daemon.pid();

    let mut invalid = good.clone();
    invalid["sinks"]["a"]["delivery"] = json!({"batch_sise": 10});
    write_config(dir.path(), &invalid);
    daemon.hangup();
    daemon
        .eventually(WAIT, "the invalid reload is counted", || async {
            reloads(&listen, "failed").await == 1.0
        })
        .await;
    assert_eq!(
        metric_value(&listen, "jetsink_config_last_reload_successful").await,
        Some(0.0)
    );
    assert!(
        daemon.log_text().contains("batch_sise"),
        "the error names the key:\n{}",
        daemon.log_text()
    );

    let mut moved = good.clone();
    moved["http"]["listen"] = json!(format!("127.0.0.1:{}", free_port()));
    write_config(dir.path(), &moved);
    daemon.hangup();
    daemon
        .eventually(WAIT, "the restart-only change is refused", || async {
            reloads(&listen, "failed").await == 2.0
        })
        .await;
    let log = daemon.log_text();
    assert!(
        log.contains("these settings change only with a restart") && log.contains("http"),
        "{log}"
    );

    // Still running as it was: ready, and writing.
    publish_n(&js, "iv.x", 100).await;
    let db = dir.path().join("data/a.db");
    daemon
        .eventually(WAIT, "the sink keeps writing", || async {
            sqlite_count(&db, "events") == 100
        })
        .await;
    let (status, body) = readyz(&listen).await.expect("readyz answers");
    assert_eq!(status, 200, "{body}");
    assert_eq!(reloads(&listen, "ok").await, 0.0);
    assert_eq!(daemon.pid(), pid);
    daemon.stop_cleanly();
}

/// Accepts connections on `port` and joins each to PostgreSQL on 127.0.0.1:5432: the
/// destination "appearing" on a port where nothing listened.
async fn proxy_to_postgres(port: u16) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("bind the proxy's port");
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect("127.0.0.1:5432").await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    })
}

fn postgres_sink(port: u16, database: &str) -> Value {
    json!({
        "source": {"stream": "LPG", "subjects": "lpg.>", "consumer": "jetsink", "ack_wait_ms": 30000},
        "delivery": {"batch_size": 50},
        "destination": {
            "type": "postgres", "host": "127.0.0.1", "port": port, "user": "postgres",
            "database": database, "table": "events", "auto_create": true,
            "connect_timeout_ms": 1000
        }
    })
}

async fn pg_rows(db: &PgDatabase) -> (i64, i64) {
    let client = db.client().await;
    match client
        .query_one(
            "SELECT COUNT(*), COUNT(DISTINCT stream_sequence) FROM events",
            &[],
        )
        .await
    {
        Ok(row) => (row.get(0), row.get(1)),
        Err(_) => (0, 0),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_postgres_sink_on_a_closed_port_waits_while_an_sqlite_sink_drains_then_drains_once() {
    let pg = PgDatabase::create("late").await;
    let server = NatsServer::start();
    let js = server.js().await;
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let port = free_port();
    streams(&js, &["LPG", "LSQ"]).await;
    publish_n(&js, "lpg.x", 200).await;
    publish_n(&js, "lsq.x", 200).await;
    let sinks = json!({
        "pg": postgres_sink(port, &pg.name),
        "lite": sqlite_sink("LSQ", "lsq.>", "data/lite.db", 50),
    });
    let config = write_config(dir.path(), &daemon_config(&server, &listen, sinks));
    let mut daemon = Daemon::start(&config, dir.path());
    let lite = dir.path().join("data/lite.db");
    daemon
        .eventually(
            WAIT,
            "the SQLite sink drains beside the waiting one",
            || async { sqlite_count(&lite, "events") == 200 },
        )
        .await;
    daemon
        .eventually(WAIT, "/readyz names the waiting sink", || async {
            readyz(&listen).await.is_some_and(|(status, body)| {
                status == 503 && body.contains("sink pg: waiting for its destination")
            })
        })
        .await;
    let waiting = "jetsink_sink_state{sink=\"pg\",state=\"waiting\"}";
    assert_eq!(metric_value(&listen, waiting).await, Some(1.0));
    let running = "jetsink_sink_state{sink=\"lite\",state=\"running\"}";
    assert_eq!(metric_value(&listen, running).await, Some(1.0));
    assert_eq!(
        consumer_info(&js, "LPG", "jetsink")
            .await
            .delivered
            .stream_sequence,
        0
    );

    let proxy = proxy_to_postgres(port).await;
    daemon
        .eventually(
            WAIT,
            "the PostgreSQL sink drains once its port opens",
            || async { pg_rows(&pg).await == (200, 200) && drained(&js, "LPG").await },
        )
        .await;
    daemon
        .eventually(WAIT, "ready once nothing waits", || async {
            readyz(&listen).await.is_some_and(|(s, _)| s == 200)
        })
        .await;
    assert!(daemon
        .log_text()
        .contains("destination not available; the sink waits"));
    daemon.stop_cleanly();
    proxy.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_login_is_exit_78_at_start_and_fail_fast_keeps_exit_69_on_a_closed_port() {
    let pg = PgDatabase::create("refused").await;
    let server = NatsServer::start();
    let js = server.js().await;
    let dir = tempfile::tempdir().unwrap();
    streams(&js, &["LPG"]).await;
    let listen = format!("127.0.0.1:{}", free_port());
    streams(&js, &["LSQ"]).await;
    publish_n(&js, "lsq.x", 10).await;
    let mut refused = postgres_sink(5432, &pg.name);
    refused["destination"]["user"] = json!("no_such_role_jetsink");
    // "lite" is ready before "pg" is refused: start-up is still all-or-nothing.
    let sinks = json!({"lite": sqlite_sink("LSQ", "lsq.>", "data/lite.db", 50), "pg": refused});
    let cfg = daemon_config(&server, &listen, sinks);
    let log = refused_at_start(dir.path(), &cfg, 78);
    assert!(log.contains("sink pg: cannot open destination"), "{log}");
    let lite = consumer_info(&js, "LSQ", "jetsink").await;
    assert_eq!(
        lite.delivered.stream_sequence, 0,
        "nothing was fetched: {lite:?}"
    );

    let closed = daemon_config(
        &server,
        &listen,
        json!({"pg": postgres_sink(free_port(), &pg.name)}),
    );
    // refused_at_start runs exit 69 with --fail-fast.
    let log = refused_at_start(dir.path(), &closed, 69);
    assert!(log.contains("sink pg: cannot open destination"), "{log}");
}

/// Writes `cfg` as `jetsink.json` in a fresh directory `<root>/<name>` and points
/// `<root>/..data` at it by renaming a new symlink over the old one, as the kubelet updates
/// a mounted ConfigMap; `<root>/jetsink.json` links to `..data/jetsink.json`.
fn configmap_update(root: &Path, name: &str, cfg: &Value) {
    let version = root.join(name);
    std::fs::create_dir_all(&version).unwrap();
    write_config(&version, cfg);
    let tmp = root.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(name, &tmp).unwrap();
    std::fs::rename(&tmp, root.join("..data")).unwrap();
    let link = root.join("jetsink.json");
    if std::fs::symlink_metadata(&link).is_err() {
        std::os::unix::fs::symlink("..data/jetsink.json", &link).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn watch_config_reloads_when_a_configmap_swaps_its_data_symlink() {
    let server = NatsServer::start();
    let js = server.js().await;
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    streams(&js, &["WA", "WB"]).await;
    let mount = dir.path().join("config");
    let one = json!({"a": sqlite_sink("WA", "wa.>", "data/a.db", 50)});
    configmap_update(&mount, "v1", &daemon_config(&server, &listen, one));
    let config = mount.join("jetsink.json");
    let mut daemon = Daemon::start_with_flags(&config, dir.path(), &["--watch-config"]);
    daemon.wait_for_log(WAIT, "sink running").await;
    publish_n(&js, "wa.x", 100).await;
    publish_n(&js, "wb.x", 100).await;

    let two = json!({
        "a": sqlite_sink("WA", "wa.>", "data/a.db", 50),
        "b": sqlite_sink("WB", "wb.>", "data/b.db", 50),
    });
    configmap_update(&mount, "v2", &daemon_config(&server, &listen, two));
    let b = dir.path().join("data/b.db");
    daemon
        .eventually(WAIT, "the sink the new ConfigMap adds drains", || async {
            sqlite_count(&b, "events") == 100
        })
        .await;
    assert_eq!(reloads(&listen, "ok").await, 1.0);
    let a = dir.path().join("data/a.db");
    assert_eq!(rows(&a), (100, 0));
    daemon.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_and_sigterm_together_stop_cleanly_and_a_restart_writes_every_message_once() {
    let server = NatsServer::start();
    let js = server.js().await;
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    streams(&js, &["TA", "TB"]).await;
    publish_n(&js, "ta.x", 200).await;
    publish_n(&js, "tb.x", 200).await;
    let one = json!({"a": sqlite_sink("TA", "ta.>", "data/a.db", 20)});
    let config = write_config(dir.path(), &daemon_config(&server, &listen, one));
    let mut daemon = Daemon::start(&config, dir.path());
    daemon.wait_for_log(WAIT, "sink running").await;
    let two = json!({
        "a": sqlite_sink("TA", "ta.>", "data/a.db", 20),
        "b": sqlite_sink("TB", "tb.>", "data/b.db", 20),
    });
    write_config(dir.path(), &daemon_config(&server, &listen, two));
    // Whichever the daemon sees first, it ends stopped: every sink it runs (or the reload
    // started) settles as at SIGTERM, and no reload starts after the stop.
    daemon.hangup();
    daemon.stop_cleanly();

    let mut again = Daemon::start(&config, dir.path());
    let (a, b) = (dir.path().join("data/a.db"), dir.path().join("data/b.db"));
    again
        .eventually(WAIT, "both sinks drain after the restart", || async {
            sqlite_count(&a, "events") == 200
                && sqlite_count(&b, "events") == 200
                && drained(&js, "TA").await
                && drained(&js, "TB").await
        })
        .await;
    again.stop_cleanly();
}
