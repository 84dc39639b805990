//! Reads the secrets and certificates a connection presents, before connecting.
//!
//! The client would read the same files itself, but only inside the connect attempt, where
//! a missing file, an empty token or a PEM file without a certificate comes back as a
//! connection failure (exit 69, "check the network"). Read first, they are configuration
//! errors (exit 78) that name the config key and the path. An error names where a secret
//! was looked for and why it was unusable, never the secret: no content of a secret file
//! ever reaches a message. The checks of what was read are pure functions of the bytes.

use std::path::Path;

use async_nats::rustls::pki_types::pem::PemObject;
use async_nats::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use async_nats::ConnectOptions;

use crate::shared::nats_security::{NatsAuth, NatsTls, SecretSource};

/// A secret or certificate named by the config that cannot be used; exit 78.
#[derive(Debug, thiserror::Error)]
#[error("nats.{key}: {message}")]
pub struct CredentialError {
    /// The config key that names it (`tls.ca_file`, `token_file`, ...).
    pub key: &'static str,
    /// What is wrong, with the path or variable name; never the content.
    pub message: String,
}

fn err(key: &'static str, message: String) -> CredentialError {
    CredentialError { key, message }
}

fn read_file(key: &'static str, path: &Path) -> Result<Vec<u8>, CredentialError> {
    crate::files::read(path, kind_of(key)).map_err(|e| err(key, e.to_string()))
}

/// The bound of the file a config key names.
fn kind_of(key: &str) -> crate::files::Kind {
    use crate::files::Kind;
    match key {
        "tls.ca_file" | "tls.cert_file" => Kind::Certificates,
        "tls.key_file" => Kind::PrivateKey,
        "creds_file" => Kind::Credentials,
        _ => Kind::Secret,
    }
}

/// A secret's text without the line break an editor or `echo` leaves after it; `None`
/// when nothing is left or it is not UTF-8.
pub fn secret_text(bytes: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(bytes).ok()?;
    let text = text.strip_suffix('\n').unwrap_or(text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    (!text.is_empty()).then(|| text.to_string())
}

fn secret(
    key_env: &'static str,
    key_file: &'static str,
    source: &SecretSource,
) -> Result<String, CredentialError> {
    match source {
        SecretSource::Env(var) => match std::env::var(var) {
            Ok(v) if !v.is_empty() => Ok(v),
            Ok(_) => Err(err(key_env, format!("environment variable {var} is empty"))),
            Err(_) => Err(err(
                key_env,
                format!("environment variable {var} is not set"),
            )),
        },
        SecretSource::File(path) => secret_text(&read_file(key_file, path)?).ok_or_else(|| {
            err(
                key_file,
                format!("{} is empty or not UTF-8 text", path.display()),
            )
        }),
    }
}

/// Whether `bytes` hold at least one PEM certificate.
pub fn has_certificate(bytes: &[u8]) -> bool {
    let mut certs = CertificateDer::pem_slice_iter(bytes);
    matches!(certs.next(), Some(Ok(_))) && certs.all(|c| c.is_ok())
}

/// Whether `bytes` hold a PEM private key (PKCS#8, PKCS#1 or SEC1).
pub fn has_private_key(bytes: &[u8]) -> bool {
    PrivateKeyDer::from_pem_slice(bytes).is_ok()
}

/// The public key of an NKEY user seed, which the server's config lists; `None` when the
/// text is not a user seed (a public key, an account or server seed, a bad checksum).
pub fn nkey_user(seed: &str) -> Option<String> {
    let pair = nkeys::KeyPair::from_seed(seed.trim()).ok()?;
    let public = pair.public_key();
    public.starts_with('U').then_some(public)
}

fn pem_file(
    key: &'static str,
    path: &Path,
    what: &str,
    check: fn(&[u8]) -> bool,
) -> Result<(), CredentialError> {
    if check(&read_file(key, path)?) {
        Ok(())
    } else {
        Err(err(key, format!("{} holds no PEM {what}", path.display())))
    }
}

/// `opts` with the configured identity and TLS settings, every file read and checked.
/// Returns a secret-free description of the identity for the start-up log.
pub async fn apply(
    mut opts: ConnectOptions,
    auth: &NatsAuth,
    tls: Option<&NatsTls>,
) -> Result<(ConnectOptions, String), CredentialError> {
    let mut identity = auth.describe();
    match auth {
        NatsAuth::None => {}
        NatsAuth::UserPassword { user, password } => {
            let pw = secret("password_env", "password_file", password)?;
            opts = opts.user_and_password(user.clone(), pw);
        }
        NatsAuth::Token(source) => {
            opts = opts.token(secret("token_env", "token_file", source)?);
        }
        NatsAuth::NkeySeedFile(path) => {
            let text = secret_text(&read_file("nkey_seed_file", path)?).unwrap_or_default();
            let public = nkey_user(&text).ok_or_else(|| {
                err(
                    "nkey_seed_file",
                    format!(
                        "{} does not hold an NKEY user seed (one line starting with SU)",
                        path.display()
                    ),
                )
            })?;
            identity = format!("{identity} (user {public})");
            opts = opts.nkey(text.trim().to_string());
        }
        NatsAuth::CredsFile(path) => {
            read_file("creds_file", path)?;
            opts = opts
                .credentials_file(path)
                .await
                .map_err(|e| err("creds_file", format!("cannot use {}: {e}", path.display())))?;
        }
    }
    if let Some(t) = tls {
        if let Some(ca) = &t.ca_file {
            pem_file("tls.ca_file", ca, "certificate", has_certificate)?;
            opts = opts.add_root_certificates(ca.clone());
        }
        if let Some((cert, key)) = &t.client {
            pem_file("tls.cert_file", cert, "certificate", has_certificate)?;
            pem_file("tls.key_file", key, "private key", has_private_key)?;
            opts = opts.add_client_certificate(cert.clone(), key.clone());
        }
        opts = opts.require_tls(t.required);
        if t.handshake_first {
            opts = opts.tls_first();
        }
    }
    Ok((opts, identity))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_trailing_line_break_is_not_part_of_a_secret() {
        assert_eq!(secret_text(b"s3cret\n").as_deref(), Some("s3cret"));
        assert_eq!(secret_text(b"s3cret\r\n").as_deref(), Some("s3cret"));
        assert_eq!(secret_text(b" spaced \n").as_deref(), Some(" spaced "));
        assert_eq!(secret_text(b"\n"), None);
        assert_eq!(secret_text(b""), None);
        assert_eq!(secret_text(&[0xff, 0xfe]), None);
    }

    #[test]
    fn only_a_user_seed_is_an_nkey_user() {
        let user = nkeys::KeyPair::new_user();
        let seed = user.seed().unwrap();
        assert_eq!(nkey_user(&seed), Some(user.public_key()));
        assert_eq!(nkey_user(&format!("{seed}\n")), Some(user.public_key()));
        assert_eq!(
            nkey_user(&user.public_key()),
            None,
            "a public key is no seed"
        );
        let account = nkeys::KeyPair::new_account().seed().unwrap();
        assert_eq!(nkey_user(&account), None);
        assert_eq!(nkey_user("SUxxxx"), None);
    }

    #[test]
    fn pem_checks_find_certificates_and_keys() {
        assert!(!has_certificate(b""));
        assert!(!has_certificate(b"not a pem file"));
        assert!(!has_private_key(
            b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
        ));
        let cert = "-----BEGIN CERTIFICATE-----\nMAMCAQA=\n-----END CERTIFICATE-----\n";
        assert!(has_certificate(cert.as_bytes()));
        let key = "-----BEGIN PRIVATE KEY-----\nMAMCAQA=\n-----END PRIVATE KEY-----\n";
        assert!(has_private_key(key.as_bytes()));
        assert!(!has_certificate(key.as_bytes()));
    }

    #[test]
    fn errors_name_the_key_and_path_never_the_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "\n").unwrap();
        let e = secret("token_env", "token_file", &SecretSource::File(path.clone())).unwrap_err();
        assert_eq!(e.key, "token_file");
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        let missing = dir.path().join("absent");
        let e = secret(
            "token_env",
            "token_file",
            &SecretSource::File(missing.clone()),
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("nats.token_file: cannot read"),
            "{e}"
        );
        std::fs::write(&path, "S3CRETVALUE").unwrap();
        let e = pem_file("tls.ca_file", &path, "certificate", has_certificate).unwrap_err();
        assert!(!e.to_string().contains("S3CRETVALUE"), "{e}");
    }

    proptest! {
        #[test]
        fn any_bytes_are_answered_without_panicking(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            let _ = secret_text(&bytes);
            let _ = has_certificate(&bytes);
            let _ = has_private_key(&bytes);
            let _ = nkey_user(&String::from_utf8_lossy(&bytes));
        }

        #[test]
        fn a_secret_keeps_everything_but_one_final_line_break(s in "[ -~]{1,40}") {
            prop_assert_eq!(secret_text(format!("{s}\n").as_bytes()), Some(s.clone()));
            prop_assert_eq!(secret_text(s.as_bytes()), Some(s));
        }
    }
}
