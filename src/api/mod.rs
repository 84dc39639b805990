//! The synchronous HTTP job API (opt-in `api` section, docs/job-queue.md "HTTP API"):
//! `POST /v1/sinks/{sink}/jobs` publishes the body as a job and waits for its result,
//! `GET /v1/sinks/{sink}/jobs/{id}` reads a retained one.
//!
//! It has its own listener, not the `/metrics` one: its bearer token must not guard the
//! scrape and health endpoints, and it may face clients on other hosts while `/metrics`
//! stays local. It has its own NATS connection (`@api`), so a client's traffic shares no
//! fault domain with a sink's pulls and ACKs. The publish and the wait are
//! [`crate::jobs::client`], the code `jetsink submit` runs. Limits come from tower-http
//! (the body limit) and a semaphore (waits in progress); the token is compared in
//! constant time through `subtle`.

mod handlers;
pub mod metrics;
pub mod request;
mod state;

use std::net::SocketAddr;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower_http::limit::RequestBodyLimitLayer;

use crate::config::SecretSource;
pub use metrics::ApiMetrics;
use state::error;
pub use state::ApiState;

/// Why the API cannot start; exit 78.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The token named by the config cannot be read.
    #[error("api.{key}: {message}")]
    Token {
        /// `token_env` or `token_file`.
        key: &'static str,
        /// What is wrong, naming the variable or file, never the content.
        message: String,
    },
}

/// Reads the bearer token the config names. Its SHA-256 is kept, not the text, so
/// comparing a presented token costs the same whatever its length.
pub fn load_token(source: &SecretSource) -> Result<[u8; 32], ApiError> {
    let text = match source {
        SecretSource::Env(var) => match std::env::var(var) {
            Ok(v) if !v.is_empty() => v,
            Ok(_) => {
                return Err(ApiError::Token {
                    key: "token_env",
                    message: format!("environment variable {var} is empty"),
                })
            }
            Err(_) => {
                return Err(ApiError::Token {
                    key: "token_env",
                    message: format!("environment variable {var} is not set"),
                })
            }
        },
        SecretSource::File(path) => {
            let bytes = crate::files::read(path, crate::files::Kind::Secret).map_err(|e| {
                ApiError::Token {
                    key: "token_file",
                    message: e.to_string(),
                }
            })?;
            crate::nats::credentials::secret_text(&bytes).ok_or_else(|| ApiError::Token {
                key: "token_file",
                message: format!("{} is empty or not UTF-8 text", path.display()),
            })?
        }
    };
    Ok(digest(text.as_bytes()))
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Whether an `Authorization` header value carries the token whose digest is `want`:
/// the scheme `Bearer` in any case (RFC 7235 makes auth schemes case-insensitive), one or
/// more spaces, the token. Constant time in the token's content.
pub fn authorized(header: Option<&[u8]>, want: &[u8; 32]) -> bool {
    let Some(h) = header else { return false };
    let Some((scheme, rest)) = h.split_at_checked(6) else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case(b"bearer") || !rest.starts_with(b" ") {
        return false;
    }
    let given = rest.trim_ascii_start();
    digest(given).ct_eq(want).into()
}

/// The API's routes and layers.
pub fn router(state: ApiState) -> Router {
    let max_body = state.0.cfg.max_body_bytes;
    Router::new()
        .route("/v1/sinks/{sink}/jobs", post(handlers::submit))
        .route("/v1/sinks/{sink}/jobs/{id}", get(handlers::lookup))
        .fallback(handlers::no_route)
        // tower-http's limit replaces axum's default one (2 MiB) on every body.
        .layer(DefaultBodyLimit::disable())
        .layer(RequestBodyLimitLayer::new(max_body))
        .layer(middleware::from_fn(json_413))
        .layer(middleware::from_fn_with_state(state.clone(), authorize))
        .layer(middleware::from_fn_with_state(state.clone(), count))
        .with_state(state)
}

/// Serves until `shutdown` turns true, within the `api` section's connection limits
/// ([`crate::listener`]).
pub async fn serve(
    listener: TcpListener,
    state: ApiState,
    connections: Option<crate::listener::ListenerMetrics>,
    shutdown: watch::Receiver<bool>,
) {
    let limits = state.0.cfg.limits();
    if let Ok(a) = listener.local_addr() {
        let a: SocketAddr = a;
        tracing::info!(listen = %a, token = state.0.token.is_some(), max_connections = limits.max_connections, "job API listening (/v1/sinks/{{sink}}/jobs)");
    }
    let app = router(state);
    crate::listener::serve(listener, app, limits, "api", connections, shutdown).await;
}

/// 401 unless the request carries the token (when one is configured).
async fn authorize(State(s): State<ApiState>, req: Request, next: Next) -> Response {
    if let Some(want) = &s.0.token {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes);
        if !authorized(given, want) {
            let mut r = error(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                json!({"message": "missing or wrong bearer token (Authorization: Bearer <token>)"}),
            );
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return r;
        }
    }
    next.run(req).await
}

/// The body limit answers a declared oversize with a plain-text 413; make it JSON like
/// every other error.
async fn json_413(req: Request, next: Next) -> Response {
    let limit_hit = |r: &Response| {
        r.status() == StatusCode::PAYLOAD_TOO_LARGE
            && r.headers().get(header::CONTENT_TYPE)
                != Some(&HeaderValue::from_static("application/json"))
    };
    let r = next.run(req).await;
    if limit_hit(&r) {
        return state::too_large();
    }
    r
}

/// Counts every response by sink and status code.
async fn count(State(s): State<ApiState>, req: Request, next: Next) -> Response {
    let sink =
        request::sink_label(req.uri().path(), s.0.sinks.keys().map(String::as_str)).to_string();
    let r = next.run(req).await;
    s.0.metrics.responded(&sink, r.status().as_u16());
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_bearer_token_is_authorized() {
        let want = digest(b"s3cret");
        for good in [
            &b"Bearer s3cret"[..],
            b"bearer s3cret",
            b"BEARER s3cret",
            b"bEaReR s3cret",
            b"Bearer  s3cret",
        ] {
            assert!(authorized(Some(good), &want), "{good:?}");
        }
        for bad in [
            &b"Bearer s3cre"[..],
            b"Bearer s3cret ",
            b"Bearers3cret",
            b"Bearer\ts3cret",
            b"Basic s3cret",
            b"s3cret",
            b"Bearer ",
            b"Bearer",
            b"Beare",
        ] {
            assert!(!authorized(Some(bad), &want), "{bad:?}");
        }
        assert!(!authorized(None, &want));
    }

    #[test]
    fn a_token_file_loses_its_line_break_and_a_missing_one_names_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token");
        std::fs::write(&p, "abc\n").unwrap();
        assert_eq!(load_token(&SecretSource::File(p)).unwrap(), digest(b"abc"));
        let e = load_token(&SecretSource::File(dir.path().join("none"))).unwrap_err();
        assert!(
            e.to_string().starts_with("api.token_file: cannot read"),
            "{e}"
        );
        let e = load_token(&SecretSource::Env("JETSINK_TEST_UNSET_API_TOKEN".into())).unwrap_err();
        assert_eq!(
            e.to_string(),
            "api.token_env: environment variable JETSINK_TEST_UNSET_API_TOKEN is not set"
        );
    }
}
