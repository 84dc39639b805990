//! What the config loader needs from a destination's settings, and nothing more.
//!
//! Each destination's `config.rs` implements [`DestinationSettings`] for its config type;
//! the generated `DestinationConfig` ([`super::DestinationConfig`]) dispatches to it, so `config/` validates, describes
//! and compares destinations without knowing any of them. A leaf: the destination configs
//! import it without importing the registry that lists them.

/// A destination's settings as the config loader sees them.
pub trait DestinationSettings {
    /// Every problem of the settings as `(key, message)`, the key relative to the
    /// destination object (`table`, `tls.ca_file`), so each is reported at its JSON path.
    fn problems(&self) -> Vec<(String, String)>;

    /// A short, secret-free description for `validate` and the start-up log.
    fn describe(&self) -> String;

    /// A stable, secret-free name of what is written to. Two sinks with the same target
    /// would interleave writes, so validation refuses that.
    fn target(&self) -> String;

    /// Whether the destination wants several pulled batches gathered into one write, and
    /// how many: the runner then holds them in its buffer stage (unacknowledged, kept
    /// alive) and writes them as one batch. `None`: every batch is written as pulled.
    fn accumulate(&self) -> Option<Accumulate> {
        None
    }

    /// Whether, with no setting of its own, the destination gathers batches anyway when
    /// the sink allows it: a Parquet archive, whose files and objects would otherwise be
    /// one per pull, tiny under a steady stream. The sink decides the size
    /// ([`crate::config::SinkSpec::accumulate`]).
    fn rolls_over_by_default(&self) -> bool {
        false
    }

    /// The most messages one write may carry, when the destination has such a limit:
    /// `delivery.batch_size` above it could never commit a full batch, so validation
    /// refuses that. `None`: no limit of its own.
    fn largest_batch(&self) -> Option<BatchLimit> {
        None
    }

    /// Whether two writers of this destination (each with connections of its own) may
    /// write two batches at the same time, which `delivery.batches_in_flight` 2 needs.
    fn writes_batches_at_once(&self) -> bool {
        false
    }

    /// Whether the destination replaces what it stored with whatever is written last (an
    /// upsert with `"order": "arrival"`): every stage that reorders messages can then leave
    /// an older message in place of a newer one, which validation warns about.
    fn last_write_wins(&self) -> bool {
        false
    }

    /// The same settings writing into `table`, a scratch table `jetsink bench` has the
    /// destination create at open (jetsink's layout, or a copy of the user's own table),
    /// then drops, so a pass starts from an empty table and never writes into the
    /// configured one. `None` where the destination has no table: the bench then writes
    /// where the config says.
    fn with_scratch_table(&self, _table: &str) -> Option<Self>
    where
        Self: Sized,
    {
        None
    }

    /// The server process this destination writes to, for tools that account for its CPU
    /// time (`jetsink bench`). `None`: no server (files, SQLite) or none to name.
    fn server(&self) -> Option<ServerProcess> {
        None
    }

    /// Every local path the settings name and what the destination does with it, so
    /// `validate` refuses a written path that another setting also names (a snapshot file
    /// at the database, a key file as the database) or that is not a regular file. Default:
    /// none.
    fn paths(&self) -> Vec<NamedPath> {
        Vec::new()
    }
}

/// What jetsink does with a path a setting names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathRole {
    /// Reads it (a key, a password, a certificate, the config).
    Read,
    /// Writes a file there (a database, the metrics snapshot).
    WritesFile,
    /// Writes files into the directory there.
    WritesDirectory,
}

/// A local path a setting names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedPath {
    /// The setting, relative to the destination object (`path`, `tls.ca_file`).
    pub key: String,
    /// The path as configured.
    pub path: String,
    /// What is done with it.
    pub role: PathRole,
}

impl NamedPath {
    /// `path` at `key`, read; `None` when the setting is absent.
    pub fn read(key: &str, path: Option<&String>) -> Option<NamedPath> {
        path.map(|p| NamedPath {
            key: key.into(),
            path: p.clone(),
            role: PathRole::Read,
        })
    }
}

/// A destination's own bound on the messages of one write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimit {
    /// The most messages.
    pub messages: usize,
    /// The setting that brings the limit, relative to the destination object (`atomic`).
    pub key: &'static str,
    /// Why there is a limit, as a sentence fragment for the error.
    pub why: &'static str,
}

/// The server a destination writes to, as the operating system names its processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerProcess {
    /// The host the destination connects to.
    pub host: String,
    /// The server's process names (`postgres`; `mariadbd`, `mysqld`).
    pub names: &'static [&'static str],
}

/// How many messages a destination gathers into one write, and for how long at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accumulate {
    /// Most messages held before they are written as one batch.
    pub messages: usize,
    /// Most payload bytes held: written once another full pull could pass it.
    pub bytes: usize,
    /// Longest time, in milliseconds, the oldest held message waits for the write.
    pub flush_ms: u64,
    /// Where the setting lives, relative to the destination object (`rollover`), so
    /// errors name it.
    pub key: &'static str,
    /// The key of `messages` under `key` (`max_messages`).
    pub messages_key: &'static str,
}

impl Accumulate {
    /// The rollover a Parquet archive gets when its config names none, for a consumer
    /// with `max_ack_pending` (-1: unlimited) pulling batches of `batch_size` and
    /// `max_batch_bytes`: half of what the consumer may hold unacknowledged (so the
    /// batches pulled ahead still fit beside the buffer), at least one batch and at most
    /// [`DEFAULT_MAX_MESSAGES`] messages; [`DEFAULT_MAX_BYTES`] (or one pull, when a pull
    /// may carry more); [`DEFAULT_MAX_AGE_MS`]. Pure.
    pub fn default_rollover(
        max_ack_pending: i64,
        batch_size: usize,
        max_batch_bytes: usize,
    ) -> Accumulate {
        let half = match usize::try_from(max_ack_pending) {
            Ok(n) if n > 0 => n / 2,
            _ => DEFAULT_MAX_MESSAGES,
        };
        Accumulate {
            messages: half.min(DEFAULT_MAX_MESSAGES).max(batch_size),
            bytes: usize::try_from(DEFAULT_MAX_BYTES)
                .unwrap_or(usize::MAX)
                .max(max_batch_bytes),
            flush_ms: DEFAULT_MAX_AGE_MS,
            key: "rollover",
            messages_key: "max_messages",
        }
    }
}

/// Most messages of a default rollover.
pub const DEFAULT_MAX_MESSAGES: usize = 50_000;
/// `max_bytes` of a default rollover, and the key's default: 64 MiB.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// `max_age_ms` of a default rollover, and the key's default: one minute.
pub const DEFAULT_MAX_AGE_MS: u64 = 60_000;

/// Adds a problem for each `(key, value, min, max)` whose value lies outside `min..=max`.
pub fn out_of_range(out: &mut Vec<(String, String)>, checks: &[(&str, u64, u64, u64)]) {
    for &(key, value, min, max) in checks {
        if !(min..=max).contains(&value) {
            out.push((
                key.into(),
                format!("must be between {min} and {max}, got {value}"),
            ));
        }
    }
}

/// Adds a problem when connecting may take longer than the whole request it is part of.
pub fn connect_within_request(
    out: &mut Vec<(String, String)>,
    connect_timeout_ms: u64,
    request_timeout_ms: u64,
) {
    if connect_timeout_ms > request_timeout_ms {
        out.push((
            "connect_timeout_ms".into(),
            format!(
                "must not exceed request_timeout_ms ({request_timeout_ms}), got {connect_timeout_ms}"
            ),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_outside_their_range_and_a_connect_longer_than_the_request_are_named() {
        let mut out = Vec::new();
        out_of_range(
            &mut out,
            &[("a", 5, 1, 10), ("b", 0, 1, 10), ("c", 11, 1, 10)],
        );
        connect_within_request(&mut out, 200, 100);
        connect_within_request(&mut out, 100, 100);
        let keys: Vec<&str> = out.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["b", "c", "connect_timeout_ms"]);
        assert_eq!(out[0].1, "must be between 1 and 10, got 0");
        assert_eq!(
            out[2].1,
            "must not exceed request_timeout_ms (100), got 200"
        );
    }
}
