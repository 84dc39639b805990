//! The rustls client configuration for `tls.enabled`: which servers to trust and, for
//! PostgreSQL `cert` authentication, the client certificate to present.
//!
//! Files are read at every connect, so a renewed certificate is picked up by the next
//! reconnect without a restart. Messages name the config field and the file's path, never
//! what the key file holds: a PEM parser's error can quote a line of the file, so key
//! errors are reduced to their kind.

use std::sync::Arc;

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::sinks::database::config::DatabaseTlsConfig;
use crate::sinks::SinkError;

fn bad(message: String) -> SinkError {
    SinkError::Misconfigured { message }
}

/// The rustls client configuration: the CA file's certificates (or the system's roots),
/// and the client certificate when `cert_file` and `key_file` are set.
pub(super) fn tls_config(tls: &DatabaseTlsConfig) -> Result<rustls::ClientConfig, SinkError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(format!("tls: {e}")))?
        .with_root_certificates(roots(tls.ca_file.as_deref())?);
    match (&tls.cert_file, &tls.key_file) {
        (Some(cert_file), Some(key_file)) => {
            let chain = read_chain(cert_file)?;
            let key = read_key(key_file)?;
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                bad(format!(
                    "tls.key_file {key_file} does not fit tls.cert_file {cert_file}: {e}"
                ))
            })
        }
        // Config validation refuses one without the other.
        _ => Ok(builder.with_no_client_auth()),
    }
}

/// The certificate authorities to trust: `ca_file`'s, or the system's.
fn roots(ca_file: Option<&str>) -> Result<rustls::RootCertStore, SinkError> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            for cert in read_certs("tls.ca_file", path)? {
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

/// The client certificate chain, leaf first as the file lists it.
fn read_chain(path: &str) -> Result<Vec<CertificateDer<'static>>, SinkError> {
    read_certs("tls.cert_file", path)
}

/// Every PEM certificate in the file `field` names; at least one.
fn read_certs(field: &str, path: &str) -> Result<Vec<CertificateDer<'static>>, SinkError> {
    let text = std::fs::read(path).map_err(|e| bad(format!("{field}: cannot read {path}: {e}")))?;
    let certs = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("{field} {path}: {e}")))?;
    if certs.is_empty() {
        return Err(bad(format!("{field} {path} holds no PEM certificate")));
    }
    Ok(certs)
}

/// The client's private key: the first PKCS#8, PKCS#1 or SEC1 PEM key in the file.
fn read_key(path: &str) -> Result<PrivateKeyDer<'static>, SinkError> {
    let text =
        std::fs::read(path).map_err(|e| bad(format!("tls.key_file: cannot read {path}: {e}")))?;
    PrivateKeyDer::from_pem_slice(&text).map_err(|e| {
        let what = match e {
            pem::Error::NoItemsFound => {
                "holds no PEM private key (PKCS#8, PKCS#1 or SEC1)".to_string()
            }
            other => format!("is not valid PEM ({})", pem_error_kind(&other)),
        };
        bad(format!("tls.key_file {path} {what}"))
    })
}

/// What went wrong reading PEM, without the line of the file some errors quote.
fn pem_error_kind(e: &pem::Error) -> &'static str {
    match e {
        pem::Error::MissingSectionEnd { .. } => "a section has no END line",
        pem::Error::IllegalSectionStart { .. } => "a BEGIN line is malformed",
        pem::Error::Base64Decode(_) => "bad base64",
        pem::Error::SectionTooLarge => "a section is too large",
        _ => "unreadable",
    }
}
