//! The job API's handlers: submit a job and wait for its result, read a retained result.
//! Every answer is JSON: the result document as the results stream stores it (200
//! committed, 422 dead-lettered), or `{error, ...}`.

use std::sync::OnceLock;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::metrics::Outcome;
use super::request::{self, BadRequest, RETRY_AFTER_SECONDS};
use super::state::{error, too_large, ApiState, Served};
use crate::jobs::client::{self, ClientError, Job, Published};

/// The header naming the job id in every answer about a job.
const JOB_ID: HeaderName = HeaderName::from_static("jetsink-job-id");
/// The request header naming the job id.
const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The query of a submission.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitQuery {
    /// The wait budget, in milliseconds.
    timeout_ms: Option<String>,
}

/// `POST /v1/sinks/{sink}/jobs`.
pub async fn submit(
    State(s): State<ApiState>,
    Path(sink): Path<String>,
    query: Result<Query<SubmitQuery>, QueryRejection>,
    headers: HeaderMap,
    req: Request,
) -> Response {
    let (served, subject, budget, key) = match accept(&s, &sink, query, &headers) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let payload = match body(&s, req).await {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let Ok(_permit) = s.0.waits.clone().try_acquire_owned() else {
        let mut r = error(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_waits",
            json!({"message": format!("{} requests are waiting for results (api.max_waiting)", s.0.cfg.max_waiting), "retry": true}),
        );
        retry_after(&mut r);
        return r;
    };
    let _waiting = s.0.metrics.waiting(&sink);
    let job = Job {
        subject,
        id: Some(key.clone()),
        headers: Vec::new(),
        payload,
    };
    let published: OnceLock<(Instant, String)> = OnceLock::new();
    let on_published = |p: &Published| {
        s.0.metrics.submitted(&sink);
        let _ = published.set((Instant::now(), p.id.clone()));
    };
    let mut shutdown = s.0.shutdown.clone();
    let outcome = tokio::select! {
        r = client::submit(&s.0.js, &served.spec, job, budget, on_published) => r,
        _ = shutdown.wait_for(|stop| *stop) => Err(ClientError::Unavailable(
            "jetsink is shutting down; the job may still run: ask again with the same Idempotency-Key".into(),
        )),
    };
    let (waited, id) = match published.get() {
        Some((at, id)) => (at.elapsed().as_secs_f64(), Some(id.clone())),
        None => (0.0, client::job_id_before_publish(&served.spec, &key)),
    };
    match outcome {
        Ok(a) => {
            let o = match a.result.status {
                crate::jobs::Status::Committed => Outcome::Committed,
                crate::jobs::Status::DeadLettered => Outcome::DeadLettered,
            };
            s.0.metrics.waited(&sink, o, a.waited.as_secs_f64());
            result(a.body, &a.result)
        }
        Err(e) => {
            if published.get().is_some() {
                let o = match e {
                    ClientError::TimedOut { .. } => Outcome::Timeout,
                    _ => Outcome::Error,
                };
                s.0.metrics.waited(&sink, o, waited);
            }
            failure(e, id, Some(&key))
        }
    }
}

/// What a submission must name before its body is read: a served sink with a job
/// subject, a good query, at most one good `Idempotency-Key` — or the refusal (boxed: a
/// `Response` is large). Without a key, one is made: every answer then names the id the
/// client can ask again with, whatever happened.
fn accept<'a>(
    s: &'a ApiState,
    sink: &str,
    query: Result<Query<SubmitQuery>, QueryRejection>,
    headers: &HeaderMap,
) -> Result<(&'a Served, String, std::time::Duration, String), Box<Response>> {
    let served = served(s, sink)?;
    let subject = match &served.subject {
        Ok(subj) => subj.clone(),
        Err(why) => {
            return Err(Box::new(error(
                StatusCode::NOT_FOUND,
                "no_job_subject",
                json!({"sink": sink, "message": format!("{why}: the API publishes jobs on the sink's one literal filter subject")}),
            )))
        }
    };
    let query = match query {
        Ok(Query(q)) => q,
        Err(e) => {
            return Err(Box::new(error(
                StatusCode::BAD_REQUEST,
                "bad_query",
                json!({"message": format!("{}; the only parameter is timeout_ms", e.body_text())}),
            )))
        }
    };
    let budget = request::budget(&s.0.cfg, query.timeout_ms.as_deref())
        .map_err(|e| Box::new(bad_request(&e)))?;
    let key = request::key_header(
        headers
            .get_all(IDEMPOTENCY_KEY)
            .iter()
            .map(HeaderValue::as_bytes),
    )
    .map_err(|e| Box::new(bad_request(&e)))?;
    Ok((
        served,
        subject,
        budget,
        key.unwrap_or_else(client::random_id),
    ))
}

/// The request body, read within `api.body_read_timeout_ms` (the size limit is the
/// layer's): a client that trickles its body cannot hold a connection for long.
async fn body(s: &ApiState, req: Request) -> Result<Bytes, Box<Response>> {
    let limit = std::time::Duration::from_millis(s.0.cfg.body_read_timeout_ms);
    match tokio::time::timeout(limit, Bytes::from_request(req, &())).await {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(e)) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(Box::new(too_large())),
        Ok(Err(e)) => Err(Box::new(error(
            StatusCode::BAD_REQUEST,
            "bad_body",
            json!({"message": e.body_text()}),
        ))),
        Err(_) => Err(Box::new(error(
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            json!({"message": format!("the body did not arrive within {} ms (api.body_read_timeout_ms)", limit.as_millis())}),
        ))),
    }
}

/// `GET /v1/sinks/{sink}/jobs/{id}`.
pub async fn lookup(
    State(s): State<ApiState>,
    Path((sink, id)): Path<(String, String)>,
) -> Response {
    let served = match served(&s, &sink) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let id = match request::job_id(Some(id.as_bytes())) {
        Ok(id) => id.unwrap_or_default(),
        Err(e) => return bad_request(&e),
    };
    let results = match client::results_of(&served.spec) {
        Ok(r) => r,
        Err(e) => return failure(e, None, None),
    };
    let found = client::stored(&s.0.js, results, &id).await;
    match found {
        Ok(Some(body)) => match client::parse(results, &id, &body) {
            Ok(r) => result(body, &r),
            Err(e) => failure(e, Some(id), None),
        },
        Ok(None) => error(
            StatusCode::NOT_FOUND,
            "not_found",
            json!({"id": id, "message": "no result is retained for this job: not finished yet, never submitted, or expired (results.create_stream.max_age_ms)"}),
        ),
        Err(e) => failure(e, Some(id), None),
    }
}

/// Any other path or method.
pub async fn no_route() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "no_route",
        json!({"message": "the job API serves POST /v1/sinks/{sink}/jobs and GET /v1/sinks/{sink}/jobs/{id}"}),
    )
}

/// The sink a request names, or the 404 it gets (boxed: a `Response` is large).
fn served<'a>(s: &'a ApiState, sink: &str) -> Result<&'a Served, Box<Response>> {
    match s.0.sinks.get(sink) {
        Some(x) if x.spec.results.is_some() => Ok(x),
        Some(_) => Err(Box::new(error(
            StatusCode::NOT_FOUND,
            "no_results",
            json!({"sink": sink, "message": format!("sink {sink} has no results section, so it publishes no results")}),
        ))),
        None => Err(Box::new(error(
            StatusCode::NOT_FOUND,
            "unknown_sink",
            json!({"message": "no sink by that name is configured"}),
        ))),
    }
}

fn bad_request(e: &BadRequest) -> Response {
    error(
        StatusCode::BAD_REQUEST,
        e.code(),
        json!({"message": e.to_string()}),
    )
}

/// A result: 200 committed, 422 dead-lettered, the stored document as the body.
fn result(body: Bytes, r: &crate::jobs::JobResult) -> Response {
    let mut resp = (
        request::status_of(r.status),
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&r.id) {
        resp.headers_mut().insert(JOB_ID, v);
    }
    resp
}

fn retry_after(r: &mut Response) {
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
}

/// A failed submission or lookup: 503 with `Retry-After` when asking again can help. A
/// submission's answer names the job (`id`, `Jetsink-Job-Id`) when its id is known, and
/// always the `idempotency_key` it was sent with: the one to ask again with.
fn failure(e: ClientError, id: Option<String>, key: Option<&str>) -> Response {
    let (status, code) = match &e {
        ClientError::TimedOut { .. } => (StatusCode::SERVICE_UNAVAILABLE, "timeout"),
        ClientError::Unconfirmed { .. } => (StatusCode::SERVICE_UNAVAILABLE, "unconfirmed"),
        ClientError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        ClientError::NoResults(_) => (StatusCode::NOT_FOUND, "no_results"),
        ClientError::BadId(_) => (StatusCode::BAD_REQUEST, "bad_id"),
        // The API takes no subject: a sink without one literal filter subject is refused
        // by `accept` before any submission, with this code.
        ClientError::BadSubject { .. }
        | ClientError::WildcardSubject(_)
        | ClientError::NoLiteralSubject { .. } => (StatusCode::NOT_FOUND, "no_job_subject"),
    };
    let mut extra = json!({"message": e.to_string()});
    if status == StatusCode::SERVICE_UNAVAILABLE {
        extra["retry"] = json!(true);
    }
    if let Some(id) = &id {
        extra["id"] = json!(id);
    }
    if let Some(k) = key {
        extra["idempotency_key"] = json!(k);
    }
    let mut r = error(status, code, extra);
    if status == StatusCode::SERVICE_UNAVAILABLE {
        retry_after(&mut r);
    }
    if let Some(v) = id.and_then(|i| HeaderValue::from_str(&i).ok()) {
        r.headers_mut().insert(JOB_ID, v);
    }
    r
}
