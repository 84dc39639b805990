//! Building the HTTP client from the settings: TLS roots and client certificate, timeouts,
//! the keep-alive pool, and the headers of every request — the secret ones read from their
//! environment variable or file here, marked sensitive, and never put in a message.
//!
//! Everything that can fail here is a setup mistake (a missing variable, an unreadable or
//! invalid PEM file), so it is `Misconfigured`: exit 78 at start-up.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Certificate, Client, Identity};

use super::config::HttpConfig;
use crate::files::Kind;
use crate::sinks::contract::SinkError;

/// The bytes of a file a TLS setting names, bounded by its kind.
fn read(path: &str, kind: Kind) -> Result<Vec<u8>, crate::files::FileError> {
    crate::files::read(std::path::Path::new(path), kind)
}

/// The client and the headers every request carries.
pub struct Prepared {
    /// The pooled client (keep-alive connections are reused across batches).
    pub client: Client,
    /// Static and secret headers.
    pub headers: HeaderMap,
    /// The idempotency header's name.
    pub idempotency: HeaderName,
}

fn misconfigured(message: String) -> SinkError {
    SinkError::Misconfigured { message }
}

/// Builds the client and the headers. Reads the files and variables the settings name.
pub fn prepare(c: &HttpConfig) -> Result<Prepared, SinkError> {
    let mut builder = Client::builder()
        .connect_timeout(Duration::from_millis(c.connect_timeout_ms))
        .timeout(Duration::from_millis(c.request_timeout_ms))
        .redirect(reqwest::redirect::Policy::none())
        .pool_idle_timeout(Duration::from_secs(60))
        .tcp_nodelay(true)
        .use_rustls_tls();
    if let Some(path) = &c.tls.ca_file {
        let pem = read(path, Kind::Certificates)
            .map_err(|e| misconfigured(format!("tls.ca_file: {e}")))?;
        let certs = Certificate::from_pem_bundle(&pem).map_err(|e| {
            misconfigured(format!(
                "tls.ca_file: {path} is not a PEM certificate bundle: {e}"
            ))
        })?;
        if certs.is_empty() {
            return Err(misconfigured(format!(
                "tls.ca_file: {path} holds no certificate"
            )));
        }
        builder = builder.tls_built_in_root_certs(false);
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
    }
    if let (Some(cert), Some(key)) = (&c.tls.client_cert_file, &c.tls.client_key_file) {
        let mut pem = read(cert, Kind::Certificates)
            .map_err(|e| misconfigured(format!("tls.client_cert_file: {e}")))?;
        pem.push(b'\n');
        pem.extend(
            read(key, Kind::PrivateKey)
                .map_err(|e| misconfigured(format!("tls.client_key_file: {e}")))?,
        );
        let identity = Identity::from_pem(&pem).map_err(|e| {
            misconfigured(format!(
                "tls.client_cert_file/client_key_file: {cert} and {key} are not a PEM certificate and key: {e}"
            ))
        })?;
        builder = builder.identity(identity);
    }
    let client = builder
        .build()
        .map_err(|e| misconfigured(format!("cannot build the HTTP client: {e}")))?;

    let mut headers = HeaderMap::new();
    for (name, value) in &c.headers {
        let n = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| misconfigured(format!("headers.{name}: not a valid header name")))?;
        let v = HeaderValue::from_str(value)
            .map_err(|_| misconfigured(format!("headers.{name}: not a valid header value")))?;
        headers.insert(n, v);
    }
    for (name, source) in &c.secret_headers {
        let key = format!("secret_headers.{name}");
        let n = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| misconfigured(format!("{key}: not a valid header name")))?;
        let text = read_secret(&key, source.env.as_deref(), source.file.as_deref())?;
        let mut v = HeaderValue::from_str(&text).map_err(|_| {
            misconfigured(format!(
                "{key}: the value is not a valid header value (visible ASCII, no line breaks)"
            ))
        })?;
        v.set_sensitive(true);
        headers.insert(n, v);
    }
    let idempotency = HeaderName::from_bytes(c.idempotency_header.as_bytes()).map_err(|_| {
        misconfigured(format!(
            "idempotency_header: not a valid header name: {:?}",
            c.idempotency_header
        ))
    })?;
    Ok(Prepared {
        client,
        headers,
        idempotency,
    })
}

/// A secret from the variable `env` or the file `file` (one trailing newline removed). The
/// error names the variable or file, never the content.
fn read_secret(key: &str, env: Option<&str>, file: Option<&str>) -> Result<String, SinkError> {
    if let Some(var) = env {
        return std::env::var(var).map_err(|_| {
            misconfigured(format!(
                "{key}.env: environment variable {var} is not set (or not UTF-8)"
            ))
        });
    }
    if let Some(path) = file {
        let text = crate::files::read_text(std::path::Path::new(path), Kind::Secret)
            .map_err(|e| misconfigured(format!("{key}.file: {e}")))?;
        let text = text.strip_suffix('\n').unwrap_or(&text);
        let text = text.strip_suffix('\r').unwrap_or(text);
        return Ok(text.to_string());
    }
    Err(misconfigured(format!(
        "{key}: give `env` or `file` for the value"
    )))
}
