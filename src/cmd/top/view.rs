//! Which rows `jetsink top` shows and in what order: a filter on the sink's name or state
//! and a sort key that a key press cycles. Pure.

use std::cmp::Ordering;

use super::rows::Row;

/// What the rows are sorted by; the variants' doc comments are the `--sort` help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SortKey {
    /// The sink's name, A to Z.
    Name,
    /// Messages committed per second, fastest first.
    Rate,
    /// The server's backlog, longest first.
    Pending,
    /// Errors, retries and dead-lettered messages, most first.
    Errors,
}

impl SortKey {
    /// The key after this one, for the key that cycles them.
    pub fn next(self) -> SortKey {
        match self {
            SortKey::Name => SortKey::Rate,
            SortKey::Rate => SortKey::Pending,
            SortKey::Pending => SortKey::Errors,
            SortKey::Errors => SortKey::Name,
        }
    }

    /// The word shown in the status line.
    pub fn as_str(self) -> &'static str {
        match self {
            SortKey::Name => "name",
            SortKey::Rate => "rate",
            SortKey::Pending => "pending",
            SortKey::Errors => "errors",
        }
    }
}

/// Whether `row` passes `filter`: empty passes all; otherwise a case-insensitive
/// substring of the sink's name or its state.
pub fn matches(row: &Row, filter: &str) -> bool {
    let f = filter.trim().to_lowercase();
    f.is_empty() || row.sink.to_lowercase().contains(&f) || row.state.as_str().contains(f.as_str())
}

/// The rows `filter` passes, sorted by `key`; ties, and numbers a daemon does not
/// export (last), by name.
pub fn arrange(rows: &[Row], key: SortKey, filter: &str) -> Vec<Row> {
    let mut out: Vec<Row> = rows
        .iter()
        .filter(|r| matches(r, filter))
        .cloned()
        .collect();
    out.sort_by(|a, b| order(a, b, key).then_with(|| a.sink.cmp(&b.sink)));
    out
}

fn order(a: &Row, b: &Row, key: SortKey) -> Ordering {
    match key {
        SortKey::Name => Ordering::Equal,
        SortKey::Rate => descending(a.rate, b.rate),
        SortKey::Pending => descending(a.pending, b.pending),
        SortKey::Errors => descending(trouble(a), trouble(b)),
    }
}

/// Errors, retries and dead-lettered messages together: what went wrong for the sink.
fn trouble(r: &Row) -> Option<u64> {
    match (r.errors, r.retries, r.dead_lettered) {
        (None, None, None) => None,
        (e, t, d) => Some(
            e.unwrap_or(0)
                .saturating_add(t.unwrap_or(0))
                .saturating_add(d.unwrap_or(0)),
        ),
    }
}

/// Largest first; absent last.
fn descending<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Ordering {
    match (a, b) {
        (Some(x), Some(y)) => y.partial_cmp(&x).unwrap_or(Ordering::Equal),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::top::state::SinkState;

    fn row(sink: &str, state: SinkState, rate: Option<f64>, pending: Option<u64>) -> Row {
        Row {
            sink: sink.into(),
            state,
            rate,
            pending,
            ack_pending: None,
            redelivered: None,
            backlog_from: None,
            in_batch: None,
            buffered: None,
            dead_lettered: None,
            retries: None,
            errors: pending.map(|p| p % 7),
            lanes_active: None,
            randomizer_window: None,
            last_error: None,
        }
    }

    fn names(rows: &[Row]) -> Vec<&str> {
        rows.iter().map(|r| r.sink.as_str()).collect()
    }

    #[test]
    fn each_key_sorts_largest_first_with_absent_numbers_last_and_ties_by_name() {
        let rows = vec![
            row("c", SinkState::Running, Some(5.0), Some(10)),
            row("a", SinkState::Holding, None, None),
            row("b", SinkState::Running, Some(50.0), Some(3)),
            row("d", SinkState::Paused, Some(5.0), Some(10)),
        ];
        assert_eq!(
            names(&arrange(&rows, SortKey::Name, "")),
            ["a", "b", "c", "d"]
        );
        assert_eq!(
            names(&arrange(&rows, SortKey::Rate, "")),
            ["b", "c", "d", "a"]
        );
        assert_eq!(
            names(&arrange(&rows, SortKey::Pending, "")),
            ["c", "d", "b", "a"]
        );
        assert_eq!(
            names(&arrange(&rows, SortKey::Errors, "")),
            ["b", "c", "d", "a"]
        );
    }

    #[test]
    fn the_filter_matches_a_name_or_a_state_ignoring_case() {
        let rows = vec![
            row("Orders", SinkState::Running, None, None),
            row("audit", SinkState::Holding, None, None),
        ];
        assert_eq!(names(&arrange(&rows, SortKey::Name, "ORD")), ["Orders"]);
        assert_eq!(names(&arrange(&rows, SortKey::Name, "hold")), ["audit"]);
        assert_eq!(
            names(&arrange(&rows, SortKey::Name, "  ")),
            ["Orders", "audit"]
        );
        assert!(arrange(&rows, SortKey::Name, "nothing").is_empty());
    }

    #[test]
    fn the_key_press_cycles_through_every_key() {
        let mut k = SortKey::Name;
        let mut seen = vec![k];
        for _ in 0..3 {
            k = k.next();
            seen.push(k);
        }
        assert_eq!(k.next(), SortKey::Name);
        assert_eq!(
            seen,
            [
                SortKey::Name,
                SortKey::Rate,
                SortKey::Pending,
                SortKey::Errors
            ]
        );
    }
}
