//! Column mapping shared by the database destinations (PostgreSQL, MySQL/MariaDB): which
//! value of an envelope goes into which column, and whether a table can hold it.
//!
//! Both destinations write through the same model. The jetsink table layout is just the
//! [default mapping](Mapping::default_layout); a user's own table is a mapping from the
//! config's `columns`. Keeping the rules here, pure and table-tested, means the two
//! databases agree on what `$stream_sequence` or `/order/id` means, on which column types
//! may receive which kind of value (checked at start-up, so a wrong table is a
//! configuration error and not a stream of rejected messages), and on which unique key
//! makes a write idempotent. Each database only says how its column types fall into the
//! [`Family`] classes and how a [`Cell`](super::cells::Cell) travels on its wire. The values
//! themselves are taken from envelopes in [`super::cells`], so this part, which config
//! validation also uses, does not depend on the message model.

use std::collections::BTreeMap;

/// An envelope field a column can be mapped from, written `$name` in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// `$subject`: the subject the message was published on.
    Subject,
    /// `$stream`: the stream that stored it.
    Stream,
    /// `$consumer`: the durable consumer that delivered it.
    Consumer,
    /// `$stream_sequence`: stable across redeliveries.
    StreamSequence,
    /// `$consumer_sequence`: grows with each redelivery.
    ConsumerSequence,
    /// `$delivered`: delivery count, this delivery included.
    Delivered,
    /// `$published_at`: when the server stored it.
    PublishedAt,
    /// `$written_at`: when this batch was written.
    WrittenAt,
    /// `$message_id`: the publisher's `Nats-Msg-Id`, if any.
    MessageId,
    /// `$idempotency_key`: what makes the write idempotent.
    IdempotencyKey,
    /// `$headers`: all headers as a JSON object of name → list of values.
    Headers,
    /// `$priority`: normalized priority (message metadata).
    Priority,
    /// `$lane`: the priority lane the message was scheduled in.
    Lane,
    /// `$classification`: normalized classification (message metadata).
    Classification,
    /// `$labels`: normalized labels as a JSON array.
    Labels,
    /// `$payload`: the payload bytes.
    Payload,
}

/// Every field with its config spelling (without the `$`).
pub const FIELDS: [(&str, Field); 16] = [
    ("subject", Field::Subject),
    ("stream", Field::Stream),
    ("consumer", Field::Consumer),
    ("stream_sequence", Field::StreamSequence),
    ("consumer_sequence", Field::ConsumerSequence),
    ("delivered", Field::Delivered),
    ("published_at", Field::PublishedAt),
    ("written_at", Field::WrittenAt),
    ("message_id", Field::MessageId),
    ("idempotency_key", Field::IdempotencyKey),
    ("headers", Field::Headers),
    ("priority", Field::Priority),
    ("lane", Field::Lane),
    ("classification", Field::Classification),
    ("labels", Field::Labels),
    ("payload", Field::Payload),
];

impl Field {
    /// The config spelling, without the `$`.
    pub fn name(self) -> &'static str {
        FIELDS
            .iter()
            .find(|(_, f)| *f == self)
            .map(|(n, _)| *n)
            .unwrap_or("?")
    }

    /// What kind of value the field is.
    pub fn kind(self) -> ValueKind {
        match self {
            Field::StreamSequence | Field::ConsumerSequence | Field::Delivered => {
                ValueKind::Integer
            }
            Field::PublishedAt | Field::WrittenAt => ValueKind::Timestamp,
            Field::Headers | Field::Labels => ValueKind::Json,
            Field::Payload => ValueKind::Bytes,
            _ => ValueKind::Text,
        }
    }

    /// Whether a redelivery of the same message yields the same value. Only such values
    /// may form the key that makes a write idempotent.
    pub fn is_stable(self) -> bool {
        !matches!(
            self,
            Field::ConsumerSequence | Field::Delivered | Field::WrittenAt | Field::Lane
        )
    }
}

/// Where one column's value comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Source {
    /// An envelope field (`$stream_sequence`).
    Field(Field),
    /// The last value of a header (`$header:Name`; the name matches case-insensitively).
    Header(String),
    /// A JSON pointer (RFC 6901) into the payload, which must then be JSON (`/order/id`).
    Pointer(String),
}

impl Source {
    /// What kind of value the source yields.
    pub fn kind(&self) -> ValueKind {
        match self {
            Source::Field(f) => f.kind(),
            Source::Header(_) => ValueKind::Text,
            Source::Pointer(_) => ValueKind::Any,
        }
    }

    /// Whether a redelivery yields the same value (see [`Field::is_stable`]).
    pub fn is_stable(&self) -> bool {
        match self {
            Source::Field(f) => f.is_stable(),
            Source::Header(_) | Source::Pointer(_) => true,
        }
    }

    /// The config spelling.
    pub fn spelling(&self) -> String {
        match self {
            Source::Field(f) => format!("${}", f.name()),
            Source::Header(h) => format!("$header:{h}"),
            Source::Pointer(p) => p.clone(),
        }
    }
}

/// Parses a mapping value: `$field`, `$header:Name` or a JSON pointer starting with `/`.
pub fn parse_source(text: &str) -> Result<Source, String> {
    if let Some(rest) = text.strip_prefix('$') {
        if let Some(name) = rest.strip_prefix("header:") {
            let ok = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && b != b':' && b != b'$');
            return if ok {
                Ok(Source::Header(name.to_string()))
            } else {
                Err(format!(
                    "`$header:` needs a header name (printable ASCII, no `:`), got {text:?}"
                ))
            };
        }
        return FIELDS
            .iter()
            .find(|(n, _)| *n == rest)
            .map(|(_, f)| Source::Field(*f))
            .ok_or_else(|| {
                let names: Vec<String> = FIELDS.iter().map(|(n, _)| format!("${n}")).collect();
                format!(
                    "unknown envelope field {text:?} (one of {}, or $header:NAME)",
                    names.join(", ")
                )
            });
    }
    if !text.starts_with('/') {
        return Err(format!(
            "must be a JSON pointer starting with `/` (such as /order/id) or an envelope \
             field such as $subject, got {text:?}"
        ));
    }
    // RFC 6901: `~` only as `~0` or `~1`.
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.peek(), Some('0') | Some('1')) {
            return Err(format!(
                "invalid JSON pointer {text:?}: `~` must be written `~0`, and `/` inside a key `~1`"
            ));
        }
    }
    Ok(Source::Pointer(text.to_string()))
}

/// The kind of value a source yields, for the type check at start-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// A string.
    Text,
    /// A non-negative integer (sequences, counts).
    Integer,
    /// A point in time.
    Timestamp,
    /// A JSON document (headers, labels).
    Json,
    /// Raw bytes (the payload).
    Bytes,
    /// Whatever the payload holds at a JSON pointer: string, number, boolean, null,
    /// object or array; known only per message.
    Any,
}

impl ValueKind {
    /// A word for messages.
    pub fn describe(self) -> &'static str {
        match self {
            ValueKind::Text => "text",
            ValueKind::Integer => "an integer",
            ValueKind::Timestamp => "a timestamp",
            ValueKind::Json => "JSON",
            ValueKind::Bytes => "bytes",
            ValueKind::Any => "a JSON value",
        }
    }
}

/// Database-independent class of a column type, into which each database sorts its own
/// type names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Character strings (`text`, `varchar`, `char`).
    Text,
    /// Integers of any width.
    Integer,
    /// Exact or floating-point numbers (`numeric`, `decimal`, `double`).
    Decimal,
    /// Booleans.
    Boolean,
    /// Date and time (with or without time zone).
    Timestamp,
    /// Calendar dates.
    Date,
    /// JSON documents.
    Json,
    /// UUIDs.
    Uuid,
    /// Byte strings (`bytea`, `blob`, `varbinary`).
    Bytes,
    /// Enumerations (accept their labels as text).
    Enum,
    /// Anything else (arrays, geometry, intervals...): jetsink does not write these.
    Other,
}

/// Whether a column of `family` can hold values of `kind`. Conversions that can fail for
/// some values (text into a UUID column, a JSON value into an integer column) are allowed:
/// such a message is then refused on its own, as bad content, while every other message
/// commits. Conversions that can never work, or would silently lose data, are refused at
/// start-up.
pub fn compatible(kind: ValueKind, family: Family) -> bool {
    use Family as F;
    match kind {
        ValueKind::Text => matches!(family, F::Text | F::Enum | F::Uuid),
        ValueKind::Integer => matches!(family, F::Integer | F::Decimal | F::Text),
        ValueKind::Timestamp => matches!(family, F::Timestamp | F::Text),
        ValueKind::Json => matches!(family, F::Json | F::Text),
        ValueKind::Bytes => matches!(family, F::Bytes | F::Json | F::Text),
        ValueKind::Any => !matches!(family, F::Bytes | F::Other),
    }
}

/// The columns of the jetsink table layout and where their values come from, in table
/// order.
pub const DEFAULT_LAYOUT: [(&str, Field); 15] = [
    ("idempotency_key", Field::IdempotencyKey),
    ("stream", Field::Stream),
    ("stream_sequence", Field::StreamSequence),
    ("consumer_sequence", Field::ConsumerSequence),
    ("subject", Field::Subject),
    ("delivered", Field::Delivered),
    ("published_at", Field::PublishedAt),
    ("written_at", Field::WrittenAt),
    ("message_id", Field::MessageId),
    ("headers", Field::Headers),
    ("priority", Field::Priority),
    ("lane", Field::Lane),
    ("classification", Field::Classification),
    ("labels", Field::Labels),
    ("payload", Field::Payload),
];

/// Which column receives which value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// Column name and its source, in a stable order.
    pub columns: Vec<(String, Source)>,
}

impl Mapping {
    /// The jetsink table layout.
    pub fn default_layout() -> Mapping {
        Mapping {
            columns: DEFAULT_LAYOUT
                .iter()
                .map(|(c, f)| (c.to_string(), Source::Field(*f)))
                .collect(),
        }
    }

    /// Parses a config's `columns`. Errors are `(column, message)` pairs, every one found.
    pub fn parse(columns: &BTreeMap<String, String>) -> Result<Mapping, Vec<(String, String)>> {
        let mut errors = Vec::new();
        let mut out = Vec::with_capacity(columns.len());
        if columns.is_empty() {
            errors.push((String::new(), "must map at least one column".to_string()));
        }
        for (column, text) in columns {
            if let Err(e) = check_column_name(column) {
                errors.push((column.clone(), e));
            }
            match parse_source(text) {
                Ok(s) => out.push((column.clone(), s)),
                Err(e) => errors.push((column.clone(), e)),
            }
        }
        if errors.is_empty() {
            Ok(Mapping { columns: out })
        } else {
            Err(errors)
        }
    }

    /// Whether any column reads the payload as JSON.
    pub fn needs_document(&self) -> bool {
        self.columns
            .iter()
            .any(|(_, s)| matches!(s, Source::Pointer(_)))
    }

    /// The columns that store the idempotency key and the stream as they are, when both
    /// exist: what counting a stream's stored keys needs.
    pub fn key_and_stream_columns(&self) -> Option<(&str, &str)> {
        let column_of = |field: Field| {
            self.columns
                .iter()
                .find(|(_, s)| *s == Source::Field(field))
                .map(|(c, _)| c.as_str())
        };
        Some((column_of(Field::IdempotencyKey)?, column_of(Field::Stream)?))
    }
}

/// A column name jetsink can quote for any database: 1–63 bytes, no control characters.
pub fn check_column_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 63 || name.chars().any(char::is_control) {
        Err(format!(
            "column names must be 1-63 bytes without control characters, got {name:?}"
        ))
    } else {
        Ok(())
    }
}

/// One column of an existing table, as the database's catalog describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableColumn {
    /// Column name as stored.
    pub name: String,
    /// Its class.
    pub family: Family,
    /// Its type as the database spells it, for messages (and casts in PostgreSQL).
    pub type_name: String,
    /// Declared `NOT NULL`.
    pub not_null: bool,
    /// Filled in by the database when not given (default, identity, auto-increment).
    pub has_default: bool,
    /// Computed by the database; cannot be written.
    pub generated: bool,
}

/// A unique index or constraint over plain columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniqueKey {
    /// Index or constraint name.
    pub name: String,
    /// Whether it is the primary key.
    pub primary: bool,
    /// Its columns, in key order.
    pub columns: Vec<String>,
}

/// A mapped column matched to the table: what the write path needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedColumn {
    /// Column name as stored in the table.
    pub name: String,
    /// Where its value comes from.
    pub source: Source,
    /// The column's class.
    pub family: Family,
    /// The column's type as the database spells it.
    pub type_name: String,
    /// Part of the key the write is idempotent on.
    pub key: bool,
}

/// The checked plan for writing into one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TablePlan {
    /// The mapped columns, in mapping order.
    pub columns: Vec<PlannedColumn>,
    /// The unique key chosen for idempotency (names as stored).
    pub key: UniqueKey,
}

impl TablePlan {
    /// Whether any column reads the payload as JSON.
    pub fn needs_document(&self) -> bool {
        self.columns
            .iter()
            .any(|c| matches!(c.source, Source::Pointer(_)))
    }
}

/// Matches `mapping` against a table's columns and unique keys. Every problem is
/// reported, joined by `; `. `fold_case`: column names match case-insensitively (MySQL).
pub fn plan_table(
    mapping: &Mapping,
    columns: &[TableColumn],
    keys: &[UniqueKey],
    fold_case: bool,
) -> Result<TablePlan, String> {
    let same = |a: &str, b: &str| {
        if fold_case {
            a.eq_ignore_ascii_case(b)
        } else {
            a == b
        }
    };
    let mut problems = Vec::new();
    let mut planned = Vec::with_capacity(mapping.columns.len());
    let mut missing = Vec::new();
    for (name, source) in &mapping.columns {
        let Some(col) = columns.iter().find(|c| same(&c.name, name)) else {
            missing.push(name.as_str());
            continue;
        };
        if col.generated {
            problems.push(format!(
                "column {name} is generated by the database and cannot be written"
            ));
            continue;
        }
        let kind = source.kind();
        if !compatible(kind, col.family) {
            problems.push(format!(
                "column {name} has type {}, which cannot hold {} ({})",
                col.type_name,
                kind.describe(),
                source.spelling()
            ));
            continue;
        }
        planned.push(PlannedColumn {
            name: col.name.clone(),
            source: source.clone(),
            family: col.family,
            type_name: col.type_name.clone(),
            key: false,
        });
    }
    if !missing.is_empty() {
        problems.insert(0, format!("missing columns: {}", missing.join(", ")));
    }
    let unfillable: Vec<&str> = columns
        .iter()
        .filter(|c| c.not_null && !c.has_default && !c.generated)
        .filter(|c| !mapping.columns.iter().any(|(n, _)| same(n, &c.name)))
        .map(|c| c.name.as_str())
        .collect();
    if !unfillable.is_empty() {
        problems.push(format!(
            "NOT NULL columns without a default that nothing is mapped to: {}",
            unfillable.join(", ")
        ));
    }
    let key = choose_key(keys, mapping, fold_case);
    if let Err(e) = &key {
        problems.push(e.clone());
    }
    match key {
        Ok(key) if problems.is_empty() => {
            let key = key.clone();
            for c in &mut planned {
                c.key = key.columns.iter().any(|k| same(k, &c.name));
            }
            Ok(TablePlan {
                columns: planned,
                key,
            })
        }
        _ => Err(problems.join("; ")),
    }
}

/// Picks the unique key that makes writes idempotent: every column of it mapped, from
/// values a redelivery repeats. The primary key is preferred, then the narrowest key.
pub fn choose_key<'k>(
    keys: &'k [UniqueKey],
    mapping: &Mapping,
    fold_case: bool,
) -> Result<&'k UniqueKey, String> {
    let stable = |column: &str| {
        mapping.columns.iter().any(|(n, s)| {
            let same = if fold_case {
                n.eq_ignore_ascii_case(column)
            } else {
                n == column
            };
            same && s.is_stable()
        })
    };
    let mut usable: Vec<&UniqueKey> = keys
        .iter()
        .filter(|k| !k.columns.is_empty() && k.columns.iter().all(|c| stable(c)))
        .collect();
    usable.sort_by(|a, b| {
        b.primary
            .cmp(&a.primary)
            .then(a.columns.len().cmp(&b.columns.len()))
            .then(a.name.cmp(&b.name))
    });
    usable.first().copied().ok_or_else(|| {
        let described: Vec<String> = keys
            .iter()
            .map(|k| format!("{} ({})", k.name, k.columns.join(", ")))
            .collect();
        format!(
            "no PRIMARY KEY or UNIQUE constraint whose columns are all mapped from values \
             that stay the same on redelivery (not $consumer_sequence, $delivered, \
             $written_at or $lane), so a redelivered message would be written twice; \
             unique keys found: {}",
            if described.is_empty() {
                "none".to_string()
            } else {
                described.join(", ")
            }
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse_or_say_why_not() {
        assert_eq!(
            parse_source("$stream_sequence"),
            Ok(Source::Field(Field::StreamSequence))
        );
        assert_eq!(
            parse_source("$header:X-Trace"),
            Ok(Source::Header("X-Trace".into()))
        );
        assert_eq!(
            parse_source("/order/id"),
            Ok(Source::Pointer("/order/id".into()))
        );
        assert_eq!(
            parse_source("/a~1b/~0c"),
            Ok(Source::Pointer("/a~1b/~0c".into()))
        );
        for (bad, needle) in [
            ("$nope", "unknown envelope field"),
            ("$header:", "needs a header name"),
            ("$header:a b", "needs a header name"),
            ("order/id", "must be a JSON pointer"),
            ("", "must be a JSON pointer"),
            ("/a~2", "invalid JSON pointer"),
            ("/a~", "invalid JSON pointer"),
        ] {
            let e = parse_source(bad).unwrap_err();
            assert!(e.contains(needle), "{bad:?}: {e}");
        }
        for (name, f) in FIELDS {
            assert_eq!(parse_source(&format!("${name}")), Ok(Source::Field(f)));
            assert_eq!(f.name(), name);
        }
    }

    #[test]
    fn mapping_reports_every_bad_entry() {
        let columns: BTreeMap<String, String> = [
            ("ok".to_string(), "/a".to_string()),
            ("bad".to_string(), "nope".to_string()),
            (String::new(), "/b".to_string()),
            ("ctl\u{7}".to_string(), "$subject".to_string()),
        ]
        .into_iter()
        .collect();
        let errors = Mapping::parse(&columns).unwrap_err();
        let cols: Vec<&str> = errors.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(cols, ["", "bad", "ctl\u{7}"]);
        assert!(Mapping::parse(&BTreeMap::new()).is_err());
        assert!(!Mapping::default_layout().needs_document());
        let m =
            Mapping::parse(&[("x".to_string(), "/x".to_string())].into_iter().collect()).unwrap();
        assert!(m.needs_document());
    }

    #[test]
    fn compatibility_table() {
        use Family as F;
        use ValueKind as K;
        let yes = [
            (K::Text, F::Text),
            (K::Text, F::Enum),
            (K::Text, F::Uuid),
            (K::Integer, F::Integer),
            (K::Integer, F::Decimal),
            (K::Integer, F::Text),
            (K::Timestamp, F::Timestamp),
            (K::Timestamp, F::Text),
            (K::Json, F::Json),
            (K::Json, F::Text),
            (K::Bytes, F::Bytes),
            (K::Bytes, F::Json),
            (K::Bytes, F::Text),
            (K::Any, F::Integer),
            (K::Any, F::Boolean),
            (K::Any, F::Date),
            (K::Any, F::Json),
            (K::Any, F::Uuid),
        ];
        let no = [
            (K::Text, F::Integer),
            (K::Text, F::Json),
            (K::Text, F::Bytes),
            (K::Integer, F::Boolean),
            (K::Integer, F::Timestamp),
            (K::Timestamp, F::Date),
            (K::Timestamp, F::Integer),
            (K::Json, F::Bytes),
            (K::Bytes, F::Integer),
            (K::Any, F::Bytes),
            (K::Any, F::Other),
            (K::Text, F::Other),
        ];
        for (k, f) in yes {
            assert!(compatible(k, f), "{k:?} into {f:?}");
        }
        for (k, f) in no {
            assert!(!compatible(k, f), "{k:?} into {f:?}");
        }
    }

    fn tc(name: &str, family: Family) -> TableColumn {
        TableColumn {
            name: name.into(),
            family,
            type_name: format!("{family:?}").to_lowercase(),
            not_null: false,
            has_default: false,
            generated: false,
        }
    }

    fn key(name: &str, primary: bool, cols: &[&str]) -> UniqueKey {
        UniqueKey {
            name: name.into(),
            primary,
            columns: cols.iter().map(|c| c.to_string()).collect(),
        }
    }

    fn mapping(pairs: &[(&str, &str)]) -> Mapping {
        Mapping::parse(
            &pairs
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn plan_reports_every_problem_at_once() {
        let mut required = tc("req", Family::Text);
        required.not_null = true;
        let mut generated = tc("gen", Family::Text);
        generated.generated = true;
        let table = vec![
            tc("id", Family::Integer),
            tc("flag", Family::Boolean),
            required,
            generated,
        ];
        let m = mapping(&[
            ("id", "$delivered"),
            ("flag", "$payload"),
            ("gone", "/x"),
            ("gen", "/y"),
        ]);
        let e = plan_table(&m, &table, &[key("pk", true, &["id"])], false).unwrap_err();
        for needle in [
            "missing columns: gone",
            "column flag has type boolean, which cannot hold bytes ($payload)",
            "column gen is generated",
            "NOT NULL columns without a default that nothing is mapped to: req",
            "no PRIMARY KEY or UNIQUE constraint",
            "pk (id)",
        ] {
            assert!(e.contains(needle), "{e} lacks {needle}");
        }
    }

    #[test]
    fn key_choice_prefers_primary_then_narrow_and_needs_stable_sources() {
        let m = mapping(&[("a", "/a"), ("b", "/b"), ("c", "$consumer_sequence")]);
        let keys = [
            key("wide", false, &["a", "b"]),
            key("narrow", false, &["b"]),
            key("unstable", true, &["c"]),
        ];
        assert_eq!(choose_key(&keys, &m, false).unwrap().name, "narrow");
        let keys = [key("wide", true, &["a", "b"]), key("narrow", false, &["b"])];
        assert_eq!(choose_key(&keys, &m, false).unwrap().name, "wide");
        let keys = [key("unmapped", true, &["z"])];
        assert!(choose_key(&keys, &m, false).is_err());
        let keys = [key("case", true, &["A"])];
        assert!(choose_key(&keys, &m, false).is_err());
        assert_eq!(choose_key(&keys, &m, true).unwrap().name, "case");
    }

    #[test]
    fn plan_marks_key_columns_and_matches_case_as_told() {
        let table = vec![tc("Id", Family::Integer), tc("v", Family::Text)];
        let keys = [key("pk", true, &["Id"])];
        let m = mapping(&[("id", "/id"), ("v", "$subject")]);
        assert!(plan_table(&m, &table, &keys, false).is_err());
        let plan = plan_table(&m, &table, &keys, true).unwrap();
        assert_eq!(plan.columns[0].name, "Id");
        assert!(plan.columns[0].key);
        assert!(!plan.columns[1].key);
        assert!(plan.needs_document());
    }

    mod generated {
        use super::*;
        use proptest::prelude::*;

        fn source() -> impl Strategy<Value = Source> {
            prop_oneof![
                prop::sample::select(FIELDS.iter().map(|(_, f)| *f).collect::<Vec<_>>())
                    .prop_map(Source::Field),
                "[!-#%-9;-~]{1,24}".prop_map(Source::Header),
                "(/([A-Za-z0-9_ .-]|~0|~1){0,6}){1,4}".prop_map(Source::Pointer),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1_000))]

            #[test]
            fn any_mapping_value_is_parsed_or_refused_without_panic(text in any::<String>()) {
                if let Err(message) = parse_source(&text) {
                    prop_assert!(!message.is_empty());
                }
            }

            #[test]
            fn every_source_reads_back_from_its_config_spelling(src in source()) {
                prop_assert_eq!(parse_source(&src.spelling()), Ok(src));
            }

            #[test]
            fn accepted_column_names_fit_every_database(name in any::<String>()) {
                if check_column_name(&name).is_ok() {
                    prop_assert!(!name.is_empty() && name.len() <= 63);
                    prop_assert!(!name.chars().any(char::is_control));
                }
            }

            #[test]
            fn any_column_map_is_planned_or_refused_by_column(
                map in prop::collection::btree_map(any::<String>(), any::<String>(), 0..8)
            ) {
                if let Err(problems) = Mapping::parse(&map) {
                    prop_assert!(!problems.is_empty());
                    for (column, _) in &problems {
                        prop_assert!(map.contains_key(column) || column.is_empty(), "{}", column);
                    }
                }
            }
        }
    }
}
