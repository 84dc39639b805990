//! The TLS files of a database destination (`tls.ca_file`, `tls.cert_file`,
//! `tls.key_file`), read and checked the same way for every engine.
//!
//! Each mistake is a configuration error naming the key and the path. A key file's content
//! never appears in a message: a PEM parser's error can quote a line of the file, so key
//! errors are reduced to their kind. The files are read at every connect, so a renewed
//! certificate is picked up by the next reconnect without a restart.

use std::sync::Arc;

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::config::DatabaseTlsConfig;
use crate::sinks::contract::SinkError;

fn bad(message: String) -> SinkError {
    SinkError::Misconfigured { message }
}

/// Every PEM certificate in the file the config key `field` names; at least one.
pub(crate) fn certificates(
    field: &str,
    path: &str,
) -> Result<Vec<CertificateDer<'static>>, SinkError> {
    let text = crate::files::read(std::path::Path::new(path), crate::files::Kind::Certificates)
        .map_err(|e| bad(format!("{field}: {e}")))?;
    let certs = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("{field} {path}: {e}")))?;
    if certs.is_empty() {
        return Err(bad(format!("{field} {path} holds no PEM certificate")));
    }
    Ok(certs)
}

/// The client's private key: the first PKCS#8, PKCS#1 or SEC1 PEM key in `tls.key_file`.
pub(crate) fn private_key(path: &str) -> Result<PrivateKeyDer<'static>, SinkError> {
    let text = crate::files::read(std::path::Path::new(path), crate::files::Kind::PrivateKey)
        .map_err(|e| bad(format!("tls.key_file: {e}")))?;
    PrivateKeyDer::from_pem_slice(&text).map_err(|e| {
        let what = match e {
            _ if is_encrypted_key(&text) => {
                "holds an encrypted private key; jetsink reads unencrypted keys only \
                 (decrypt it with `openssl pkey -in KEY -out KEY.plain` and keep that file \
                 readable by jetsink's user alone)"
                    .to_string()
            }
            pem::Error::NoItemsFound => {
                "holds no PEM private key (PKCS#8, PKCS#1 or SEC1)".to_string()
            }
            other => format!("is not valid PEM ({})", pem_error_kind(&other)),
        };
        bad(format!("tls.key_file {path} {what}"))
    })
}

/// Whether the PEM text holds a password-protected key (PKCS#8 `ENCRYPTED PRIVATE KEY`, or
/// an OpenSSL legacy key with `Proc-Type: 4,ENCRYPTED`), which rustls skips as unknown.
/// Only the section labels are looked at, never the key.
fn is_encrypted_key(text: &[u8]) -> bool {
    let text = String::from_utf8_lossy(text);
    text.lines().any(|l| {
        let l = l.trim();
        l == "-----BEGIN ENCRYPTED PRIVATE KEY-----" || l == "Proc-Type: 4,ENCRYPTED"
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

/// A rustls client configuration trusting `roots`, presenting the client certificate when
/// `cert_file` and `key_file` are set. A key that does not belong to its certificate is
/// refused here, naming both files, instead of failing the handshake later.
pub(crate) fn client_config(
    tls: &DatabaseTlsConfig,
    roots: rustls::RootCertStore,
) -> Result<rustls::ClientConfig, SinkError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(format!("tls: {e}")))?
        .with_root_certificates(roots);
    match (&tls.cert_file, &tls.key_file) {
        (Some(cert_file), Some(key_file)) => {
            let chain = certificates("tls.cert_file", cert_file)?;
            let key = private_key(key_file)?;
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

/// Why the TLS session with the server failed, with the setting to check, when `err` is
/// a TLS failure: the client libraries report those as a bare I/O error.
pub(crate) fn handshake_failure(err: &(dyn std::error::Error + 'static)) -> Option<String> {
    let tls = rustls_error(err)?;
    let hint = match tls {
        rustls::Error::InvalidCertificate(_) => {
            "the server's certificate was not accepted: check tls.ca_file (the CA that \
             signed it) and that it names the host connected to"
        }
        rustls::Error::AlertReceived(_) => {
            "the server ended the handshake: check tls.cert_file (a certificate its CA \
             signed) and the server's TLS settings"
        }
        _ => "check the tls settings and the server's TLS settings",
    };
    Some(format!("TLS with the server failed ({tls}); {hint}"))
}

/// The rustls error somewhere in `err`'s chain. An `io::Error` hides the error it wraps
/// from `source()`, so it is looked into with `get_ref`.
fn rustls_error<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(inner) = e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            if let Some(tls) = inner.downcast_ref::<rustls::Error>() {
                return Some(tls);
            }
            current = Some(inner);
            continue;
        }
        current = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_error(text: &str) -> String {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("key.pem");
        std::fs::write(&path, text).expect("write");
        match private_key(&path.display().to_string()) {
            Err(SinkError::Misconfigured { message }) => message,
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    #[test]
    fn an_encrypted_key_is_named_as_such_without_its_content() {
        let pkcs8 = "-----BEGIN ENCRYPTED PRIVATE KEY-----\nU0VDUkVUQk9EWQ==\n-----END ENCRYPTED PRIVATE KEY-----\n";
        let m = key_error(pkcs8);
        assert!(
            m.contains("tls.key_file") && m.contains("encrypted private key"),
            "{m}"
        );
        assert!(!m.contains("U0VDUkVUQk9EWQ"), "{m}");
        let legacy = "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-256-CBC,00\n\nU0VDUkVU\n-----END RSA PRIVATE KEY-----\n";
        let m = key_error(legacy);
        assert!(m.contains("encrypted private key"), "{m}");
        assert!(!m.contains("U0VDUkVU"), "{m}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// Whatever a key file holds — a PEM-looking section with a body of any bytes, or
        /// free text — reading it never panics, and a refusal never quotes the file: the
        /// message has the path and the kind of problem, not a line of the key.
        #[test]
        fn a_refused_key_file_is_never_quoted(
            label in proptest::sample::select(vec![
                "PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY",
                "ENCRYPTED PRIVATE KEY", "CERTIFICATE", "NONSENSE",
            ]),
            secret in "[A-Za-z0-9+/=]{12,64}",
            junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            framed in proptest::prelude::any::<bool>(),
        ) {
            let mut text = Vec::new();
            if framed {
                text.extend_from_slice(format!("-----BEGIN {label}-----\n").as_bytes());
            }
            text.extend_from_slice(secret.as_bytes());
            text.push(b'\n');
            text.extend_from_slice(&junk);
            if framed {
                text.extend_from_slice(format!("\n-----END {label}-----\n").as_bytes());
            }
            let dir = tempfile::tempdir().expect("dir");
            let path = dir.path().join("key.pem");
            std::fs::write(&path, &text).expect("write");
            if let Err(e) = private_key(&path.display().to_string()) {
                let m = e.to_string();
                proptest::prop_assert!(m.contains("tls.key_file"), "{}", m);
                proptest::prop_assert!(!m.contains(&secret), "{}", m);
            }
        }
    }

    #[test]
    fn a_file_without_a_key_says_which_formats_are_read() {
        let m = key_error("just some text\n");
        assert!(
            m.contains("holds no PEM private key (PKCS#8, PKCS#1 or SEC1)"),
            "{m}"
        );
        assert!(!m.contains("just some text"), "{m}");
    }
}
