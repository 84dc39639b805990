//! The `http` destination's settings and their checks. Nothing here reads a secret: secret
//! headers name an environment variable or a file, read when the sink opens, so `validate`
//! and the start-up log can never print one.

use std::collections::BTreeMap;

use reqwest::header::{HeaderName, HeaderValue};
use reqwest::Url;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::sinks::settings::{
    connect_within_request, out_of_range, DestinationSettings, NamedPath,
};

/// The `http` destination: every batch (or every message) is sent to one URL, and
/// committed when the endpoint answers 2xx.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// The endpoint, `https://host[:port]/path`. `http://` only with
    /// `allow_insecure_http: true`. No user or password in the URL: use `secret_headers`.
    pub url: String,
    /// `post` (default) or `put`.
    #[serde(default)]
    pub method: HttpMethod,
    /// `batch` (default): one request per batch. `message`: one request per message, up to
    /// `concurrency` at a time.
    #[serde(default)]
    pub mode: HttpMode,
    /// Body of a batch request: `ndjson` (default; one record per line,
    /// `application/x-ndjson`) or `json_array` (`application/json`). Batch mode only.
    #[serde(default)]
    pub batch_format: BatchFormat,
    /// Requests in flight at once in `message` mode, 1 – 256. Default 16.
    #[serde(default = "default_concurrency")]
    pub concurrency: u32,
    /// Allow a plain `http://` URL: messages and headers travel unencrypted. Default false.
    #[serde(default)]
    pub allow_insecure_http: bool,
    /// TLS settings for an `https://` URL. Default: the system's roots, no client
    /// certificate.
    #[serde(default)]
    pub tls: HttpTlsConfig,
    /// Headers sent with every request, name → value. Not for secrets: these are printed
    /// by `validate`. `Content-Type`, `Content-Length`, `Host`, `Transfer-Encoding`,
    /// `Connection` and the idempotency header are set by jetsink.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Headers whose values are secrets (`Authorization`, API keys), name → where the value
    /// is: `{"env": "VAR"}` or `{"file": "/path"}` (one trailing newline ignored). Read when
    /// the sink opens; never logged or printed.
    #[serde(default)]
    pub secret_headers: BTreeMap<String, SecretSource>,
    /// Name of the header carrying the idempotency key. Default `Idempotency-Key`.
    #[serde(default = "default_idempotency_header")]
    pub idempotency_header: String,
    /// How long opening a connection (TCP and TLS) may take, in milliseconds, 100 – 600000.
    /// Default 5000.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// How long a whole request may take (connect, send, answer, body), in milliseconds,
    /// 100 – 3600000. Default 30000. A request that outlasts it is a transient failure.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// Most bytes of a response body read, 0 – 16777216. Default 65536. The rest is not
    /// read (the connection is then not reused).
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: u64,
    /// Longest `Retry-After` honoured, in milliseconds, 0 – 600000. Default 60000. A longer
    /// one is cut to this; 0 ignores `Retry-After` (the retry backoff alone applies).
    #[serde(default = "default_retry_after_max_ms")]
    pub retry_after_max_ms: u64,
}

/// The request method.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HttpMethod {
    /// `POST`.
    #[default]
    Post,
    /// `PUT`.
    Put,
}

impl HttpMethod {
    /// The method as sent.
    pub fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Post => "POST",
            HttpMethod::Put => "PUT",
        }
    }
}

/// One request per batch or per message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HttpMode {
    /// One request per batch.
    #[default]
    Batch,
    /// One request per message, several at a time.
    Message,
}

/// The body of a batch request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BatchFormat {
    /// One JSON record per line.
    #[default]
    Ndjson,
    /// One JSON array of records.
    JsonArray,
}

/// TLS towards the endpoint (rustls).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpTlsConfig {
    /// PEM file of the certificate authorities to trust instead of the system's roots.
    #[serde(default)]
    pub ca_file: Option<String>,
    /// PEM file of the client certificate (chain), with `client_key_file`.
    #[serde(default)]
    pub client_cert_file: Option<String>,
    /// PEM file of the client certificate's private key, with `client_cert_file`.
    #[serde(default)]
    pub client_key_file: Option<String>,
}

/// Where a secret header's value is.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretSource {
    /// Environment variable holding the value.
    #[serde(default)]
    pub env: Option<String>,
    /// File holding the value (one trailing newline ignored).
    #[serde(default)]
    pub file: Option<String>,
}

/// Headers jetsink sets itself, refused in `headers` and `secret_headers`.
const RESERVED: [&str; 5] = [
    "content-type",
    "content-length",
    "host",
    "transfer-encoding",
    "connection",
];

impl HttpConfig {
    /// The URL without query or fragment (which may carry a token), for logs and errors.
    pub fn endpoint(&self) -> String {
        match Url::parse(&self.url) {
            Ok(u) => format!(
                "{}://{}{}{}",
                u.scheme(),
                u.host_str().unwrap_or(""),
                u.port().map(|p| format!(":{p}")).unwrap_or_default(),
                u.path()
            ),
            Err(_) => "(invalid url)".into(),
        }
    }

    fn url_problems(&self, out: &mut Vec<(String, String)>) {
        let url = match Url::parse(&self.url) {
            Ok(u) => u,
            Err(e) => {
                out.push(("url".into(), format!("not a URL: {e}")));
                return;
            }
        };
        match url.scheme() {
            "https" => {}
            "http" if self.allow_insecure_http => {}
            "http" => out.push((
                "url".into(),
                "is plain http: use https, or set `allow_insecure_http: true` to send unencrypted"
                    .into(),
            )),
            other => out.push((
                "url".into(),
                format!("scheme must be https (or http), got {other:?}"),
            )),
        }
        if url.host_str().is_none_or(str::is_empty) {
            out.push(("url".into(), "has no host".into()));
        }
        if !url.username().is_empty() || url.password().is_some() {
            out.push((
                "url".into(),
                "must not contain a user or password: use `secret_headers`".into(),
            ));
        }
        if url.scheme() == "http" && self.tls_given() {
            out.push(("tls".into(), "applies to https URLs only".into()));
        }
    }

    fn tls_given(&self) -> bool {
        self.tls.ca_file.is_some()
            || self.tls.client_cert_file.is_some()
            || self.tls.client_key_file.is_some()
    }
}

impl DestinationSettings for HttpConfig {
    fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        self.url_problems(&mut out);
        for (key, path) in [
            ("tls.ca_file", &self.tls.ca_file),
            ("tls.client_cert_file", &self.tls.client_cert_file),
            ("tls.client_key_file", &self.tls.client_key_file),
        ] {
            if path.as_deref().is_some_and(|p| p.trim().is_empty()) {
                out.push((key.into(), "must not be empty".into()));
            }
        }
        if self.tls.client_cert_file.is_some() != self.tls.client_key_file.is_some() {
            out.push((
                "tls".into(),
                "give both `client_cert_file` and `client_key_file`, or neither".into(),
            ));
        }
        let idem = HeaderName::from_bytes(self.idempotency_header.as_bytes());
        match &idem {
            Err(_) => out.push((
                "idempotency_header".into(),
                format!("not a valid header name: {:?}", self.idempotency_header),
            )),
            Ok(n) if RESERVED.contains(&n.as_str()) => out.push((
                "idempotency_header".into(),
                format!("{:?} is set by jetsink", self.idempotency_header),
            )),
            Ok(_) => {}
        }
        let idem = idem.ok();
        let reserved = |n: &HeaderName| RESERVED.contains(&n.as_str()) || Some(n) == idem.as_ref();
        for (name, value) in &self.headers {
            let key = format!("headers.{name}");
            match HeaderName::from_bytes(name.as_bytes()) {
                Err(_) => out.push((key.clone(), "not a valid header name".into())),
                Ok(n) if reserved(&n) => {
                    out.push((key.clone(), "is set by jetsink; remove it".into()))
                }
                Ok(_) => {}
            }
            if HeaderValue::from_str(value).is_err() {
                out.push((
                    key,
                    "value must be visible ASCII, spaces or tabs (no line breaks)".into(),
                ));
            }
        }
        for (name, source) in &self.secret_headers {
            let key = format!("secret_headers.{name}");
            match HeaderName::from_bytes(name.as_bytes()) {
                Err(_) => out.push((key.clone(), "not a valid header name".into())),
                Ok(n) if reserved(&n) => {
                    out.push((key.clone(), "is set by jetsink; remove it".into()))
                }
                Ok(n) => {
                    let twice = self
                        .headers
                        .keys()
                        .any(|h| HeaderName::from_bytes(h.as_bytes()).ok().as_ref() == Some(&n));
                    if twice {
                        out.push((key.clone(), "is also in `headers`; give it once".into()));
                    }
                }
            }
            match (&source.env, &source.file) {
                (Some(_), Some(_)) | (None, None) => out.push((
                    key,
                    "give exactly one of `env` (a variable name) or `file` (a path)".into(),
                )),
                (Some(v), None) if v.is_empty() => {
                    out.push((format!("{key}.env"), "must name a variable".into()))
                }
                (None, Some(f)) if f.trim().is_empty() => {
                    out.push((format!("{key}.file"), "must not be empty".into()))
                }
                _ => {}
            }
        }
        if !(1..=256).contains(&self.concurrency) {
            out.push((
                "concurrency".into(),
                format!("must be between 1 and 256, got {}", self.concurrency),
            ));
        }
        out_of_range(
            &mut out,
            &[
                ("connect_timeout_ms", self.connect_timeout_ms, 100, 600_000),
                (
                    "request_timeout_ms",
                    self.request_timeout_ms,
                    100,
                    3_600_000,
                ),
                ("max_response_bytes", self.max_response_bytes, 0, 16 << 20),
                ("retry_after_max_ms", self.retry_after_max_ms, 0, 600_000),
            ],
        );
        connect_within_request(&mut out, self.connect_timeout_ms, self.request_timeout_ms);
        out
    }

    /// The TLS files and secret header files are read.
    fn paths(&self) -> Vec<NamedPath> {
        let tls = &self.tls;
        let headers = self.secret_headers.iter().filter_map(|(name, source)| {
            NamedPath::read(&format!("secret_headers.{name}.file"), source.file.as_ref())
        });
        [
            NamedPath::read("tls.ca_file", tls.ca_file.as_ref()),
            NamedPath::read("tls.client_cert_file", tls.client_cert_file.as_ref()),
            NamedPath::read("tls.client_key_file", tls.client_key_file.as_ref()),
        ]
        .into_iter()
        .flatten()
        .chain(headers)
        .collect()
    }

    fn describe(&self) -> String {
        let shape = match self.mode {
            HttpMode::Batch => match self.batch_format {
                BatchFormat::Ndjson => "batch, ndjson".to_string(),
                BatchFormat::JsonArray => "batch, json_array".to_string(),
            },
            HttpMode::Message => format!("per message, concurrency {}", self.concurrency),
        };
        let names: Vec<&str> = self
            .headers
            .keys()
            .chain(self.secret_headers.keys())
            .map(String::as_str)
            .collect();
        format!(
            "http {} {} ({shape}; headers: {})",
            self.method.as_str(),
            self.endpoint(),
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        )
    }

    fn target(&self) -> String {
        format!("http:{} {}", self.method.as_str(), self.endpoint())
    }
}

fn default_concurrency() -> u32 {
    16
}
fn default_idempotency_header() -> String {
    "Idempotency-Key".into()
}
fn default_connect_timeout_ms() -> u64 {
    5_000
}
fn default_request_timeout_ms() -> u64 {
    30_000
}
fn default_max_response_bytes() -> u64 {
    64 * 1024
}
fn default_retry_after_max_ms() -> u64 {
    60_000
}
