//! What a database destination keeps of a key, as the config says it: the write mode, and
//! for an upsert the `order` that decides which message of a key is the newest and the
//! `delete` marker that deletes a key, their checks, and the column mapping they complete.
//!
//! jetsink reorders messages on purpose (the randomizer, buckets, the shuffler, lanes,
//! batches in flight) and writes old ones again on request (`replay`, redelivery), so in
//! an upsert the last write is often not the newest message. An upsert therefore replaces
//! a row only with a message of greater order: by default the column mapped from
//! `$stream_sequence`, or a column the config names whose source the producer sets (a
//! version, an event time). An upsert with neither is refused, unless `"order":
//! "arrival"` says that the last write winning is what is wanted.
//!
//! A delete keeps the key's row as a tombstone: the delete column (a nullable time the
//! config names, never mapped in `columns`) gets the time the delete was stored in the
//! stream, and the order column the delete's order, guarded like any update. So an older
//! update arriving after the delete finds a newer order and changes nothing, and a newer
//! one brings the key back (the delete column becomes NULL again). A real `DELETE` would
//! forget the order, and with it what makes the older update lose.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::columns::{check_column_name, parse_source, Field, Mapping, Marker, MarkerAt, Source};

/// How a database destination treats a message whose key is already in the table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// Keep the row already there (`ON CONFLICT DO NOTHING`; MySQL: a no-op
    /// `ON DUPLICATE KEY UPDATE`). A redelivery changes nothing.
    #[default]
    InsertIgnore,
    /// Overwrite the row's other mapped columns with a newer message (`ON CONFLICT ... DO
    /// UPDATE ... WHERE`; MySQL: `ON DUPLICATE KEY UPDATE` with every assignment guarded):
    /// newer by the `order` column, so an older message arriving later changes nothing.
    Upsert,
}

impl WriteMode {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            WriteMode::InsertIgnore => "insert_ignore",
            WriteMode::Upsert => "upsert",
        }
    }
}

/// `order`: how an upsert decides which message of a key is the newest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(
    untagged,
    expecting = "`\"arrival\"` or an object `{\"column\": NAME}`"
)]
pub enum UpsertOrder {
    /// `"arrival"`: no order; the last write wins, so a replay, a redelivery or any
    /// reordering stage can leave a row holding an older message (warned at start-up
    /// with the randomizer, buckets, the shuffler, lanes or batches in flight).
    Arrival(Arrival),
    /// `{"column": NAME}`: the mapped column whose value orders the messages of a key (a
    /// whole number or an RFC 3339 time the producer sets: a version, an event time).
    Column(OrderColumn),
}

/// The one word `order` takes as a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Arrival {
    /// The last write wins.
    Arrival,
}

/// `order: {"column": NAME}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OrderColumn {
    /// A column of `columns` whose source gives the order: `$stream_sequence`,
    /// `$published_at`, a JSON pointer or a header holding a whole number (0 to 2^63-1)
    /// or an RFC 3339 time with its offset. Its table type must be an integer or a
    /// timestamp type.
    pub column: String,
}

/// `delete`: a message that deletes its key (upsert with `columns` only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteMarker {
    /// Header whose last value marks a delete (name matched case-insensitively). Default
    /// `Jetsink-Op`, unless `pointer` is given.
    #[serde(default)]
    pub header: Option<String>,
    /// JSON pointer into the payload whose value marks a delete (`/op`), instead of a
    /// header.
    #[serde(default)]
    pub pointer: Option<String>,
    /// The value that means delete, compared exactly (a JSON value by its plain text:
    /// `true`, `42`). Default `delete`.
    #[serde(default = "default_value")]
    pub value: String,
    /// The table column that marks a deleted key: a nullable timestamp set to the time
    /// the delete was stored in the stream, and to NULL by any newer update. Not in
    /// `columns`. Required.
    pub column: String,
}

/// The header a delete marker reads by default.
pub const DEFAULT_HEADER: &str = "Jetsink-Op";

fn default_value() -> String {
    "delete".into()
}

impl DeleteMarker {
    /// The marker as the mapping reads it.
    pub fn marker(&self) -> Marker {
        let at = match (&self.pointer, &self.header) {
            (Some(p), _) => MarkerAt::Pointer(p.clone()),
            (None, Some(h)) => MarkerAt::Header(h.clone()),
            (None, None) => MarkerAt::Header(DEFAULT_HEADER.into()),
        };
        Marker {
            at,
            value: self.value.clone(),
        }
    }
}

/// What decides the newest message of a key, as the config has it.
#[derive(Debug, Clone, Copy)]
pub struct State<'a> {
    /// The write mode.
    pub mode: WriteMode,
    /// `columns`, `None` for the jetsink layout.
    pub columns: Option<&'a BTreeMap<String, String>>,
    /// `order`.
    pub order: Option<&'a UpsertOrder>,
    /// `delete`.
    pub delete: Option<&'a DeleteMarker>,
}

/// The column the jetsink layout maps from `$stream_sequence`, its default order.
const LAYOUT_ORDER: &str = "stream_sequence";

impl State<'_> {
    /// Whether the last write wins (`upsert` with `"order": "arrival"`).
    pub fn last_write_wins(&self) -> bool {
        self.mode == WriteMode::Upsert && matches!(self.order, Some(UpsertOrder::Arrival(_)))
    }

    /// The column whose value orders an upsert: the one named, or by default the one
    /// mapped from `$stream_sequence`; `None` for `insert_ignore`, for `arrival`, and for
    /// an upsert without one (which [`State::problems`] refuses).
    pub fn order_column(&self) -> Option<String> {
        if self.mode != WriteMode::Upsert {
            return None;
        }
        match self.order {
            Some(UpsertOrder::Column(c)) => Some(c.column.clone()),
            Some(UpsertOrder::Arrival(_)) => None,
            None => match self.columns {
                None => Some(LAYOUT_ORDER.into()),
                Some(columns) => columns
                    .iter()
                    .find(|(_, s)| parse_source(s) == Ok(Source::Field(Field::StreamSequence)))
                    .map(|(c, _)| c.clone()),
            },
        }
    }

    /// `(key under the destination, message)` for every problem of `order` and `delete`.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if self.mode != WriteMode::Upsert {
            for (key, given) in [
                ("order", self.order.is_some()),
                ("delete", self.delete.is_some()),
            ] {
                if given {
                    out.push((key.into(), "applies to `mode: \"upsert\"` only; insert_ignore keeps the row written first".into()));
                }
            }
            return out;
        }
        match self.order {
            None if self.order_column().is_none() => out.push(("order".into(), NO_ORDER.into())),
            Some(UpsertOrder::Column(c)) => self.order_problems(&c.column, &mut out),
            _ => {}
        }
        if let Some(d) = self.delete {
            self.delete_problems(d, &mut out);
        }
        out
    }

    fn order_problems(&self, column: &str, out: &mut Vec<(String, String)>) {
        let source = match self.columns {
            None => crate::sinks::database::columns::DEFAULT_LAYOUT
                .iter()
                .find(|(c, _)| *c == column)
                .map(|(_, f)| Source::Field(*f)),
            Some(columns) => columns.get(column).and_then(|s| parse_source(s).ok()),
        };
        let why = match source {
            None if self.columns.is_some_and(|c| c.contains_key(column)) => return,
            None => format!(
                "{column:?} is not a mapped column: name a column of `columns` whose source \
                 gives the order (a version, an event time)"
            ),
            Some(Source::Field(Field::StreamSequence | Field::PublishedAt))
            | Some(Source::Header(_) | Source::Pointer(_)) => return,
            Some(other) => format!(
                "column {column} is mapped from {}, which cannot order messages: use \
                 $stream_sequence, $published_at, or a JSON pointer or header holding a whole \
                 number or an RFC 3339 time",
                other.spelling()
            ),
        };
        out.push(("order.column".into(), why));
    }

    fn delete_problems(&self, d: &DeleteMarker, out: &mut Vec<(String, String)>) {
        let mut push = |key: &str, why: String| out.push((format!("delete.{key}"), why));
        if d.header.is_some() && d.pointer.is_some() {
            push(
                "pointer",
                "give either `header` or `pointer`, not both".into(),
            );
        }
        if let Some(h) = &d.header {
            if !matches!(parse_source(&format!("$header:{h}")), Ok(Source::Header(_))) {
                push(
                    "header",
                    format!("must be a header name (printable ASCII, no `:`), got {h:?}"),
                );
            }
        }
        if let Some(p) = &d.pointer {
            match parse_source(p) {
                Ok(Source::Pointer(_)) => {}
                Ok(_) => push(
                    "pointer",
                    format!("must be a JSON pointer starting with `/`, got {p:?}"),
                ),
                Err(e) => push("pointer", e.to_string()),
            }
        }
        if d.value.is_empty() {
            push("value", "must not be empty".into());
        }
        if let Err(e) = check_column_name(&d.column) {
            push("column", e.to_string());
        }
        match self.columns {
            None => out.push((
                "delete".into(),
                "needs a table of your own (`columns`): the delete column is one of its columns"
                    .into(),
            )),
            Some(columns) => {
                if columns.keys().any(|c| c.eq_ignore_ascii_case(&d.column)) {
                    out.push((
                        "delete.column".into(),
                        format!(
                            "column {} is mapped in `columns`; the delete marker writes it, so \
                             leave it out there",
                            d.column
                        ),
                    ));
                }
            }
        }
    }

    /// `mapping` with what the upsert adds: its order column and the delete column.
    pub fn complete(&self, mut mapping: Mapping) -> Mapping {
        mapping.order = self.order_column();
        if let (WriteMode::Upsert, Some(d)) = (self.mode, self.delete) {
            mapping
                .columns
                .push((d.column.clone(), Source::Deleted(d.marker())));
        }
        mapping
    }

    /// How `validate` and the start-up log show what an upsert keeps: `, newest by
    /// stream_seq; deletes by header Jetsink-Op = "delete" into deleted_at`.
    pub fn describe(&self) -> String {
        if self.mode != WriteMode::Upsert {
            return String::new();
        }
        let mut out = match self.order_column() {
            Some(c) => format!(", newest by {c}"),
            None => ", last write wins (order: arrival)".to_string(),
        };
        if let Some(d) = self.delete {
            out.push_str(&format!(
                "; deletes by {} into {}",
                d.marker().describe(),
                d.column
            ));
        }
        out
    }
}

/// Why an upsert without an order is refused, and the three ways out.
const NO_ORDER: &str = "an upsert keeps the newest message of each key, which needs an order: \
     map `$stream_sequence` to a column (\"stream_seq\": \"$stream_sequence\"), or name a mapped \
     column the producer orders by with \"order\": {\"column\": \"version\"}, or set \
     \"order\": \"arrival\" to let the last write win (a replay, a redelivery, the randomizer, \
     buckets, the shuffler, lanes and batches in flight can then leave a row holding an older \
     message)";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn state_problems(mode: WriteMode, rest: serde_json::Value) -> Vec<String> {
        let columns: Option<BTreeMap<String, String>> =
            serde_json::from_value(rest["columns"].clone()).ok();
        let order: Option<UpsertOrder> = serde_json::from_value(rest["order"].clone()).ok();
        let delete: Option<DeleteMarker> = serde_json::from_value(rest["delete"].clone()).ok();
        let state = State {
            mode,
            columns: columns.as_ref(),
            order: order.as_ref(),
            delete: delete.as_ref(),
        };
        state
            .problems()
            .into_iter()
            .map(|(k, m)| format!("{k}: {m}"))
            .collect()
    }

    const UPSERT: WriteMode = WriteMode::Upsert;

    #[test]
    fn an_upsert_takes_its_order_from_the_stream_sequence_column_by_default() {
        assert!(
            state_problems(UPSERT, json!({})).is_empty(),
            "the layout has one"
        );
        let mapped = json!({"columns": {"id": "/id", "seq": "$stream_sequence"}});
        assert!(state_problems(UPSERT, mapped.clone()).is_empty());
        let columns: BTreeMap<String, String> =
            serde_json::from_value(mapped["columns"].clone()).unwrap();
        let state = State {
            mode: UPSERT,
            columns: Some(&columns),
            order: None,
            delete: None,
        };
        assert_eq!(state.order_column().as_deref(), Some("seq"));
        assert_eq!(state.describe(), ", newest by seq");
        let none = State {
            mode: WriteMode::InsertIgnore,
            ..state
        };
        assert_eq!(
            (none.order_column(), none.describe()),
            (None, String::new())
        );
    }

    #[test]
    fn an_upsert_without_an_order_is_refused_naming_the_three_fixes() {
        let got = state_problems(UPSERT, json!({"columns": {"id": "/id", "v": "/v"}}));
        assert_eq!(got.len(), 1, "{got:?}");
        for fix in [
            "$stream_sequence",
            "\"order\": {\"column\"",
            "\"order\": \"arrival\"",
        ] {
            assert!(
                got[0].starts_with("order: an upsert keeps the newest"),
                "{got:?}"
            );
            assert!(got[0].contains(fix), "{got:?} lacks {fix}");
        }
        let arrival = json!({"columns": {"id": "/id", "v": "/v"}, "order": "arrival"});
        assert!(state_problems(UPSERT, arrival).is_empty());
    }

    #[test]
    fn a_named_order_column_must_be_mapped_from_a_number_or_a_time() {
        let with = |order: &str| {
            state_problems(
                UPSERT,
                json!({"columns": {"id": "/id", "v": "/version", "h": "$header:Version",
                                   "at": "$published_at", "s": "$subject",
                                   "d": "$delivered"},
                       "order": {"column": order}}),
            )
        };
        for fine in ["v", "h", "at"] {
            assert!(with(fine).is_empty(), "{fine}: {:?}", with(fine));
        }
        let got = with("s");
        assert!(
            got[0].starts_with("order.column: column s is mapped from $subject"),
            "{got:?}"
        );
        assert!(with("d")[0].contains("$delivered"));
        let got = with("absent");
        assert!(
            got[0].contains("\"absent\" is not a mapped column"),
            "{got:?}"
        );
        // The layout's columns may be named too.
        let layout = state_problems(UPSERT, json!({"order": {"column": "published_at"}}));
        assert!(layout.is_empty(), "{layout:?}");
    }

    #[test]
    fn order_and_delete_belong_to_upserts_only() {
        let got = state_problems(
            WriteMode::InsertIgnore,
            json!({"order": "arrival", "delete": {"column": "gone"}}),
        );
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(
            got[0].starts_with("order: applies to `mode: \"upsert\"` only"),
            "{got:?}"
        );
        assert!(got[1].starts_with("delete: applies to"), "{got:?}");
    }

    #[test]
    fn a_delete_marker_is_checked_where_each_part_is_written() {
        let cols = json!({"id": "/id", "seq": "$stream_sequence", "gone_at": "$published_at"});
        let with = |delete: serde_json::Value| {
            state_problems(UPSERT, json!({"columns": cols, "delete": delete}))
        };
        assert!(with(json!({"column": "deleted_at"})).is_empty());
        assert!(with(json!({"pointer": "/op", "value": "d", "column": "deleted_at"})).is_empty());
        let got = with(json!({"header": "a:b", "pointer": "op", "value": "", "column": "GONE_AT"}));
        let keys: Vec<&str> = got.iter().map(|g| g.split(':').next().unwrap()).collect();
        assert_eq!(
            keys,
            [
                "delete.pointer",
                "delete.header",
                "delete.pointer",
                "delete.value",
                "delete.column"
            ],
            "{got:?}"
        );
        assert!(got[4].contains("mapped in `columns`"), "{got:?}");
        let layout = state_problems(UPSERT, json!({"delete": {"column": "deleted_at"}}));
        assert_eq!(layout.len(), 1);
        assert!(
            layout[0].starts_with("delete: needs a table of your own"),
            "{layout:?}"
        );
    }

    #[test]
    fn the_mapping_gains_the_order_and_the_delete_column() {
        let columns: BTreeMap<String, String> = [
            ("id".to_string(), "/id".to_string()),
            ("v".to_string(), "/v".to_string()),
        ]
        .into_iter()
        .collect();
        let order = UpsertOrder::Column(OrderColumn { column: "v".into() });
        let delete: DeleteMarker = serde_json::from_value(json!({"column": "gone"})).unwrap();
        let state = State {
            mode: UPSERT,
            columns: Some(&columns),
            order: Some(&order),
            delete: Some(&delete),
        };
        let mapping = state.complete(Mapping::parse(&columns).unwrap());
        assert_eq!(mapping.order.as_deref(), Some("v"));
        let (name, source) = mapping.columns.last().unwrap();
        assert_eq!(name, "gone");
        assert_eq!(
            *source,
            Source::Deleted(Marker {
                at: MarkerAt::Header("Jetsink-Op".into()),
                value: "delete".into()
            })
        );
        assert_eq!(
            state.describe(),
            ", newest by v; deletes by header Jetsink-Op = \"delete\" into gone"
        );
        let arrival = UpsertOrder::Arrival(Arrival::Arrival);
        let state = State {
            order: Some(&arrival),
            delete: None,
            ..state
        };
        assert!(state.last_write_wins());
        assert_eq!(
            state.complete(Mapping::parse(&columns).unwrap()).order,
            None
        );
        assert_eq!(state.describe(), ", last write wins (order: arrival)");
    }

    #[test]
    fn order_reads_the_word_arrival_or_a_column_object_and_nothing_else() {
        let read = |v: serde_json::Value| serde_json::from_value::<UpsertOrder>(v);
        assert_eq!(
            read(json!("arrival")).unwrap(),
            UpsertOrder::Arrival(Arrival::Arrival)
        );
        assert_eq!(
            read(json!({"column": "v"})).unwrap(),
            UpsertOrder::Column(OrderColumn { column: "v".into() })
        );
        for bad in [json!("newest"), json!({"column": "v", "x": 1}), json!(3)] {
            let e = read(bad.clone()).unwrap_err().to_string();
            assert!(e.contains("\"arrival\"` or an object"), "{bad}: {e}");
        }
    }
}
