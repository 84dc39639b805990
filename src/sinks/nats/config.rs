//! The NATS republish destination's settings and their checks.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::template::Template;
use crate::shared::names::is_valid_name;
use crate::shared::nats_security::{NatsAuth, NatsConfig, SecretSource};
use crate::shared::server_url;
use crate::sinks::settings::{BatchLimit, DestinationSettings, NamedPath};

/// A JetStream stream on the same or another NATS server, fed one copy of each message.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NatsRepublishConfig {
    /// Server URLs of the target, tried in order. The destination opens its own
    /// connection even when these are the source's servers, so a fault on one side cannot
    /// drop the other. Credentials never go in a URL.
    pub servers: Vec<String>,
    /// The target stream. It must exist at start-up (exit 78 otherwise) and capture the
    /// subjects the template makes; its duplicate window must be longer than a message
    /// can take to be redelivered, since that window is what absorbs the copies a
    /// redelivery publishes again.
    pub stream: String,
    /// Subject template of each copy: literal text with `{subject}` (the source subject),
    /// `{sink}` (this sink's name) and `{token[i]}` (token `i`, from 0, of the source
    /// subject). Example `archive.{subject}`.
    pub subject: String,
    /// Client connection name, visible in the target server's connection list. Default
    /// `jetsink-republish`.
    #[serde(default = "default_name")]
    pub name: String,
    /// Time allowed for the first connection, in milliseconds. Default 5000.
    #[serde(default = "default_5000")]
    pub connect_timeout_ms: u64,
    /// How long the PubAcks of one batch may take, and the timeout of stream info
    /// requests, in milliseconds. A batch whose PubAcks do not all arrive in time is held
    /// and published again. Default 5000.
    #[serde(default = "default_5000")]
    pub request_timeout_ms: u64,
    /// Longest delay between reconnect attempts, in milliseconds. Default 5000.
    #[serde(default = "default_5000")]
    pub reconnect_delay_max_ms: u64,
    /// User name for password authentication.
    #[serde(default)]
    pub user: Option<String>,
    /// Name of the environment variable holding the password.
    #[serde(default)]
    pub password_env: Option<String>,
    /// Name of the environment variable holding an authentication token.
    #[serde(default)]
    pub token_env: Option<String>,
    /// Path of a NATS `.creds` file.
    #[serde(default)]
    pub creds_file: Option<String>,
    /// Publish each batch as one atomic batch (nats-server 2.12.1+, a target stream with
    /// `allow_atomic`): the target stores all of its copies or none. Needs
    /// `delivery.batch_size` at most 1000, the server's limit. Default false: each copy is
    /// published on its own.
    #[serde(default)]
    pub atomic: bool,
}

impl NatsRepublishConfig {
    /// The connection settings in the shape `nats::connect` takes, so the target
    /// connection gets the same authentication, reconnect jitter and logs as the source's.
    pub fn connection(&self) -> NatsConfig {
        NatsConfig {
            servers: self.servers.clone(),
            name: self.name.clone(),
            connect_timeout_ms: self.connect_timeout_ms,
            reconnect_delay_max_ms: self.reconnect_delay_max_ms,
            max_reconnects: None,
            request_timeout_ms: self.request_timeout_ms,
            auth: self.auth(),
            tls: None,
        }
    }
}

impl NatsRepublishConfig {
    /// The one authentication method the checks allowed (see `problems`).
    fn auth(&self) -> NatsAuth {
        if let Some(path) = &self.creds_file {
            return NatsAuth::CredsFile(PathBuf::from(path));
        }
        if let Some(var) = &self.token_env {
            return NatsAuth::Token(SecretSource::Env(var.clone()));
        }
        match (&self.user, &self.password_env) {
            (Some(user), Some(var)) => NatsAuth::UserPassword {
                user: user.clone(),
                password: SecretSource::Env(var.clone()),
            },
            _ => NatsAuth::None,
        }
    }
}

impl DestinationSettings for NatsRepublishConfig {
    fn problems(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        if self.servers.is_empty() {
            out.push(("servers".into(), "must list at least one server URL".into()));
        }
        for (i, s) in self.servers.iter().enumerate() {
            if server_url::has_credentials(s) {
                out.push((
                    format!("servers[{i}]"),
                    format!(
                        "credentials in a server URL are printed wherever the URL is ({}); use `user` with `password_env`, `token_env` or `creds_file`",
                        server_url::redacted(s)
                    ),
                ));
            } else if s.parse::<async_nats::ServerAddr>().is_err() {
                out.push((
                    format!("servers[{i}]"),
                    format!("not a NATS server URL: {s:?}"),
                ));
            }
        }
        if !is_valid_name(&self.stream) {
            out.push((
                "stream".into(),
                format!(
                    "not a valid stream name (1-255 characters without whitespace, `.`, `*`, `>`, `/`, `\\`): {:?}",
                    self.stream
                ),
            ));
        }
        if let Err(e) = Template::parse(&self.subject) {
            out.push(("subject".into(), format!("{e}, got {:?}", self.subject)));
        }
        if self.name.trim().is_empty() {
            out.push(("name".into(), "must not be empty".into()));
        }
        for (key, value) in [
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("request_timeout_ms", self.request_timeout_ms),
            ("reconnect_delay_max_ms", self.reconnect_delay_max_ms),
        ] {
            if !(100..=600_000).contains(&value) {
                out.push((
                    key.into(),
                    format!("must be between 100 and 600000, got {value}"),
                ));
            }
        }
        if self.password_env.is_some() && self.user.is_none() {
            out.push(("password_env".into(), "needs `user`".into()));
        }
        if self.user.is_some() && self.password_env.is_none() {
            out.push(("user".into(), "needs `password_env`".into()));
        }
        let methods = [
            self.password_env.is_some(),
            self.token_env.is_some(),
            self.creds_file.is_some(),
        ];
        if methods.iter().filter(|m| **m).count() > 1 {
            out.push((
                "password_env".into(),
                "choose one authentication method: password_env, token_env or creds_file".into(),
            ));
        }
        out
    }

    /// The credentials file is read.
    fn paths(&self) -> Vec<NamedPath> {
        NamedPath::read("creds_file", self.creds_file.as_ref())
            .into_iter()
            .collect()
    }

    fn describe(&self) -> String {
        format!(
            "nats republish to stream {} at {} (subject {})",
            self.stream,
            self.servers
                .iter()
                .map(|s| server_url::redacted(s))
                .collect::<Vec<_>>()
                .join(","),
            self.subject
        )
    }

    fn target(&self) -> String {
        let mut servers: Vec<String> = self
            .servers
            .iter()
            .map(|s| server_url::redacted(s))
            .collect();
        servers.sort();
        format!(
            "nats:{}/{}/{}",
            servers.join(","),
            self.stream,
            self.subject
        )
    }

    fn largest_batch(&self) -> Option<BatchLimit> {
        self.atomic.then_some(BatchLimit {
            messages: super::batch::MAX_ATOMIC_BATCH,
            key: "atomic",
            why: "publishes each batch as one atomic batch, which nats-server",
        })
    }
}

fn default_name() -> String {
    "jetsink-republish".into()
}
fn default_5000() -> u64 {
    5_000
}
