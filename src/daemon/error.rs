//! Why the daemon would not start, or stopped with an error. Each failure carries what it
//! is about (a sink, a setting's JSON path) and its kind, from which the exit code follows:
//! the service manager and the operator read the same verdict.

use crate::api::ApiError;
use crate::nats::own_stream::CreateStreamFailed;
use crate::nats::{BindError, ConnectError};
use crate::sinks::SinkError;

/// Who is at fault, which decides the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The configuration cannot work (exit 78): restarting will not help.
    Config,
    /// NATS or a destination is not reachable, or refused a request (exit 69): a restart
    /// may, once it is back.
    Unavailable,
    /// Anything else (exit 1).
    Failure,
}

/// One failure of the daemon, named by the phase it happened in.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// A NATS connection could not be opened.
    #[error(transparent)]
    Connect(ConnectError),
    /// The server has no JetStream.
    #[error("NATS server {server} ({version}) has JetStream disabled; start it with -js")]
    NoJetStream {
        /// The server's name.
        server: String,
        /// Its version.
        version: String,
    },
    /// An HTTP listener could not bind its address.
    #[error("{setting}: cannot listen on {address}: {source}")]
    Listen {
        /// `http.listen` or `api.listen`.
        setting: &'static str,
        /// The configured address.
        address: String,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// The job API's token cannot be read.
    #[error(transparent)]
    ApiToken(ApiError),
    /// The job API's metric families could not be registered (two with one name: a bug).
    #[error(transparent)]
    ApiMetrics(#[from] crate::api::metrics::RegisterError),
    /// The backlog gauges could not be registered (a bug, too).
    #[error(transparent)]
    BacklogMetrics(#[from] crate::nats::backlog::RegisterError),
    /// A sink's stream or consumer could not be bound.
    #[error(transparent)]
    Bind(BindError),
    /// A live consumer cannot carry what the sink holds unacknowledged.
    #[error("{}", refusals.join("; "))]
    Capacity {
        /// The sink.
        sink: String,
        /// Each refusal, naming its settings.
        refusals: Vec<String>,
    },
    /// A destination could not be opened.
    #[error("sink {sink}: cannot open destination {destination}: {source}")]
    Open {
        /// The sink.
        sink: String,
        /// The destination, described without secrets.
        destination: String,
        /// The JSON path of the destination object.
        setting: String,
        /// What the destination said.
        #[source]
        source: SinkError,
    },
    /// The dead-letter or results stream could not be created.
    #[error(transparent)]
    OwnStream(Box<CreateStreamFailed>),
    /// A sink's loop panicked; the others were stopped.
    #[error("sink {sink}: its loop panicked: {message}")]
    Panicked {
        /// The sink.
        sink: String,
        /// The panic.
        message: String,
    },
    /// A client stopped reconnecting (`nats.max_reconnects`).
    #[error("NATS connection {label} closed for good: the client stopped reconnecting after nats.max_reconnects attempts")]
    ConnectionGone {
        /// The connection.
        label: String,
    },
    /// The trace exporter (`telemetry.otlp`) could not be set up.
    #[error(transparent)]
    Telemetry(#[from] crate::telemetry::TelemetryError),
    /// The runners did not settle within the largest `shutdown_timeout_ms` plus 5 s.
    #[error("shutdown did not finish in time; unacked messages will be redelivered")]
    ShutdownTimeout,
}

impl DaemonError {
    /// Who is at fault.
    pub fn kind(&self) -> Kind {
        match self {
            DaemonError::Connect(ConnectError::Credentials { .. })
            | DaemonError::ApiToken(_)
            | DaemonError::Telemetry(_)
            | DaemonError::Capacity { .. } => Kind::Config,
            DaemonError::Bind(e) if e.is_config() => Kind::Config,
            DaemonError::Open {
                source: SinkError::Misconfigured { .. },
                ..
            } => Kind::Config,
            DaemonError::Connect(_)
            | DaemonError::NoJetStream { .. }
            | DaemonError::Listen { .. }
            | DaemonError::Bind(_)
            | DaemonError::Open { .. }
            | DaemonError::OwnStream(_)
            | DaemonError::ConnectionGone { .. } => Kind::Unavailable,
            DaemonError::ApiMetrics(_)
            | DaemonError::BacklogMetrics(_)
            | DaemonError::Panicked { .. }
            | DaemonError::ShutdownTimeout => Kind::Failure,
        }
    }

    /// The sink the failure is about, if one.
    pub fn sink(&self) -> Option<&str> {
        match self {
            DaemonError::Capacity { sink, .. }
            | DaemonError::Open { sink, .. }
            | DaemonError::Panicked { sink, .. } => Some(sink),
            DaemonError::Bind(e) => Some(e.sink()),
            DaemonError::OwnStream(e) => Some(&e.sink),
            _ => None,
        }
    }

    /// The JSON path of the setting to look at, if one.
    pub fn setting(&self) -> Option<String> {
        match self {
            DaemonError::Connect(ConnectError::Credentials { key, .. }) => {
                Some(format!("nats.{key}"))
            }
            DaemonError::Connect(_) => Some("nats.servers".into()),
            DaemonError::Listen { setting, .. } => Some((*setting).into()),
            DaemonError::ApiToken(ApiError::Token { key, .. }) => Some(format!("api.{key}")),
            DaemonError::Open { setting, .. } => Some(setting.clone()),
            DaemonError::OwnStream(e) => Some(e.setting.clone()),
            DaemonError::Telemetry(_) => Some("telemetry.otlp".into()),
            _ => None,
        }
    }

    /// The process exit code.
    pub fn exit_code(&self) -> u8 {
        match self.kind() {
            Kind::Config => crate::exit::CONFIG,
            Kind::Unavailable => crate::exit::UNAVAILABLE,
            Kind::Failure => crate::exit::FAILURE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_code_follows_the_kind() {
        let token = DaemonError::ApiToken(ApiError::Token {
            key: "token_file",
            message: "cannot read /x".into(),
        });
        assert_eq!(token.exit_code(), crate::exit::CONFIG);
        assert_eq!(token.setting().as_deref(), Some("api.token_file"));
        let listen = DaemonError::Listen {
            setting: "http.listen",
            address: "0.0.0.0:1".into(),
            source: std::io::Error::from(std::io::ErrorKind::AddrInUse),
        };
        assert_eq!(listen.exit_code(), crate::exit::UNAVAILABLE);
        assert!(listen
            .to_string()
            .starts_with("http.listen: cannot listen on 0.0.0.0:1"));
        let open = |source| DaemonError::Open {
            sink: "a".into(),
            destination: "file out".into(),
            setting: "sinks.a.destination".into(),
            source,
        };
        let misconfigured = open(SinkError::Misconfigured {
            message: "no such column".into(),
        });
        assert_eq!(misconfigured.exit_code(), crate::exit::CONFIG);
        assert_eq!(misconfigured.sink(), Some("a"));
        assert_eq!(
            open(SinkError::transient("refused")).exit_code(),
            crate::exit::UNAVAILABLE
        );
        let panicked = DaemonError::Panicked {
            sink: "audit".into(),
            message: "boom".into(),
        };
        assert_eq!(panicked.exit_code(), crate::exit::FAILURE);
        assert_eq!(
            DaemonError::ShutdownTimeout.exit_code(),
            crate::exit::FAILURE
        );
    }
}
