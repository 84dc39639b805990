//! The rows as text: the cells both the plain table (`--once`) and the terminal view
//! show, and the JSON form for scripts. Every text that came from the daemon (sink names,
//! reasons) has its control characters replaced, so a hostile `/metrics` cannot send
//! escape sequences to the operator's terminal. Pure.

use serde::Serialize;

use super::rows::Row;

/// The column headers, in the order of [`cells`].
pub const HEADERS: [&str; 12] = [
    "SINK",
    "STATE",
    "MSG/S",
    "PENDING",
    "ACK_PEND",
    "REDELIV",
    "BATCH",
    "BUFFERED",
    "DLQ",
    "RETRIES",
    "ERRORS",
    "LANES/WINDOW",
];

/// `text` with every control character (escape, newline, tab…) shown as `?`.
pub fn clean(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

fn number(n: Option<u64>) -> String {
    n.map_or_else(|| "-".to_string(), |n| n.to_string())
}

/// A rate with one decimal (`-` before the second scrape).
pub fn per_second(rate: Option<f64>) -> String {
    rate.map_or_else(|| "-".to_string(), |r| format!("{r:.1}"))
}

/// `lanes 2`, `window 40`, both, or `-`.
fn extras(r: &Row) -> String {
    let mut parts = Vec::new();
    if let Some(l) = r.lanes_active {
        parts.push(format!("lanes {l}"));
    }
    if let Some(w) = r.randomizer_window {
        parts.push(format!("window {w}"));
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

/// The cells of one row, in the order of [`HEADERS`].
pub fn cells(r: &Row) -> [String; 12] {
    [
        clean(&r.sink),
        r.state.as_str().to_string(),
        per_second(r.rate),
        number(r.pending),
        number(r.ack_pending),
        number(r.redelivered),
        number(r.in_batch),
        number(r.buffered),
        number(r.dead_lettered),
        number(r.retries),
        number(r.errors),
        extras(r),
    ]
}

/// The rows as aligned columns under [`HEADERS`], then one `<sink>: <last error>` line
/// per sink that has one.
pub fn table(rows: &[Row]) -> String {
    let body: Vec<[String; 12]> = std::iter::once(HEADERS.map(str::to_string))
        .chain(rows.iter().map(cells))
        .collect();
    let widths: Vec<usize> = (0..HEADERS.len())
        .map(|c| body.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for line in &body {
        let padded: Vec<String> = line
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(padded.join("  ").trim_end());
        out.push('\n');
    }
    for r in rows {
        if let Some(e) = &r.last_error {
            out.push_str(&format!("{}: {}\n", clean(&r.sink), clean(e)));
        }
    }
    out
}

/// The snapshot `--format json` prints.
#[derive(Debug, Serialize)]
pub struct Snapshot<'a> {
    /// The metrics URL read, credentials redacted.
    pub url: &'a str,
    /// `/readyz`'s verdict, `None` when it did not answer with its JSON.
    pub ready: Option<bool>,
    /// Milliseconds between the two scrapes the rates come from.
    pub interval_ms: u64,
    /// One entry per sink, sorted and filtered as asked.
    pub sinks: &'a [Row],
    /// What could not be read (the server's consumer info, `/readyz`), one line each.
    pub notes: &'a [String],
}

/// The snapshot as one line of JSON.
pub fn json(snapshot: &Snapshot) -> String {
    serde_json::to_string(snapshot)
        .unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }).to_string())
}
