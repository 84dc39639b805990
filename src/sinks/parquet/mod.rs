//! Parquet encoding shared by the `s3` and `file` destinations (`format: "parquet"`):
//! each write becomes one whole Parquet file — an object, or a file renamed into place —
//! that DuckDB, Spark, Athena, pandas or pyarrow read directly.
//!
//! - [`settings`] (pure): the keys both destinations take (`compression`,
//!   `row_group_rows`, `columns`, `column_types`), their checks and the resolved
//!   [`Options`];
//! - [`schema`] (pure): the jetsink layout, pinned, or a mapped layout, as a Parquet
//!   schema, and the metadata naming each column's source;
//! - [`values`] (pure): a mapped column's value for one message in its Parquet type, or
//!   why it does not fit (that message is then refused, never the file broken);
//! - [`encode`]: envelopes into row groups through the crate's column writers, on any
//!   `Write`;
//! - [`read`]: rows back as JSON (`jetsink decrypt`) and a stream's idempotency keys
//!   (`jetsink bench`).
//!
//! The `parquet` crate is used without its Arrow layer: the column writers are all a
//! writer of envelopes needs, and Arrow would roughly double the dependency's build time.

pub mod encode;
pub mod read;
pub mod schema;
pub mod settings;
pub mod values;

pub use encode::{EncodeError, Encoder};
pub use settings::{Codec, ColumnType, Format, Keys, Layout, Options, SettingsRefused};

#[cfg(test)]
mod tests;
