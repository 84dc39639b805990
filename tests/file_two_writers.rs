//! Two `jetsink run` daemons on one file directory, as an overlapping rollout makes them:
//! the second, run with `--fail-fast`, is refused (exit 69, naming the directory and the
//! holder's pid) while the first holds the directory, takes over once the first is gone (killed or stopped), and
//! no ACKed line is lost or cut across the handovers.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::json;

const N: usize = 3_000;

/// Lines written so far, complete or not.
fn line_count(dir: &Path) -> usize {
    jsonl_lines(dir).len()
}

/// Starts a daemon that must be refused because `holder` has the directory, and checks
/// its exit code and what it says.
fn assert_refused(config: &Path, dir: &Path, holder: &Daemon) {
    // With --fail-fast: without it, the second waits for the directory as for any late
    // destination, which is what a rolling restart wants.
    let mut second = Daemon::start_with_flags(config, dir, &["--fail-fast"]);
    let status = second.wait_exit(Duration::from_secs(30));
    let log = second.log_text();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(69),
        "a second daemon on the same directory must exit 69 while the first runs:\n{log}"
    );
    assert!(log.contains("data/events"), "names the directory:\n{log}");
    assert!(
        log.contains(&format!("pid {}", holder.pid())),
        "names the holder's pid {}:\n{log}",
        holder.pid()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn overlapping_daemons_on_one_directory_take_turns_and_lose_no_acked_line() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "TWO", "two.>").await;
    // Both daemons run the same config, as two versions of one service during a rollout:
    // the same durable consumer and the same directory and prefix. Small batches and
    // files make the drain long and rotate files across the handovers.
    let cfg = json!({
        "nats": {"servers": [server.url()]},
        "http": {"enabled": false},
        "sinks": {"files": {
            "source": {"stream": "TWO", "consumer": "to-files", "ack_wait_ms": 2000},
            "delivery": {"batch_size": 10, "batch_timeout_ms": 100},
            "destination": {"type": "file", "directory": "data/events", "rotate_bytes": 65536}
        }}
    });
    let path = write_config(dir.path(), &cfg);
    let out = dir.path().join("data/events");
    // Messages are published in four parts, so each daemon has work of its own whatever
    // the speed of the disk: 1000 + 1000 + 500 + 500 = N.
    publish_n(&js, "two.x", 1_000).await;

    let mut first = Daemon::start(&path, dir.path());
    eventually(
        Duration::from_secs(60),
        "the first daemon writes",
        || async { line_count(&out) >= 300 },
    )
    .await;
    assert_refused(&path, dir.path(), &first);

    // A burst: the first daemon keeps writing after the refusal, and dies while draining
    // it (possibly mid-write); the next one takes the lock and cuts a torn last line if
    // there is one.
    publish_n(&js, "two.x", 1_000).await;
    eventually(
        Duration::from_secs(60),
        "the first daemon writes after the refusal",
        || async { distinct_keys(&jsonl_lines(&out)).len() > 1_100 },
    )
    .await;
    first.kill();
    publish_n(&js, "two.x", 500).await;
    let mut second = Daemon::start(&path, dir.path());
    eventually(
        Duration::from_secs(90),
        "the second daemon writes what was published after the kill",
        || async { distinct_keys(&jsonl_lines(&out)).len() == 2_500 },
    )
    .await;
    assert_refused(&path, dir.path(), &second);

    // A clean stop hands over too.
    publish_n(&js, "two.x", 500).await;
    second.stop_cleanly();
    let mut third = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(90), "every message written", || async {
        distinct_keys(&jsonl_lines(&out)).len() == N
    })
    .await;
    eventually(Duration::from_secs(30), "every message ACKed", || async {
        consumer_state(&js, "TWO", "to-files").await == (0, 0)
    })
    .await;
    third.stop_cleanly();

    // Every line of every file is whole, and every message is there.
    let mut files: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    assert!(files.len() > 1, "rotation happened across the handovers");
    let mut sequences = BTreeSet::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "{} ends mid-line",
            f.display()
        );
        for line in text.lines() {
            let record: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("a line of {} does not parse: {e}", f.display()));
            sequences.insert(record["stream_sequence"].as_u64().expect("a sequence"));
        }
    }
    let want: BTreeSet<u64> = (1..=N as u64).collect();
    assert_eq!(sequences, want, "every message present");
}
