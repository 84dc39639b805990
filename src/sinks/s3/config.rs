//! The `s3` destination's settings and their checks. Nothing here reads a secret: the
//! access key settings name an environment variable or a file, read when the sink opens,
//! so `validate` and the start-up log can never print one.

use reqwest::Url;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use super::key::Template;
use crate::sinks::parquet::{ColumnType, Format};
use crate::sinks::settings::{
    connect_within_request, out_of_range, Accumulate, DestinationSettings, NamedPath,
};
pub use crate::sinks::util::rollover::RolloverConfig;

/// The `s3` destination: each batch becomes one JSON Lines object (one per partition the
/// batch touches) in a bucket of any S3-compatible store, committed when the upload
/// completed.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct S3Config {
    /// The bucket. It must exist; jetsink never creates it.
    pub bucket: String,
    /// Key prefix of every object, without leading or trailing `/` (`archive/orders`).
    /// Default: none.
    #[serde(default)]
    pub prefix: String,
    /// The folders under `prefix`, `/`-separated, from placeholders and text: `{stream}`,
    /// `{yyyy}`, `{mm}`, `{dd}`, `{hh}` (the message's publication time, UTC) and
    /// `{subject.N}` (the N-th token of its subject, from 1). Default
    /// `{stream}/{yyyy}/{mm}/{dd}`. A batch whose messages fall in several partitions is
    /// written as one object per partition.
    #[serde(default = "default_partition")]
    pub partition: String,
    /// `jsonl` (default): JSON Lines objects; `parquet`: Parquet objects (`.parquet`)
    /// with typed columns, which analytics engines read directly.
    #[serde(default)]
    pub format: Format,
    /// JSON Lines: `none` (default), `gzip` (`.jsonl.gz`) or `zstd` (`.jsonl.zst`).
    /// Parquet: `zstd` (default), `snappy` or `none`, the compression of its pages.
    #[serde(default)]
    pub compression: Option<Compression>,
    /// Parquet only: rows per row group, 100 – 1000000. Default 10000.
    #[serde(default)]
    pub row_group_rows: Option<u64>,
    /// Parquet only: a column mapping, column name → an envelope field (`$subject`) or a
    /// JSON pointer into the payload (`/order/id`), as the database destinations'
    /// `columns`. Default: the jetsink layout (docs/sinks/s3.md).
    #[serde(default)]
    pub columns: Option<BTreeMap<String, String>>,
    /// Parquet only: the type of mapped columns (`string`, `int64`, `double`, `boolean`,
    /// `timestamp`, `date`, `json`, `binary`); required for JSON pointer columns, others
    /// default from their field.
    #[serde(default)]
    pub column_types: Option<BTreeMap<String, ColumnType>>,
    /// The region the requests are signed for. Default: `AWS_REGION` /
    /// `AWS_DEFAULT_REGION`, else `us-east-1`.
    #[serde(default)]
    pub region: Option<String>,
    /// Base URL of a store other than AWS (`https://minio.example:9000`). Default: the AWS
    /// endpoint of the region.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Allow a plain `http://` endpoint: objects and signatures travel unencrypted.
    /// Default false.
    #[serde(default)]
    pub allow_http: bool,
    /// Path-style requests (`<endpoint>/<bucket>/<key>`), what most non-AWS stores expect.
    /// Default true. With false, virtual-hosted requests: on AWS `<bucket>.s3...`, and a
    /// custom `endpoint` must then already name the bucket.
    #[serde(default = "default_true")]
    pub path_style: bool,
    /// Environment variable holding the access key id. With `access_key_id_file`, give at
    /// most one; with neither (and no secret key setting), the standard AWS environment is
    /// used (`AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, web
    /// identity, container or instance credentials).
    #[serde(default)]
    pub access_key_id_env: Option<String>,
    /// File holding the access key id (one trailing newline ignored).
    #[serde(default)]
    pub access_key_id_file: Option<String>,
    /// Environment variable holding the secret access key.
    #[serde(default)]
    pub secret_access_key_env: Option<String>,
    /// File holding the secret access key (one trailing newline ignored).
    #[serde(default)]
    pub secret_access_key_file: Option<String>,
    /// Objects larger than this are uploaded in parts of this size, 5 MiB – 5 GiB, in
    /// bytes; at most 4 parts are in flight. Default 8388608 (8 MiB).
    #[serde(default = "default_part_bytes")]
    pub multipart_part_bytes: u64,
    /// How long opening a connection may take, in milliseconds, 100 – 600000. Default 5000.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// How long one request (one PUT, one part) may take, in milliseconds, 100 – 3600000.
    /// Default 30000. A request that outlasts it is a transient failure.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// Several pulled batches per object: messages are held (unacknowledged) until
    /// `max_messages`, `max_bytes` or `max_age_ms`, then written as one batch, one object
    /// per partition, and ACKed after it is stored. Default: for Parquet objects, half the
    /// consumer's `max_ack_pending` (at most 50000 messages), 64 MiB or 60000 ms, when the
    /// sink has no shuffler, randomizer or lanes; for JSON Lines, one object per batch.
    #[serde(default)]
    pub rollover: Option<RolloverConfig>,
}

/// How objects are compressed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// Plain JSON Lines, `.jsonl`.
    #[default]
    None,
    /// gzip, `.jsonl.gz`.
    Gzip,
    /// zstd, `.jsonl.zst`; or a Parquet object's pages (the Parquet default).
    Zstd,
    /// Snappy: a Parquet object's pages only.
    Snappy,
}

impl Compression {
    /// The object name's ending.
    pub fn extension(self) -> &'static str {
        match self {
            Compression::None => "jsonl",
            Compression::Gzip => "jsonl.gz",
            Compression::Zstd => "jsonl.zst",
            // Refused with JSON Lines by validation.
            Compression::Snappy => "jsonl.sz",
        }
    }

    /// The compression of an object named `name`, by its ending; `None` for an object
    /// jetsink did not write.
    pub fn of_name(name: &str) -> Option<Compression> {
        [Compression::Gzip, Compression::Zstd, Compression::None]
            .into_iter()
            .find(|c| name.ends_with(&format!(".{}", c.extension())))
    }
}

/// Smallest part S3 accepts (except the last).
pub const MIN_PART_BYTES: u64 = 5 << 20;
/// Largest part S3 accepts.
pub const MAX_PART_BYTES: u64 = 5 << 30;

impl S3Config {
    /// `s3://bucket/prefix`, for logs, errors and the conflict check.
    pub fn location(&self) -> String {
        if self.prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, self.prefix)
        }
    }

    /// The endpoint without user, query or fragment, for logs.
    fn endpoint_shown(&self) -> String {
        match self.endpoint.as_deref().map(Url::parse) {
            None => "AWS".into(),
            Some(Ok(u)) => format!(
                "{}://{}{}",
                u.scheme(),
                u.host_str().unwrap_or(""),
                u.port().map(|p| format!(":{p}")).unwrap_or_default()
            ),
            Some(Err(_)) => "(invalid endpoint)".into(),
        }
    }

    fn endpoint_problems(&self, out: &mut Vec<(String, String)>) {
        let Some(endpoint) = &self.endpoint else {
            if self.allow_http {
                out.push((
                    "allow_http".into(),
                    "applies to a custom `endpoint` only (AWS is always https)".into(),
                ));
            }
            return;
        };
        let url = match Url::parse(endpoint) {
            Ok(u) => u,
            Err(e) => {
                out.push(("endpoint".into(), format!("not a URL: {e}")));
                return;
            }
        };
        match url.scheme() {
            "https" => {}
            "http" if self.allow_http => {}
            "http" => out.push((
                "endpoint".into(),
                "is plain http: use https, or set `allow_http: true` to send unencrypted".into(),
            )),
            other => out.push((
                "endpoint".into(),
                format!("scheme must be https (or http), got {other:?}"),
            )),
        }
        if url.host_str().is_none_or(str::is_empty) {
            out.push(("endpoint".into(), "has no host".into()));
        }
        if !url.username().is_empty() || url.password().is_some() {
            out.push((
                "endpoint".into(),
                "must not contain a user or password: use the access key settings".into(),
            ));
        }
        if url.query().is_some() || url.fragment().is_some() {
            out.push((
                "endpoint".into(),
                "must not have a query or fragment".into(),
            ));
        }
    }

    fn credential_problems(&self, out: &mut Vec<(String, String)>) {
        let pairs = [
            (
                "access_key_id",
                &self.access_key_id_env,
                &self.access_key_id_file,
            ),
            (
                "secret_access_key",
                &self.secret_access_key_env,
                &self.secret_access_key_file,
            ),
        ];
        for (name, env, file) in pairs {
            if env.is_some() && file.is_some() {
                out.push((
                    format!("{name}_env"),
                    format!("give one of `{name}_env` or `{name}_file`, not both"),
                ));
            }
            if env.as_deref().is_some_and(str::is_empty) {
                out.push((format!("{name}_env"), "must name a variable".into()));
            }
            if file.as_deref().is_some_and(|f| f.trim().is_empty()) {
                out.push((format!("{name}_file"), "must not be empty".into()));
            }
        }
        let id = self.access_key_id_env.is_some() || self.access_key_id_file.is_some();
        let secret = self.secret_access_key_env.is_some() || self.secret_access_key_file.is_some();
        if id != secret {
            out.push((
                if id {
                    "secret_access_key_env"
                } else {
                    "access_key_id_env"
                }
                .into(),
                "give the access key id and the secret access key together (each by `_env` or `_file`), or neither to use the AWS environment".into(),
            ));
        }
    }

    /// Whether the config names its own key settings (else the AWS environment is used).
    pub fn explicit_keys(&self) -> bool {
        self.access_key_id_env.is_some() || self.access_key_id_file.is_some()
    }
}

impl DestinationSettings for S3Config {
    fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        // S3's bucket naming rules (lowercase letters, digits, dots, hyphens; 3 – 63).
        let b = self.bucket.as_bytes();
        let bucket_ok = (3..=63).contains(&b.len())
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'.' || *c == b'-')
            && b.first().is_some_and(u8::is_ascii_alphanumeric)
            && b.last().is_some_and(u8::is_ascii_alphanumeric);
        if !bucket_ok {
            out.push((
                "bucket".into(),
                format!(
                    "{:?} is not a bucket name: 3 to 63 lowercase letters, digits, dots or hyphens, starting and ending with a letter or digit",
                    self.bucket
                ),
            ));
        }
        if self.prefix.starts_with('/') || self.prefix.ends_with('/') {
            out.push(("prefix".into(), "must not start or end with `/`".into()));
        }
        if self
            .prefix
            .split('/')
            .any(|p| p.is_empty() || p == "." || p == "..")
            && !self.prefix.is_empty()
        {
            out.push((
                "prefix".into(),
                "must not have empty, `.` or `..` folders".into(),
            ));
        }
        if let Err(e) = Template::parse(&self.partition) {
            out.push(("partition".into(), e.to_string()));
        }
        if self.region.as_deref().is_some_and(|r| r.trim().is_empty()) {
            out.push(("region".into(), "must not be empty".into()));
        }
        self.endpoint_problems(&mut out);
        self.credential_problems(&mut out);
        self.format_problems(&mut out);
        out_of_range(
            &mut out,
            &[
                (
                    "multipart_part_bytes",
                    self.multipart_part_bytes,
                    MIN_PART_BYTES,
                    MAX_PART_BYTES,
                ),
                ("connect_timeout_ms", self.connect_timeout_ms, 100, 600_000),
                (
                    "request_timeout_ms",
                    self.request_timeout_ms,
                    100,
                    3_600_000,
                ),
            ],
        );
        connect_within_request(&mut out, self.connect_timeout_ms, self.request_timeout_ms);
        if let Some(r) = &self.rollover {
            r.problems(&mut out);
        }
        out
    }

    fn accumulate(&self) -> Option<Accumulate> {
        self.rollover.as_ref().map(RolloverConfig::accumulate)
    }

    /// The key files are read.
    fn paths(&self) -> Vec<NamedPath> {
        [
            NamedPath::read("access_key_id_file", self.access_key_id_file.as_ref()),
            NamedPath::read(
                "secret_access_key_file",
                self.secret_access_key_file.as_ref(),
            ),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    fn rolls_over_by_default(&self) -> bool {
        self.rollover.is_none() && self.format == Format::Parquet
    }

    fn describe(&self) -> String {
        format!(
            "s3 {} (endpoint {}, {} objects, partition {}, {}, credentials from {})",
            self.location(),
            self.endpoint_shown(),
            self.extension(),
            self.partition,
            match &self.rollover {
                Some(r) => format!(
                    "rollover at {} messages, {} bytes or {} ms",
                    r.max_messages, r.max_bytes, r.max_age_ms
                ),
                None if self.format == Format::Parquet => "default rollover".into(),
                None => "one object per batch".into(),
            },
            if self.explicit_keys() {
                "the configured env/file"
            } else {
                "the AWS environment"
            }
        )
    }

    fn target(&self) -> String {
        format!("s3:{} {}", self.endpoint_shown(), self.location())
    }
}

fn default_partition() -> String {
    "{stream}/{yyyy}/{mm}/{dd}".into()
}
fn default_true() -> bool {
    true
}
fn default_part_bytes() -> u64 {
    8 << 20
}
fn default_connect_timeout_ms() -> u64 {
    5_000
}
fn default_request_timeout_ms() -> u64 {
    30_000
}
