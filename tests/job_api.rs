//! The synchronous HTTP job API against real servers: a `jetsink run` with an `api`
//! section, a work-queue jobs stream drained into SQLite with results on, and HTTP clients
//! submitting jobs and waiting for their results.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const TOKEN: &str = "t0ken-for-tests";

/// The jobs table, with a trigger refusing any payload containing `POISON` for good.
fn jobs_db(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let path = dir.join("data/jobs.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "CREATE TABLE jobs (idempotency_key TEXT PRIMARY KEY NOT NULL, stream TEXT NOT NULL,
           stream_sequence INTEGER NOT NULL, consumer_sequence INTEGER NOT NULL,
           subject TEXT NOT NULL, delivered INTEGER NOT NULL, published_at TEXT NOT NULL,
           written_at TEXT NOT NULL, message_id TEXT, headers TEXT NOT NULL, priority TEXT,
           lane TEXT, classification TEXT, labels TEXT NOT NULL DEFAULT '[]',
           payload BLOB NOT NULL);
         CREATE TRIGGER refuse_poison BEFORE INSERT ON jobs
           WHEN instr(CAST(NEW.payload AS TEXT), 'POISON') > 0
           BEGIN SELECT RAISE(ABORT, 'poison job refused'); END;",
    )
    .unwrap();
    path
}

struct Api {
    server: NatsServer,
    dir: tempfile::TempDir,
    daemon: Daemon,
    base: String,
    metrics: String,
    http: reqwest::Client,
}

/// A daemon with sink `worker` (results on, SQLite, dead letters) and sink `plain` (no
/// results), and the job API behind a token.
async fn start(max_waiting: usize) -> Api {
    start_with(max_waiting, |_| {}).await
}

/// [`start`], with the config changed by `tune` before the daemon starts.
async fn start_with(max_waiting: usize, tune: impl FnOnce(&mut Value)) -> Api {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    jobs_db(dir.path());
    std::fs::write(dir.path().join("api-token"), format!("{TOKEN}\n")).unwrap();
    let api_listen = format!("127.0.0.1:{}", free_port());
    let metrics = format!("127.0.0.1:{}", free_port());
    let cfg = json!({
        "nats": {"servers": [server.url()], "connect_timeout_ms": 2000},
        "http": {"listen": metrics},
        "api": {"listen": api_listen, "token_file": "api-token", "max_body_bytes": 1024,
                "max_waiting": max_waiting, "default_timeout_ms": 30000},
        "sinks": {
            "worker": {
                "source": {"stream": "JOBS", "subjects": "jobs.run", "consumer": "workers",
                           "ack_wait_ms": 5000, "max_deliver": 4,
                           "create_stream": {"subjects": ["jobs.run"], "retention": "workqueue"}},
                "delivery": {"batch_size": 50, "batch_timeout_ms": 200,
                             "retry": {"initial_backoff_ms": 50, "max_backoff_ms": 200}},
                "destination": {"type": "sqlite", "path": "data/jobs.db", "table": "jobs"},
                "results": {"subject_prefix": "jobs.results", "create_stream": {"name": "RESULTS"}},
                "dead_letter": {"subject": "jobs.dlq", "create_stream": {"name": "JOBS_DLQ"}}
            },
            "plain": {
                "source": {"stream": "PLAIN", "subjects": "plain.in", "consumer": "plain",
                           "create_stream": {"subjects": ["plain.in"]}},
                "destination": {"type": "file", "directory": "data/plain"}
            }
        }
    });
    let mut cfg = cfg;
    tune(&mut cfg);
    let path = write_config(dir.path(), &cfg);
    let daemon = Daemon::start(&path, dir.path());
    let http = reqwest::Client::new();
    let base = format!("http://{api_listen}/v1/sinks");
    let probe = format!("{base}/worker/jobs/probe");
    eventually(Duration::from_secs(30), "the job API answers", || {
        let (http, probe) = (http.clone(), probe.clone());
        async move {
            http.get(&probe)
                .bearer_auth(TOKEN)
                .send()
                .await
                .is_ok_and(|r| r.status() == 404)
        }
    })
    .await;
    Api {
        server,
        dir,
        daemon,
        base,
        metrics,
        http,
    }
}

impl Api {
    fn post(
        &self,
        sink: &str,
        key: Option<&str>,
        query: &str,
        body: &str,
    ) -> reqwest::RequestBuilder {
        let mut r = self
            .http
            .post(format!("{}/{sink}/jobs{query}", self.base))
            .bearer_auth(TOKEN)
            .body(body.to_string());
        if let Some(k) = key {
            r = r.header("Idempotency-Key", k);
        }
        r
    }

    fn get(&self, sink: &str, id: &str) -> reqwest::RequestBuilder {
        self.http
            .get(format!("{}/{sink}/jobs/{id}", self.base))
            .bearer_auth(TOKEN)
    }
}

/// A raw HTTP/1.1 POST of `chunks` chunks of `size` bytes with chunked transfer
/// encoding (no Content-Length): (status line, body).
async fn chunked_post(url: &str, chunks: usize, size: usize) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_at(rest.find('/').unwrap());
    let mut s = tokio::net::TcpStream::connect(host).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    for _ in 0..chunks {
        let chunk = format!("{size:x}\r\n{}\r\n", "y".repeat(size));
        if s.write_all(chunk.as_bytes()).await.is_err() {
            break; // the server may answer and close before the whole body is sent
        }
    }
    let _ = s.write_all(b"0\r\n\r\n").await;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.lines().next().unwrap_or_default().to_string();
    (status, text)
}

async fn answer(r: reqwest::RequestBuilder) -> (u16, reqwest::header::HeaderMap, Value) {
    let resp = r.send().await.expect("request");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.expect("body");
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
    (status, headers, v)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_committed_job_answers_200_a_dead_lettered_one_422_and_a_result_stored_before_the_wait_is_found(
) {
    let mut api = start(100).await;
    // Committed: 200 with the result; the id is the Idempotency-Key.
    let (code, headers, v) = answer(api.post("worker", Some("ok-1"), "", "{\"n\":1}")).await;
    assert_eq!(code, 200, "{v}\n{}", api.daemon.log_text());
    assert_eq!(
        (v["id"].as_str(), v["status"].as_str()),
        (Some("ok-1"), Some("committed"))
    );
    assert_eq!(headers["jetsink-job-id"], "ok-1");
    let (code, _, again) = answer(api.get("worker", "ok-1")).await;
    assert_eq!((code, &again), (200, &v), "GET returns the retained result");

    // Without a key, a generated id is returned.
    let (code, headers, v) = answer(api.post("worker", None, "", "{\"n\":2}")).await;
    assert_eq!(code, 200, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 32, "{id}");
    assert_eq!(headers["jetsink-job-id"], id.as_str());

    // Dead-lettered: 422 with the result.
    let (code, _, v) = answer(api.post("worker", Some("poison-1"), "", "{\"POISON\":1}")).await;
    assert_eq!(code, 422, "{v}");
    assert_eq!(v["status"], "dead_lettered");
    assert!(
        v["error"].as_str().unwrap().contains("poison job refused"),
        "{v}"
    );
    let (code, _, _) = answer(api.get("worker", "poison-1")).await;
    assert_eq!(code, 422);

    // A job published straight to NATS and finished before anyone waited: the API finds
    // its stored result, and the jobs stream drops the resubmission.
    let js = api.server.js().await;
    let mut h = async_nats::HeaderMap::new();
    h.insert("Nats-Msg-Id", "early-1");
    js.publish_with_headers("jobs.run", h, "{\"n\":3}".into())
        .await
        .unwrap()
        .await
        .unwrap();
    eventually(
        Duration::from_secs(20),
        "early-1's result is stored",
        || async { answer(api.get("worker", "early-1")).await.0 == 200 },
    )
    .await;
    let (code, _, v) = answer(api.post("worker", Some("early-1"), "", "{\"n\":3}")).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["id"], "early-1");
    assert_eq!(
        sqlite_count(&api.dir.path().join("data/jobs.db"), "jobs"),
        3
    );

    let (code, _, v) = answer(api.get("worker", "never-submitted")).await;
    assert_eq!((code, v["error"].as_str()), (404, Some("not_found")));
    assert_eq!(
        metric_value(
            &api.metrics,
            "jetsink_jobs_submitted_total{sink=\"worker\"}"
        )
        .await,
        Some(4.0)
    );
    assert_eq!(
        metric_value(
            &api.metrics,
            "jetsink_job_api_responses_total{code=\"422\",sink=\"worker\"}"
        )
        .await,
        Some(2.0)
    );
    api.daemon.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn unauthorized_oversized_unknown_and_malformed_requests_are_refused_with_json() {
    let mut api = start(100).await;
    let url = format!("{}/worker/jobs", api.base);
    let (code, headers, v) = answer(api.http.post(&url).body("{}")).await;
    assert_eq!((code, v["error"].as_str()), (401, Some("unauthorized")));
    assert_eq!(headers["www-authenticate"], "Bearer");
    let (code, _, _) = answer(api.http.post(&url).bearer_auth("t0ken-for-test").body("{}")).await;
    assert_eq!(code, 401, "a token one character short");
    let (code, _, _) = answer(api.http.get(format!("{}/worker/jobs/x", api.base))).await;
    assert_eq!(code, 401, "GET needs the token too");
    // The token guards the API only, not /metrics.
    let scrape = api
        .http
        .get(format!("http://{}/metrics", api.metrics))
        .send()
        .await
        .unwrap();
    assert_eq!(scrape.status().as_u16(), 200);

    let big = "x".repeat(1025);
    let (code, _, v) = answer(api.post("worker", Some("big-1"), "", &big)).await;
    assert_eq!((code, v["error"].as_str()), (413, Some("too_large")));
    // A body without a declared length (chunked) is cut at the limit too.
    let (status, body) = chunked_post(&url, 3, 600).await;
    assert!(status.starts_with("HTTP/1.1 413"), "{status}");
    assert!(body.contains("\"too_large\""), "{body}");
    let (code, _, v) = answer(api.post("nosuch", None, "", "{}")).await;
    assert_eq!((code, v["error"].as_str()), (404, Some("unknown_sink")));
    let (code, _, v) = answer(api.post("plain", None, "", "{}")).await;
    assert_eq!((code, v["error"].as_str()), (404, Some("no_results")));
    let (code, _, v) = answer(api.post("worker", Some("a.b"), "", "{}")).await;
    assert_eq!((code, v["error"].as_str()), (400, Some("bad_id")));
    let (code, _, v) = answer(api.get("worker", "a*")).await;
    assert_eq!((code, v["error"].as_str()), (400, Some("bad_id")));
    let (code, _, v) = answer(api.post("worker", None, "?timeout_ms=soon", "{}")).await;
    assert_eq!((code, v["error"].as_str()), (400, Some("bad_timeout")));
    let (code, _, v) = answer(api.post("worker", None, "?wait=1", "{}")).await;
    assert_eq!((code, v["error"].as_str()), (400, Some("bad_query")));
    let js = api.server.js().await;
    let mut jobs = js.get_stream("JOBS").await.unwrap();
    assert_eq!(
        jobs.info().await.unwrap().state.last_sequence,
        0,
        "no refused request published a job"
    );
    assert_eq!(
        metric_value(
            &api.metrics,
            "jetsink_job_api_responses_total{code=\"404\",sink=\"\"}"
        )
        .await,
        Some(1.0),
        "an unknown sink is counted without its name"
    );
    api.daemon.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_budget_that_runs_out_answers_503_and_the_same_key_later_returns_the_result_and_waits_beyond_max_waiting_get_429(
) {
    let mut api = start(1).await;
    // The destination is locked by another connection: jobs are held, results wait.
    let db = api.dir.path().join("data/jobs.db");
    let lock = rusqlite::Connection::open(&db).unwrap();
    lock.execute_batch("BEGIN EXCLUSIVE").unwrap();

    let (code, headers, v) =
        answer(api.post("worker", Some("slow-1"), "?timeout_ms=300", "{\"n\":1}")).await;
    assert_eq!(code, 503, "{v}");
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(
        (v["id"].as_str(), v["error"].as_str(), v["retry"].as_bool()),
        (Some("slow-1"), Some("timeout"), Some(true))
    );

    // One wait held open fills max_waiting (1): the next request is refused with 429.
    let held = tokio::spawn(
        api.post("worker", Some("held-1"), "?timeout_ms=60000", "{\"n\":2}")
            .send(),
    );
    eventually(
        Duration::from_secs(20),
        "one request is waiting",
        || async {
            metric_value(&api.metrics, "jetsink_job_waits{sink=\"worker\"}").await == Some(1.0)
        },
    )
    .await;
    let (code, headers, v) = answer(api.post("worker", Some("more-1"), "", "{}")).await;
    assert_eq!((code, v["error"].as_str()), (429, Some("too_many_waits")));
    assert!(headers.contains_key("retry-after"));

    // The destination comes back: the held wait ends with its result, and asking again
    // for the timed-out job returns its result without running it twice.
    lock.execute_batch("ROLLBACK").unwrap();
    drop(lock);
    let held = held.await.unwrap().unwrap();
    assert_eq!(held.status().as_u16(), 200);
    let (code, headers, v) = answer(api.post("worker", Some("slow-1"), "", "{\"n\":1}")).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["id"], "slow-1");
    assert_eq!(headers["jetsink-job-id"], "slow-1");
    assert_eq!(sqlite_count(&db, "jobs"), 2, "slow-1 and held-1, once each");
    assert_eq!(
        metric_value(
            &api.metrics,
            "jetsink_job_api_responses_total{code=\"503\",sink=\"worker\"}"
        )
        .await,
        Some(1.0)
    );
    assert_eq!(
        metric_value(
            &api.metrics,
            "jetsink_job_wait_seconds_count{outcome=\"timeout\",sink=\"worker\"}"
        )
        .await,
        Some(1.0)
    );
    api.daemon.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_answered_503_while_nats_is_down_names_its_id_and_the_documented_retry_makes_exactly_one_job(
) {
    // The PubAck wait of the client's own JetStream context is far longer than the
    // request's budget: the answer must still come within the budget, and say so.
    let mut api = start_with(100, |cfg| {
        cfg["nats"]["request_timeout_ms"] = json!(120_000);
    })
    .await;
    api.server.kill();
    // No Idempotency-Key: the client has nothing of its own to ask again with.
    let (code, headers, v) = answer(api.post("worker", None, "?timeout_ms=500", "{\"n\":1}")).await;
    assert_eq!(code, 503, "{v}\n{}", api.daemon.log_text());
    assert_eq!(
        (v["error"].as_str(), v["retry"].as_bool()),
        (Some("unconfirmed"), Some(true)),
        "{v}"
    );
    let message = v["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("within 500 ms") && message.contains("may still be stored and run"),
        "the budget, not the client's 120 s PubAck wait, ended the request: {v}"
    );
    let id = v["id"].as_str().expect("the 503 names the job").to_string();
    assert_eq!(id.len(), 32, "{id}");
    assert_eq!(v["idempotency_key"], id.as_str(), "{v}");
    assert_eq!(headers["jetsink-job-id"], id.as_str());
    assert_eq!(headers["retry-after"], "1");

    // NATS comes back; the publish the client kept queued may go out now. The client
    // follows the documented rule: ask again with Idempotency-Key set to the id it got.
    api.server.restart();
    let db = api.dir.path().join("data/jobs.db");
    // Polls the answer, as a client honouring Retry-After would (bounded: a failure
    // guard, not a timing the test asserts).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let last = loop {
        let r = api.post("worker", Some(&id), "?timeout_ms=2000", "{\"n\":1}");
        if let Ok(resp) = r.send().await {
            let status = resp.status().as_u16();
            let body: Value =
                serde_json::from_str(&resp.text().await.unwrap_or_default()).unwrap_or(Value::Null);
            if status == 200 {
                break body;
            }
            assert_eq!(
                status, 503,
                "a retry is answered with the result or a 503: {body}"
            );
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a retry with the id never got the result:\n{}",
            api.daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        (last["id"].as_str(), last["status"].as_str()),
        (Some(id.as_str()), Some("committed")),
        "{last}"
    );
    assert_eq!(sqlite_count(&db, "jobs"), 1, "the job ran once");
    let js = api.server.js().await;
    let mut jobs = js.get_stream("JOBS").await.unwrap();
    assert_eq!(
        jobs.info().await.unwrap().state.last_sequence,
        1,
        "the jobs stream stored one job: the queued publish and every retry share its Nats-Msg-Id"
    );
    api.daemon.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lowercase_bearer_scheme_is_accepted_and_a_second_idempotency_key_is_refused() {
    let mut api = start(100).await;
    let url = format!("{}/worker/jobs", api.base);
    let (code, _, v) = answer(
        api.http
            .post(&url)
            .header("Authorization", format!("bearer {TOKEN}"))
            .header("Idempotency-Key", "lower-1")
            .body("{}"),
    )
    .await;
    assert_eq!(code, 200, "RFC 7235: the scheme is case-insensitive: {v}");
    let (code, _, v) = answer(
        api.post("worker", Some("two-1"), "", "{}")
            .header("Idempotency-Key", "two-2"),
    )
    .await;
    assert_eq!(
        (code, v["error"].as_str()),
        (400, Some("duplicate_idempotency_key")),
        "{v}"
    );
    assert!(
        v["message"]
            .as_str()
            .unwrap_or_default()
            .contains("Idempotency-Key"),
        "{v}"
    );
    let mut jobs = api.server.js().await.get_stream("JOBS").await.unwrap();
    assert_eq!(
        jobs.info().await.unwrap().state.last_sequence,
        1,
        "only the accepted request published a job"
    );
    api.daemon.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_posted_while_the_results_stream_is_gone_answers_503_unavailable() {
    let mut api = start(100).await;
    api.server
        .js()
        .await
        .delete_stream("RESULTS")
        .await
        .unwrap();
    // A two-minute budget: a 503 `timeout` would mean the API waited it out.
    let (status, headers, v) =
        answer(api.post("worker", Some("no-results-1"), "?timeout_ms=120000", "{}")).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (503, Some("unavailable")),
        "{v}"
    );
    assert_eq!(v["retry"], true, "{v}");
    assert_eq!(
        headers.get("retry-after").map(|h| h.to_str().unwrap_or("")),
        Some("1")
    );
    api.daemon.stop_cleanly();
}
