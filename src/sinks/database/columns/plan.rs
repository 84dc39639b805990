//! The check of an existing table against a mapping at start-up: every mapped column
//! present, writable and of a type that can hold its value, every required column mapped,
//! a unique key that makes a write idempotent, and for an ordered upsert an order column
//! that is a number or a time. Its result is the plan the write path follows.

use super::kinds::{compatible, Family, ValueKind};
use super::mapping::Mapping;
use super::source::Source;

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
    /// Declared `NOT NULL`.
    pub not_null: bool,
}

/// The checked plan for writing into one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TablePlan {
    /// The mapped columns, in mapping order.
    pub columns: Vec<PlannedColumn>,
    /// The unique key chosen for idempotency (names as stored).
    pub key: UniqueKey,
    /// For an ordered upsert, which columns decide that a message is newer than the row.
    pub newest: Option<Newest>,
}

/// The columns an ordered upsert compares, by their place in [`TablePlan::columns`]: a
/// stored row is replaced only by a message whose `(order, tie)` is greater.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Newest {
    /// The order column (an integer or a time).
    pub order: usize,
    /// The column mapped from `$stream_sequence`, when that is not the order column
    /// itself: it breaks ties between equal order values.
    pub tie: Option<usize>,
}

impl TablePlan {
    /// Whether the unique key is made only of what tells messages apart
    /// (`$idempotency_key`, `$stream`, `$stream_sequence`): then two messages of one batch
    /// with distinct idempotency keys never write the same row, and the batch may be spread
    /// over connections by idempotency key. A key read from the payload or a header may
    /// join two messages in one row, whose winner only one connection decides.
    pub fn keyed_by_message(&self) -> bool {
        use super::source::Field;
        self.columns.iter().filter(|c| c.key).all(|c| {
            matches!(
                c.source,
                Source::Field(Field::IdempotencyKey | Field::Stream | Field::StreamSequence)
            )
        })
    }

    /// Whether any column reads the payload as JSON.
    pub fn needs_document(&self) -> bool {
        self.columns.iter().any(|c| c.source.reads_payload())
    }

    /// The place of the delete marker's column, when the upsert has one.
    pub fn deleted(&self) -> Option<usize> {
        self.columns
            .iter()
            .position(|c| matches!(c.source, Source::Deleted(_)))
    }

    /// What the table check found for an upsert, as `validate --online` and the start-up
    /// log say it: `; newest by version (bigint), ties by stream_seq; deletes mark
    /// deleted_at (timestamp); ...`. Empty when there is nothing to say.
    pub fn describe_upsert(&self) -> String {
        let mut out = String::new();
        if let Some(n) = self.newest {
            let c = &self.columns[n.order];
            out.push_str(&format!("; newest by {} ({})", c.name, c.type_name));
            if let Some(t) = n.tie {
                out.push_str(&format!(", ties by {}", self.columns[t].name));
            }
        }
        if let Some(d) = self.deleted() {
            let c = &self.columns[d];
            out.push_str(&format!("; deletes mark {} ({})", c.name, c.type_name));
            let required = self.required_on_delete();
            if !required.is_empty() {
                out.push_str(&format!(
                    "; a delete of a key not stored yet needs values for the NOT NULL \
                     columns {}, or it is refused",
                    required.join(", ")
                ));
            }
        }
        out
    }

    /// The NOT NULL columns besides the key and the order that a delete of a key not
    /// stored yet must fill from its message (its tombstone row is inserted whole): those
    /// mapped from a pointer, a header or an optional field.
    pub fn required_on_delete(&self) -> Vec<&str> {
        let order = self.newest.map(|n| n.order);
        self.columns
            .iter()
            .enumerate()
            .filter(|(i, c)| {
                c.not_null
                    && !c.key
                    && Some(*i) != order
                    && c.source.may_be_null()
                    && !matches!(c.source, Source::Deleted(_))
            })
            .map(|(_, c)| c.name.as_str())
            .collect()
    }
}

/// One way a table does not fit its mapping, naming the columns or keys concerned (the
/// caller names the table).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanProblem {
    /// Mapped columns the table does not have.
    #[error("missing columns: {}", .columns.join(", "))]
    MissingColumns {
        /// Their names as mapped.
        columns: Vec<String>,
    },
    /// A mapped column the database computes itself.
    #[error("column {column} is generated by the database and cannot be written")]
    Generated {
        /// Its name as mapped.
        column: String,
    },
    /// A mapped column whose type can never hold what it is mapped from.
    #[error("column {column} has type {type_name}, which cannot hold {} ({spelling})", .kind.describe())]
    CannotHold {
        /// Its name as mapped.
        column: String,
        /// Its type as the database spells it.
        type_name: String,
        /// What its source yields.
        kind: ValueKind,
        /// The source as the config spells it.
        spelling: String,
    },
    /// Columns every insert would have to fill that nothing is mapped to.
    #[error(
        "NOT NULL columns without a default that nothing is mapped to: {}",
        .columns.join(", ")
    )]
    Unfillable {
        /// Their names as stored.
        columns: Vec<String>,
    },
    /// The order column of an upsert is not a number or a time in the table.
    #[error(
        "the order column {column} has type {type_name}: an upsert compares it to keep the \
         newest message, so it must be an integer or a timestamp type"
    )]
    OrderType {
        /// Its name as mapped.
        column: String,
        /// Its type as the database spells it.
        type_name: String,
    },
    /// The order an upsert was given names no mapped column.
    #[error("the order column {column} is not mapped in `columns`")]
    OrderUnmapped {
        /// The name given.
        column: String,
    },
    /// No unique key can make a write idempotent.
    #[error(
        "no PRIMARY KEY or UNIQUE constraint whose columns are all mapped from values \
         that stay the same on redelivery (not $consumer_sequence, $delivered, \
         $written_at or $lane), so a redelivered message would be written twice; \
         unique keys found: {}",
        listed(.found)
    )]
    NoUsableKey {
        /// Every unique key of the table, as `name (column, ...)`.
        found: Vec<String>,
    },
}

/// Every way a table does not fit its mapping, reported at once, joined by `; `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", join(.problems))]
pub struct PlanError {
    /// The problems, the missing columns first.
    pub problems: Vec<PlanProblem>,
}

/// The keys found, or `none`.
fn listed(found: &[String]) -> String {
    if found.is_empty() {
        "none".to_string()
    } else {
        found.join(", ")
    }
}

/// The problems as one message.
fn join(problems: &[PlanProblem]) -> String {
    let texts: Vec<String> = problems.iter().map(ToString::to_string).collect();
    texts.join("; ")
}

/// Matches `mapping` against a table's columns and unique keys. Every problem is
/// reported. `fold_case`: column names match case-insensitively (MySQL).
pub fn plan_table(
    mapping: &Mapping,
    columns: &[TableColumn],
    keys: &[UniqueKey],
    fold_case: bool,
) -> Result<TablePlan, PlanError> {
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
    let mut order = None;
    for (name, source) in &mapping.columns {
        let is_order = mapping.order.as_deref() == Some(name.as_str());
        let Some(col) = columns.iter().find(|c| same(&c.name, name)) else {
            missing.push(name.clone());
            continue;
        };
        if col.generated {
            problems.push(PlanProblem::Generated {
                column: name.clone(),
            });
            continue;
        }
        // The order value is read as a number or a time whatever its source (see
        // `database::newest`), so only the column's own type decides.
        let kind = if is_order {
            ValueKind::Any
        } else {
            source.kind()
        };
        if is_order && !matches!(col.family, Family::Integer | Family::Timestamp) {
            problems.push(PlanProblem::OrderType {
                column: name.clone(),
                type_name: col.type_name.clone(),
            });
            continue;
        }
        if !compatible(kind, col.family) {
            problems.push(PlanProblem::CannotHold {
                column: name.clone(),
                type_name: col.type_name.clone(),
                kind,
                spelling: source.spelling(),
            });
            continue;
        }
        planned.push(PlannedColumn {
            name: col.name.clone(),
            source: source.clone(),
            family: col.family,
            type_name: col.type_name.clone(),
            key: false,
            not_null: col.not_null,
        });
        if is_order {
            order = Some(planned.len() - 1);
        }
    }
    if !missing.is_empty() {
        problems.insert(0, PlanProblem::MissingColumns { columns: missing });
    }
    if let Some(column) = &mapping.order {
        if !mapping.columns.iter().any(|(n, _)| n == column) {
            problems.push(PlanProblem::OrderUnmapped {
                column: column.clone(),
            });
        }
    }
    let unfillable: Vec<String> = columns
        .iter()
        .filter(|c| c.not_null && !c.has_default && !c.generated)
        .filter(|c| !mapping.columns.iter().any(|(n, _)| same(n, &c.name)))
        .map(|c| c.name.clone())
        .collect();
    if !unfillable.is_empty() {
        problems.push(PlanProblem::Unfillable {
            columns: unfillable,
        });
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
            let newest = order.map(|order| Newest {
                order,
                tie: (0..planned.len()).find(|&i| {
                    i != order
                        && planned[i].source == Source::Field(super::source::Field::StreamSequence)
                }),
            });
            Ok(TablePlan {
                columns: planned,
                key,
                newest,
            })
        }
        _ => Err(PlanError { problems }),
    }
}

/// Which of `names` the table has no column for. `fold_case`: column names match
/// case-insensitively (MySQL).
pub fn lacking<'a>(names: &[&'a str], columns: &[TableColumn], fold_case: bool) -> Vec<&'a str> {
    names
        .iter()
        .copied()
        .filter(|n| {
            !columns.iter().any(|c| {
                if fold_case {
                    c.name.eq_ignore_ascii_case(n)
                } else {
                    c.name == *n
                }
            })
        })
        .collect()
}

/// Picks the unique key that makes writes idempotent: every column of it mapped, from
/// values a redelivery repeats. The primary key is preferred, then the narrowest key.
pub fn choose_key<'k>(
    keys: &'k [UniqueKey],
    mapping: &Mapping,
    fold_case: bool,
) -> Result<&'k UniqueKey, PlanProblem> {
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
    usable
        .first()
        .copied()
        .ok_or_else(|| PlanProblem::NoUsableKey {
            found: keys
                .iter()
                .map(|k| format!("{} ({})", k.name, k.columns.join(", ")))
                .collect(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn lacking_names_the_columns_a_table_has_not() {
        let table = [tc("Labels", Family::Json), tc("payload", Family::Bytes)];
        let names = ["labels", "trace_id", "payload"];
        assert_eq!(lacking(&names, &table, false), ["labels", "trace_id"]);
        assert_eq!(lacking(&names, &table, true), ["trace_id"]);
        assert!(lacking(&[], &table, true).is_empty());
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
        let e = plan_table(&m, &table, &[key("pk", true, &["id"])], false)
            .unwrap_err()
            .to_string();
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
        assert!(e.starts_with("missing columns: gone; "), "{e}");
    }

    #[test]
    fn a_table_without_unique_keys_says_none_were_found() {
        let m = mapping(&[("id", "/id")]);
        let e = choose_key(&[], &m, false).unwrap_err().to_string();
        assert!(e.ends_with("unique keys found: none"), "{e}");
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

    #[test]
    fn only_a_key_of_message_identity_lets_a_batch_be_spread() {
        let table = vec![
            tc("k", Family::Text),
            tc("s", Family::Text),
            tc("q", Family::Integer),
            tc("order", Family::Integer),
            tc("h", Family::Text),
        ];
        let plan_with = |keys: &[&str]| {
            let m = mapping(&[
                ("k", "$idempotency_key"),
                ("s", "$stream"),
                ("q", "$stream_sequence"),
                ("order", "/order/id"),
                ("h", "$header:Trace-Id"),
            ]);
            plan_table(&m, &table, &[key("pk", true, keys)], false).unwrap()
        };
        assert!(plan_with(&["k"]).keyed_by_message());
        assert!(plan_with(&["s", "q"]).keyed_by_message());
        // Two messages may carry one order id or one header value: one row, one winner.
        assert!(!plan_with(&["order"]).keyed_by_message());
        assert!(!plan_with(&["h"]).keyed_by_message());
        assert!(!plan_with(&["s", "order"]).keyed_by_message());
    }

    #[test]
    fn an_ordered_upsert_plans_its_order_column_and_the_stream_sequence_tie_breaker() {
        let table = vec![
            tc("id", Family::Integer),
            tc("version", Family::Integer),
            tc("at", Family::Timestamp),
            tc("seq", Family::Integer),
            tc("note", Family::Text),
        ];
        let keys = [key("pk", true, &["id"])];
        let with_order = |order: &str| {
            // A header's text fits an integer column only as the order (read as a number).
            let version = if order == "version" {
                "$header:Version"
            } else {
                "/version"
            };
            let mut m = mapping(&[
                ("id", "/id"),
                ("version", version),
                ("at", "/at"),
                ("seq", "$stream_sequence"),
                ("note", "/note"),
            ]);
            m.order = Some(order.to_string());
            plan_table(&m, &table, &keys, false)
        };
        // A header's text into an integer column: read as a number, so the type fits.
        let plan = with_order("version").unwrap();
        let (order, tie) = plan.newest.map(|n| (n.order, n.tie)).unwrap();
        assert_eq!(plan.columns[order].name, "version");
        assert_eq!(tie.map(|t| plan.columns[t].name.as_str()), Some("seq"));
        assert_eq!(
            plan.describe_upsert(),
            "; newest by version (integer), ties by seq"
        );
        let plan = with_order("seq").unwrap();
        assert_eq!(
            plan.newest.unwrap().tie,
            None,
            "the order is the sequence itself"
        );
        assert!(with_order("at").is_ok());
        let e = with_order("note").unwrap_err().to_string();
        assert!(e.contains("the order column note has type text"), "{e}");
        let e = with_order("absent").unwrap_err().to_string();
        assert!(e.contains("the order column absent is not mapped"), "{e}");
        // Without an order (insert_ignore, arrival), nothing is compared.
        let m = mapping(&[("id", "/id"), ("seq", "$stream_sequence")]);
        assert_eq!(plan_table(&m, &table, &keys, false).unwrap().newest, None);
    }
}
