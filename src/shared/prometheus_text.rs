//! Reading the Prometheus text exposition format: a `# TYPE` line gives the kind of the
//! samples that follow (and of a histogram's or summary's `_bucket`, `_sum` and `_count`
//! rows); other comments are skipped. Pure, so every malformed-line case is tested
//! without a server.

use std::collections::HashMap;
use std::fmt;

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
    /// The kind a `# TYPE` line (or a snapshot file) names.
    pub fn from_type(word: &str) -> Option<Kind> {
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
    /// The value as a JSON number when it is one JSON can hold (`12`, `0.25`), else its
    /// text (`+Inf`, `NaN`), so a JSON reader keeps every value.
    pub fn json_value(&self) -> serde_json::Value {
        if let Ok(i) = self.value.parse::<i64>() {
            return i.into();
        }
        match self
            .value
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
        {
            Some(n) => serde_json::Value::Number(n),
            None => serde_json::Value::String(self.value.clone()),
        }
    }

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
