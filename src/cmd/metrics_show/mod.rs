//! `jetsink metrics show`: reads a running daemon's `/metrics` and prints it as
//! `kind name value` rows, so an operator can check a few counters (for example the
//! priority-lane ones) without Prometheus or `grep`.
//!
//! Three pure steps, tested without a network: [`parse`] reads the Prometheus text
//! exposition format (a `# TYPE` line gives the kind of the samples that follow; other
//! comments are skipped), [`select`] keeps the samples a glob names, and [`render_table`] /
//! [`render_json`] print them. [`fetch`] is the only I/O: one plain-HTTP GET with a
//! timeout. The glob is matched against the metric name with and without the `jetsink_`
//! prefix, so `priority_lane_*` and `jetsink_priority_lane_*` select the same rows.
//! Histogram buckets are left out unless the glob itself asks for them (contains
//! `_bucket`): a histogram shows as its `_sum` and `_count` rows.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

/// The endpoint read when `--url` is not given: the daemon's default `http.listen`.
pub const DEFAULT_URL: &str = "http://127.0.0.1:9464/metrics";

/// The prefix of every jetsink metric, optional in a glob.
pub const PREFIX: &str = "jetsink_";

/// How long one request may take, connection included.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The kind of a metric family, from its `# TYPE` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A value that only goes up (reset on restart).
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// Observations in buckets, with `_sum` and `_count`.
    Histogram,
    /// Quantiles, with `_sum` and `_count`.
    Summary,
    /// No `# TYPE` line, or `untyped`.
    Untyped,
}

impl Kind {
    fn from_type(word: &str) -> Option<Kind> {
        Some(match word {
            "counter" => Kind::Counter,
            "gauge" => Kind::Gauge,
            "histogram" => Kind::Histogram,
            "summary" => Kind::Summary,
            "untyped" => Kind::Untyped,
            _ => return None,
        })
    }

    /// The lowercase name printed in the `kind` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Summary => "summary",
            Kind::Untyped => "untyped",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One sample line of the exposition.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Kind of its family.
    pub kind: Kind,
    /// Family name: the `# TYPE` name (`jetsink_sink_write_seconds` for its `_count`).
    pub family: String,
    /// Sample name as written (`jetsink_sink_write_seconds_count`).
    pub name: String,
    /// Labels in the order written, values unescaped.
    pub labels: Vec<(String, String)>,
    /// Value as written (`12`, `0.25`, `+Inf`, `NaN`).
    pub value: String,
}

impl Sample {
    /// The name with its labels, as Prometheus writes it: `name{sink="x"}`.
    pub fn display_name(&self) -> String {
        if self.labels.is_empty() {
            return self.name.clone();
        }
        let labels: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
            .collect();
        format!("{}{{{}}}", self.name, labels.join(","))
    }

    /// Whether this is a histogram bucket row (`_bucket`).
    pub fn is_bucket(&self) -> bool {
        self.kind == Kind::Histogram && self.name.ends_with("_bucket")
    }
}

/// A line that is not valid Prometheus text format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

/// Parses the Prometheus text exposition format (version 0.0.4) into samples, in order.
///
/// `# TYPE name kind` sets the kind of `name` and, for histograms and summaries, of its
/// `_bucket`, `_sum` and `_count` samples; `# HELP` and any other comment are skipped, as
/// are blank lines. A sample without a `# TYPE` is [`Kind::Untyped`]. A trailing timestamp
/// is accepted and dropped. Anything else malformed is an error naming its line.
pub fn parse(text: &str) -> Result<Vec<Sample>, ParseError> {
    let mut kinds: HashMap<String, Kind> = HashMap::new();
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let error = |reason: &str| ParseError {
            line: i + 1,
            reason: reason.to_string(),
        };
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let mut words = comment.split_whitespace();
            if words.next() == Some("TYPE") {
                let (Some(name), Some(kind), None) = (words.next(), words.next(), words.next())
                else {
                    return Err(error("a TYPE line must be `# TYPE <name> <kind>`"));
                };
                let kind = Kind::from_type(kind).ok_or_else(|| {
                    error("unknown metric kind (counter, gauge, histogram, summary, untyped)")
                })?;
                kinds.insert(name.to_string(), kind);
            }
            continue;
        }
        let (name, labels, rest) = sample_parts(line).map_err(error)?;
        let mut tokens = rest.split_whitespace();
        let value = tokens.next().ok_or_else(|| error("missing value"))?;
        if value.parse::<f64>().is_err() {
            return Err(error("the value is not a number"));
        }
        if let Some(ts) = tokens.next() {
            if ts.parse::<i64>().is_err() {
                return Err(error("the timestamp is not an integer"));
            }
        }
        if tokens.next().is_some() {
            return Err(error("unexpected text after the value and timestamp"));
        }
        let (kind, family) = family_of(&kinds, name);
        out.push(Sample {
            kind,
            family,
            name: name.to_string(),
            labels,
            value: value.to_string(),
        });
    }
    Ok(out)
}

/// The kind and family of sample `name`: its own `# TYPE`, or that of the histogram or
/// summary it is the `_bucket`, `_sum` or `_count` of.
fn family_of(kinds: &HashMap<String, Kind>, name: &str) -> (Kind, String) {
    if let Some(&kind) = kinds.get(name) {
        return (kind, name.to_string());
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            match kinds.get(base) {
                Some(&Kind::Histogram) => return (Kind::Histogram, base.to_string()),
                Some(&Kind::Summary) if suffix != "_bucket" => {
                    return (Kind::Summary, base.to_string())
                }
                _ => {}
            }
        }
    }
    (Kind::Untyped, name.to_string())
}

type Labels = Vec<(String, String)>;

/// Splits a sample line into its name, its labels and the text after them.
fn sample_parts(line: &str) -> Result<(&str, Labels, &str), &'static str> {
    let end = line
        .char_indices()
        .find(|&(i, c)| !is_name_char(c, i == 0))
        .map_or(line.len(), |(i, _)| i);
    if end == 0 {
        return Err("a sample must start with a metric name");
    }
    let (name, rest) = line.split_at(end);
    let rest = rest.trim_start();
    let Some(body) = rest.strip_prefix('{') else {
        if !rest.is_empty() && !line[end..].starts_with(char::is_whitespace) {
            return Err("invalid character in the metric name");
        }
        return Ok((name, Vec::new(), rest));
    };
    let (labels, after) = parse_labels(body)?;
    Ok((name, labels, after))
}

fn is_name_char(c: char, first: bool) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':' || (!first && c.is_ascii_digit())
}

/// Parses `a="x",b="y"}` (the text after `{`): the labels and the text after `}`.
fn parse_labels(body: &str) -> Result<(Labels, &str), &'static str> {
    let mut labels = Vec::new();
    let mut rest = body.trim_start();
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let end = rest
            .char_indices()
            .find(|&(i, c)| !(c.is_ascii_alphabetic() || c == '_' || (i > 0 && c.is_ascii_digit())))
            .map_or(rest.len(), |(i, _)| i);
        if end == 0 {
            return Err("expected a label name or `}`");
        }
        let key = &rest[..end];
        rest = rest[end..].trim_start();
        rest = rest
            .strip_prefix('=')
            .ok_or("expected `=` after a label name")?
            .trim_start();
        rest = rest
            .strip_prefix('"')
            .ok_or("a label value must be in double quotes")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let close = loop {
            match chars.next() {
                None => return Err("unterminated label value"),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    _ => return Err("invalid escape in a label value (\\n, \\\\, \\\")"),
                },
                Some((_, c)) => value.push(c),
            }
        };
        labels.push((key.to_string(), value));
        rest = rest[close + 1..].trim_start();
        if let Some(after) = rest.strip_prefix(',') {
            rest = after.trim_start();
        } else if !rest.starts_with('}') {
            return Err("expected `,` or `}` after a label value");
        }
    }
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Shell-style glob match of the whole `text`: `*` matches any run of characters (also
/// none), `?` exactly one, every other character itself. Case-sensitive.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    // Where the last `*` was, and the text position it is currently taken to match up to.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(&c) if c == '?' || c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                // Let the last `*` swallow one more character and retry.
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Whether `glob` names `name`, with or without the `jetsink_` prefix.
fn names(glob: &str, name: &str) -> bool {
    glob_match(glob, name)
        || name
            .strip_prefix(PREFIX)
            .is_some_and(|n| glob_match(glob, n))
}

/// The samples to show, in exposition order. Without a glob, every sample except
/// histogram buckets. With one, the samples whose name or family name it matches (with or
/// without the `jetsink_` prefix); buckets only when the glob contains `_bucket` and
/// matches the bucket's own name.
pub fn select<'a>(samples: &'a [Sample], glob: Option<&str>) -> Vec<&'a Sample> {
    samples
        .iter()
        .filter(|s| match glob {
            None => !s.is_bucket(),
            Some(g) if s.is_bucket() => g.contains("_bucket") && names(g, &s.name),
            Some(g) => names(g, &s.name) || names(g, &s.family),
        })
        .collect()
}

/// The rows as an aligned table with the header `kind name value`, one row a line.
pub fn render_table(rows: &[&Sample]) -> String {
    let table: Vec<[String; 3]> = std::iter::once(["kind".into(), "name".into(), "value".into()])
        .chain(
            rows.iter()
                .map(|s| [s.kind.to_string(), s.display_name(), s.value.clone()]),
        )
        .collect();
    let width = |col: usize| {
        table
            .iter()
            .map(|r| r[col].chars().count())
            .max()
            .unwrap_or(0)
    };
    let (kind_w, name_w) = (width(0), width(1));
    let mut out = String::new();
    for [kind, name, value] in &table {
        out.push_str(&format!("{kind:<kind_w$}  {name:<name_w$}  {value}\n"));
    }
    out
}

/// The rows as a JSON array of `{"kind", "name", "labels", "value"}`. `labels` is an
/// object; `value` is a JSON integer or number, or a string for `+Inf`, `-Inf` and `NaN`,
/// which JSON cannot hold as numbers.
pub fn render_json(rows: &[&Sample]) -> String {
    let items: Vec<serde_json::Value> = rows
        .iter()
        .map(|s| {
            let labels: serde_json::Map<String, serde_json::Value> = s
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                .collect();
            serde_json::json!({
                "kind": s.kind.as_str(),
                "name": s.name,
                "labels": labels,
                "value": json_value(&s.value),
            })
        })
        .collect();
    serde_json::Value::Array(items).to_string()
}

fn json_value(text: &str) -> serde_json::Value {
    if let Ok(i) = text.parse::<i64>() {
        return i.into();
    }
    match text
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
    {
        Some(n) => serde_json::Value::Number(n),
        None => serde_json::Value::String(text.to_string()),
    }
}

/// Why the metrics could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchErrorKind {
    /// The URL is not a plain `http://` URL.
    BadUrl,
    /// Nothing answered, or the connection failed or timed out.
    Unreachable,
    /// The server answered with a status other than 200.
    Status(u16),
    /// The answer was not Prometheus text format.
    NotMetrics,
}

/// A failure to read a metrics endpoint; its message names the URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{url}: {message}")]
pub struct FetchError {
    /// What went wrong, for the exit code.
    pub kind: FetchErrorKind,
    /// The URL asked.
    pub url: String,
    /// Details.
    pub message: String,
}

impl FetchError {
    fn new(kind: FetchErrorKind, url: &str, message: impl Into<String>) -> FetchError {
        FetchError {
            kind,
            url: url.to_string(),
            message: message.into(),
        }
    }

    /// The process exit code: 2 for a URL this build cannot use, 69 (unavailable) when the
    /// endpoint cannot be read, 1 when it answered with something that is not metrics.
    pub fn exit_code(&self) -> u8 {
        match self.kind {
            FetchErrorKind::BadUrl => crate::exit::USAGE,
            FetchErrorKind::Unreachable | FetchErrorKind::Status(_) => crate::exit::UNAVAILABLE,
            FetchErrorKind::NotMetrics => crate::exit::FAILURE,
        }
    }
}

/// GETs `url` (plain HTTP only: the daemon's endpoint has no TLS) and returns the body.
/// Blocking; run it off the async runtime.
pub fn fetch(url: &str, timeout: Duration) -> Result<String, FetchError> {
    if !url.starts_with("http://") {
        return Err(FetchError::new(
            FetchErrorKind::BadUrl,
            url,
            "only http:// URLs are supported (the daemon serves /metrics over plain HTTP)",
        ));
    }
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .build()
        .into();
    let mut response = agent.get(url).call().map_err(|e| {
        FetchError::new(
            FetchErrorKind::Unreachable,
            url,
            format!("cannot read metrics: {e} (is `jetsink run` running with http.enabled, and is this its http.listen address?)"),
        )
    })?;
    let status = response.status().as_u16();
    if status != 200 {
        return Err(FetchError::new(
            FetchErrorKind::Status(status),
            url,
            format!("answered HTTP {status}, expected 200 with Prometheus metrics"),
        ));
    }
    response.body_mut().read_to_string().map_err(|e| {
        FetchError::new(
            FetchErrorKind::Unreachable,
            url,
            format!("cannot read the response: {e}"),
        )
    })
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

/// Reads `url` and renders the samples `glob` selects: the whole `metrics show` command
/// apart from printing.
pub fn show(url: &str, glob: Option<&str>, format: Format) -> Result<Shown, FetchError> {
    let body = fetch(url, TIMEOUT)?;
    let samples = parse(&body).map_err(|e| {
        FetchError::new(
            FetchErrorKind::NotMetrics,
            url,
            format!("not Prometheus text format: {e}"),
        )
    })?;
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
    /// The daemon's metrics endpoint (plain HTTP).
    #[arg(long, default_value = DEFAULT_URL)]
    url: String,
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
        url,
        metric,
        format,
    } = args;
    // `ureq` blocks; keep it off the async runtime's worker threads.
    let shown = tokio::task::spawn_blocking(move || show(&url, metric.as_deref(), format)).await;
    match shown {
        Ok(Ok(shown)) => {
            super::emit(shown.text.trim_end_matches('\n'));
            if shown.rows == 0 {
                eprintln!("no metric matches");
            }
            crate::exit::OK
        }
        Ok(Err(e)) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
        Err(e) => {
            eprintln!("error: {e}");
            crate::exit::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shaped like the daemon's real output (prometheus crate 0.14).
    const EXPOSITION: &str = r#"# HELP jetsink_batches_total Batches by outcome.
# TYPE jetsink_batches_total counter
jetsink_batches_total{outcome="committed",sink="orders"} 12
jetsink_batches_total{outcome="retried",sink="orders"} 0
# HELP jetsink_build_info Always 1.
# TYPE jetsink_build_info gauge
jetsink_build_info{version="0.1.0"} 1
# HELP jetsink_current_priority_lanes_active Lanes in the last batch.
# TYPE jetsink_current_priority_lanes_active gauge
jetsink_current_priority_lanes_active{sink="orders"} 2
# HELP jetsink_nats_connected 1 while connected.
# TYPE jetsink_nats_connected gauge
jetsink_nats_connected 1
# HELP jetsink_priority_lane_batches_total Batches ordered.
# TYPE jetsink_priority_lane_batches_total counter
jetsink_priority_lane_batches_total{sink="orders"} 12
# HELP jetsink_priority_lane_defaulted_total Defaulted.
# TYPE jetsink_priority_lane_defaulted_total counter
jetsink_priority_lane_defaulted_total{sink="orders"} 41
# HELP jetsink_sink_write_seconds Time of one write_batch call.
# TYPE jetsink_sink_write_seconds histogram
jetsink_sink_write_seconds_bucket{sink="orders",le="0.001"} 3
jetsink_sink_write_seconds_bucket{sink="orders",le="+Inf"} 12
jetsink_sink_write_seconds_sum{sink="orders"} 0.0425
jetsink_sink_write_seconds_count{sink="orders"} 12
"#;

    fn rows(glob: Option<&str>) -> Vec<String> {
        let samples = parse(EXPOSITION).unwrap();
        select(&samples, glob)
            .iter()
            .map(|s| format!("{} {} {}", s.kind, s.display_name(), s.value))
            .collect()
    }

    #[test]
    fn type_lines_give_the_kind_and_comments_are_skipped() {
        let samples = parse(EXPOSITION).unwrap();
        assert_eq!(samples.len(), 11);
        let first = &samples[0];
        assert_eq!(first.kind, Kind::Counter);
        assert_eq!(first.family, "jetsink_batches_total");
        assert_eq!(
            first.labels,
            vec![
                ("outcome".to_string(), "committed".to_string()),
                ("sink".to_string(), "orders".to_string())
            ]
        );
        assert_eq!(first.value, "12");
        let connected = samples
            .iter()
            .find(|s| s.name == "jetsink_nats_connected")
            .unwrap();
        assert_eq!((connected.kind, connected.labels.len()), (Kind::Gauge, 0));
    }

    #[test]
    fn histogram_samples_belong_to_their_family() {
        let samples = parse(EXPOSITION).unwrap();
        let hist: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.family == "jetsink_sink_write_seconds")
            .collect();
        assert_eq!(hist.len(), 4);
        assert!(hist.iter().all(|s| s.kind == Kind::Histogram));
        assert_eq!(hist.iter().filter(|s| s.is_bucket()).count(), 2);
    }

    #[test]
    fn a_sample_without_type_is_untyped_and_a_timestamp_is_dropped() {
        let samples = parse("foo_count 3 1700000000000\nbar{a=\"b\"} -1.5e3\n").unwrap();
        assert_eq!(samples[0].kind, Kind::Untyped);
        assert_eq!(samples[0].family, "foo_count");
        assert_eq!(samples[0].value, "3");
        assert_eq!(samples[1].value, "-1.5e3");
    }

    #[test]
    fn special_values_parse() {
        let samples = parse("a +Inf\nb -Inf\nc NaN\n").unwrap();
        let values: Vec<&str> = samples.iter().map(|s| s.value.as_str()).collect();
        assert_eq!(values, ["+Inf", "-Inf", "NaN"]);
    }

    #[test]
    fn summary_sum_and_count_take_the_summary_kind() {
        let samples =
            parse("# TYPE rpc summary\nrpc{quantile=\"0.5\"} 1\nrpc_sum 9\nrpc_count 3\n").unwrap();
        assert!(samples.iter().all(|s| s.kind == Kind::Summary));
        assert!(samples.iter().all(|s| s.family == "rpc"));
        assert!(!samples.iter().any(Sample::is_bucket));
    }

    #[test]
    fn label_values_are_unescaped_and_redisplayed_escaped() {
        let line = r#"m{path="C:\\dir",quote="say \"hi\"",nl="a\nb",comma="x,y}",} 1"#;
        let samples = parse(line).unwrap();
        assert_eq!(
            samples[0].labels,
            vec![
                ("path".to_string(), "C:\\dir".to_string()),
                ("quote".to_string(), "say \"hi\"".to_string()),
                ("nl".to_string(), "a\nb".to_string()),
                ("comma".to_string(), "x,y}".to_string()),
            ]
        );
        assert_eq!(
            samples[0].display_name(),
            r#"m{path="C:\\dir",quote="say \"hi\"",nl="a\nb",comma="x,y}"}"#
        );
    }

    #[test]
    fn whitespace_around_labels_is_accepted() {
        let samples = parse("m { a = \"1\" , b=\"2\" }   7\n\n   \n").unwrap();
        assert_eq!(samples[0].labels.len(), 2);
        assert_eq!(samples[0].value, "7");
        assert_eq!(parse("m{} 1").unwrap()[0].labels, vec![]);
    }

    #[test]
    fn malformed_lines_are_errors_naming_the_line() {
        for (text, reason) in [
            ("ok 1\n<html>", "a sample must start with a metric name"),
            ("ok 1\nm", "missing value"),
            ("ok 1\nm one", "the value is not a number"),
            (
                "ok 1\nm 1 2 3",
                "unexpected text after the value and timestamp",
            ),
            ("ok 1\nm 1 soon", "the timestamp is not an integer"),
            ("ok 1\nm{a=1} 1", "a label value must be in double quotes"),
            ("ok 1\nm{a=\"1} 1", "unterminated label value"),
            (
                "ok 1\nm{a=\"1\" b=\"2\"} 1",
                "expected `,` or `}` after a label value",
            ),
            (
                "ok 1\nm{a=\"\\t\"} 1",
                "invalid escape in a label value (\\n, \\\\, \\\")",
            ),
            ("ok 1\nm{=\"1\"} 1", "expected a label name or `}`"),
            ("ok 1\nm{a \"1\"} 1", "expected `=` after a label name"),
            ("ok 1\nm-x 1", "invalid character in the metric name"),
            (
                "ok 1\n# TYPE m",
                "a TYPE line must be `# TYPE <name> <kind>`",
            ),
            (
                "ok 1\n# TYPE m meter",
                "unknown metric kind (counter, gauge, histogram, summary, untyped)",
            ),
        ] {
            assert_eq!(
                parse(text),
                Err(ParseError {
                    line: 2,
                    reason: reason.to_string()
                }),
                "{text:?}"
            );
        }
    }

    #[test]
    fn an_empty_body_has_no_samples() {
        assert_eq!(parse(""), Ok(vec![]));
        assert_eq!(parse("# only a comment\n"), Ok(vec![]));
    }

    #[test]
    fn glob_matching() {
        for (pattern, text, expected) in [
            ("*", "", true),
            ("*", "anything", true),
            ("", "", true),
            ("", "a", false),
            ("abc", "abc", true),
            ("abc", "abcd", false),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("priority_lane_*", "priority_lane_batches_total", true),
            ("priority_lane_*", "current_priority_lanes_active", false),
            ("*lane*", "current_priority_lanes_active", true),
            ("*_total", "jetsink_acked_total", true),
            ("*_total", "jetsink_total_x", false),
            ("a*b*c", "aXXbYYbZZc", true),
            ("a*b*c", "aXXbYYbZZ", false),
            ("**", "x", true),
            ("*a", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", false),
            ("é?", "éü", true),
            ("ABC", "abc", false),
        ] {
            assert_eq!(
                glob_match(pattern, text),
                expected,
                "{pattern:?} vs {text:?}"
            );
        }
    }

    #[test]
    fn the_glob_works_with_and_without_the_prefix() {
        let expected = vec![
            "counter jetsink_priority_lane_batches_total{sink=\"orders\"} 12",
            "counter jetsink_priority_lane_defaulted_total{sink=\"orders\"} 41",
        ];
        assert_eq!(rows(Some("priority_lane_*")), expected);
        assert_eq!(rows(Some("jetsink_priority_lane_*")), expected);
        assert_eq!(
            rows(Some("current_priority_lanes_active")),
            vec!["gauge jetsink_current_priority_lanes_active{sink=\"orders\"} 2"]
        );
        assert!(rows(Some("lane_*")).is_empty(), "the glob is anchored");
    }

    #[test]
    fn histograms_show_sum_and_count_and_buckets_only_on_request() {
        let sum_count = vec![
            "histogram jetsink_sink_write_seconds_sum{sink=\"orders\"} 0.0425",
            "histogram jetsink_sink_write_seconds_count{sink=\"orders\"} 12",
        ];
        assert_eq!(rows(Some("sink_write_seconds")), sum_count);
        assert_eq!(rows(Some("sink_write_seconds*")), sum_count);
        assert_eq!(rows(Some("*")).len(), 9);
        assert_eq!(rows(None).len(), 9);
        assert_eq!(
            rows(Some("sink_write_seconds_bucket")),
            vec![
                "histogram jetsink_sink_write_seconds_bucket{sink=\"orders\",le=\"0.001\"} 3",
                "histogram jetsink_sink_write_seconds_bucket{sink=\"orders\",le=\"+Inf\"} 12",
            ]
        );
        assert_eq!(rows(Some("*_bucket")).len(), 2);
    }

    #[test]
    fn the_table_has_aligned_kind_name_value_columns() {
        let samples = parse(EXPOSITION).unwrap();
        let table = render_table(&select(&samples, Some("priority_lane_*")));
        assert_eq!(
            table,
            "kind     name                                                  value\n\
             counter  jetsink_priority_lane_batches_total{sink=\"orders\"}    12\n\
             counter  jetsink_priority_lane_defaulted_total{sink=\"orders\"}  41\n"
        );
        assert_eq!(render_table(&[]), "kind  name  value\n");
    }

    #[test]
    fn json_rows_carry_labels_and_typed_values() {
        let samples =
            parse("# TYPE c counter\nc{sink=\"a\"} 12\n# TYPE g gauge\ng 0.5\ng2 +Inf\ng3 NaN\n")
                .unwrap();
        let json: serde_json::Value =
            serde_json::from_str(&render_json(&select(&samples, None))).unwrap();
        assert_eq!(
            json,
            serde_json::json!([
                {"kind": "counter", "name": "c", "labels": {"sink": "a"}, "value": 12},
                {"kind": "gauge", "name": "g", "labels": {}, "value": 0.5},
                {"kind": "untyped", "name": "g2", "labels": {}, "value": "+Inf"},
                {"kind": "untyped", "name": "g3", "labels": {}, "value": "NaN"},
            ])
        );
        assert_eq!(render_json(&[]), "[]");
    }

    #[test]
    fn the_real_registry_output_parses() {
        let m = crate::metrics::Metrics::new();
        let s = m.sink("orders");
        s.lane_batches.inc_by(3);
        s.write_seconds.observe(0.002);
        let samples = parse(&m.render()).unwrap();
        let shown = rows_of(&samples, Some("priority_lane_batches_total"));
        assert_eq!(
            shown,
            vec!["counter jetsink_priority_lane_batches_total{sink=\"orders\"} 3"]
        );
        assert_eq!(
            rows_of(&samples, Some("sink_write_seconds")),
            vec![
                "histogram jetsink_sink_write_seconds_sum{sink=\"orders\"} 0.002",
                "histogram jetsink_sink_write_seconds_count{sink=\"orders\"} 1",
            ]
        );
    }

    fn rows_of(samples: &[Sample], glob: Option<&str>) -> Vec<String> {
        select(samples, glob)
            .iter()
            .map(|s| format!("{} {} {}", s.kind, s.display_name(), s.value))
            .collect()
    }

    #[test]
    fn only_plain_http_urls_are_fetched() {
        let err = fetch("https://127.0.0.1:9464/metrics", Duration::from_secs(1)).unwrap_err();
        assert_eq!(err.kind, FetchErrorKind::BadUrl);
        assert_eq!(err.exit_code(), crate::exit::USAGE);
        assert!(err
            .to_string()
            .starts_with("https://127.0.0.1:9464/metrics: "));
    }

    #[test]
    fn an_unreachable_endpoint_is_unavailable_and_named() {
        // Bind then drop a listener: the port is very likely closed right after.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}/metrics");
        let err = fetch(&url, Duration::from_secs(2)).unwrap_err();
        assert_eq!(err.kind, FetchErrorKind::Unreachable);
        assert_eq!(err.exit_code(), crate::exit::UNAVAILABLE);
        assert!(err.to_string().starts_with(&url), "{err}");
    }
}
