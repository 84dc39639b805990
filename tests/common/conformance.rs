//! The conformance suite of the database destinations: what every engine must do the same
//! way, written once as generic test bodies over [`TestDatabase`]. `tests/postgres.rs` and
//! `tests/mysql.rs` implement the trait for their server and instantiate every body with one
//! line, [`conformance_suite!`](crate::conformance_suite); each keeps only the tests of
//! what is engine-specific (its default layout's types, PostgreSQL's COPY path and slow
//! triggers, MySQL's split statements and row-naming errors).
//!
//! Engine-specific SQL and error codes are the trait's items, so an assertion that names a
//! SQLSTATE on PostgreSQL names the matching error number on MySQL.

use std::time::Duration;

use async_nats::HeaderMap;
use bytes::Bytes;
use jetsink::envelope::Envelope;
use jetsink::sinks::{Located, Probe, Sink, SinkError, Wanted};
use serde_json::{json, Value};

use super::database::{envelope, json_batch, misconfigured, traced, TRACEPARENT, TRACE_ID};
use super::*;

pub use super::state_tables::*;

/// One engine's test server: a database of its own per test (dropped with the value), the
/// sink under test, and the SQL and error codes that differ between engines.
#[allow(async_fn_in_trait)]
pub trait TestDatabase: Sized {
    /// The destination's config section.
    type Config: serde::de::DeserializeOwned + Clone;
    /// The sink under test.
    type Sink: Sink;
    /// Drops a user created by [`TestDatabase::create_reader`] when dropped.
    type UserGuard;
    /// Keeps every other connection from writing a table until it is dropped.
    type WriteLock;

    /// The destination `type` (`postgres`, `mysql`), also how its errors name it.
    const KIND: &'static str;
    /// Prefix of the stream names of the daemon tests, so the engines' streams differ.
    const STREAM: &'static str;
    /// Port and user of the local server.
    const PORT: u16;
    const USER: &'static str;
    /// The payload types that store JSON natively and bytes.
    const JSON_PAYLOAD: &'static str;
    const BYTES_PAYLOAD: &'static str;
    /// The config extras that select each write path (PostgreSQL: INSERT and COPY).
    const WRITE_PATHS: &'static [&'static str];
    /// The config extra for the idempotency test, the rows of its large batch (enough to
    /// take the second write path), and how many rows its rewrites write at a time.
    const IDEMPOTENCY_EXTRA: &'static str;
    const BIG_BATCH: u64;
    const REWRITE_CHUNK: usize;
    /// Error code of a CHECK constraint violation, and the orders table's constraint name.
    const CHECK_VIOLATION: &'static str;
    const CHECK_NAME: &'static str;
    /// Error code of a database that does not exist.
    const UNKNOWN_DATABASE: &'static str;
    /// What a missing INSERT privilege's error names (the first is also checked mid-run).
    const NO_PRIVILEGE: &'static [&'static str];
    /// The type the orders table's `paid` column reports.
    const BOOLEAN_TYPE: &'static str;
    /// A column type holding a time (UTC), for the state tables' delete column.
    const TIMESTAMP: &'static str;

    /// Creates the test's database, named after `tag`.
    async fn create(tag: &str) -> Self;
    /// The database's name.
    fn name(&self) -> &str;
    /// Runs one statement, failing the test on an error.
    async fn exec(&self, sql: &str);
    /// `SELECT COUNT(*) FROM <from>`, or -1 when the query fails (a missing table).
    async fn count(&self, from: &str) -> i64;
    /// The sink for `config`, not opened.
    fn sink(config: Self::Config) -> Self::Sink;
    /// Creates the typed `orders` table the mapping tests write to.
    async fn orders_table(&self, name: &str);
    /// Renames a table.
    fn rename_sql(from: &str, to: &str) -> String;
    /// A condition true of a row whose payload is the JSON document `{"n": n}`.
    fn json_payload_is(n: i64) -> String;
    /// A condition true when column `column` holds a time within ten minutes of now (UTC).
    fn recent(column: &str) -> String;
    /// Creates user `user` that may read but not write `events`.
    async fn create_reader(&self, user: &str) -> Self::UserGuard;
    /// Grants or revokes `user`'s right to write `events`.
    async fn allow_writes(&self, user: &str, allowed: bool);
    /// Row `order_id = 42` of `orders`: amount as text, customer, paid, tags, subject, seq,
    /// note.
    async fn order_42(&self) -> OrderRow;
    /// Creates `seen (seq, conn)` and a trigger on `table` that records, for every row
    /// inserted, its stream sequence and the server's id of the connection that wrote it.
    async fn record_connections(&self, table: &str);
    /// Locks `table` against writes from every other connection, until the lock is dropped.
    async fn lock_writes(&self, table: &str) -> Self::WriteLock;
    /// What [`TestDatabase::count`] counts to find the sessions of this database waiting for
    /// a table lock, as writes behind [`TestDatabase::lock_writes`] do.
    fn lock_waiters() -> &'static str;

    /// The destination object of a daemon config, with `extra` keys merged in.
    fn destination(&self, extra: Value) -> Value {
        let mut d = json!({"type": Self::KIND, "host": "127.0.0.1", "port": Self::PORT,
                           "user": Self::USER, "database": self.name(), "table": "events"});
        merge(&mut d, &extra);
        d
    }

    /// The sink config, with `extra` keys merged in.
    fn config(&self, extra: Value) -> Self::Config {
        let mut d = self.destination(extra);
        if let Some(o) = d.as_object_mut() {
            o.remove("type");
        }
        parse_config::<Self>(d)
    }
}

/// Row 42 of the mapped orders table, as the engines read it back.
#[derive(Debug, PartialEq)]
pub struct OrderRow {
    pub amount: String,
    pub customer: Option<String>,
    pub paid: Option<bool>,
    pub tags: Value,
    pub subject: String,
    pub seq: i64,
    pub note: Option<String>,
}

/// Instantiates conformance bodies as `#[tokio::test]`s for one engine:
/// `conformance_tests!(Pg; stored_keys_counts_one_stream, ...);`
#[macro_export]
macro_rules! conformance_tests {
    ($db:ty; $($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread")]
        async fn $name() {
            $crate::common::conformance::$name::<$db>().await
        }
    )*};
}

/// Instantiates the whole suite for one engine: `conformance_suite!(Pg);`. A body added
/// to this file is added here once and runs on every engine.
#[macro_export]
macro_rules! conformance_suite {
    ($db:ty) => {
        $crate::conformance_tests!(
            $db;
            rewriting_batches_is_idempotent_on_every_write_path,
            json_payloads_are_stored_natively_and_a_non_json_one_is_refused_by_index,
            a_constraint_violation_is_permanent_and_commits_nothing_of_the_batch,
            open_refuses_tables_it_cannot_write_as_configuration_errors,
            a_user_without_insert_privilege_is_refused_at_open_and_held_mid_run,
            a_table_renamed_away_is_an_outage_and_is_not_recreated,
            an_unreachable_server_is_transient,
            stored_keys_counts_one_stream_and_declines_a_mapping_without_the_key,
            sigkill_mid_drain_then_restart_stores_10000_rows_exactly_once,
            two_batches_in_flight_wait_for_a_locked_table_at_once_and_all_commit,
            the_second_writer_takes_what_arrives_after_a_pull_ahead_found_nothing,
            table_renamed_away_mid_drain_holds_the_batch_and_drains_after_it_returns,
            a_row_breaking_a_check_constraint_is_isolated_and_the_rest_commit,
            column_mapping_fills_a_typed_user_table,
            start_up_exits_78_for_a_wrong_table_and_69_for_an_unreachable_server,
            bench_of_a_configured_sink_verifies_every_key_in_scratch_tables_it_drops_even_for_a_mapped_table,
            locate_finds_a_written_key_and_a_message_id_and_not_an_absent_one,
            a_batch_spread_over_two_connections_commits_each_run_on_its_own,
            a_valid_traceparent_stores_its_trace_id_on_every_write_path_and_none_stores_null,
            a_default_table_from_before_trace_ids_gains_the_column_and_keeps_its_rows,
            a_message_published_with_a_traceparent_has_its_trace_id_in_the_row,
            an_ordered_upsert_keeps_the_newest_whatever_the_write_order_on_every_write_path,
            a_delete_then_an_older_update_leaves_the_key_deleted_and_a_newer_one_revives_it,
            replaying_an_old_range_leaves_every_key_at_its_newest,
            shuffled_updates_leave_every_key_at_its_last_published_value,
            randomized_updates_leave_every_key_at_its_last_published_value,
            two_batches_in_flight_leave_every_key_at_its_last_published_value,
            sigkill_mid_batch_of_updates_then_restart_leaves_every_key_at_its_newest,
            validate_online_shows_the_order_column_and_the_delete_marker_it_checked,
        );
    };
}

/// A unique database name for one test.
pub fn unique_name(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("jetsink_t_{tag}_{}_{nanos}", std::process::id())
}

/// Runs `work` on a runtime of its own on another thread: `Drop` runs inside the test's
/// runtime, which cannot block on a future.
pub fn on_own_runtime<F: std::future::Future<Output = ()> + Send + 'static>(work: F) {
    let _ = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(work);
    })
    .join();
}

fn merge(into: &mut Value, extra: &Value) {
    if let (Some(d), Some(extra)) = (into.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            d.insert(k.clone(), v.clone());
        }
    }
}

fn parse_config<D: TestDatabase>(value: Value) -> D::Config {
    serde_json::from_value(value).expect("destination config")
}

fn extra(text: &str) -> Value {
    serde_json::from_str(text).expect("config extra")
}

async fn opened<D: TestDatabase>(config: D::Config) -> D::Sink {
    let mut sink = D::sink(config);
    sink.open().await.expect("open");
    sink
}

/// The column mapping of the typed orders table.
pub fn orders_columns() -> Value {
    json!({
        "order_id": "/order/id", "amount": "/amount", "customer": "/customer/name",
        "paid": "/paid", "tags": "/tags", "subject": "$subject", "seq": "$stream_sequence",
        "published": "$published_at", "note": "$header:X-Note"
    })
}

/// An order as envelope `seq`, with its note header.
pub fn order(seq: u64, id: i64, amount: &str) -> Envelope {
    let mut e = envelope(
        seq,
        format!(
            r#"{{"order":{{"id":{id}}},"amount":{amount},"customer":{{"name":"c{id}"}},"paid":true,"tags":["x",{id}]}}"#
        )
        .as_bytes(),
    );
    e.headers
        .push(("X-Note".into(), vec![format!("note {id}")]));
    e
}

/// Publishes orders `ids`; order `bad` gets a negative amount the CHECK refuses.
pub async fn publish_orders(
    js: &async_nats::jetstream::Context,
    subject: &str,
    ids: std::ops::Range<i64>,
    bad: i64,
) {
    for id in ids {
        let amount = if id == bad {
            "-1".to_string()
        } else {
            format!("{id}.25")
        };
        let mut headers = HeaderMap::new();
        headers.insert("X-Note", format!("note {id}").as_str());
        let payload = format!(
            r#"{{"order":{{"id":{id}}},"amount":{amount},"customer":{{"name":"c{id}"}},"paid":{},"tags":["t{id}"]}}"#,
            id % 2 == 0
        );
        js.publish_with_headers(subject.to_string(), headers, payload.into())
            .await
            .expect("publish")
            .await
            .expect("puback");
    }
}

// ---------------------------------------------------------------- the sink on its own

pub async fn rewriting_batches_is_idempotent_on_every_write_path<D: TestDatabase>() {
    let db = D::create("idem").await;
    let mut sink = opened::<D>(db.config(extra(D::IDEMPOTENCY_EXTRA))).await;
    let big = json_batch(1..=D::BIG_BATCH);
    let small = json_batch(D::BIG_BATCH + 1..=D::BIG_BATCH + 10);
    sink.write_batch(&big).await.unwrap();
    sink.write_batch(&small).await.unwrap();
    let total = D::BIG_BATCH as i64 + 10;
    let mut again: Vec<Envelope> = json_batch(1..=D::BIG_BATCH + 10);
    for e in &mut again {
        e.delivered = 2;
        e.payload = Bytes::from_static(b"changed");
    }
    for part in again.chunks(D::REWRITE_CHUNK) {
        sink.write_batch(part).await.unwrap();
    }
    assert_eq!(db.count("events").await, total);
    assert_eq!(
        db.count("events WHERE delivered = 1 AND payload <> 'changed'")
            .await,
        total,
        "insert_ignore keeps the first write"
    );

    // upsert: a message replaces the row only when newer (by its stream sequence, the
    // layout's order): the same messages again change nothing, on every path...
    let mut upsert_extra = extra(D::IDEMPOTENCY_EXTRA);
    upsert_extra["mode"] = json!("upsert");
    let mut upsert = opened::<D>(db.config(upsert_extra)).await;
    for part in again.chunks(D::REWRITE_CHUNK) {
        upsert.write_batch(part).await.unwrap();
    }
    assert_eq!(
        db.count("events WHERE delivered = 1 AND payload <> 'changed'")
            .await,
        total,
        "a replay of a stored message changes nothing"
    );
    // ...and later messages with the same keys (Nats-Msg-Id keys) replace them, while the
    // older ones written again after them do not.
    let mut newer: Vec<Envelope> = json_batch(total as u64 + 1..=2 * total as u64);
    for (e, old) in newer.iter_mut().zip(&again) {
        e.idempotency_key = old.idempotency_key.clone();
        e.payload = Bytes::from_static(b"newer");
    }
    for part in newer.chunks(D::REWRITE_CHUNK) {
        upsert.write_batch(part).await.unwrap();
    }
    for part in again.chunks(D::REWRITE_CHUNK) {
        upsert.write_batch(part).await.unwrap();
    }
    let newest = format!("events WHERE payload = 'newer' AND stream_sequence > {total}");
    assert_eq!(db.count(&newest).await, total);
    assert_eq!(db.count("events").await, total);
}

pub async fn json_payloads_are_stored_natively_and_a_non_json_one_is_refused_by_index<
    D: TestDatabase,
>() {
    let db = D::create("json").await;
    for (i, path) in D::WRITE_PATHS.iter().enumerate() {
        let table = format!("j{i}");
        let mut cfg = extra(path);
        cfg["payload_type"] = json!(D::JSON_PAYLOAD);
        cfg["table"] = json!(table);
        let mut sink = opened::<D>(db.config(cfg)).await;
        let mut batch = json_batch(1..=5);
        batch[3].payload = Bytes::from_static(b"{not json");
        match sink.write_batch(&batch).await {
            Err(SinkError::Permanent {
                index: Some(3),
                message,
            }) => {
                assert!(message.contains("not JSON"), "{message}");
                assert!(
                    !message.contains("{not json"),
                    "no payload in errors: {message}"
                );
            }
            other => panic!("expected a permanent error at index 3, got {other:?}"),
        }
        assert_eq!(db.count(&table).await, 0, "nothing of the batch");
        batch.remove(3);
        sink.write_batch(&batch).await.unwrap();
        let n5 = format!(
            "{table} WHERE stream_sequence = 5 AND {}",
            D::json_payload_is(5)
        );
        assert_eq!(db.count(&n5).await, 1);
    }
    // payload_type that contradicts an existing table is a configuration error.
    let mut wrong = D::sink(db.config(json!({"payload_type": D::BYTES_PAYLOAD, "table": "j0"})));
    misconfigured(
        wrong.open().await,
        &[format!("payload_type is {}", D::BYTES_PAYLOAD).as_str()],
    );
}

pub async fn a_constraint_violation_is_permanent_and_commits_nothing_of_the_batch<
    D: TestDatabase,
>() {
    let db = D::create("check").await;
    db.orders_table("orders").await;
    for (path_index, path) in D::WRITE_PATHS.iter().enumerate() {
        let mut cfg = extra(path);
        cfg["table"] = json!("orders");
        cfg["columns"] = orders_columns();
        let mut sink = opened::<D>(db.config(cfg)).await;
        let base = path_index as i64 * 100;
        let before = db.count("orders").await;
        let mut batch: Vec<Envelope> = (1..=5).map(|i| order(i, base + i as i64, "1.5")).collect();
        batch[2] = order(3, base + 3, "-7");
        match sink.write_batch(&batch).await {
            Err(SinkError::Permanent {
                index: None,
                message,
            }) => {
                assert!(message.contains(D::CHECK_VIOLATION), "{message}");
                assert!(message.contains(D::CHECK_NAME), "{message}");
                assert!(!message.contains("-7"), "no values in errors: {message}");
            }
            other => panic!("expected a permanent batch error, got {other:?}"),
        }
        assert_eq!(db.count("orders").await, before, "nothing of the batch");
        // The runner retries the parts; the culprit alone is named by index 0.
        assert!(matches!(
            sink.write_batch(&batch[2..3]).await,
            Err(SinkError::Permanent { index: Some(0), .. })
        ));
        sink.write_batch(&batch[..2]).await.unwrap();
        sink.write_batch(&batch[3..]).await.unwrap();
        // A value the column type cannot take is refused the same way.
        let bad_type = order(9, base + 9, "\"lots\"");
        match sink.write_batch(&[bad_type]).await {
            Err(SinkError::Permanent {
                index: Some(0),
                message,
            }) => assert!(!message.contains("lots"), "no values in errors: {message}"),
            other => panic!("expected a permanent error at index 0, got {other:?}"),
        }
    }
    assert_eq!(db.count("orders").await, 4 * D::WRITE_PATHS.len() as i64);
}

pub async fn open_refuses_tables_it_cannot_write_as_configuration_errors<D: TestDatabase>() {
    let db = D::create("misconf").await;
    db.orders_table("orders").await;
    db.exec("CREATE TABLE nokey (a bigint, b text)").await;
    db.exec("CREATE TABLE bare (x int)").await;
    let mapped = |columns: Value, table: &str| {
        D::sink(db.config(json!({"table": table, "columns": columns})))
    };
    let mut cols = orders_columns();
    cols["missing_col"] = json!("/x");
    misconfigured(
        mapped(cols, "orders").open().await,
        &["missing columns: missing_col"],
    );
    let mut cols = orders_columns();
    cols["paid"] = json!("$payload");
    misconfigured(
        mapped(cols, "orders").open().await,
        &[format!("column paid has type {}", D::BOOLEAN_TYPE).as_str()],
    );
    let mut cols = orders_columns();
    cols.as_object_mut().unwrap().remove("subject");
    misconfigured(
        mapped(cols, "orders").open().await,
        &["NOT NULL", "subject"],
    );
    let mut cols = orders_columns();
    cols["order_id"] = json!("$delivered");
    misconfigured(
        mapped(cols, "orders").open().await,
        &["PRIMARY KEY or UNIQUE"],
    );
    misconfigured(
        mapped(json!({"a": "/a", "b": "/b"}), "nokey").open().await,
        &["unique keys found: none"],
    );
    misconfigured(
        mapped(json!({"a": "/a"}), "absent").open().await,
        &["does not exist", "must be created beforehand"],
    );
    // The default layout into a table of another shape.
    misconfigured(
        D::sink(db.config(json!({"table": "bare"}))).open().await,
        &["missing columns: idempotency_key"],
    );
    misconfigured(
        D::sink(db.config(json!({"table": "nothere", "auto_create": false})))
            .open()
            .await,
        &["auto_create is false"],
    );
    let wrong_db = db.config(json!({"database": format!("{}_absent", db.name())}));
    misconfigured(D::sink(wrong_db).open().await, &[D::UNKNOWN_DATABASE]);
    let var = format!("JETSINK_TEST_UNSET_{}_PASSWORD", D::KIND.to_uppercase());
    misconfigured(
        D::sink(db.config(json!({"password_env": &var})))
            .open()
            .await,
        &[var.as_str()],
    );
}

pub async fn a_user_without_insert_privilege_is_refused_at_open_and_held_mid_run<
    D: TestDatabase,
>() {
    let db = D::create("grant").await;
    let user = format!("{}_w", db.name());
    let mut setup = opened::<D>(db.config(json!({}))).await;
    setup.write_batch(&json_batch(1..=1)).await.unwrap();
    let guard = db.create_reader(&user).await;
    let cfg = db.config(json!({"user": user}));
    misconfigured(D::sink(cfg.clone()).open().await, D::NO_PRIVILEGE);
    db.allow_writes(&user, true).await;
    let mut sink = opened::<D>(cfg).await;
    sink.write_batch(&json_batch(2..=3)).await.unwrap();
    db.allow_writes(&user, false).await;
    match sink.write_batch(&json_batch(4..=6)).await {
        Err(SinkError::Transient { message }) => {
            assert!(message.contains(D::NO_PRIVILEGE[0]), "{message}")
        }
        other => panic!("a revoked grant mid-run is an outage, got {other:?}"),
    }
    db.allow_writes(&user, true).await;
    sink.write_batch(&json_batch(4..=6)).await.unwrap();
    assert_eq!(db.count("events").await, 6);
    // Privileges go with the database; the user itself is server-wide, so it goes last.
    drop((sink, setup));
    drop(db);
    drop(guard);
}

pub async fn a_table_renamed_away_is_an_outage_and_is_not_recreated<D: TestDatabase>() {
    let db = D::create("rename").await;
    let mut sink = opened::<D>(db.config(json!({}))).await;
    sink.write_batch(&json_batch(1..=3)).await.unwrap();
    db.exec(&D::rename_sql("events", "away")).await;
    for batch in [json_batch(4..=6), json_batch(4..=6), json_batch(4..=100)] {
        match sink.write_batch(&batch).await {
            Err(SinkError::Transient { .. }) => {}
            other => panic!("expected transient, got {other:?}"),
        }
    }
    assert!(sink.health().await.is_err());
    assert_eq!(
        db.count("events").await,
        -1,
        "a vanished table is waited for, not re-created"
    );
    db.exec(&D::rename_sql("away", "events")).await;
    sink.write_batch(&json_batch(4..=100)).await.unwrap();
    assert_eq!(db.count("events").await, 100);
}

pub async fn an_unreachable_server_is_transient<D: TestDatabase>() {
    let cfg = parse_config::<D>(json!({"host": "127.0.0.1", "port": free_port(),
                                       "database": "x", "connect_timeout_ms": 1_000}));
    match D::sink(cfg).open().await {
        Err(SinkError::Transient { message }) => assert!(message.contains(D::KIND), "{message}"),
        other => panic!("expected transient, got {other:?}"),
    }
}

pub async fn stored_keys_counts_one_stream_and_declines_a_mapping_without_the_key<
    D: TestDatabase,
>() {
    let db = D::create("keys").await;
    let mut sink = opened::<D>(db.config(json!({}))).await;
    sink.write_batch(&json_batch(1..=5)).await.unwrap();
    sink.write_batch(&json_batch(4..=7)).await.unwrap();
    assert_eq!(sink.stored_keys("ORDERS").await.unwrap(), Some(7));
    assert_eq!(sink.stored_keys("OTHER").await.unwrap(), Some(0));
    db.orders_table("orders").await;
    let mut mapped =
        opened::<D>(db.config(json!({"table": "orders", "columns": orders_columns()}))).await;
    assert_eq!(mapped.stored_keys("ORDERS").await.unwrap(), None);
}

pub async fn locate_finds_a_written_key_and_a_message_id_and_not_an_absent_one<D: TestDatabase>() {
    let db = D::create("locate").await;
    // Before the table exists, a lookup says so and creates nothing.
    let mut fresh = D::sink(db.config(json!({})));
    let before = fresh
        .locate("ORDERS", Wanted::Key("ORDERS:1"))
        .await
        .unwrap();
    assert!(
        matches!(&before, Located::Absent(w) if w.contains("does not exist")),
        "{before:?}"
    );
    assert_eq!(db.count("events").await, -1, "a lookup created the table");

    let mut sink = opened::<D>(db.config(json!({}))).await;
    let mut batch = json_batch(1..=3);
    batch[1].delivered = 4;
    sink.write_batch(&batch).await.unwrap();
    let second = &batch[1];
    let key = second.idempotency_key.as_str();
    let found = fresh.locate("ORDERS", Wanted::Key(key)).await.unwrap();
    match &found {
        Located::Stored {
            place,
            sequence,
            delivered,
        } => {
            assert!(place.contains("events") && place.contains(key), "{place}");
            assert_eq!((*sequence, *delivered), (Some(2), Some(4)));
        }
        other => panic!("expected the stored row of {key}, got {other:?}"),
    }
    let id = second
        .message_id
        .as_deref()
        .expect("the envelope has a message id");
    let by_id = fresh.locate("ORDERS", Wanted::MessageId(id)).await.unwrap();
    assert!(
        matches!(
            by_id,
            Located::Stored {
                sequence: Some(2),
                delivered: Some(4),
                ..
            }
        ),
        "{by_id:?}"
    );
    let absent = fresh
        .locate("ORDERS", Wanted::Key("ORDERS:99"))
        .await
        .unwrap();
    assert!(matches!(absent, Located::Absent(_)), "{absent:?}");
    let other_stream = fresh.locate("OTHER", Wanted::Key(key)).await.unwrap();
    assert!(
        matches!(other_stream, Located::Absent(_)),
        "{other_stream:?}"
    );
    let no_id = fresh
        .locate("ORDERS", Wanted::MessageId("id-99"))
        .await
        .unwrap();
    assert!(matches!(no_id, Located::Absent(_)), "{no_id:?}");

    // A mapping without the key cannot be asked, as it cannot count stored keys.
    db.orders_table("orders").await;
    let mut mapped = D::sink(db.config(json!({"table": "orders", "columns": orders_columns()})));
    let declined = mapped.locate("ORDERS", Wanted::Key(key)).await.unwrap();
    assert!(
        matches!(&declined, Located::CannotAsk(why) if why.contains("$idempotency_key")),
        "{declined:?}"
    );
}

pub async fn a_valid_traceparent_stores_its_trace_id_on_every_write_path_and_none_stores_null<
    D: TestDatabase,
>() {
    let db = D::create("trace").await;
    for (i, path) in D::WRITE_PATHS.iter().enumerate() {
        let table = format!("t{i}");
        let mut cfg = extra(path);
        cfg["table"] = json!(table);
        let mut sink = opened::<D>(db.config(cfg)).await;
        // Even sequences carry a valid traceparent; 3 an invalid one (uppercase hex),
        // which is treated as absent.
        let mut batch = json_batch(1..=6);
        for e in batch.iter_mut().filter(|e| e.stream_sequence % 2 == 0) {
            traced(e);
        }
        batch[2]
            .headers
            .push(("traceparent".into(), vec![TRACEPARENT.to_uppercase()]));
        sink.write_batch(&batch).await.unwrap();
        let traced_rows =
            format!("{table} WHERE trace_id = '{TRACE_ID}' AND stream_sequence IN (2, 4, 6)");
        assert_eq!(db.count(&traced_rows).await, 3, "{path}");
        let null_rows = format!("{table} WHERE trace_id IS NULL AND stream_sequence IN (1, 3, 5)");
        assert_eq!(db.count(&null_rows).await, 3, "{path}");
    }
}

pub async fn a_default_table_from_before_trace_ids_gains_the_column_and_keeps_its_rows<
    D: TestDatabase,
>() {
    let db = D::create("addcol").await;
    let mut first = opened::<D>(db.config(json!({}))).await;
    first.write_batch(&json_batch(1..=3)).await.unwrap();
    drop(first);
    db.exec("ALTER TABLE events DROP COLUMN trace_id").await;
    // validate --online says what open will add, and changes nothing.
    match D::sink(db.config(json!({}))).probe().await {
        Ok(Probe::WouldCreate(what)) => assert!(what.contains("columns trace_id"), "{what}"),
        other => panic!("expected the column to be added at open, got {other:?}"),
    }
    assert_eq!(db.count("events WHERE trace_id IS NULL").await, -1);
    let mut sink = opened::<D>(db.config(json!({}))).await;
    let mut batch = json_batch(4..=5);
    traced(&mut batch[0]);
    sink.write_batch(&batch).await.unwrap();
    assert_eq!(db.count("events WHERE trace_id IS NULL").await, 4);
    let row_4 = format!("events WHERE trace_id = '{TRACE_ID}' AND stream_sequence = 4");
    assert_eq!(db.count(&row_4).await, 1);

    // A user who may write the table but not alter it keeps writing it, without it.
    db.exec("ALTER TABLE events DROP COLUMN trace_id").await;
    let user = format!("{}_w", db.name());
    let guard = db.create_reader(&user).await;
    db.allow_writes(&user, true).await;
    let mut limited = opened::<D>(db.config(json!({"user": user}))).await;
    let mut batch = json_batch(6..=7);
    traced(&mut batch[0]);
    limited.write_batch(&batch).await.unwrap();
    assert_eq!(db.count("events").await, 7);
    assert_eq!(db.count("events WHERE trace_id IS NULL").await, -1);
    // Privileges go with the database; the user itself is server-wide, so it goes last.
    drop((sink, limited));
    drop(db);
    drop(guard);
}

// ---------------------------------------------------------------- the whole daemon

pub async fn a_message_published_with_a_traceparent_has_its_trace_id_in_the_row<D: TestDatabase>() {
    let db = D::create("tracepub").await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    let (stream, subjects) = (format!("{}TRACE", D::STREAM), format!("{}trace.>", D::KIND));
    let subject = format!("{}trace.x", D::KIND);
    create_stream(&js, &stream, &subjects).await;
    let mut headers = HeaderMap::new();
    headers.insert("traceparent", TRACEPARENT);
    js.publish_with_headers(subject.clone(), headers, r#"{"n":1}"#.into())
        .await
        .expect("publish")
        .await
        .expect("puback");
    js.publish(subject.clone(), r#"{"n":2}"#.into())
        .await
        .expect("publish")
        .await
        .expect("puback");
    let cfg = config(
        &server,
        &stream,
        &subjects,
        db.destination(json!({})),
        json!({"batch_timeout_ms": 200}),
    );
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    eventually(Duration::from_secs(30), "2 rows", || async {
        db.count("events").await == 2
    })
    .await;
    let row_1 = format!("events WHERE stream_sequence = 1 AND trace_id = '{TRACE_ID}'");
    assert_eq!(db.count(&row_1).await, 1);
    let row_2 = "events WHERE stream_sequence = 2 AND trace_id IS NULL";
    assert_eq!(db.count(row_2).await, 1);
    daemon.stop_cleanly();
}

const N: usize = 10_000;

pub async fn sigkill_mid_drain_then_restart_stores_10000_rows_exactly_once<D: TestDatabase>() {
    let db = D::create("crash").await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    let (stream, subjects) = (format!("{}CRASH", D::STREAM), format!("{}crash.>", D::KIND));
    let subject = format!("{}crash.x", D::KIND);
    create_stream(&js, &stream, &subjects).await;
    // Each kill comes while the daemon holds messages it has not written: a lock on the
    // table holds its writes, and 500 more are published behind the lock, so there is work
    // left whatever the daemon had drained.
    const BEHIND_THE_LOCK: usize = 500;
    publish_n(&js, &subject, N - 3 * BEHIND_THE_LOCK).await;
    for round in 1..=4usize {
        // Round 2 spreads each batch over two connections (runs committed apart), so a kill
        // lands between the runs of a batch; rounds 3 and 4 write two batches at once
        // (`batches_in_flight`), so it lands while both are in flight.
        let (connections, in_flight) = match round {
            2 => (2, 1),
            3 => (1, 2),
            4 => (2, 2),
            _ => (1, 1),
        };
        let mut cfg = config(
            &server,
            &stream,
            &subjects,
            db.destination(json!({"connections": connections})),
            json!({"batch_size": 200, "batch_timeout_ms": 200, "batches_in_flight": in_flight}),
        );
        cfg["sinks"]["main"]["source"]["ack_wait_ms"] = json!(2000);
        let path = write_config(dir.path(), &cfg);
        let mut daemon = Daemon::start(&path, dir.path());
        if round == 4 {
            eventually(Duration::from_secs(60), "every row", || async {
                db.count("events").await == N as i64
            })
            .await;
            eventually(Duration::from_secs(20), "consumer drained", || async {
                consumer_state(&js, &stream, "jetsink").await == (0, 0)
            })
            .await;
            daemon.stop_cleanly();
            break;
        }
        let target = (round * N / 4) as i64;
        eventually(
            Duration::from_secs(60),
            "progress before the kill",
            || async { db.count("events").await >= target },
        )
        .await;
        let lock = db.lock_writes("events").await;
        publish_n(&js, &subject, BEHIND_THE_LOCK).await;
        // The rows stand still under the lock; a delivered sequence above their count is a
        // message the daemon holds and has not written.
        eventually(
            Duration::from_secs(30),
            "a delivered message not yet written",
            || async {
                let rows = db.count("events").await;
                let s = js.get_stream(&stream).await.expect("stream");
                s.consumer_info("jetsink")
                    .await
                    .is_ok_and(|i| i.delivered.stream_sequence as i64 > rows)
            },
        )
        .await;
        daemon.kill();
        drop(lock);
    }
    // N rows, N distinct keys, every sequence in 1..=N: each message exactly once.
    assert_eq!(
        db.count("(SELECT DISTINCT idempotency_key FROM events) k")
            .await,
        N as i64
    );
    assert_eq!(
        db.count(&format!("events WHERE stream_sequence BETWEEN 1 AND {N}"))
            .await,
        N as i64
    );
}

/// A sink with `delivery.batches_in_flight` 2 on a database and stream of its own (named
/// after `tag`), its first message written, then its table locked against writes.
struct LockedInFlight<D: TestDatabase> {
    db: D,
    /// Kept for the test's length: dropping them stops the server and removes the files.
    _server: NatsServer,
    _dir: tempfile::TempDir,
    js: async_nats::jetstream::Context,
    stream: String,
    subject: String,
    cfg: Value,
    daemon: Daemon,
    /// Taken by [`LockedInFlight::unlock_and_drain`].
    lock: Option<D::WriteLock>,
}

impl<D: TestDatabase> LockedInFlight<D> {
    /// Checks that nothing was written under the lock (the first row alone), unlocks the
    /// table, and waits until it holds `rows` rows and every message is ACKed.
    async fn unlock_and_drain(&mut self, rows: i64) {
        assert_eq!(
            self.db.count("events").await,
            1,
            "nothing written under the lock"
        );
        drop(self.lock.take());
        eventually(Duration::from_secs(60), "every row", || async {
            self.db.count("events").await == rows
        })
        .await;
        eventually(Duration::from_secs(20), "every message ACKed", || async {
            consumer_state(&self.js, &self.stream, "jetsink").await == (0, 0)
        })
        .await;
    }
}

async fn locked_in_flight<D: TestDatabase>(tag: &str, rust_log: &str) -> LockedInFlight<D> {
    let db = D::create(tag).await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    let (stream, subjects) = (
        format!("{}{}", D::STREAM, tag.to_uppercase()),
        format!("{}{tag}.>", D::KIND),
    );
    let subject = format!("{}{tag}.x", D::KIND);
    create_stream(&js, &stream, &subjects).await;
    publish_n(&js, &subject, 1).await;
    let cfg = config(
        &server,
        &stream,
        &subjects,
        db.destination(json!({})),
        json!({"batch_size": 100, "batch_timeout_ms": 200, "batches_in_flight": 2}),
    );
    let daemon = Daemon::start_with_log(&write_config(dir.path(), &cfg), dir.path(), rust_log);
    eventually(Duration::from_secs(30), "the first row", || async {
        db.count("events").await == 1
    })
    .await;
    let lock = db.lock_writes("events").await;
    LockedInFlight {
        db,
        _server: server,
        _dir: dir,
        js,
        stream,
        subject,
        cfg,
        daemon,
        lock: Some(lock),
    }
}

/// `delivery.batches_in_flight` 2: with the table locked, two batches wait at once on two
/// sessions (one alone would leave one waiting); once it is unlocked every row is stored
/// and every message ACKed.
pub async fn two_batches_in_flight_wait_for_a_locked_table_at_once_and_all_commit<
    D: TestDatabase,
>() {
    let mut run = locked_in_flight::<D>("flight", "info").await;
    let (db, js, subject) = (&run.db, &run.js, &run.subject);
    publish_n(js, subject, 999).await;
    eventually(
        Duration::from_secs(30),
        "two writes waiting for the lock",
        || async { db.count(D::lock_waiters()).await == 2 },
    )
    .await;
    run.unlock_and_drain(1000).await;
    // The batch that waited on the second writer counts as written ahead.
    let listen = run.cfg["http"]["listen"]
        .as_str()
        .expect("listen")
        .to_string();
    let ahead = metric_value(
        &listen,
        "jetsink_batches_written_ahead_total{sink=\"main\"}",
    )
    .await;
    assert!(ahead.is_some_and(|n| n >= 1.0), "{ahead:?}");
    run.daemon.stop_cleanly();
    assert_eq!(
        run.db
            .count("(SELECT DISTINCT idempotency_key FROM events) k")
            .await,
        1000
    );
}

/// With two batches in flight, a pull ahead that found nothing during a blocked write is
/// followed by another: a message arriving later is written ahead by the second writer
/// instead of waiting for the first write to end.
pub async fn the_second_writer_takes_what_arrives_after_a_pull_ahead_found_nothing<
    D: TestDatabase,
>() {
    let mut run = locked_in_flight::<D>("pullon", "info,jetsink::pipeline=debug").await;
    let (db, js, subject) = (&run.db, &run.js, &run.subject);
    publish_n(js, subject, 1).await;
    eventually(
        Duration::from_secs(30),
        "a write waiting for the lock",
        || async { db.count(D::lock_waiters()).await == 1 },
    )
    .await;
    // Every pull from here on is a pull ahead of the blocked write.
    let empty = "pull found no message";
    let before = run.daemon.log_text().matches(empty).count();
    let log = run.daemon.log.clone();
    run.daemon
        .eventually(
            Duration::from_secs(30),
            "a pull ahead that found nothing",
            || {
                let now = std::fs::read_to_string(&log).unwrap_or_default();
                async move { now.matches(empty).count() > before }
            },
        )
        .await;
    publish_n(js, subject, 1).await;
    eventually(
        Duration::from_secs(30),
        "the later message written ahead, waiting for the lock",
        || async { db.count(D::lock_waiters()).await == 2 },
    )
    .await;
    run.unlock_and_drain(3).await;
    run.daemon.stop_cleanly();
}

pub async fn table_renamed_away_mid_drain_holds_the_batch_and_drains_after_it_returns<
    D: TestDatabase,
>() {
    let db = D::create("outage").await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    let (stream, subjects) = (format!("{}FAIL", D::STREAM), format!("{}fail.>", D::KIND));
    let subject = format!("{}fail.x", D::KIND);
    create_stream(&js, &stream, &subjects).await;
    publish_n(&js, &subject, 500).await;
    let mut cfg = config(
        &server,
        &stream,
        &subjects,
        db.destination(json!({})),
        json!({"batch_size": 100, "batch_timeout_ms": 200,
               "retry": {"initial_backoff_ms": 50, "max_backoff_ms": 300}}),
    );
    cfg["sinks"]["main"]["source"]["ack_wait_ms"] = json!(2000);
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    eventually(Duration::from_secs(30), "first 500 stored", || async {
        db.count("events").await == 500
    })
    .await;
    eventually(Duration::from_secs(10), "acked", || async {
        consumer_state(&js, &stream, "jetsink").await == (0, 0)
    })
    .await;

    db.exec(&D::rename_sql("events", "away")).await;
    publish_n(&js, &subject, 300).await;
    eventually(Duration::from_secs(10), "a batch is held", || async {
        consumer_state(&js, &stream, "jetsink").await.1 > 0
    })
    .await;
    assert_batch_held(&js, &daemon, &stream, 300).await;
    assert_eq!(db.count("away").await, 500);

    db.exec(&D::rename_sql("away", "events")).await;
    eventually(
        Duration::from_secs(30),
        "all 800 stored after the fix",
        || async { db.count("events").await == 800 },
    )
    .await;
    eventually(Duration::from_secs(10), "consumer drained", || async {
        consumer_state(&js, &stream, "jetsink").await == (0, 0)
    })
    .await;
    daemon.stop_cleanly();
}

pub async fn a_row_breaking_a_check_constraint_is_isolated_and_the_rest_commit<D: TestDatabase>() {
    let db = D::create("poison").await;
    db.orders_table("orders").await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    let (stream, subjects) = (format!("{}BAD", D::STREAM), format!("{}bad.>", D::KIND));
    create_stream(&js, &stream, &subjects).await;
    publish_orders(&js, &format!("{}bad.orders", D::KIND), 1..301, 137).await;
    let cfg = config(
        &server,
        &stream,
        &subjects,
        db.destination(json!({"table": "orders", "columns": orders_columns()})),
        // A long reject delay keeps the refused message parked while the test looks.
        json!({"batch_size": 100, "batch_timeout_ms": 200,
               "retry": {"initial_backoff_ms": 50, "max_backoff_ms": 60000}}),
    );
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    eventually(Duration::from_secs(30), "299 good rows", || async {
        db.count("orders").await == 299
    })
    .await;
    eventually(
        Duration::from_secs(10),
        "only the bad one unacked",
        || async {
            let (pending, ack_pending) = consumer_state(&js, &stream, "jetsink").await;
            pending + ack_pending as u64 == 1
        },
    )
    .await;
    assert_eq!(db.count("orders WHERE order_id = 137").await, 0);
    let log = daemon.log_text();
    assert!(log.contains("stream_sequence=137"), "{log}");
    assert!(log.contains(D::CHECK_VIOLATION), "{log}");
    assert!(!log.contains("\"amount\":-1"), "no payloads in logs");
    daemon.stop_cleanly();
}

pub async fn column_mapping_fills_a_typed_user_table<D: TestDatabase>() {
    let db = D::create("mapping").await;
    db.orders_table("orders").await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    let (stream, subjects) = (format!("{}MAP", D::STREAM), format!("{}map.>", D::KIND));
    let subject = format!("{}map.orders", D::KIND);
    create_stream(&js, &stream, &subjects).await;
    publish_orders(&js, &subject, 1..201, -1).await;
    let mut columns = orders_columns();
    columns["note"] = json!("$header:x-note");
    let cfg = config(
        &server,
        &stream,
        &subjects,
        db.destination(json!({"table": "orders", "columns": columns, "mode": "upsert"})),
        json!({"batch_size": 150, "batch_timeout_ms": 200}),
    );
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    eventually(Duration::from_secs(30), "200 rows", || async {
        db.count("orders").await == 200
    })
    .await;
    assert_eq!(
        db.order_42().await,
        OrderRow {
            amount: "42.25".into(),
            customer: Some("c42".into()),
            paid: Some(true),
            tags: json!(["t42"]),
            subject,
            seq: 42,
            note: Some("note 42".into()),
        }
    );
    assert_eq!(
        db.count(&format!("orders WHERE {}", D::recent("published")))
            .await,
        200,
        "published_at is stored in UTC"
    );
    eventually(Duration::from_secs(10), "consumer drained", || async {
        consumer_state(&js, &stream, "jetsink").await == (0, 0)
    })
    .await;
    daemon.stop_cleanly();
}

pub async fn start_up_exits_78_for_a_wrong_table_and_69_for_an_unreachable_server<
    D: TestDatabase,
>() {
    let db = D::create("exit").await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (stream, subjects) = (format!("{}EXIT", D::STREAM), format!("{}exit.>", D::KIND));
    let wrong = config(
        &server,
        &stream,
        &subjects,
        db.destination(json!({"table": "absent", "columns": {"a": "/a"}})),
        json!({}),
    );
    let mut daemon = Daemon::start(&write_config(dir.path(), &wrong), dir.path());
    let status = daemon.wait_exit(Duration::from_secs(20)).expect("exits");
    assert_eq!(status.code(), Some(78), "{}", daemon.log_text());
    assert!(
        daemon.log_text().contains("does not exist"),
        "{}",
        daemon.log_text()
    );

    // Two batches in flight into a table keyed by the order, not the message, where the
    // last write wins: two batches committing in either order could leave an older
    // version of an order.
    db.orders_table("orders").await;
    let by_order = config(
        &server,
        &stream,
        &subjects,
        db.destination(json!({"table": "orders", "columns": orders_columns(),
                              "mode": "upsert", "order": "arrival"})),
        json!({"batches_in_flight": 2}),
    );
    let mut daemon = Daemon::start(&write_config(dir.path(), &by_order), dir.path());
    let status = daemon.wait_exit(Duration::from_secs(20)).expect("exits");
    assert_eq!(status.code(), Some(78), "{}", daemon.log_text());
    assert!(
        daemon
            .log_text()
            .contains("delivery.batches_in_flight: 2 needs a table keyed by the message"),
        "{}",
        daemon.log_text()
    );

    let unreachable = config(
        &server,
        &stream,
        &subjects,
        json!({"type": D::KIND, "port": free_port(), "database": "x", "connect_timeout_ms": 1000}),
        json!({}),
    );
    // With --fail-fast: without it, an unreachable database is waited for (tests/reload.rs).
    let mut daemon = Daemon::start_with_flags(
        &write_config(dir.path(), &unreachable),
        dir.path(),
        &["--fail-fast"],
    );
    let status = daemon.wait_exit(Duration::from_secs(20)).expect("exits");
    assert_eq!(status.code(), Some(69), "{}", daemon.log_text());
}

pub async fn bench_of_a_configured_sink_verifies_every_key_in_scratch_tables_it_drops_even_for_a_mapped_table<
    D: TestDatabase,
>() {
    let db = D::create("bench").await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = bench_configured_sink(&server, dir.path(), db.destination(json!({})), 300);
    assert!(out.contains("verified: 300 distinct keys stored"), "{out}");
    assert!(
        out.contains("; each pass writes a scratch table beside it, dropped after"),
        "the report says where the rows went: {out}"
    );
    // Each pass wrote a scratch table of its own (jetsink's layout, as configured), and
    // dropped it after counting its keys: the configured table was never created.
    assert_eq!(
        db.count("events").await,
        -1,
        "the configured table is untouched"
    );
    let name = db.name();
    let scratch = format!(
        "information_schema.tables WHERE table_name LIKE 'jetsink_bench%' \
         AND (table_schema = '{name}' OR table_catalog = '{name}')"
    );
    assert_eq!(db.count(&scratch).await, 0, "no scratch table is left");

    // A table of the user's own, through a column mapping: each pass writes a copy of it
    // (`CREATE TABLE … LIKE`), and the table itself gets no row.
    db.exec("CREATE TABLE mine (k VARCHAR(200) PRIMARY KEY, s VARCHAR(200), n BIGINT)")
        .await;
    let mapped = db.destination(json!({
        "table": "mine",
        "columns": {"k": "$idempotency_key", "s": "$stream", "n": "/n"}
    }));
    let out = bench_configured_sink(&server, dir.path(), mapped, 300);
    assert!(out.contains("verified: 300 distinct keys stored"), "{out}");
    assert_eq!(
        db.count("mine").await,
        0,
        "the user's table gets no bench row"
    );
    assert_eq!(db.count(&scratch).await, 0, "no scratch copy is left");
}

pub async fn a_batch_spread_over_two_connections_commits_each_run_on_its_own<D: TestDatabase>() {
    let db = D::create("spread").await;
    let mut sink = opened::<D>(db.config(json!({"connections": 2}))).await;
    db.record_connections("events").await;
    let connections = |range: &str| format!("(SELECT DISTINCT conn FROM seen WHERE {range}) AS d");
    sink.write_batch(&json_batch(1..=200)).await.unwrap();
    assert_eq!(db.count("events").await, 200);
    // Two runs in batch order, each on one connection of its own.
    assert_eq!(db.count(&connections("seq <= 200")).await, 2);
    assert_eq!(db.count(&connections("seq <= 100")).await, 1);
    assert_eq!(db.count(&connections("seq > 100 AND seq <= 200")).await, 1);
    // One idempotency key twice: the batch stays on one connection, and the key gets
    // one row, as without connections.
    let mut twice = json_batch(201..=400);
    twice[150].idempotency_key = twice[10].idempotency_key.clone();
    sink.write_batch(&twice).await.unwrap();
    assert_eq!(db.count(&connections("seq > 200")).await, 1);
    assert_eq!(db.count("events").await, 399);
    // A batch too small to cut takes one connection.
    sink.write_batch(&json_batch(401..=500)).await.unwrap();
    assert_eq!(db.count(&connections("seq > 400")).await, 1);
    // A message refused in the second run is named by its place in the batch.
    let cfg = json!({"connections": 2, "payload_type": D::JSON_PAYLOAD, "table": "j"});
    let mut json_sink = opened::<D>(db.config(cfg)).await;
    let mut batch = json_batch(1..=200);
    batch[150].payload = Bytes::from_static(b"{not json");
    match json_sink.write_batch(&batch).await {
        Err(SinkError::Permanent {
            index: Some(150), ..
        }) => {}
        other => panic!("expected a permanent error at batch index 150, got {other:?}"),
    }
    // Rewriting what a run committed changes nothing.
    batch.remove(150);
    json_sink.write_batch(&batch).await.unwrap();
    assert_eq!(db.count("j").await, 199);
}
