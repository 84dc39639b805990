//! A SQLite sink table as jetsink creates it, audited: a trigger appends the stream
//! sequence and delivery count of every commit to a plain `writes` table, so a message
//! committed twice is counted even though the table's unique key absorbs its second row.

use std::path::Path;

/// Creates `table` with jetsink's default columns and its audit in the SQLite file at
/// `path` (and its directory), then runs `extra` (more triggers on the table, say).
pub fn create_audited_table(path: &Path, table: &str, extra: &str) {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).expect("data dir");
    }
    let conn = rusqlite::Connection::open(path).expect("audited db");
    conn.execute_batch(&format!(
        "CREATE TABLE {table} (
            idempotency_key TEXT PRIMARY KEY NOT NULL,
            stream TEXT NOT NULL,
            stream_sequence INTEGER NOT NULL,
            consumer_sequence INTEGER NOT NULL,
            subject TEXT NOT NULL,
            delivered INTEGER NOT NULL,
            published_at TEXT NOT NULL,
            written_at TEXT NOT NULL,
            message_id TEXT,
            headers TEXT NOT NULL,
            priority TEXT,
            lane TEXT,
            classification TEXT,
            labels TEXT NOT NULL DEFAULT '[]',
            payload BLOB NOT NULL
        );
        CREATE TABLE writes (seq INTEGER NOT NULL, delivered INTEGER NOT NULL);
        CREATE TRIGGER audit_every_write BEFORE INSERT ON {table}
        BEGIN
            INSERT INTO writes (seq, delivered) VALUES (NEW.stream_sequence, NEW.delivered);
        END;
        {extra}"
    ))
    .expect("audited schema");
}

/// The stream sequence of every commit the audit saw (one twice: committed twice).
pub fn committed_sequences(path: &Path) -> Vec<u64> {
    let conn = rusqlite::Connection::open(path).expect("audited db");
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .expect("busy timeout");
    let mut stmt = conn.prepare("SELECT seq FROM writes").expect("select");
    let seqs = stmt
        .query_map([], |r| r.get::<_, i64>(0))
        .expect("query")
        .map(|r| r.expect("row") as u64)
        .collect();
    seqs
}
