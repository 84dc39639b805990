//! Unit tests of the MySQL destination's pure parts: the error-number table and row
//! extraction, type classes, quoting and generated SQL, statement splitting, and value
//! encoding. The sink against a real server is tested in `tests/mysql.rs`.

use mysql_async::{ServerError, Value};
use serde_json::json;
use time::OffsetDateTime;

use super::classify::{class_of, classify, row_of, Class, Rows};
use super::config::MysqlPayloadType;
use super::encode::value;
use super::schema::{self, chunks, family, insert_sql, json_checked_column, quote_ident};
use super::write::takes_bulk;
use crate::sinks::contract::SinkError;
use crate::sinks::database::cells::Cell;
use crate::sinks::database::columns::{
    plan_table, Family, Mapping, TableColumn, UniqueKey, DEFAULT_LAYOUT,
};
use crate::sinks::database::config::WriteMode;
use crate::sinks::database::util::Phase;

#[test]
fn error_number_classes() {
    let table = [
        (1213, Class::Transient),
        (1205, Class::Transient),
        (1040, Class::Transient),
        (1053, Class::Transient),
        (1927, Class::Transient),
        (1290, Class::Transient),
        (1021, Class::Transient),
        (1114, Class::Transient),
        (2013, Class::Transient),
        (1223, Class::Transient),
        (1105, Class::Unclassified),
        (1999, Class::Unclassified),
        (1118, Class::Permanent),
        (1071, Class::Permanent),
        (1300, Class::Permanent),
        (1264, Class::Permanent),
        (1366, Class::Permanent),
        (1406, Class::Permanent),
        (1048, Class::Permanent),
        (4025, Class::Permanent),
        (3819, Class::Permanent),
        (1452, Class::Permanent),
        (1062, Class::Permanent),
        (1292, Class::Permanent),
        (1265, Class::Permanent),
        (1644, Class::Permanent),
        (3140, Class::Permanent),
        (1153, Class::Permanent),
        (1146, Class::Schema),
        (1054, Class::Schema),
        (1142, Class::Schema),
        (1045, Class::Schema),
        (1044, Class::Schema),
        (1049, Class::Schema),
        (1364, Class::Schema),
    ];
    for (code, class) in table {
        assert_eq!(class_of(code), class, "error {code}");
    }
}

#[test]
fn the_failing_row_is_read_from_the_end_of_the_message() {
    assert_eq!(
        row_of("Out of range value for column 'amount' at row 3"),
        Some(2)
    );
    assert_eq!(row_of("Data too long for column 'x' at row 1"), Some(0));
    // A quoted value that looks like a row number does not fool it.
    assert_eq!(
        row_of("Incorrect integer value: 'x at row 9' for column `t`.`n` at row 2"),
        Some(1)
    );
    assert_eq!(
        row_of("Incorrect integer value: 'x at row 9' for column `n`"),
        None
    );
    assert_eq!(row_of("Column 'x' cannot be null"), None);
    assert_eq!(row_of("at row 0"), None);
}

fn server(code: u16, message: &str) -> mysql_async::Error {
    mysql_async::Error::Server(ServerError {
        code,
        message: message.into(),
        state: "22003".into(),
    })
}

#[test]
fn permanent_errors_name_the_batch_index_and_never_quote_values() {
    let rows = Some(Rows {
        offset: 100,
        len: 50,
    });
    let e = classify(
        &server(
            1366,
            "Incorrect integer value: 'SECRET' for column `n` at row 4",
        ),
        Phase::Write,
        rows,
    );
    match e {
        SinkError::Permanent { index, message } => {
            assert_eq!(index, Some(103));
            assert!(!message.contains("SECRET"), "{message}");
            assert!(message.contains("1366"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let e = classify(
        &server(1264, "Out of range value for column 'amount' at row 2"),
        Phase::Write,
        rows,
    );
    assert!(
        matches!(e, SinkError::Permanent { index: Some(101), ref message } if message.contains("column 'amount'"))
    );
    // No row in the message: a one-row statement still names its message.
    let e = classify(
        &server(4025, "CONSTRAINT `c` failed"),
        Phase::Write,
        Some(Rows { offset: 7, len: 1 }),
    );
    assert!(matches!(e, SinkError::Permanent { index: Some(7), .. }));
    let e = classify(&server(4025, "CONSTRAINT `c` failed"), Phase::Write, rows);
    assert!(matches!(e, SinkError::Permanent { index: None, .. }));
    // A row number beyond the statement is not trusted.
    let e = classify(&server(1264, "x at row 99"), Phase::Write, rows);
    assert!(matches!(e, SinkError::Permanent { index: None, .. }));
}

#[test]
fn schema_errors_depend_on_the_phase_and_unknown_ones_are_unclassified() {
    let missing = server(1146, "Table 'test.t' doesn't exist");
    assert!(matches!(
        classify(&missing, Phase::Open, None),
        SinkError::Misconfigured { .. }
    ));
    assert!(matches!(
        classify(&missing, Phase::Write, None),
        SinkError::Transient { .. }
    ));
    let deadlock = server(1213, "Deadlock found");
    assert!(matches!(
        classify(&deadlock, Phase::Write, None),
        SinkError::Transient { .. }
    ));
    match classify(&server(1999, "value 'SECRET'"), Phase::Write, None) {
        SinkError::Unclassified { message } => {
            assert!(!message.contains("SECRET"), "{message}");
            assert!(message.contains("1999"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // A row too large and a key too long are the message's content.
    let rows = Some(Rows { offset: 4, len: 1 });
    for code in [1118, 1071] {
        assert!(matches!(
            classify(&server(code, "too large"), Phase::Write, rows),
            SinkError::Permanent { index: Some(4), .. }
        ));
    }
    let io = mysql_async::Error::Io(mysql_async::IoError::Io(std::io::Error::other("reset")));
    assert!(matches!(
        classify(&io, Phase::Open, None),
        SinkError::Transient { .. }
    ));
}

#[test]
fn catalog_types_fall_into_families() {
    let table = [
        ("int", "int(11)", false, Family::Integer),
        ("bigint", "bigint(20) unsigned", false, Family::Integer),
        ("tinyint", "tinyint(1)", false, Family::Boolean),
        ("tinyint", "tinyint(4)", false, Family::Integer),
        ("decimal", "decimal(10,2)", false, Family::Decimal),
        ("double", "double", false, Family::Decimal),
        ("varchar", "varchar(20)", false, Family::Text),
        ("longtext", "longtext", true, Family::Json),
        ("longtext", "longtext", false, Family::Text),
        ("json", "json", false, Family::Json),
        ("enum", "enum('a','b')", false, Family::Enum),
        ("datetime", "datetime(6)", false, Family::Timestamp),
        ("timestamp", "timestamp", false, Family::Timestamp),
        ("date", "date", false, Family::Date),
        ("longblob", "longblob", false, Family::Bytes),
        ("varbinary", "varbinary(16)", false, Family::Bytes),
        ("uuid", "uuid", false, Family::Uuid),
        ("geometry", "geometry", false, Family::Other),
        ("time", "time", false, Family::Other),
    ];
    for (dt, ct, json, fam) in table {
        assert_eq!(family(dt, ct, json), fam, "{ct}");
    }
    assert_eq!(
        json_checked_column("json_valid(`headers`)").as_deref(),
        Some("headers")
    );
    assert_eq!(
        json_checked_column("json_valid(`a``b`)").as_deref(),
        Some("a`b")
    );
    assert_eq!(json_checked_column("`x` > 0"), None);
    assert!(schema::is_generated("VIRTUAL GENERATED"));
    assert!(schema::is_generated("STORED GENERATED"));
    assert!(!schema::is_generated("DEFAULT_GENERATED"));
    assert!(!schema::is_generated("auto_increment"));
}

#[test]
fn identifiers_are_quoted_with_inner_backticks_doubled() {
    assert_eq!(quote_ident("events"), "`events`");
    assert_eq!(quote_ident("we`ird; DROP"), "`we``ird; DROP`");
}

fn layout_plan() -> crate::sinks::database::columns::TablePlan {
    let table = layout_columns();
    let keys = [UniqueKey {
        name: "PRIMARY".into(),
        primary: true,
        columns: vec!["idempotency_key".into()],
    }];
    plan_table(&Mapping::default_layout(), &table, &keys, true).unwrap()
}

fn layout_columns() -> Vec<TableColumn> {
    DEFAULT_LAYOUT
        .iter()
        .map(|(c, _)| TableColumn {
            name: c.to_string(),
            family: match *c {
                "stream_sequence" | "consumer_sequence" | "delivered" => Family::Integer,
                "published_at" | "written_at" => Family::Timestamp,
                "headers" | "labels" => Family::Json,
                "payload" => Family::Bytes,
                _ => Family::Text,
            },
            type_name: "t".into(),
            not_null: true,
            has_default: false,
            generated: false,
        })
        .collect()
}

#[test]
fn insert_sql_uses_placeholders_and_a_no_op_update_for_insert_ignore() {
    let plan = layout_plan();
    let sql = insert_sql("`events`", &plan, 2, WriteMode::InsertIgnore);
    let one = format!("({})", vec!["?"; 16].join(","));
    assert!(sql.starts_with("INSERT INTO `events` (`idempotency_key`, `stream`, "));
    assert!(sql.contains(&format!("VALUES {one},{one} ON DUPLICATE KEY UPDATE")));
    assert!(sql.ends_with("ON DUPLICATE KEY UPDATE `idempotency_key` = `idempotency_key`"));
    assert!(!sql.contains("IGNORE"));
    let up = insert_sql("`events`", &plan, 1, WriteMode::Upsert);
    assert!(up.contains("ON DUPLICATE KEY UPDATE `stream` = VALUES(`stream`), "));
    assert!(up.ends_with("`payload` = VALUES(`payload`)"));
    assert!(!up.contains("`idempotency_key` = VALUES"));
}

/// A state table `orders (id key, a_version order, amount, seq, gone)`: the order column
/// sorts first in the mapping, so the test shows it is still assigned last.
fn state_plan(delete: bool) -> crate::sinks::database::columns::TablePlan {
    use crate::sinks::database::state::{DeleteMarker, OrderColumn, State, UpsertOrder};
    let columns = [
        ("id", "/id"),
        ("a_version", "/version"),
        ("amount", "/amount"),
        ("seq", "$stream_sequence"),
    ]
    .iter()
    .map(|(c, s)| (c.to_string(), s.to_string()))
    .collect();
    let order = UpsertOrder::Column(OrderColumn {
        column: "a_version".into(),
    });
    let marker: DeleteMarker = serde_json::from_value(json!({"column": "gone"})).unwrap();
    let state = State {
        mode: WriteMode::Upsert,
        columns: Some(&columns),
        order: Some(&order),
        delete: delete.then_some(&marker),
    };
    let mapping = state.complete(Mapping::parse(&columns).unwrap());
    let table: Vec<TableColumn> = [
        ("id", Family::Integer),
        ("a_version", Family::Integer),
        ("amount", Family::Decimal),
        ("seq", Family::Integer),
        ("gone", Family::Timestamp),
    ]
    .iter()
    .map(|(name, family)| TableColumn {
        name: name.to_string(),
        family: *family,
        type_name: "t".into(),
        not_null: false,
        has_default: false,
        generated: false,
    })
    .collect();
    let keys = [UniqueKey {
        name: "PRIMARY".into(),
        primary: true,
        columns: vec!["id".into()],
    }];
    plan_table(&mapping, &table, &keys, true).unwrap()
}

#[test]
fn every_assignment_of_an_ordered_upsert_is_guarded_and_the_order_is_assigned_last() {
    let guard = "`a_version` IS NULL OR `a_version` < VALUES(`a_version`) OR \
                 (`a_version` = VALUES(`a_version`) AND (`seq` IS NULL OR `seq` < VALUES(`seq`)))";
    let sql = insert_sql("`orders`", &state_plan(false), 2, WriteMode::Upsert);
    let want = format!(
        "ON DUPLICATE KEY UPDATE `amount` = IF({guard}, VALUES(`amount`), `amount`), \
         `seq` = IF({guard}, VALUES(`seq`), `seq`), \
         `a_version` = IF({guard}, VALUES(`a_version`), `a_version`)"
    );
    assert!(sql.ends_with(&want), "{sql}");
    // insert_ignore stays a no-op update.
    let sql = insert_sql("`orders`", &state_plan(false), 1, WriteMode::InsertIgnore);
    assert!(
        sql.ends_with("ON DUPLICATE KEY UPDATE `id` = `id`"),
        "{sql}"
    );
}

#[test]
fn a_delete_keeps_the_stored_values_and_is_guarded_like_an_update() {
    let sql = insert_sql("`orders`", &state_plan(true), 1, WriteMode::Upsert);
    let guard = "`a_version` IS NULL OR `a_version` < VALUES(`a_version`) OR \
                 (`a_version` = VALUES(`a_version`) AND (`seq` IS NULL OR `seq` < VALUES(`seq`)))";
    let want = format!(
        "ON DUPLICATE KEY UPDATE \
         `amount` = IF({guard}, IF(VALUES(`gone`) IS NULL, VALUES(`amount`), `amount`), `amount`), \
         `gone` = IF({guard}, VALUES(`gone`), `gone`), \
         `seq` = IF({guard}, VALUES(`seq`), `seq`), \
         `a_version` = IF({guard}, VALUES(`a_version`), `a_version`)"
    );
    assert!(sql.ends_with(&want), "{sql}");
}

#[test]
fn the_order_value_is_written_as_the_integer_it_was_read_as_and_a_missing_one_is_named() {
    use crate::envelope::{normalize, Delivery};
    let plan = state_plan(false);
    let e = |payload: &'static str| {
        normalize(
            "s",
            Delivery {
                stream: "S",
                consumer: "c",
                stream_sequence: 9,
                consumer_sequence: 9,
                delivered: 1,
                published: OffsetDateTime::UNIX_EPOCH,
            },
            [],
            bytes::Bytes::from_static(payload.as_bytes()),
            crate::config::IdempotencyKey::StreamSequence,
        )
    };
    let ok = e(r#"{"id":1,"version":"12","amount":3}"#);
    let doc: serde_json::Value = serde_json::from_slice(&ok.payload).unwrap();
    let row = super::encode::row(&plan, &ok, Some(&doc), OffsetDateTime::UNIX_EPOCH).unwrap();
    // Columns in mapping order: a_version first.
    assert_eq!(row[0], Value::UInt(12), "a_version");
    let bad = e(r#"{"id":1,"amount":3}"#);
    let doc: serde_json::Value = serde_json::from_slice(&bad.payload).unwrap();
    let err = super::encode::row(&plan, &bad, Some(&doc), OffsetDateTime::UNIX_EPOCH).unwrap_err();
    assert_eq!(
        err.to_string(),
        "column a_version: the message has no order value (its source is absent or null)"
    );
}

#[test]
fn default_ddl_matches_the_layout() {
    let ddl = schema::create_table_sql("events", MysqlPayloadType::Blob);
    for (c, _) in DEFAULT_LAYOUT {
        assert!(ddl.contains(&format!("    {c} ")), "{c} missing from {ddl}");
    }
    assert!(ddl.contains("PRIMARY KEY (idempotency_key)"));
    assert!(ddl.contains("COLLATE=utf8mb4_bin"));
    assert!(ddl.contains("published_at DATETIME(6) NOT NULL"));
    assert!(ddl.contains("payload LONGBLOB NOT NULL"));
    assert!(schema::create_table_sql("e", MysqlPayloadType::Json).contains("payload JSON NOT NULL"));
}

#[test]
fn a_table_from_before_the_trace_id_gets_it_added_with_the_new_tables_definition() {
    use super::upgrade::missing_added;
    let ddl = schema::create_table_sql("events", MysqlPayloadType::Blob);
    for (name, definition) in schema::ADDED_COLUMNS {
        assert!(ddl.contains(&format!("    {name} {definition},")), "{ddl}");
    }
    assert_eq!(
        schema::add_column_sql("`ev``x`", "trace_id", "VARCHAR(32) NULL"),
        "ALTER TABLE `ev``x` ADD COLUMN `trace_id` VARCHAR(32) NULL"
    );
    let older: Vec<TableColumn> = layout_columns()
        .into_iter()
        .filter(|c| c.name != "trace_id")
        .collect();
    let default: super::MysqlConfig = serde_json::from_value(json!({})).unwrap();
    assert_eq!(missing_added(&default, &older), ["trace_id"]);
    assert!(missing_added(&default, &layout_columns()).is_empty());
    // Column names compare as MySQL compares them.
    let mut upper = layout_columns();
    for c in &mut upper {
        c.name = c.name.to_uppercase();
    }
    assert!(missing_added(&default, &upper).is_empty());
    // A table of the user's own (`columns`) is never altered.
    let mapped: super::MysqlConfig =
        serde_json::from_value(json!({"columns": {"id": "$stream_sequence"}})).unwrap();
    assert!(missing_added(&mapped, &older).is_empty());
    // Without it, the rest of the layout still plans, and writes no trace_id.
    let keys = [UniqueKey {
        name: "PRIMARY".into(),
        primary: true,
        columns: vec!["idempotency_key".into()],
    }];
    let mapping = Mapping::default_layout().without(&["trace_id"]);
    let plan = plan_table(&mapping, &older, &keys, true).unwrap();
    assert_eq!(plan.columns.len(), DEFAULT_LAYOUT.len() - 1);
    assert!(!insert_sql("`events`", &plan, 1, WriteMode::InsertIgnore).contains("trace_id"));
}

#[test]
fn chunks_respect_rows_and_bytes_and_keep_an_oversized_row_alone() {
    assert_eq!(chunks(&[10; 5], 2, 1_000), [(0, 2), (2, 2), (4, 1)]);
    assert_eq!(chunks(&[10; 5], 100, 25), [(0, 2), (2, 2), (4, 1)]);
    assert_eq!(chunks(&[10, 500, 10], 100, 100), [(0, 1), (1, 1), (2, 1)]);
    assert_eq!(chunks(&[10; 3], 100, 1_000), [(0, 3)]);
    assert_eq!(chunks(&[], 100, 1_000), Vec::<(usize, usize)>::new());
    assert_eq!(chunks(&[1; 3], 0, 1_000), [(0, 1), (1, 1), (2, 1)]);
}

#[test]
fn values_are_typed_for_their_column_and_bad_content_is_named() {
    assert_eq!(value(Cell::UInt(7), Family::Integer), Ok(Value::UInt(7)));
    assert_eq!(
        value(Cell::UInt(7), Family::Text),
        Ok(Value::Bytes(b"7".to_vec()))
    );
    assert_eq!(value(Cell::Null, Family::Text), Ok(Value::NULL));
    let t = OffsetDateTime::from_unix_timestamp_nanos(1_700_000_000_123_456_789).unwrap();
    assert_eq!(
        value(Cell::Timestamp(t), Family::Timestamp),
        Ok(Value::Date(2023, 11, 14, 22, 13, 20, 123_456))
    );
    assert_eq!(
        value(Cell::Timestamp(t), Family::Text),
        Ok(Value::Bytes(b"2023-11-14T22:13:20.123456789Z".to_vec()))
    );
    assert!(value(Cell::Bytes(b"{x"), Family::Json)
        .unwrap_err()
        .to_string()
        .contains("not JSON"));
    assert!(value(Cell::Bytes(b"\xff"), Family::Text)
        .unwrap_err()
        .to_string()
        .contains("UTF-8"));
    assert_eq!(
        value(Cell::Bytes(b"\xff"), Family::Bytes),
        Ok(Value::Bytes(vec![0xff]))
    );
    let j =
        json!({"b": true, "n": 5, "big": 18446744073709551615u64, "f": 1.25, "s": "x", "o": [1]});
    assert_eq!(
        value(Cell::Value(&j["b"]), Family::Boolean),
        Ok(Value::Int(1))
    );
    assert_eq!(
        value(Cell::Value(&j["b"]), Family::Text),
        Ok(Value::Bytes(b"true".to_vec()))
    );
    assert_eq!(
        value(Cell::Value(&j["n"]), Family::Integer),
        Ok(Value::Int(5))
    );
    assert_eq!(
        value(Cell::Value(&j["big"]), Family::Integer),
        Ok(Value::UInt(u64::MAX))
    );
    assert_eq!(
        value(Cell::Value(&j["f"]), Family::Decimal),
        Ok(Value::Bytes(b"1.25".to_vec()))
    );
    assert_eq!(
        value(Cell::Value(&j["s"]), Family::Json),
        Ok(Value::Bytes(b"\"x\"".to_vec()))
    );
    assert_eq!(
        value(Cell::Value(&j["o"]), Family::Text),
        Ok(Value::Bytes(b"[1]".to_vec()))
    );
    let ancient = OffsetDateTime::from_unix_timestamp(-70_000_000_000).unwrap();
    assert!(value(Cell::Timestamp(ancient), Family::Timestamp).is_err());
}

#[test]
fn bulk_executions_are_used_on_mariadb_from_10_2_7_and_never_on_mysql() {
    for (version, bulk) in [
        ("10.11.19-MariaDB-0+deb12u1", true),
        ("10.2.7-MariaDB", true),
        ("10.2.6-MariaDB-log", false),
        ("10.1.48-MariaDB", false),
        ("5.5.5-10.6.12-MariaDB", true),
        ("5.5.5-10.1.2-MariaDB", false),
        ("11.4.2-MariaDB-ubu2404", true),
        ("8.0.36", false),
        ("8.4.0-0ubuntu0.24.04.1", false),
        ("5.7.44-log", false),
        ("", false),
        ("MariaDB", false),
    ] {
        assert_eq!(takes_bulk(version), bulk, "{version}");
    }
}

proptest::proptest! {
    /// The server's version string is the server's to choose: any text is read without
    /// a panic, and only one naming MariaDB ever turns bulk executions on.
    #[test]
    fn any_version_string_is_read_and_only_mariadb_takes_bulk(version in ".{0,40}") {
        let bulk = takes_bulk(&version);
        proptest::prop_assert!(!bulk || version.contains("MariaDB"));
    }

    #[test]
    fn mariadb_versions_take_bulk_exactly_from_10_2_7(
        major in 0u32..30, minor in 0u32..30, patch in 0u32..100, prefix in proptest::bool::ANY,
    ) {
        let version = format!(
            "{}{major}.{minor}.{patch}-MariaDB-log",
            if prefix { "5.5.5-" } else { "" }
        );
        proptest::prop_assert_eq!(takes_bulk(&version), (major, minor, patch) >= (10, 2, 7));
    }
}
