//! The fault matrix (issue 48): every destination through every fault, each cell asserting
//! that every stream sequence is stored exactly once — counted in raw copies (rows, lines,
//! objects' records, target messages), not distinct keys — or, for HTTP and exec, which
//! promise at least once with an idempotency key, delivered at least once under as many
//! distinct keys as messages. None may be dead-lettered.
//!
//! One test per fault (a column of [`MATRIX`]): one jetsink process with every applicable
//! destination as a sink of its own (`tests/common/fault_matrix/`), messages arriving while
//! the fault is injected once the consumers' ACK floors show the drain part-way. A cell
//! that cannot apply is declared not applicable with its reason, never skipped silently.
//! docs/reliability.md shows the same table; the last test here fails when they differ.

use crate::common;

use common::fault_matrix::{judge, Dest, Event, Expect, Mode, World};

/// A column of the matrix: a fault, how it is injected, and the test that injects it.
struct Fault {
    title: &'static str,
    how: &'static str,
    test: &'static str,
    mode: Mode,
    events: &'static [Event],
}

const FAULTS: [Fault; 9] = [
    Fault {
        title: "jetsink SIGKILL",
        how: "SIGKILL while a proxy holds jetsink's ACKs, so every sink has committed messages the server never saw ACKed; then a restart",
        test: "every_destination_stores_each_message_once_across_a_jetsink_sigkill_with_acks_in_flight",
        mode: Mode::Plain,
        events: &[Event::KillJetsink],
    },
    Fault {
        title: "jetsink SIGTERM",
        how: "SIGTERM mid-drain (exit 0), then a restart",
        test: "every_destination_stores_each_message_once_across_a_jetsink_sigterm_mid_drain",
        mode: Mode::Plain,
        events: &[Event::TermJetsink],
    },
    Fault {
        title: "nats-server SIGKILL ×2",
        how: "the source nats-server SIGKILLed mid-drain and restarted on its store, twice; jetsink keeps running",
        test: "every_destination_stores_each_message_once_across_two_nats_server_sigkills",
        mode: Mode::Plain,
        events: &[Event::KillServer, Event::KillServer],
    },
    Fault {
        title: "outage",
        how: "every destination away until its sink has held a batch past an AckWait (three `+WPI` rounds; exec: a job told to come back later came back), then back: directories and tables renamed away and back, moto behind a proxy that refuses connections, the republish target's server killed and restarted on its store, the HTTP receiver answering 503, the exec script exiting 75",
        test: "every_destination_stores_each_message_once_across_its_own_outage",
        mode: Mode::Plain,
        events: &[Event::Outage],
    },
    Fault {
        title: "replay overlap",
        how: "SIGTERM mid-drain, `jetsink replay` of each sink from half its ACK floor to past every floor (written and unwritten messages), then a restart",
        test: "every_destination_stores_each_message_once_after_a_replay_overlapping_what_was_written",
        mode: Mode::Plain,
        events: &[Event::Replay],
    },
    Fault {
        title: "randomizer P=0",
        how: "the randomizer delaying every first delivery 20-200 ms, `max_deliver` 2; SIGTERM mid-drain twice, then the full run",
        test: "the_randomizer_at_p0_with_max_deliver_2_stores_each_message_once_across_two_sigterms",
        mode: Mode::Randomizer,
        events: &[Event::TermJetsink, Event::TermJetsink],
    },
    Fault {
        title: "shuffler",
        how: "`delivery.shuffle` (buffer 500), `max_deliver` 2; SIGTERM mid-drain twice, then the full run",
        test: "the_shuffler_stores_each_message_once_across_two_sigterms",
        mode: Mode::Shuffle,
        events: &[Event::TermJetsink, Event::TermJetsink],
    },
    Fault {
        title: "priority lanes",
        how: "two priority lanes by subject, `max_deliver` 2; SIGTERM mid-drain twice, then the full run",
        test: "priority_lanes_store_each_message_once_across_two_sigterms",
        mode: Mode::Lanes,
        events: &[Event::TermJetsink, Event::TermJetsink],
    },
    Fault {
        title: "2 batches in flight",
        how: "`batches_in_flight: 2`, `max_deliver` 2; SIGTERM mid-drain twice, then the full run",
        test: "two_batches_in_flight_store_each_message_once_across_two_sigterms",
        mode: Mode::InFlight,
        events: &[Event::TermJetsink, Event::TermJetsink],
    },
];

const ONCE: Expect = Expect::Once;
const KEY: Expect = Expect::ByKey;
/// `validate` refuses `batches_in_flight: 2` for every other destination.
const ONE_BATCH: Expect = Expect::NotApplicable("writes one batch at a time");

/// What each destination must do under each fault (the columns of [`FAULTS`]).
const MATRIX: [(Dest, [Expect; 9]); 10] = [
    (
        Dest::Sqlite,
        [ONCE, ONCE, ONCE, ONCE, ONCE, ONCE, ONCE, ONCE, ONE_BATCH],
    ),
    (
        Dest::Jsonl,
        [ONCE, ONCE, ONCE, ONCE, ONCE, ONCE, ONCE, ONCE, ONE_BATCH],
    ),
    (
        Dest::ParquetFile,
        [ONCE, ONCE, ONCE, ONCE, ONCE, ONCE, ONCE, ONCE, ONE_BATCH],
    ),
    (
        Dest::S3Jsonl,
        [ONCE, ONCE, ONCE, ONCE, ONCE, ONCE, ONCE, ONCE, ONE_BATCH],
    ),
    (
        Dest::S3Parquet,
        [ONCE, ONCE, ONCE, ONCE, ONCE, ONCE, ONCE, ONCE, ONE_BATCH],
    ),
    (
        Dest::Postgres,
        [ONCE, ONCE, ONCE, ONCE, ONCE, ONCE, ONCE, ONCE, ONCE],
    ),
    (
        Dest::Mysql,
        [ONCE, ONCE, ONCE, ONCE, ONCE, ONCE, ONCE, ONCE, ONCE],
    ),
    (
        Dest::Nats,
        [ONCE, ONCE, ONCE, ONCE, ONCE, ONCE, ONCE, ONCE, ONE_BATCH],
    ),
    (
        Dest::Http,
        [KEY, KEY, KEY, KEY, KEY, KEY, KEY, KEY, ONE_BATCH],
    ),
    (
        Dest::Exec,
        [KEY, KEY, KEY, KEY, KEY, KEY, KEY, KEY, ONE_BATCH],
    ),
];

/// Runs the column of the fault whose test is `test` and fails with every failing cell.
async fn column(test: &str) {
    let col = FAULTS
        .iter()
        .position(|f| f.test == test)
        .expect("a test of FAULTS");
    let fault = &FAULTS[col];
    let cells: Vec<(Dest, Expect)> = MATRIX.iter().map(|(d, e)| (*d, e[col])).collect();
    for (d, e) in &cells {
        if let Expect::NotApplicable(why) = e {
            println!("{} × {}: not applicable: {why}", fault.title, d.title());
        }
    }
    let dests = cells
        .iter()
        .filter(|(_, e)| !matches!(e, Expect::NotApplicable(_)))
        .map(|(d, _)| *d)
        .collect();
    let started = std::time::Instant::now();
    let mut world = World::new(dests, fault.mode).await;
    let outcome = world.run(fault.events).await;
    for (event, at) in &outcome.at_faults {
        println!("consumers at the {event:?} (ack floor / delivered / ack pending):");
        for (d, s) in at {
            println!(
                "  {:<16} {} / {} / {}",
                d.title(),
                s.ack_floor,
                s.delivered,
                s.ack_pending
            );
        }
    }
    let mut failed = outcome.notes.clone();
    for (d, expect) in cells {
        if matches!(expect, Expect::NotApplicable(_)) {
            continue;
        }
        match judge(&outcome, d, expect) {
            Ok(figures) => println!("{} × {}: PASS ({figures})", fault.title, d.title()),
            Err(wrong) => {
                println!("{} × {}: FAIL ({wrong})", fault.title, d.title());
                let mut warnings = outcome.warnings[&d].clone();
                warnings.sort_by_key(|(_, times)| std::cmp::Reverse(*times));
                for (message, times) in warnings.iter().take(6) {
                    println!("  its sink logged {times} x: {message}");
                }
                failed.push(format!("{}: {wrong}", d.title()));
            }
        }
    }
    let [faulted, drained, read] = outcome.phases;
    println!(
        "{}: last fault at {faulted:.1} s, drained at {drained:.1} s, read back at {read:.1} s \
         of the run; {:.1} s with the servers' start",
        fault.title,
        started.elapsed().as_secs_f64()
    );
    assert!(failed.is_empty(), "{}:\n{}", fault.title, failed.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_destination_stores_each_message_once_across_a_jetsink_sigkill_with_acks_in_flight() {
    column(
        "every_destination_stores_each_message_once_across_a_jetsink_sigkill_with_acks_in_flight",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_destination_stores_each_message_once_across_a_jetsink_sigterm_mid_drain() {
    column("every_destination_stores_each_message_once_across_a_jetsink_sigterm_mid_drain").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_destination_stores_each_message_once_across_two_nats_server_sigkills() {
    column("every_destination_stores_each_message_once_across_two_nats_server_sigkills").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_destination_stores_each_message_once_across_its_own_outage() {
    column("every_destination_stores_each_message_once_across_its_own_outage").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_destination_stores_each_message_once_after_a_replay_overlapping_what_was_written() {
    column(
        "every_destination_stores_each_message_once_after_a_replay_overlapping_what_was_written",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_randomizer_at_p0_with_max_deliver_2_stores_each_message_once_across_two_sigterms() {
    column("the_randomizer_at_p0_with_max_deliver_2_stores_each_message_once_across_two_sigterms")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_shuffler_stores_each_message_once_across_two_sigterms() {
    column("the_shuffler_stores_each_message_once_across_two_sigterms").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn priority_lanes_store_each_message_once_across_two_sigterms() {
    column("priority_lanes_store_each_message_once_across_two_sigterms").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_batches_in_flight_store_each_message_once_across_two_sigterms() {
    column("two_batches_in_flight_store_each_message_once_across_two_sigterms").await;
}

/// The section of docs/reliability.md the tables are rendered into.
const DOCS: &str = "docs/reliability.md";

/// The matrix and the faults, as docs/reliability.md shows them.
fn docs_tables() -> String {
    let mut out = String::from("| Destination |");
    for f in &FAULTS {
        out += &format!(" {} |", f.title);
    }
    out += "\n| --- |";
    out += &" --- |".repeat(FAULTS.len());
    for (d, expects) in &MATRIX {
        out += &format!("\n| {} |", d.title());
        for e in expects {
            out += &format!(" {} |", e.words());
        }
    }
    out += "\n\n| Fault | How it is injected | Test | Command |\n| --- | --- | --- | --- |";
    for f in &FAULTS {
        out += &format!(
            "\n| {} | {} | `{}` | `cargo test --test integration fault_matrix::{}` |",
            f.title, f.how, f.test, f.test
        );
    }
    out + "\n"
}

#[test]
fn the_fault_matrix_in_reliability_md_is_the_one_the_tests_run() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(DOCS);
    let docs = std::fs::read_to_string(&path).expect("read docs/reliability.md");
    let tables = docs_tables();
    assert!(
        docs.contains("## The fault matrix") && docs.contains(&tables),
        "{DOCS}'s section \"The fault matrix\" must hold these tables, as tests/fault_matrix.rs \
         has them (paste them in):\n\n{tables}"
    );
    // Every test named in the tables exists in this file.
    let this = include_str!("fault_matrix.rs");
    for f in &FAULTS {
        assert!(
            this.contains(&format!("async fn {}()", f.test)),
            "no test {}",
            f.test
        );
    }
}
