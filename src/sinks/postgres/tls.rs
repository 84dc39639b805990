//! The rustls client configuration for `tls.enabled`: which servers to trust and, for
//! PostgreSQL `cert` authentication, the client certificate to present.
//!
//! Files are read at every connect, so a renewed certificate is picked up by the next
//! reconnect without a restart. Messages name the config field and the file's path, never
//! what the key file holds: a PEM parser's error can quote a line of the file, so key
//! errors are reduced to their kind.

use crate::sinks::contract::SinkError;
use crate::sinks::database::config::DatabaseTlsConfig;
use crate::sinks::database::tls_files::{certificates, client_config};

/// The rustls client configuration: the CA file's certificates (or the system's roots),
/// and the client certificate when `cert_file` and `key_file` are set.
pub(super) fn tls_config(tls: &DatabaseTlsConfig) -> Result<rustls::ClientConfig, SinkError> {
    client_config(tls, roots(tls.ca_file.as_deref())?)
}

/// The certificate authorities to trust: `ca_file`'s, or the system's.
fn roots(ca_file: Option<&str>) -> Result<rustls::RootCertStore, SinkError> {
    let bad = |message: String| SinkError::Misconfigured { message };
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            for cert in certificates("tls.ca_file", path)? {
                roots
                    .add(cert)
                    .map_err(|e| bad(format!("tls.ca_file {path}: {e}")))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err(bad(
                    "tls: no system root certificates found; set tls.ca_file".to_string(),
                ));
            }
        }
    }
    Ok(roots)
}
