//! Unit tests of the PostgreSQL destination's pure parts: the SQLSTATE table, type classes,
//! wire choice, generated SQL and quoting, and batch encoding. The sink against a real
//! server is tested in `tests/postgres.rs`.

use bytes::Bytes;
use time::OffsetDateTime;
use tokio_postgres::types::{ToSql, Type};

use super::classify::{class_of, Class};
use super::config::PostgresPayloadType;
use super::encode::{documents, encode, JsonText};
use super::schema::{self, family, quote_ident, wire, write_sql, Wire};
use crate::config::IdempotencyKey;
use crate::envelope::{normalize, Delivery, Envelope};
use crate::sinks::database::columns::{
    plan_table, Family, Mapping, TableColumn, TablePlan, UniqueKey, DEFAULT_LAYOUT,
};
use crate::sinks::database::config::WriteMode;

#[test]
fn sqlstate_classes() {
    let table = [
        ("08000", Class::Transient),
        ("08006", Class::Transient),
        ("08P01", Class::Transient),
        ("40001", Class::Transient),
        ("40P01", Class::Transient),
        ("40003", Class::Transient),
        ("40002", Class::Permanent),
        ("57P01", Class::Transient),
        ("57P02", Class::Transient),
        ("57P03", Class::Transient),
        ("57014", Class::Transient),
        ("53100", Class::Transient),
        ("53300", Class::Transient),
        ("55P03", Class::Transient),
        ("58030", Class::Transient),
        ("XX000", Class::Unclassified),
        ("XX001", Class::Unclassified),
        ("25P02", Class::Transient),
        ("25006", Class::Transient),
        ("72000", Class::Transient),
        ("54000", Class::Permanent),
        ("54001", Class::Permanent),
        ("54011", Class::Permanent),
        ("54023", Class::Permanent),
        ("22001", Class::Permanent),
        ("22003", Class::Permanent),
        ("22P02", Class::Permanent),
        ("22021", Class::Permanent),
        ("22P05", Class::Permanent),
        ("23502", Class::Permanent),
        ("23503", Class::Permanent),
        ("23505", Class::Permanent),
        ("23514", Class::Permanent),
        ("23P01", Class::Permanent),
        ("21000", Class::Permanent),
        ("44000", Class::Permanent),
        ("P0001", Class::Permanent),
        ("42P01", Class::Schema),
        ("42703", Class::Schema),
        ("42501", Class::Schema),
        ("42P10", Class::Schema),
        ("42804", Class::Schema),
        ("3D000", Class::Schema),
        ("3F000", Class::Schema),
        ("28P01", Class::Schema),
        ("28000", Class::Schema),
        ("0A000", Class::Schema),
        ("", Class::Unclassified),
        ("ZZZZZ", Class::Unclassified),
        ("HV000", Class::Unclassified),
        ("P0002", Class::Unclassified),
    ];
    for (code, class) in table {
        assert_eq!(class_of(code), class, "SQLSTATE {code}");
    }
}

#[test]
fn catalog_types_fall_into_families() {
    let table = [
        ("int4", "b", Family::Integer),
        ("int8", "b", Family::Integer),
        ("numeric", "b", Family::Decimal),
        ("float8", "b", Family::Decimal),
        ("varchar", "b", Family::Text),
        ("bpchar", "b", Family::Text),
        ("bool", "b", Family::Boolean),
        ("timestamp", "b", Family::Timestamp),
        ("timestamptz", "b", Family::Timestamp),
        ("date", "b", Family::Date),
        ("jsonb", "b", Family::Json),
        ("json", "b", Family::Json),
        ("uuid", "b", Family::Uuid),
        ("bytea", "b", Family::Bytes),
        ("mood", "e", Family::Enum),
        ("_int4", "b", Family::Other),
        ("interval", "b", Family::Other),
        ("point", "b", Family::Other),
    ];
    for (name, kind, fam) in table {
        assert_eq!(family(name, kind), fam, "{name}");
    }
}

#[test]
fn identifiers_are_quoted_with_inner_quotes_doubled() {
    assert_eq!(quote_ident("events"), "\"events\"");
    assert_eq!(quote_ident("we\"ird; DROP"), "\"we\"\"ird; DROP\"");
    assert_eq!(schema::qualified(Some("audit"), "Ev"), "\"audit\".\"Ev\"");
    assert_eq!(schema::qualified(None, "ev"), "\"ev\"");
}

fn col(name: &str, type_name: &str, base: &str) -> TableColumn {
    TableColumn {
        name: name.into(),
        family: family(base, "b"),
        type_name: type_name.into(),
        not_null: false,
        has_default: false,
        generated: false,
    }
}

fn layout_columns(payload: &str) -> Vec<(TableColumn, String)> {
    let base = |c: &str| match c {
        "stream_sequence" | "consumer_sequence" | "delivered" => ("bigint", "int8"),
        "published_at" | "written_at" => ("timestamp with time zone", "timestamptz"),
        "headers" | "labels" => ("jsonb", "jsonb"),
        "payload" => (payload, payload),
        _ => ("text", "text"),
    };
    DEFAULT_LAYOUT
        .iter()
        .map(|(c, _)| {
            let (t, b) = base(c);
            (col(c, t, b), b.to_string())
        })
        .collect()
}

fn layout_plan(payload: &str) -> (TablePlan, Vec<Wire>) {
    let cols = layout_columns(payload);
    let table: Vec<TableColumn> = cols.iter().map(|(c, _)| c.clone()).collect();
    let keys = [UniqueKey {
        name: "events_pkey".into(),
        primary: true,
        columns: vec!["idempotency_key".into()],
    }];
    let plan = plan_table(&Mapping::default_layout(), &table, &keys, false).unwrap();
    let wires = plan
        .columns
        .iter()
        .map(|p| {
            let base = &cols.iter().find(|(c, _)| c.name == p.name).unwrap().1;
            wire(p, base)
        })
        .collect();
    (plan, wires)
}

#[test]
fn the_layout_travels_natively_and_text_is_cast() {
    let (_, wires) = layout_plan("bytea");
    use Wire::*;
    assert_eq!(
        wires,
        [
            Text,
            Text,
            Int8,
            Int8,
            Text,
            Int8,
            Timestamptz,
            Timestamptz,
            Text,
            Jsonb,
            Text,
            Text,
            Text,
            Jsonb,
            Text,
            Bytea
        ]
    );
    let (_, wires) = layout_plan("jsonb");
    assert_eq!(wires[15], Jsonb);
}

#[test]
fn write_sql_binds_every_value_and_quotes_every_name() {
    let (plan, wires) = layout_plan("bytea");
    let sql = write_sql(
        "\"public\".\"events\"",
        &plan,
        &wires,
        WriteMode::InsertIgnore,
    );
    assert!(sql.insert.starts_with(
        "INSERT INTO \"public\".\"events\" AS stored (\"idempotency_key\", \"stream\", \"stream_sequence\""
    ));
    assert!(sql.insert.contains(
        "FROM unnest($1::text[], $2::text[], $3::int8[], $4::int8[], $5::text[], $6::int8[], \
         $7::timestamptz[], $8::timestamptz[], $9::text[], $10::jsonb[], $11::text[], \
         $12::text[], $13::text[], $14::jsonb[], $15::text[], $16::bytea[]) AS u(c0, c1, c2"
    ));
    assert!(sql
        .insert
        .contains("SELECT CAST(u.c0 AS text), CAST(u.c1 AS text), u.c2, u.c3"));
    assert!(sql
        .insert
        .ends_with("ON CONFLICT (\"idempotency_key\") DO NOTHING"));
    assert_eq!(
        sql.copy,
        "COPY pg_temp.jetsink_stage (c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15) FROM STDIN (FORMAT binary)"
    );
    assert!(sql.create_stage.contains(
        "CREATE TEMP TABLE jetsink_stage (c0 text, c1 text, c2 int8, c3 int8, c4 text, c5 int8, \
         c6 timestamptz, c7 timestamptz, c8 text, c9 jsonb, c10 text, c11 text, c12 text, \
         c13 jsonb, c14 text, c15 bytea) ON COMMIT DELETE ROWS"
    ));
    assert!(sql
        .insert_from_stage
        .contains("FROM pg_temp.jetsink_stage AS u ON CONFLICT"));
    let up = write_sql("\"events\"", &plan, &wires, WriteMode::Upsert);
    assert!(up.insert.contains(
        "ON CONFLICT (\"idempotency_key\") DO UPDATE SET \"stream\" = EXCLUDED.\"stream\", "
    ));
    assert!(!up.insert.contains("\"idempotency_key\" = EXCLUDED"));
    assert!(up.insert.ends_with("\"payload\" = EXCLUDED.\"payload\""));
}

#[test]
fn copy_goes_straight_into_a_table_only_when_no_column_needs_a_cast() {
    for payload in ["bytea", "jsonb"] {
        let (plan, wires) = layout_plan(payload);
        let (table, bases): (Vec<TableColumn>, Vec<String>) =
            layout_columns(payload).into_iter().unzip();
        assert_eq!(
            schema::native_copy_wires(&plan, &wires, &table, &bases).as_deref(),
            Some(wires.as_slice())
        );
        let sql = write_sql("\"events\"", &plan, &wires, WriteMode::InsertIgnore);
        assert!(sql
            .copy_direct
            .starts_with("COPY \"events\" (\"idempotency_key\", \"stream\", "));
        assert!(sql
            .copy_direct
            .ends_with(", \"payload\") FROM STDIN (FORMAT binary)"));
        // A column of another type than its wire's (`integer` for an int8, `varchar` for
        // text) would need the cast binary COPY does not apply.
        for (column, base) in [("delivered", "int4"), ("subject", "varchar")] {
            let mut other = bases.clone();
            let at = table.iter().position(|c| c.name == column).unwrap();
            other[at] = base.into();
            assert!(
                schema::native_copy_wires(&plan, &wires, &table, &other).is_none(),
                "{column}"
            );
        }
    }
}

#[test]
fn a_refused_copy_is_written_again_by_insert_only_when_the_rows_or_the_table_were_refused() {
    use super::write::{after_refused_copy, AfterCopy};
    for rows in ["23505", "23514", "22P02", "22001"] {
        assert_eq!(after_refused_copy(rows), AfterCopy::Insert, "{rows}");
    }
    for table in ["42809", "0A000"] {
        assert_eq!(
            after_refused_copy(table),
            AfterCopy::InsertFromNowOn,
            "{table}"
        );
    }
    for server in ["57014", "40P01", "53100", "08006", "42501", "XX000"] {
        assert_eq!(after_refused_copy(server), AfterCopy::Fail, "{server}");
    }
}

#[test]
fn mapped_columns_with_odd_names_are_quoted_and_cast_to_their_type() {
    let columns = [
        ("Order Id".to_string(), "/id".to_string()),
        ("amt\"x".to_string(), "/amount".to_string()),
    ]
    .into_iter()
    .collect();
    let mapping = Mapping::parse(&columns).unwrap();
    let table = vec![
        col("Order Id", "bigint", "int8"),
        col("amt\"x", "numeric", "numeric"),
    ];
    let keys = [UniqueKey {
        name: "k".into(),
        primary: true,
        columns: vec!["Order Id".into()],
    }];
    let plan = plan_table(&mapping, &table, &keys, false).unwrap();
    let wires: Vec<Wire> = plan.columns.iter().map(|p| wire(p, "")).collect();
    assert_eq!(wires, [Wire::Text, Wire::Text]);
    let sql = write_sql("\"t\"", &plan, &wires, WriteMode::Upsert);
    assert_eq!(
        sql.insert,
        "INSERT INTO \"t\" AS stored (\"Order Id\", \"amt\"\"x\") SELECT CAST(u.c0 AS bigint), \
         CAST(u.c1 AS numeric) FROM unnest($1::text[], $2::text[]) AS u(c0, c1) \
         ON CONFLICT (\"Order Id\") DO UPDATE SET \"amt\"\"x\" = EXCLUDED.\"amt\"\"x\""
    );
}

#[test]
fn default_ddl_matches_the_layout() {
    let ddl = schema::create_table_sql("\"events\"", PostgresPayloadType::Jsonb);
    for (c, _) in DEFAULT_LAYOUT {
        assert!(ddl.contains(&format!("    {c} ")), "{c} missing from {ddl}");
    }
    assert!(ddl.contains("idempotency_key text PRIMARY KEY"));
    assert!(ddl.contains("payload jsonb NOT NULL"));
    assert!(
        schema::create_table_sql("\"e\"", PostgresPayloadType::Bytea)
            .contains("payload bytea NOT NULL")
    );
}

#[test]
fn a_table_from_before_the_trace_id_gets_it_added_with_the_new_tables_definition() {
    use super::config::PostgresConfig;
    use super::table::missing_added;
    let ddl = schema::create_table_sql("\"events\"", PostgresPayloadType::Bytea);
    for (name, definition) in schema::ADDED_COLUMNS {
        assert!(ddl.contains(&format!("    {name} {definition},")), "{ddl}");
    }
    assert_eq!(
        schema::add_column_sql("\"public\".\"events\"", "trace_id", "text"),
        "ALTER TABLE \"public\".\"events\" ADD COLUMN IF NOT EXISTS \"trace_id\" text"
    );
    let table: Vec<TableColumn> = layout_columns("bytea")
        .into_iter()
        .map(|(c, _)| c)
        .collect();
    let older: Vec<TableColumn> = table
        .iter()
        .filter(|c| c.name != "trace_id")
        .cloned()
        .collect();
    let layout = Mapping::default_layout();
    let default: PostgresConfig = serde_json::from_value(serde_json::json!({})).unwrap();
    assert_eq!(missing_added(&default, &layout, &older), ["trace_id"]);
    assert!(missing_added(&default, &layout, &table).is_empty());
    // A user's own table (`columns`) is never altered, even one mapped like the layout.
    let mapped: PostgresConfig =
        serde_json::from_value(serde_json::json!({"columns": {"id": "$stream_sequence"}})).unwrap();
    assert!(missing_added(&mapped, &layout, &older).is_empty());
}

fn envelope(seq: u64, payload: &'static [u8]) -> Envelope {
    normalize(
        "s",
        Delivery {
            stream: "S",
            consumer: "c",
            stream_sequence: seq,
            consumer_sequence: seq,
            delivered: 1,
            published: OffsetDateTime::UNIX_EPOCH,
        },
        [],
        Bytes::from_static(payload),
        IdempotencyKey::StreamSequence,
    )
}

#[test]
fn encoding_refuses_content_postgres_cannot_take_by_index() {
    let (plan, wires) = layout_plan("jsonb");
    let batch = vec![envelope(1, b"{}"), envelope(2, b"[1,"), envelope(3, b"{}")];
    let docs = documents(&batch, &plan).unwrap();
    let err = encode(
        &batch,
        &docs,
        &plan,
        &wires,
        OffsetDateTime::UNIX_EPOCH,
        false,
    )
    .unwrap_err();
    assert_eq!(err.index, 1);
    assert!(
        err.message.contains("payload is not JSON"),
        "{}",
        err.message
    );

    let (plan, wires) = layout_plan("bytea");
    let mut nul = envelope(5, b"ok");
    nul.subject = "a\0b".into();
    let batch = vec![envelope(4, b"\xff"), nul];
    let err = encode(
        &batch,
        &[None, None],
        &plan,
        &wires,
        OffsetDateTime::UNIX_EPOCH,
        false,
    )
    .unwrap_err();
    assert_eq!(err.index, 1);
    assert!(err.message.contains("NUL"), "{}", err.message);

    let batch = vec![envelope(u64::MAX, b"x")];
    let err = encode(
        &batch,
        &[None],
        &plan,
        &wires,
        OffsetDateTime::UNIX_EPOCH,
        false,
    )
    .unwrap_err();
    assert!(err.message.contains("bigint"), "{}", err.message);
}

#[test]
fn pointer_mappings_need_json_payloads_and_name_the_index() {
    let columns = [("id".to_string(), "/id".to_string())]
        .into_iter()
        .collect();
    let mapping = Mapping::parse(&columns).unwrap();
    let keys = [UniqueKey {
        name: "k".into(),
        primary: true,
        columns: vec!["id".into()],
    }];
    let plan = plan_table(&mapping, &[col("id", "bigint", "int8")], &keys, false).unwrap();
    let batch = vec![envelope(1, br#"{"id":1}"#), envelope(2, b"nope")];
    let err = documents(&batch, &plan).unwrap_err();
    assert_eq!(err.index, 1);
    assert!(!err.message.contains("nope"));
}

#[test]
fn upsert_encoding_keeps_the_last_of_a_repeated_key() {
    let (plan, wires) = layout_plan("bytea");
    let mut batch = vec![envelope(1, b"a"), envelope(2, b"b"), envelope(3, b"c")];
    batch[0].idempotency_key = "k".into();
    batch[2].idempotency_key = "k".into();
    let docs = vec![None, None, None];
    let enc = encode(
        &batch,
        &docs,
        &plan,
        &wires,
        OffsetDateTime::UNIX_EPOCH,
        true,
    )
    .unwrap();
    assert_eq!(enc.rows, 2);
    let enc = encode(
        &batch,
        &docs,
        &plan,
        &wires,
        OffsetDateTime::UNIX_EPOCH,
        false,
    )
    .unwrap();
    assert_eq!(enc.rows, 3);
}

/// The plan of a state table `orders (id bigint key, amount numeric, version bigint, seq
/// bigint, gone timestamptz)` for an upsert ordered by `order` (the default: `seq`), with
/// a delete marker into `gone` when `delete`.
fn state_plan(order: Option<&str>, delete: bool) -> (TablePlan, Vec<Wire>) {
    use crate::sinks::database::state::{DeleteMarker, OrderColumn, State, UpsertOrder};
    let columns = [
        ("id", "/id"),
        ("amount", "/amount"),
        ("version", "/version"),
        ("seq", "$stream_sequence"),
    ]
    .iter()
    .map(|(c, s)| (c.to_string(), s.to_string()))
    .collect();
    let order = order.map(|c| {
        UpsertOrder::Column(OrderColumn {
            column: c.to_string(),
        })
    });
    let marker: DeleteMarker =
        serde_json::from_value(serde_json::json!({"column": "gone"})).unwrap();
    let state = State {
        mode: WriteMode::Upsert,
        columns: Some(&columns),
        order: order.as_ref(),
        delete: delete.then_some(&marker),
    };
    assert!(state.problems().is_empty(), "{:?}", state.problems());
    let mapping = state.complete(Mapping::parse(&columns).unwrap());
    let mut table = vec![
        col("id", "bigint", "int8"),
        col("amount", "numeric", "numeric"),
        col("version", "bigint", "int8"),
        col("seq", "bigint", "int8"),
        col("gone", "timestamp with time zone", "timestamptz"),
    ];
    table[1].not_null = true;
    let keys = [UniqueKey {
        name: "k".into(),
        primary: true,
        columns: vec!["id".into()],
    }];
    let plan = plan_table(&mapping, &table, &keys, false).unwrap();
    let wires = plan
        .columns
        .iter()
        .map(|p| {
            wire(
                p,
                if p.name == "gone" {
                    "timestamptz"
                } else {
                    "int8"
                },
            )
        })
        .collect();
    (plan, wires)
}

#[test]
fn an_ordered_upsert_updates_a_row_only_from_a_newer_message() {
    let (plan, wires) = state_plan(None, false);
    let sql = write_sql("\"orders\"", &plan, &wires, WriteMode::Upsert);
    let tail = "ON CONFLICT (\"id\") DO UPDATE SET \"amount\" = EXCLUDED.\"amount\", \
                \"seq\" = EXCLUDED.\"seq\", \"version\" = EXCLUDED.\"version\" \
                WHERE stored.\"seq\" IS NULL OR stored.\"seq\" < EXCLUDED.\"seq\"";
    assert!(
        sql.insert.starts_with("INSERT INTO \"orders\" AS stored ("),
        "{}",
        sql.insert
    );
    assert!(sql.insert.ends_with(tail), "{}", sql.insert);
    // The COPY path's INSERT from the staging table is guarded alike.
    assert!(
        sql.insert_from_stage.ends_with(tail),
        "{}",
        sql.insert_from_stage
    );
    // A version the producer sets orders it; the stream sequence breaks ties.
    let (plan, wires) = state_plan(Some("version"), false);
    let sql = write_sql("\"orders\"", &plan, &wires, WriteMode::Upsert);
    assert!(
        sql.insert.ends_with(
            "WHERE stored.\"version\" IS NULL OR stored.\"version\" < EXCLUDED.\"version\" \
             OR (stored.\"version\" = EXCLUDED.\"version\" AND (stored.\"seq\" IS NULL \
             OR stored.\"seq\" < EXCLUDED.\"seq\"))"
        ),
        "{}",
        sql.insert
    );
    assert_eq!(
        plan.describe_upsert(),
        "; newest by version (bigint), ties by seq"
    );
    // insert_ignore ignores the order.
    let sql = write_sql("\"orders\"", &plan, &wires, WriteMode::InsertIgnore);
    assert!(sql.insert.ends_with("ON CONFLICT (\"id\") DO NOTHING"));
}

#[test]
fn a_delete_keeps_the_stored_values_and_sets_its_order_and_delete_column() {
    let (plan, wires) = state_plan(Some("version"), true);
    let sql = write_sql("\"orders\"", &plan, &wires, WriteMode::Upsert);
    assert!(
        sql.insert.contains(
            "DO UPDATE SET \"amount\" = CASE WHEN EXCLUDED.\"gone\" IS NULL THEN \
             EXCLUDED.\"amount\" ELSE stored.\"amount\" END, \"seq\" = EXCLUDED.\"seq\", \
             \"version\" = EXCLUDED.\"version\", \"gone\" = EXCLUDED.\"gone\" WHERE "
        ),
        "{}",
        sql.insert
    );
    assert_eq!(wires[4], Wire::Timestamptz);
    assert_eq!(
        plan.describe_upsert(),
        "; newest by version (bigint), ties by seq; deletes mark gone (timestamp with time \
         zone); a delete of a key not stored yet needs values for the NOT NULL columns \
         amount, or it is refused"
    );
}

/// An order message `{"id", "amount", "version"}` as envelope `seq`.
fn versioned(seq: u64, id: u64, version: &str) -> Envelope {
    let payload = format!(r#"{{"id":{id},"amount":{seq},"version":{version}}}"#);
    let mut e = envelope(seq, b"");
    e.payload = Bytes::from(payload);
    e
}

#[test]
fn an_upsert_batch_keeps_the_newest_of_each_key_by_its_order_not_its_place() {
    let (plan, wires) = state_plan(Some("version"), false);
    // Key 1: versions 3, 5, 4 (5 wins); key 2: version 7 twice (the later stream
    // sequence wins, as the tie column would decide); key 0 once.
    let batch = vec![
        versioned(10, 1, "3"),
        versioned(11, 2, "7"),
        versioned(12, 1, "5"),
        versioned(13, 2, "7"),
        versioned(14, 1, "\"4\""),
        versioned(15, 0, "1"),
    ];
    let docs = documents(&batch, &plan).unwrap();
    let written_at = OffsetDateTime::UNIX_EPOCH;
    let rows = super::encode::newest_rows(&batch, &docs, &plan, written_at).unwrap();
    // In key order, so two writers lock shared rows in the same order.
    assert_eq!(rows, [5, 2, 3]);
    let enc = encode(&batch, &docs, &plan, &wires, written_at, true).unwrap();
    assert_eq!(enc.rows, 3);
    // The order value travels as the integer it was read as (text, cast by the INSERT).
    // Columns in mapping order: amount, id, seq, version.
    match &enc.columns[3] {
        super::encode::ColumnData::Text(v) => {
            let got: Vec<Option<&str>> = v.iter().map(|t| t.as_deref()).collect();
            assert_eq!(got, [Some("1"), Some("5"), Some("7")]);
        }
        other => panic!("expected text, got {other:?}"),
    }
    // Without the tie column, equal orders keep the first of the batch, as the guard
    // keeps the row stored first.
    let no_tie = TablePlan {
        newest: plan
            .newest
            .map(|n| crate::sinks::database::columns::Newest { tie: None, ..n }),
        ..plan.clone()
    };
    let rows = super::encode::newest_rows(&batch, &docs, &no_tie, written_at).unwrap();
    assert_eq!(rows, [5, 2, 1]);
}

#[test]
fn a_message_without_a_readable_order_is_refused_by_index() {
    let (plan, wires) = state_plan(Some("version"), false);
    for (bad, why) in [
        ("null", "no order value"),
        ("-1", "whole number"),
        ("1.5", "whole number"),
    ] {
        let batch = vec![versioned(1, 1, "1"), versioned(2, 2, bad)];
        let docs = documents(&batch, &plan).unwrap();
        let err = encode(
            &batch,
            &docs,
            &plan,
            &wires,
            OffsetDateTime::UNIX_EPOCH,
            true,
        )
        .unwrap_err();
        assert_eq!(err.index, 1, "{bad}");
        assert!(
            err.message.starts_with("column version: "),
            "{}",
            err.message
        );
        assert!(err.message.contains(why), "{bad}: {}", err.message);
    }
}

#[test]
fn json_text_is_sent_as_binary_jsonb_or_plain_json() {
    let v = JsonText(std::borrow::Cow::Borrowed(b"{\"a\":1}"));
    let mut out = bytes::BytesMut::new();
    v.to_sql(&Type::JSONB, &mut out).unwrap();
    assert_eq!(&out[..], b"\x01{\"a\":1}");
    let mut out = bytes::BytesMut::new();
    v.to_sql(&Type::JSON, &mut out).unwrap();
    assert_eq!(&out[..], b"{\"a\":1}");
    assert!(!<JsonText<'_> as ToSql>::accepts(&Type::TEXT));
}

#[test]
fn config_problems_and_target_never_show_a_password() {
    use crate::sinks::mysql::MysqlConfig;
    use crate::sinks::postgres::PostgresConfig;
    use crate::sinks::settings::DestinationSettings;
    let pg: PostgresConfig = serde_json::from_value(serde_json::json!({
        "url": "postgres://u:hunter2@db:6543/shop", "table": "t"
    }))
    .unwrap();
    let problems = pg.problems();
    assert!(problems
        .iter()
        .any(|(k, m)| k == "url" && m.contains("must not contain a password")));
    assert!(problems.iter().all(|(_, m)| !m.contains("hunter2")));
    assert_eq!(pg.target(), "postgres://db:6543/shop table (search_path).t");
    let ok: PostgresConfig = serde_json::from_value(serde_json::json!({
        "url": "postgres://u@db/shop", "password_env": "PW"
    }))
    .unwrap();
    assert_eq!(ok.problems(), Vec::<(String, String)>::new());
    assert_eq!(ok.copy_threshold, 4_000);
    assert_eq!(ok.mode, WriteMode::InsertIgnore);
    assert!(ok.auto_create);

    let my: MysqlConfig = serde_json::from_value(serde_json::json!({
        "url": "mysql://u:hunter2@db:3307/shop"
    }))
    .unwrap();
    assert!(my
        .problems()
        .iter()
        .any(|(k, m)| k == "url" && m.contains("password")));
    assert_eq!(my.target(), "mysql://db:3307/shop table jetsink_events");
    let none: MysqlConfig = serde_json::from_value(serde_json::json!({})).unwrap();
    assert!(none.problems().iter().any(|(k, _)| k == "database"));
}

#[test]
fn connections_outside_1_to_16_are_refused_by_name_on_both_engines() {
    use crate::sinks::mysql::MysqlConfig;
    use crate::sinks::postgres::PostgresConfig;
    use crate::sinks::settings::DestinationSettings;
    for (n, ok) in [(0, false), (1, true), (16, true), (17, false)] {
        let pg: PostgresConfig =
            serde_json::from_value(serde_json::json!({ "connections": n })).unwrap();
        let my: MysqlConfig =
            serde_json::from_value(serde_json::json!({ "database": "d", "connections": n }))
                .unwrap();
        for problems in [pg.problems(), my.problems()] {
            let named = problems.iter().any(|(k, m)| {
                k == "connections" && m == &format!("must be between 1 and 16, got {n}")
            });
            assert_eq!(named, !ok, "{n}: {problems:?}");
        }
        assert!(pg.direct_copy);
    }
}

#[test]
fn copy_data_is_postgres_binary_copy_format() {
    use super::encode::copy_data;
    let (plan, wires) = layout_plan("bytea");
    let mut e = envelope(7, b"\x01\x02");
    e.message_id = None;
    let batch = vec![e];
    let enc = encode(
        &batch,
        &[None],
        &plan,
        &wires,
        OffsetDateTime::UNIX_EPOCH,
        false,
    )
    .unwrap();
    let data = copy_data(&enc, &wires).unwrap();
    assert!(data.starts_with(b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0"));
    assert!(
        data.ends_with(b"\x02\xff\xff"),
        "payload then the -1 trailer"
    );
    let body = &data[19..];
    assert_eq!(&body[..2], &16i16.to_be_bytes());
    // idempotency_key "S:7" as text
    assert_eq!(&body[2..6], &3i32.to_be_bytes());
    assert_eq!(&body[6..9], b"S:7");
    // message_id (9th column) is NULL: length -1 somewhere in the row
    assert!(body.windows(4).any(|w| w == (-1i32).to_be_bytes()));
}

#[test]
fn copy_data_carries_the_trace_id_before_the_payload_or_null_without_one() {
    use super::encode::copy_data;
    let (plan, wires) = layout_plan("bytea");
    let mut traced = envelope(7, b"\x01\x02");
    traced.headers.push((
        "traceparent".into(),
        vec!["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()],
    ));
    let plain = envelope(8, b"\x03\x04");
    let batch = vec![traced, plain];
    let docs = [None, None];
    let enc = encode(
        &batch,
        &docs,
        &plan,
        &wires,
        OffsetDateTime::UNIX_EPOCH,
        false,
    )
    .unwrap();
    let data = copy_data(&enc, &wires).unwrap();
    let mut traced_tail = 32i32.to_be_bytes().to_vec();
    traced_tail.extend_from_slice(b"4bf92f3577b34da6a3ce929d0e0e4736");
    traced_tail.extend_from_slice(&2i32.to_be_bytes());
    traced_tail.extend_from_slice(b"\x01\x02");
    assert!(data.windows(traced_tail.len()).any(|w| w == traced_tail));
    let mut plain_tail = (-1i32).to_be_bytes().to_vec();
    plain_tail.extend_from_slice(&2i32.to_be_bytes());
    plain_tail.extend_from_slice(b"\x03\x04");
    assert!(data.ends_with(&[&plain_tail[..], b"\xff\xff"].concat()));
}

#[test]
fn only_a_server_warning_is_logged_above_debug_level() {
    use super::connection::notice_is_warning;
    use tokio_postgres::error::Severity;
    assert!(notice_is_warning(Some(Severity::Warning)));
    // "table \"jetsink_stage\" does not exist, skipping" is a NOTICE: debug level only.
    for routine in [
        Severity::Notice,
        Severity::Info,
        Severity::Log,
        Severity::Debug,
    ] {
        assert!(!notice_is_warning(Some(routine)), "{routine:?}");
    }
    assert!(!notice_is_warning(None));
}

#[test]
fn a_client_certificate_needs_its_key_and_tls_on_both_engines() {
    use crate::sinks::mysql::MysqlConfig;
    use crate::sinks::postgres::PostgresConfig;
    use crate::sinks::settings::DestinationSettings;
    let keys = |problems: Vec<(String, String)>| -> Vec<String> {
        let mut k: Vec<String> = problems.into_iter().map(|(k, _)| k).collect();
        k.sort();
        k
    };
    let base = serde_json::json!({"host": "db", "database": "shop"});
    let with = |tls: serde_json::Value| {
        let mut v = base.clone();
        v["tls"] = tls;
        v
    };
    for (tls, expected) in [
        (
            serde_json::json!({"enabled": true, "cert_file": "c.pem", "key_file": "k.pem"}),
            vec![],
        ),
        (
            serde_json::json!({"enabled": true, "cert_file": "c.pem"}),
            vec!["tls.key_file"],
        ),
        (
            serde_json::json!({"enabled": true, "key_file": "k.pem"}),
            vec!["tls.cert_file"],
        ),
        (
            serde_json::json!({"cert_file": "c.pem", "key_file": "k.pem"}),
            vec!["tls.cert_file", "tls.key_file"],
        ),
        (
            serde_json::json!({"enabled": true, "cert_file": " ", "key_file": "k.pem"}),
            vec!["tls.cert_file"],
        ),
    ] {
        let pg: PostgresConfig = serde_json::from_value(with(tls.clone())).unwrap();
        assert_eq!(keys(pg.problems()), expected, "postgres {tls}");
        let my: MysqlConfig = serde_json::from_value(with(tls.clone())).unwrap();
        assert_eq!(keys(my.problems()), expected, "mysql {tls}");
    }
}

#[test]
fn a_json_value_into_an_int8_column_may_go_by_copy_as_int8_and_into_int4_may_not() {
    let table = vec![
        TableColumn {
            name: "id".into(),
            type_name: "bigint".into(),
            family: Family::Integer,
            not_null: true,
            generated: false,
            has_default: false,
        },
        TableColumn {
            name: "n".into(),
            type_name: "bigint".into(),
            family: Family::Integer,
            not_null: false,
            generated: false,
            has_default: false,
        },
    ];
    let keys = [UniqueKey {
        name: "pkey".into(),
        primary: true,
        columns: vec!["id".into()],
    }];
    let mapping = Mapping::parse(
        &[("id", "$stream_sequence"), ("n", "/n")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
    .unwrap();
    let plan = plan_table(&mapping, &table, &keys, false).unwrap();
    let bases: Vec<String> = vec!["int8".into(), "int8".into()];
    let wires: Vec<Wire> = plan.columns.iter().map(|p| wire(p, "int8")).collect();
    let n = plan.columns.iter().position(|c| c.name == "n").unwrap();
    assert_eq!(
        wires[n],
        Wire::Text,
        "the INSERT casts the JSON value's text"
    );
    let direct = schema::native_copy_wires(&plan, &wires, &table, &bases).unwrap();
    assert_eq!(direct[n], Wire::Int8);
    let int4: Vec<String> = vec!["int8".into(), "int4".into()];
    assert!(schema::native_copy_wires(&plan, &wires, &table, &int4).is_none());
}

#[test]
fn only_plain_decimal_integers_in_range_read_as_int8() {
    use super::encode::int8_text;
    for (text, n) in [
        ("0", Some(0)),
        ("-0", Some(0)),
        ("007", Some(7)),
        ("-42", Some(-42)),
        ("9223372036854775807", Some(i64::MAX)),
        ("-9223372036854775808", Some(i64::MIN)),
        ("9223372036854775808", None),
        ("+7", None),
        (" 7", None),
        ("7 ", None),
        ("1e3", None),
        ("1.0", None),
        ("0x1F", None),
        ("1_000", None),
        ("-", None),
        ("", None),
        ("true", None),
    ] {
        assert_eq!(int8_text(text), n, "{text:?}");
    }
}

proptest::proptest! {
    /// Any text a payload can put in a column is read without a panic, and what reads as
    /// an int8 prints back as the same digits (less leading zeros), so the server's cast
    /// of the text would have stored the same number.
    #[test]
    fn int8_text_agrees_with_the_number_it_returns(text in "-?[0-9]{0,21}|.{0,24}") {
        if let Some(n) = super::encode::int8_text(&text) {
            let trimmed = text.trim_start_matches('-').trim_start_matches('0');
            let printed = n.unsigned_abs().to_string();
            proptest::prop_assert_eq!(if trimmed.is_empty() { "0" } else { trimmed }, printed);
            proptest::prop_assert_eq!(n < 0, text.starts_with('-') && n != 0);
        }
    }
}
