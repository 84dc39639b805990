//! The OTLP/HTTP exporter's client: jetsink's one `reqwest` client, driven on the daemon's
//! tokio runtime.
//!
//! The exporter runs on the batch processor's own thread, outside the runtime, while
//! `reqwest` needs the runtime's reactor; so each request is spawned onto the runtime and
//! only its result is awaited on that thread. This also keeps a second `reqwest` (the
//! exporter's own is a newer major version) out of the build.

use bytes::Bytes;
use http::{Request, Response};
use opentelemetry_http::{HttpClient, HttpError};
use tokio::runtime::Handle;

/// Longest response body read from a collector (its answer is a small protobuf message).
const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// A `reqwest` client bound to the runtime it was made on.
#[derive(Debug, Clone)]
pub(super) struct RuntimeClient {
    client: reqwest::Client,
    runtime: Handle,
}

impl RuntimeClient {
    /// A client for the current runtime; `timeout` bounds each request whole.
    pub(super) fn new(timeout: std::time::Duration) -> Result<RuntimeClient, reqwest::Error> {
        Ok(RuntimeClient {
            client: reqwest::Client::builder().timeout(timeout).build()?,
            runtime: Handle::current(),
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for RuntimeClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let sent = self.runtime.spawn(async move {
            let (parts, body) = request.into_parts();
            let mut req = client.request(parts.method, parts.uri.to_string());
            for (name, value) in &parts.headers {
                req = req.header(name.as_str(), value.as_bytes());
            }
            let response = req.body(body).send().await?;
            let status = response.status().as_u16();
            let body = match crate::files::body::read(
                response,
                MAX_RESPONSE_BYTES,
                crate::files::body::Over::Cut,
            )
            .await
            {
                Ok(body) => body,
                Err(crate::files::body::BodyError::Read(e)) => return Err(e),
                // Cut, never refused.
                Err(crate::files::body::BodyError::TooLarge { .. }) => Vec::new(),
            };
            Ok::<_, reqwest::Error>((status, body))
        });
        let (status, body) = sent.await??;
        Ok(Response::builder().status(status).body(Bytes::from(body))?)
    }
}
