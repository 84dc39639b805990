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
//!
//! Split by job: `source` parses what a column is mapped from, `kinds` says which kinds of
//! value which column types can hold, `mapping` is the set of mapped columns (the default
//! layout or the config's), and `plan` checks a table against a mapping and picks the
//! unique key.

mod kinds;
mod mapping;
mod plan;
mod source;

pub use kinds::{compatible, Family, ValueKind};
pub use mapping::{check_column_name, ColumnNameError, Mapping, DEFAULT_LAYOUT};
pub use plan::{
    choose_key, lacking, plan_table, Newest, PlanError, PlanProblem, PlannedColumn, TableColumn,
    TablePlan, UniqueKey,
};
pub use source::{parse_source, Field, Marker, MarkerAt, Source, SourceError, FIELDS};
