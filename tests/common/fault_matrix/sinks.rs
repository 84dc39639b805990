//! The destinations and delivery modes of the fault matrix, and the sink each becomes in
//! the one multi-sink config a matrix test runs: every destination its own sink, reading
//! the source stream through its own durable consumer, with a dead-letter queue so a
//! message that is given up on is counted, not silently gone.

use serde_json::{json, Value};

/// A destination of the matrix: each `type` of sink destination, Parquet and JSON Lines
/// apart where a destination writes both.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dest {
    Sqlite,
    Jsonl,
    ParquetFile,
    S3Jsonl,
    S3Parquet,
    Postgres,
    Mysql,
    Nats,
    Http,
    Exec,
}

impl Dest {
    pub const ALL: [Dest; 10] = [
        Dest::Sqlite,
        Dest::Jsonl,
        Dest::ParquetFile,
        Dest::S3Jsonl,
        Dest::S3Parquet,
        Dest::Postgres,
        Dest::Mysql,
        Dest::Nats,
        Dest::Http,
        Dest::Exec,
    ];

    /// The sink's name in the config (and its consumer's, after `fm-`).
    pub fn sink(self) -> &'static str {
        match self {
            Dest::Sqlite => "sqlite",
            Dest::Jsonl => "jsonl",
            Dest::ParquetFile => "parquet",
            Dest::S3Jsonl => "s3-jsonl",
            Dest::S3Parquet => "s3-parquet",
            Dest::Postgres => "postgres",
            Dest::Mysql => "mysql",
            Dest::Nats => "nats",
            Dest::Http => "http",
            Dest::Exec => "exec",
        }
    }

    /// How the docs name it.
    pub fn title(self) -> &'static str {
        match self {
            Dest::Sqlite => "SQLite",
            Dest::Jsonl => "JSON Lines files",
            Dest::ParquetFile => "Parquet files",
            Dest::S3Jsonl => "S3 JSON Lines",
            Dest::S3Parquet => "S3 Parquet",
            Dest::Postgres => "PostgreSQL",
            Dest::Mysql => "MySQL/MariaDB",
            Dest::Nats => "NATS republish",
            Dest::Http => "HTTP",
            Dest::Exec => "exec",
        }
    }

    pub fn consumer(self) -> String {
        format!("fm-{}", self.sink())
    }

    /// The dead-letter subject of its sink.
    pub fn dead_letter_subject(self) -> String {
        format!("fmdlq.{}", self.sink())
    }

    pub fn is_s3(self) -> bool {
        matches!(self, Dest::S3Jsonl | Dest::S3Parquet)
    }
}

/// How every sink of a test delivers: plainly, or through one of the stages that hold or
/// reorder messages, each with the small `max_deliver` the matrix runs it under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Plain,
    /// The randomizer at P = 0 (every first delivery delayed), 20-200 ms, `max_deliver` 2.
    Randomizer,
    /// `delivery.shuffle`, buffer 500, `max_deliver` 2.
    Shuffle,
    /// Two priority lanes from the subject, `max_deliver` 2.
    Lanes,
    /// `batches_in_flight: 2`, `max_deliver` 2.
    InFlight,
}

impl Mode {
    /// `max_deliver` of every consumer: -1 when plain; 2 in the modes, the figure
    /// (the randomizer's delay uses up the first delivery): a message handed back at the
    /// first SIGTERM is on its last delivery at the second, where it must be written, not
    /// handed back — a hand-back would be the server's reason to drop it.
    pub fn max_deliver(self) -> i64 {
        match self {
            Mode::Plain => -1,
            Mode::Randomizer | Mode::Shuffle | Mode::Lanes | Mode::InFlight => 2,
        }
    }

    /// The counter that shows the mode at work in a sink (it must have risen in the last
    /// run of a test, or the cell tested nothing of the mode).
    pub fn at_work(self) -> Option<&'static str> {
        match self {
            Mode::Plain => None,
            Mode::Randomizer => Some("jetsink_randomizer_delayed_total"),
            Mode::Shuffle => Some("jetsink_shuffle_flushes_total"),
            Mode::Lanes => Some("jetsink_priority_lane_batches_total"),
            Mode::InFlight => Some("jetsink_batches_written_ahead_total"),
        }
    }

    /// AckWait: short, so what a SIGKILL left comes back soon; the randomizer needs at least
    /// `batch_timeout_ms` + 5000.
    fn ack_wait_ms(self) -> u64 {
        match self {
            Mode::Randomizer => 6000,
            _ => 3000,
        }
    }

    fn delivery(self) -> Value {
        let mut d = json!({"batch_size": 100, "batch_timeout_ms": 200,
                           "retry": {"initial_backoff_ms": 50, "max_backoff_ms": 500}});
        match self {
            Mode::Plain | Mode::Lanes => {}
            Mode::Randomizer => {
                d["randomizer"] = json!({"enabled": true, "process_immediately_probability": 0,
                                         "min_delay_ms": 20, "max_delay_ms": 200,
                                         "max_window": 500});
            }
            Mode::Shuffle => d["shuffle"] = json!({"buffer": 500, "flush_ms": 500}),
            Mode::InFlight => d["batches_in_flight"] = json!(2),
        }
        if self == Mode::Lanes {
            d["priority_lanes"] = json!({"enabled": true, "default_lane": "routine", "lanes": [
                {"name": "urgent", "priorities": ["urgent"], "weight": 3},
                {"name": "routine", "priorities": ["routine"], "weight": 1}]});
        }
        d
    }

    /// The sink around `destination` for `dest`.
    pub fn sink(self, dest: Dest, destination: Value) -> Value {
        let mut sink = json!({
            "source": {"stream": super::STREAM, "subjects": "fm.>", "consumer": dest.consumer(),
                       "ack_wait_ms": self.ack_wait_ms(), "max_deliver": self.max_deliver()},
            "delivery": self.delivery(),
            "dead_letter": {"subject": dest.dead_letter_subject()},
            "destination": destination,
        });
        let parquet = sink["destination"]["format"] == "parquet";
        if self == Mode::Plain && parquet {
            // The rollover path, small enough for the matrix's flow (the default gathers
            // half of max_ack_pending, which the flow never lets fill; its timer is a
            // minute).
            sink["destination"]["rollover"] = json!({"max_messages": 200, "max_age_ms": 1000});
        }
        if self == Mode::Lanes {
            sink["message_metadata"] = json!({
                "priority": {"default": "routine"},
                "rules": [{"subject": "fm.urgent", "priority": "urgent"}]});
        }
        sink
    }
}
