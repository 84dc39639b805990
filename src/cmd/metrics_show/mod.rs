//! `jetsink metrics show`: reads a running daemon's `/metrics` (or the snapshot file it
//! writes, `metrics.snapshot_file`) and prints it as `kind name value` rows, so an operator
//! can check a few counters (for example the priority-lane ones) without Prometheus or
//! `grep`; [`get`] is `jetsink metrics get`, one value for a script.
//!
//! Three pure steps, tested without a network: [`parse`] (in `shared::prometheus_text`, which
//! the daemon's snapshot file also uses) reads the Prometheus text
//! exposition format (a `# TYPE` line gives the kind of the samples that follow; other
//! comments are skipped), [`select`] keeps the samples a glob names, and [`render_table`] /
//! [`render_json`] print them. [`fetch`] is the only I/O: one plain-HTTP GET with a
//! timeout whose body is read up to 16 MiB ([`crate::files::body`]; an endless answer is
//! refused there), or one bounded read of a snapshot file ([`load`]). A URL is printed
//! with its credentials replaced by `***`. The glob is matched against the metric name with and without the `jetsink_`
//! prefix, so `priority_lane_*` and `jetsink_priority_lane_*` select the same rows.
//! Histogram buckets are left out unless the glob itself asks for them (contains
//! `_bucket`): a histogram shows as its `_sum` and `_count` rows.

pub mod get;
pub mod order;
mod render;
mod select;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::time::Duration;

pub use crate::shared::prometheus_text::{parse, Kind, ParseError, Sample};
pub use render::{render_json, render_table};
pub use select::{glob_match, select, PREFIX};

/// The endpoint read when `--url` is not given: the daemon's default `http.listen`.
pub const DEFAULT_URL: &str = "http://127.0.0.1:9464/metrics";

/// How long one request may take, connection included.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Why the metrics could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchErrorKind {
    /// The URL is not a plain `http://` URL.
    BadUrl,
    /// Nothing answered, or the connection failed or timed out.
    Unreachable,
    /// The server answered with a status other than 200.
    Status(u16),
    /// The answer was not Prometheus text format, or the file not a metrics snapshot.
    NotMetrics,
    /// The snapshot file could not be read (missing, not a regular file, too large).
    File,
}

/// A failure to read a metrics endpoint or snapshot file; its message names which.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{url}: {message}")]
pub struct FetchError {
    /// What went wrong, for the exit code.
    pub kind: FetchErrorKind,
    /// The URL asked (its credentials replaced by `***`), or the snapshot file's path.
    pub url: String,
    /// Details.
    pub message: String,
}

impl FetchError {
    fn new(kind: FetchErrorKind, url: &str, message: impl Into<String>) -> FetchError {
        FetchError {
            kind,
            // Shown to the operator: a password in the URL is never printed.
            url: crate::shared::server_url::redacted(url),
            message: message.into(),
        }
    }

    /// The process exit code: 2 for a URL this build cannot use, 69 (unavailable) when the
    /// endpoint cannot be read, 1 when it answered with something that is not metrics and
    /// when the snapshot file cannot be read or is not a snapshot.
    pub fn exit_code(&self) -> u8 {
        match self.kind {
            FetchErrorKind::BadUrl => crate::exit::USAGE,
            FetchErrorKind::Unreachable | FetchErrorKind::Status(_) => crate::exit::UNAVAILABLE,
            FetchErrorKind::NotMetrics | FetchErrorKind::File => crate::exit::FAILURE,
        }
    }
}

/// GETs `url` (plain HTTP only: the daemon's endpoint has no TLS) and returns the body.
pub async fn fetch(url: &str, timeout: Duration) -> Result<String, FetchError> {
    if !url.starts_with("http://") {
        return Err(FetchError::new(
            FetchErrorKind::BadUrl,
            url,
            "only http:// URLs are supported (the daemon serves /metrics over plain HTTP)",
        ));
    }
    let unreachable = |e: reqwest::Error| {
        FetchError::new(
            FetchErrorKind::Unreachable,
            url,
            format!("cannot read metrics: {} (is `jetsink run` running with http.enabled, and is this its http.listen address?)", root_cause(&e.without_url())),
        )
    };
    // Plain HTTP: no certificate store to load.
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .tls_built_in_root_certs(false)
        .build()
        .map_err(unreachable)?;
    let response = client.get(url).send().await.map_err(unreachable)?;
    let status = response.status().as_u16();
    if status != 200 {
        return Err(FetchError::new(
            FetchErrorKind::Status(status),
            url,
            format!("answered HTTP {status}, expected 200 with Prometheus metrics"),
        ));
    }
    let limit = usize::try_from(crate::files::Kind::Metrics.limit()).unwrap_or(usize::MAX);
    let body = crate::files::body::read(response, limit, crate::files::body::Over::Refuse)
        .await
        .map_err(|e| match e {
            crate::files::body::BodyError::Read(e) => FetchError::new(
                FetchErrorKind::Unreachable,
                url,
                format!("cannot read the response: {}", root_cause(&e.without_url())),
            ),
            e @ crate::files::body::BodyError::TooLarge { .. } => FetchError::new(
                FetchErrorKind::NotMetrics,
                url,
                format!("{e}: not a jetsink /metrics endpoint"),
            ),
        })?;
    String::from_utf8(body).map_err(|_| {
        FetchError::new(
            FetchErrorKind::NotMetrics,
            url,
            "the response is not UTF-8 text, not Prometheus metrics",
        )
    })
}

/// The innermost error of a chain ("Connection refused (os error 111)"), which says what
/// happened; the outer ones only say which layer passed it on.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut inner = e;
    while let Some(source) = inner.source() {
        inner = source;
    }
    inner.to_string()
}

/// Output format of `metrics show`; the variants' doc comments are the `--format` help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned kind, name, value columns.
    Table,
    /// A JSON array of {kind, name, labels, value}.
    Json,
}

/// What `metrics show` prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    /// The rendered rows (ends with a newline).
    pub text: String,
    /// Rows matched.
    pub rows: usize,
}

/// Where the metrics are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A running daemon's `/metrics` endpoint.
    Url(String),
    /// A snapshot file the daemon wrote (`metrics.snapshot_file`).
    File(PathBuf),
}

impl Source {
    /// The file when given, else the URL, else the daemon's default endpoint.
    pub fn of(file: Option<PathBuf>, url: Option<String>) -> Source {
        match (file, url) {
            (Some(f), _) => Source::File(f),
            (None, u) => Source::Url(u.unwrap_or_else(|| DEFAULT_URL.to_string())),
        }
    }
}

/// The samples at `source`: one GET of the endpoint, or one bounded read of the snapshot
/// file (`files::Kind::Metrics`).
pub async fn load(source: &Source) -> Result<Vec<Sample>, FetchError> {
    match source {
        Source::Url(url) => {
            let body = fetch(url, TIMEOUT).await?;
            parse(&body).map_err(|e| {
                FetchError::new(
                    FetchErrorKind::NotMetrics,
                    url,
                    format!("not Prometheus text format: {e}"),
                )
            })
        }
        Source::File(path) => {
            let shown = path.display().to_string();
            let text = crate::files::read_text(path, crate::files::Kind::Metrics)
                .map_err(|e| FetchError::new(FetchErrorKind::File, &shown, file_problem(e)))?;
            crate::metrics_snapshot::decode(&text)
                .map(|snapshot| snapshot.samples)
                .map_err(|e| FetchError::new(FetchErrorKind::NotMetrics, &shown, e.to_string()))
        }
    }
}

/// What is wrong with the snapshot file, without its path: [`FetchError`] names it first.
fn file_problem(e: crate::files::FileError) -> String {
    use crate::files::FileError;
    match e {
        FileError::Io { source, .. } => format!("cannot read the snapshot file: {source}"),
        FileError::NotRegular { what, .. } => format!("is {what}, not a snapshot file"),
        FileError::NotText { .. } => "is not UTF-8 text, not a snapshot file".to_string(),
        e @ FileError::TooLarge { .. } => e.to_string(),
    }
}

/// Reads `source` and renders the samples `glob` selects: the whole `metrics show`
/// command apart from printing.
pub async fn show(
    source: &Source,
    glob: Option<&str>,
    format: Format,
) -> Result<Shown, FetchError> {
    let samples = load(source).await?;
    let rows = select(&samples, glob);
    let text = match format {
        Format::Table => render_table(&rows),
        Format::Json => render_json(&rows) + "\n",
    };
    Ok(Shown {
        text,
        rows: rows.len(),
    })
}

/// `jetsink metrics show`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// A snapshot file the daemon writes (`metrics.snapshot_file`) to read instead of
    /// the endpoint.
    #[arg(conflicts_with = "url")]
    file: Option<PathBuf>,
    /// The daemon's metrics endpoint (plain HTTP). Default
    /// http://127.0.0.1:9464/metrics.
    #[arg(long)]
    url: Option<String>,
    /// Show only metrics whose name matches this glob (`*`, `?`), with or without the
    /// `jetsink_` prefix, e.g. "priority_lane_*". Histogram buckets only when it
    /// contains `_bucket`.
    #[arg(long)]
    metric: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

/// `jetsink metrics show`: reads and prints the selected rows (`no metric matches` on
/// stderr when none); the exit code says why reading failed ([`FetchError::exit_code`]).
pub async fn execute(args: Args) -> u8 {
    let Args {
        file,
        url,
        metric,
        format,
    } = args;
    match show(&Source::of(file, url), metric.as_deref(), format).await {
        Ok(shown) => {
            super::emit(shown.text.trim_end_matches('\n'));
            if shown.rows == 0 {
                eprintln!("no metric matches");
            }
            crate::exit::OK
        }
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}
