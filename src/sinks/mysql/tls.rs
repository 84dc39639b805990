//! TLS towards MySQL/MariaDB: the driver's [`SslOpts`] from `tls`, with the files checked
//! first.
//!
//! The driver reads the CA, certificate and key files itself at every connect, and its
//! error for a file it cannot use is vague (`no key found`, a bare I/O error) and would
//! surface as an unreachable server. Reading them here first turns each mistake into a
//! configuration error naming the key (`tls.key_file`) and the path; the key's content is
//! never put in a message. The files are still handed over as paths, so a rotated
//! certificate is picked up at the next connect.

use std::path::PathBuf;

use mysql_async::{ClientIdentity, SslOpts};

use crate::sinks::contract::SinkError;
use crate::sinks::database::config::DatabaseTlsConfig;
use crate::sinks::database::tls_files::{certificates, client_config};

/// The driver's TLS options: server certificate and host name always verified, against
/// `ca_file` alone when it is given (the bundled web PKI roots otherwise), and the client
/// certificate when `cert_file`/`key_file` are given.
pub(super) fn ssl_opts(tls: &DatabaseTlsConfig) -> Result<SslOpts, SinkError> {
    let mut ssl = SslOpts::default();
    if let Some(ca) = &tls.ca_file {
        certificates("tls.ca_file", ca)?;
        // A private CA is the only one trusted: a public CA's certificate for the same
        // name must not be accepted instead.
        ssl = ssl
            .with_root_certs(vec![PathBuf::from(ca).into()])
            .with_disable_built_in_roots(true);
    }
    if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
        // The certificate holds a chain, the key a key, and they belong together (rustls
        // would refuse a key of another certificate only at the handshake).
        client_config(tls, rustls::RootCertStore::empty())?;
        ssl = ssl.with_client_identity(Some(ClientIdentity::new(
            PathBuf::from(cert).into(),
            PathBuf::from(key).into(),
        )));
    }
    Ok(ssl)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &std::path::Path, cert: &str, key: &str) -> DatabaseTlsConfig {
        let write = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).expect("write");
            p.display().to_string()
        };
        DatabaseTlsConfig {
            enabled: true,
            ca_file: None,
            cert_file: Some(write("cert.pem", cert)),
            key_file: Some(write("key.pem", key)),
        }
    }

    fn message(result: Result<SslOpts, SinkError>) -> String {
        match result {
            Err(SinkError::Misconfigured { message }) => message,
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    fn self_signed() -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("key");
        let params = rcgen::CertificateParams::new(vec!["jetsink".to_string()]).expect("params");
        let cert = params.self_signed(&key).expect("cert");
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn a_matching_certificate_and_key_become_the_client_identity() {
        let dir = tempfile::tempdir().expect("dir");
        let (cert, key) = self_signed();
        let ssl = ssl_opts(&config(dir.path(), &cert, &key)).expect("usable identity");
        assert!(ssl.client_identity().is_some());
        assert!(!ssl.skip_domain_validation() && !ssl.accept_invalid_certs());
    }

    #[test]
    fn a_key_file_without_a_key_is_named_without_its_content() {
        let dir = tempfile::tempdir().expect("dir");
        let (cert, _) = self_signed();
        let tls = config(dir.path(), &cert, "S3CRET-NOT-A-KEY\n");
        let m = message(ssl_opts(&tls));
        assert!(m.contains("tls.key_file"), "{m}");
        assert!(m.contains(tls.key_file.as_deref().unwrap_or("?")), "{m}");
        assert!(!m.contains("S3CRET"), "{m}");
    }

    #[test]
    fn a_key_of_another_certificate_is_refused_naming_both_files() {
        let dir = tempfile::tempdir().expect("dir");
        let (cert, _) = self_signed();
        let (_, other_key) = self_signed();
        let m = message(ssl_opts(&config(dir.path(), &cert, &other_key)));
        assert!(
            m.contains("tls.key_file") && m.contains("tls.cert_file"),
            "{m}"
        );
        assert!(!m.contains("PRIVATE KEY"), "{m}");
    }

    #[test]
    fn unreadable_and_empty_files_name_their_key_and_path() {
        let dir = tempfile::tempdir().expect("dir");
        let (_, key) = self_signed();
        let tls = config(dir.path(), "not a certificate\n", &key);
        let m = message(ssl_opts(&tls));
        assert!(
            m.contains("tls.cert_file") && m.contains("holds no PEM certificate"),
            "{m}"
        );
        let tls = DatabaseTlsConfig {
            ca_file: Some("/nonexistent/jetsink/ca.pem".into()),
            ..tls
        };
        let m = message(ssl_opts(&tls));
        assert!(
            m.contains("tls.ca_file: cannot read /nonexistent/jetsink/ca.pem"),
            "{m}"
        );
    }
}
