//! The job-queue document's "persist results to Postgres", as shipped in
//! `config/job-results-postgres.json`: a second sink reads the results stream into a
//! PostgreSQL table keyed by job id (`config/job-results-postgres.sql`), so a committed and
//! a dead-lettered result outlive the results stream's retention. Against the real
//! servers: nats-server and PostgreSQL on 127.0.0.1:5432 (user `postgres`, trust).

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

use common::pg::PgDatabase;

fn repo_file(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The example as shipped, pointed at the private server, a free port and the test's
/// database (user postgres, no password: trust).
fn example(server: &NatsServer, database: &str) -> Value {
    let mut cfg: Value = serde_json::from_str(&repo_file("config/job-results-postgres.json"))
        .expect("the example parses");
    cfg["nats"]["servers"] = json!([server.url()]);
    cfg["http"]["listen"] = json!(format!("127.0.0.1:{}", free_port()));
    let dest = &mut cfg["sinks"]["results_to_postgres"]["destination"];
    dest["user"] = json!("postgres");
    dest["database"] = json!(database);
    if let Some(d) = dest.as_object_mut() {
        d.remove("password_env");
    }
    cfg
}

fn submit(dir: &Path, cfg: &Path, data: &str, id: &str) -> (i32, String, String) {
    let cfg = cfg.to_string_lossy().into_owned();
    jetsink(
        &[
            "submit",
            "--config",
            &cfg,
            "--sink",
            "grader",
            "--data",
            data,
            "--id",
            id,
            "--timeout-ms",
            "30000",
        ],
        dir,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_sink_persists_committed_and_dead_lettered_results_in_postgres() {
    let server = NatsServer::start();
    let js = server.js().await;
    let dir = tempfile::tempdir().unwrap();
    let db = PgDatabase::create("results").await;
    let pg = db.client().await;
    pg.batch_execute(&repo_file("config/job-results-postgres.sql"))
        .await
        .expect("the shipped table");
    // The grader's table refuses a poison job, so it gets a `dead_lettered` result.
    audit::create_audited_table(
        &dir.path().join("data/grading.db"),
        "jobs",
        "CREATE TRIGGER refuse_poison BEFORE INSERT ON jobs
           WHEN instr(CAST(NEW.payload AS TEXT), 'POISON') > 0
           BEGIN SELECT RAISE(ABORT, 'poison job refused'); END;",
    );
    let cfg = example(&server, &db.name);
    let ready = format!("http://{}/readyz", cfg["http"]["listen"].as_str().unwrap());
    let path = write_config(dir.path(), &cfg);
    let mut d = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(30), "both sinks ready", || {
        let ready = ready.clone();
        async move {
            http(reqwest::Method::GET, &ready)
                .await
                .is_some_and(|(status, _)| status == 200)
        }
    })
    .await;

    let (code, out, err) = submit(dir.path(), &path, "{\"essay\":42}", "essay-42");
    assert_eq!(code, 0, "{out}\n{err}\n{}", d.log_text());
    let (code, out, err) = submit(dir.path(), &path, "{\"POISON\":1}", "poison-1");
    assert_eq!(code, 65, "{out}\n{err}\n{}", d.log_text());

    eventually(
        Duration::from_secs(30),
        "both results in PostgreSQL",
        || {
            let pg = &pg;
            async move {
                pg.query_one("SELECT count(*) FROM job_results", &[])
                    .await
                    .map(|r| r.get::<_, i64>(0) == 2)
                    .unwrap_or(false)
            }
        },
    )
    .await;
    let rows = pg
        .query(
            "SELECT job_id, status, error, job_stream, job_sequence, delivered, \
                    finished_at IS NOT NULL, result->>'status' \
             FROM job_results ORDER BY job_id",
            &[],
        )
        .await
        .unwrap();
    let essay = &rows[0];
    assert_eq!(essay.get::<_, String>(0), "essay-42");
    assert_eq!(essay.get::<_, String>(1), "committed");
    assert_eq!(essay.get::<_, Option<String>>(2), None);
    assert_eq!(essay.get::<_, String>(3), "GRADING_JOBS");
    assert_eq!(essay.get::<_, i64>(4), 1);
    assert_eq!(essay.get::<_, i32>(5), 1);
    assert!(essay.get::<_, bool>(6));
    assert_eq!(essay.get::<_, String>(7), "committed", "the whole document");
    let poison = &rows[1];
    assert_eq!(poison.get::<_, String>(0), "poison-1");
    assert_eq!(poison.get::<_, String>(1), "dead_lettered");
    let error = poison.get::<_, Option<String>>(2).unwrap_or_default();
    assert!(error.contains("poison job refused"), "{error}");

    // The stream is only transport: with its results gone (as after `max_age_ms`), the
    // rows stay, and the consumer has nothing left to redeliver.
    js.get_stream("GRADING_RESULTS")
        .await
        .unwrap()
        .purge()
        .await
        .unwrap();
    eventually(
        Duration::from_secs(10),
        "the results consumer settled",
        || async { consumer_state(&js, "GRADING_RESULTS", "results-to-postgres").await == (0, 0) },
    )
    .await;
    d.stop_cleanly();
    let n: i64 = pg
        .query_one("SELECT count(*) FROM job_results", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 2);
}
