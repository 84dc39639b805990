//! What the job API's handlers and middleware share: the served sinks, the token digest,
//! the wait bound, the metrics; and the JSON error body every refusal uses.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_nats::jetstream;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use tokio::sync::{watch, Semaphore};

use super::metrics::ApiMetrics;
use crate::config::api::ApiConfig;
use crate::config::SinkSpec;
use crate::jobs::client::ClientError;

/// A sink the API serves.
pub(super) struct Served {
    pub(super) spec: SinkSpec,
    /// The subject its jobs are published on, or why it has none.
    pub(super) subject: Result<String, ClientError>,
}

/// What the handlers share.
#[derive(Clone)]
pub struct ApiState(pub(super) Arc<Inner>);

pub(super) struct Inner {
    pub(super) js: jetstream::Context,
    pub(super) cfg: ApiConfig,
    pub(super) sinks: BTreeMap<String, Served>,
    pub(super) token: Option<[u8; 32]>,
    pub(super) waits: Arc<Semaphore>,
    pub(super) metrics: ApiMetrics,
    pub(super) shutdown: watch::Receiver<bool>,
}

impl ApiState {
    /// The state of an API over `sinks`, publishing and waiting through `js`.
    pub fn new(
        cfg: ApiConfig,
        sinks: &[SinkSpec],
        js: jetstream::Context,
        token: Option<[u8; 32]>,
        metrics: ApiMetrics,
        shutdown: watch::Receiver<bool>,
    ) -> ApiState {
        let sinks = sinks
            .iter()
            .map(|s| {
                metrics.init_sink(&s.name);
                let served = Served {
                    subject: crate::jobs::client::job_subject(s, None),
                    spec: s.clone(),
                };
                (s.name.clone(), served)
            })
            .collect();
        ApiState(Arc::new(Inner {
            js,
            waits: Arc::new(Semaphore::new(cfg.max_waiting)),
            cfg,
            sinks,
            token,
            metrics,
            shutdown,
        }))
    }
}

/// A JSON error body `{error, ...extra}` with `status`.
pub(super) fn error(status: StatusCode, code: &str, extra: serde_json::Value) -> Response {
    let mut body = json!({ "error": code });
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    (status, Json(body)).into_response()
}

/// 413 with a JSON body.
pub(super) fn too_large() -> Response {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        json!({"message": "the body is larger than api.max_body_bytes"}),
    )
}
