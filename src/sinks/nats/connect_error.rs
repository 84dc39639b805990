//! What a failed connection to the target server means for the destination: a secret the
//! config names that cannot be read, or an identity the server refuses, is misconfigured
//! (exit 78 at start-up: waiting does not fix it; held as misconfigured at a write);
//! anything else (refused, unreachable, a timeout) is transient, and at start-up the sink
//! waits for the server.

use crate::nats::connect::ConnectError;
use crate::sinks::contract::SinkError;

/// The class of a failed connection to the target server.
pub(super) fn classify(e: ConnectError) -> SinkError {
    match e {
        ConnectError::Credentials { key, message } => SinkError::Misconfigured {
            message: format!("destination.{key}: {message}"),
        },
        ConnectError::Unreachable { ref source, .. } if refused_identity(source) => {
            SinkError::Misconfigured {
                message: e.to_string(),
            }
        }
        other => SinkError::transient(other.to_string()),
    }
}

/// Whether the server refused the identity presented (a wrong user, password, token or
/// key), rather than being out of reach.
fn refused_identity(e: &async_nats::ConnectError) -> bool {
    use async_nats::ConnectErrorKind as K;
    matches!(e.kind(), K::AuthorizationViolation | K::Authentication)
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_nats::ConnectErrorKind as K;

    fn unreachable(kind: K) -> ConnectError {
        ConnectError::Unreachable {
            servers: "nats://127.0.0.1:4222".into(),
            identity: "user jetsink".into(),
            source: async_nats::ConnectError::new(kind),
            hint: "",
        }
    }

    #[test]
    fn a_refused_identity_is_misconfigured_and_an_unreachable_server_is_transient() {
        for kind in [K::AuthorizationViolation, K::Authentication] {
            let e = classify(unreachable(kind));
            assert!(matches!(e, SinkError::Misconfigured { .. }), "{e}");
        }
        for kind in [K::Io, K::TimedOut, K::Dns] {
            let e = classify(unreachable(kind));
            assert!(matches!(e, SinkError::Transient { .. }), "{e}");
        }
    }
}
