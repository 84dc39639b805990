//! How jetsink proves who it is to NATS and how it checks who the server is: the
//! `nats.tls` section and the authentication keys of `nats`.
//!
//! The checks run offline and refuse every ambiguous combination: a client certificate
//! without its key, a user without a password (the server would reject the connection
//! anyway, but only after start-up was attempted), and more than one authentication method
//! (the client would send all of them and the server would pick one, so the config would
//! not say which identity is in use). Secrets are never held here, only where they live: an
//! environment variable's name or a file's path, which is also all `validate` shows. A leaf:
//! nothing from the rest of `config` but the issue collector.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Deserialize;

use super::issue::Issues;

/// The `nats.tls` section.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM file of the certificate authorities that sign the server's certificate. Absent:
    /// the system's roots.
    #[serde(default)]
    pub ca_file: Option<String>,
    /// PEM file of the client certificate, for servers that verify clients (mutual TLS).
    /// Needs `key_file`.
    #[serde(default)]
    pub cert_file: Option<String>,
    /// PEM file of the client certificate's private key. Needs `cert_file`.
    #[serde(default)]
    pub key_file: Option<String>,
    /// Refuse to connect without TLS, even to a server that does not ask for it, so a
    /// misconfigured server cannot make jetsink send credentials in clear text. Default
    /// true (a `tls` section means TLS); false lets a `nats://` server answer in clear.
    #[serde(default = "yes")]
    pub required: bool,
    /// Start the TLS handshake before the server's greeting, for servers configured with
    /// `handshake_first` (nats-server 2.10+): nothing crosses the network in clear, not
    /// even the server's INFO. Default false.
    #[serde(default)]
    pub handshake_first: bool,
}

fn yes() -> bool {
    true
}

/// TLS as the connection uses it, after validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsTls {
    /// Certificate authorities to trust instead of the system's roots.
    pub ca_file: Option<PathBuf>,
    /// Client certificate and its key, for mutual TLS.
    pub client: Option<(PathBuf, PathBuf)>,
    /// TLS even when the server does not ask for it.
    pub required: bool,
    /// TLS before the server's INFO.
    pub handshake_first: bool,
}

/// Where one secret lives; never the secret itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// An environment variable, by name.
    Env(String),
    /// A file, by path; its content without the trailing line break.
    File(PathBuf),
}

impl SecretSource {
    /// Where the secret is, without it.
    pub fn describe(&self) -> String {
        match self {
            SecretSource::Env(v) => format!("from environment variable {v}"),
            SecretSource::File(p) => format!("from file {}", p.display()),
        }
    }
}

/// The one authentication method a connection uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum NatsAuth {
    /// No credentials (the server allows anonymous clients).
    #[default]
    None,
    /// `nats.user` with its password.
    UserPassword {
        /// The user name.
        user: String,
        /// Where the password is.
        password: SecretSource,
    },
    /// A bearer token.
    Token(SecretSource),
    /// A file holding an NKEY user seed; the server knows the public key.
    NkeySeedFile(PathBuf),
    /// A `.creds` file (JWT and NKEY seed).
    CredsFile(PathBuf),
}

impl NatsAuth {
    /// A secret-free line for `validate` and the start-up log.
    pub fn describe(&self) -> String {
        match self {
            NatsAuth::None => "none".into(),
            NatsAuth::UserPassword { user, password } => {
                format!("user {user}, password {}", password.describe())
            }
            NatsAuth::Token(s) => format!("token {}", s.describe()),
            NatsAuth::NkeySeedFile(p) => format!("NKEY seed from file {}", p.display()),
            NatsAuth::CredsFile(p) => format!("credentials file {}", p.display()),
        }
    }
}

impl NatsTls {
    /// A secret-free line for `validate` and the start-up log.
    pub fn describe(&self) -> String {
        let mut parts = vec![match &self.ca_file {
            Some(p) => format!("CA {}", p.display()),
            None => "system roots".into(),
        }];
        if let Some((c, k)) = &self.client {
            parts.push(format!(
                "client certificate {} (key {})",
                c.display(),
                k.display()
            ));
        }
        parts.push(
            if self.required {
                "required"
            } else {
                "if the server offers it"
            }
            .into(),
        );
        if self.handshake_first {
            parts.push("handshake first".into());
        }
        parts.join(", ")
    }
}

/// The authentication keys of `nats`, as typed.
#[derive(Debug, Clone, Copy, Default)]
pub struct AuthKeys<'a> {
    /// `nats.user`.
    pub user: Option<&'a str>,
    /// `nats.password_env`.
    pub password_env: Option<&'a str>,
    /// `nats.password_file`.
    pub password_file: Option<&'a str>,
    /// `nats.token_env`.
    pub token_env: Option<&'a str>,
    /// `nats.token_file`.
    pub token_file: Option<&'a str>,
    /// `nats.nkey_seed_file`.
    pub nkey_seed_file: Option<&'a str>,
    /// `nats.creds_file`.
    pub creds_file: Option<&'a str>,
}

/// Refuses an empty or control-character path or variable name at `path`.
fn check_name(value: Option<&str>, path: &str, what: &str, issues: &mut Issues) {
    if let Some(v) = value {
        if v.trim().is_empty() || v.chars().any(char::is_control) {
            issues.push(
                path,
                format!("must be a non-empty {what} without control characters"),
            );
        }
    }
}

/// Checks the authentication keys and returns the one method they select.
pub(crate) fn check_auth(k: AuthKeys<'_>, issues: &mut Issues) -> NatsAuth {
    for (value, path, what) in [
        (k.user, "nats.user", "user name"),
        (k.password_env, "nats.password_env", "variable name"),
        (k.token_env, "nats.token_env", "variable name"),
        (k.password_file, "nats.password_file", "path"),
        (k.token_file, "nats.token_file", "path"),
        (k.nkey_seed_file, "nats.nkey_seed_file", "path"),
        (k.creds_file, "nats.creds_file", "path"),
    ] {
        check_name(value, path, what, issues);
    }
    if k.password_env.is_some() && k.password_file.is_some() {
        issues.push(
            "nats.password_file",
            "give the password in one place: `password_env` or `password_file`, not both",
        );
    }
    if k.token_env.is_some() && k.token_file.is_some() {
        issues.push(
            "nats.token_file",
            "give the token in one place: `token_env` or `token_file`, not both",
        );
    }
    let password = k
        .password_env
        .map(|v| SecretSource::Env(v.into()))
        .or(k.password_file.map(|p| SecretSource::File(p.into())));
    let token = k
        .token_env
        .map(|v| SecretSource::Env(v.into()))
        .or(k.token_file.map(|p| SecretSource::File(p.into())));
    match (k.user, &password) {
        (Some(_), None) => issues.push(
            "nats.user",
            "needs a password source: `nats.password_env` or `nats.password_file`",
        ),
        (None, Some(_)) => {
            let key = if k.password_env.is_some() {
                "nats.password_env"
            } else {
                "nats.password_file"
            };
            issues.push(key, "needs `nats.user`");
        }
        _ => {}
    }
    let mut methods = Vec::new();
    if k.user.is_some() || password.is_some() {
        methods.push("user + password");
    }
    if token.is_some() {
        methods.push("token");
    }
    if k.nkey_seed_file.is_some() {
        methods.push("nkey_seed_file");
    }
    if k.creds_file.is_some() {
        methods.push("creds_file");
    }
    if methods.len() > 1 {
        issues.push(
            "nats",
            format!(
                "choose one authentication method, got {}: the client would send them all and the config would not say which identity is used",
                methods.join(", ")
            ),
        );
    }
    match (k.user, password, token, k.nkey_seed_file, k.creds_file) {
        (Some(user), Some(password), ..) => NatsAuth::UserPassword {
            user: user.into(),
            password,
        },
        (_, _, Some(t), ..) => NatsAuth::Token(t),
        (_, _, _, Some(p), _) => NatsAuth::NkeySeedFile(p.into()),
        (_, _, _, _, Some(p)) => NatsAuth::CredsFile(p.into()),
        _ => NatsAuth::None,
    }
}

/// Checks `nats.tls` and returns what the connection uses.
pub(crate) fn check_tls(tls: Option<&TlsConfig>, issues: &mut Issues) -> Option<NatsTls> {
    let t = tls?;
    for (value, key) in [
        (&t.ca_file, "ca_file"),
        (&t.cert_file, "cert_file"),
        (&t.key_file, "key_file"),
    ] {
        check_name(value.as_deref(), &format!("nats.tls.{key}"), "path", issues);
    }
    match (&t.cert_file, &t.key_file) {
        (Some(_), None) => issues.push(
            "nats.tls.cert_file",
            "needs `nats.tls.key_file` (the client certificate's private key)",
        ),
        (None, Some(_)) => issues.push(
            "nats.tls.key_file",
            "needs `nats.tls.cert_file` (the certificate the key belongs to)",
        ),
        _ => {}
    }
    if t.handshake_first && !t.required {
        issues.push(
            "nats.tls.handshake_first",
            "needs `required: true`: a handshake before the server's greeting is TLS or nothing",
        );
    }
    Some(NatsTls {
        ca_file: t.ca_file.as_ref().map(PathBuf::from),
        client: match (&t.cert_file, &t.key_file) {
            (Some(c), Some(k)) => Some((c.into(), k.into())),
            _ => None,
        },
        required: t.required,
        handshake_first: t.handshake_first,
    })
}

/// The NATS connection settings every connection uses (one per sink or connection group).
#[derive(Debug, Clone)]
pub struct NatsConfig {
    /// Server URLs to try, in order.
    pub servers: Vec<String>,
    /// Client connection name, visible in the server's connection list.
    pub name: String,
    /// How long the first connect may take before start-up fails with exit 69.
    pub connect_timeout_ms: u64,
    /// Upper bound of the delay between reconnect attempts.
    pub reconnect_delay_max_ms: u64,
    /// Reconnect attempts before giving up; `None` retries forever.
    pub max_reconnects: Option<usize>,
    /// Timeout for JetStream API requests (stream/consumer info, publish acks).
    pub request_timeout_ms: u64,
    /// The one authentication method, and where its secret lives.
    pub auth: NatsAuth,
    /// TLS settings; `None` leaves TLS to the URL scheme and the server's demand.
    pub tls: Option<NatsTls>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(k: AuthKeys<'_>) -> (NatsAuth, Vec<String>) {
        let mut issues = Issues::default();
        let a = check_auth(k, &mut issues);
        (a, issues.0.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn a_user_without_a_password_source_is_refused_at_its_path() {
        let (_, errs) = auth(AuthKeys {
            user: Some("alice"),
            ..Default::default()
        });
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].starts_with("nats.user: needs a password source"),
            "{errs:?}"
        );
    }

    #[test]
    fn a_password_from_a_file_selects_user_and_password() {
        let (a, errs) = auth(AuthKeys {
            user: Some("alice"),
            password_file: Some("/run/secrets/pw"),
            ..Default::default()
        });
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(
            a.describe(),
            "user alice, password from file /run/secrets/pw"
        );
    }

    #[test]
    fn two_places_for_one_secret_are_refused() {
        let (_, errs) = auth(AuthKeys {
            token_env: Some("T"),
            token_file: Some("/t"),
            ..Default::default()
        });
        assert!(
            errs.iter().any(|e| e.starts_with("nats.token_file: ")),
            "{errs:?}"
        );
        let (_, errs) = auth(AuthKeys {
            user: Some("u"),
            password_env: Some("P"),
            password_file: Some("/p"),
            ..Default::default()
        });
        assert!(
            errs.iter().any(|e| e.starts_with("nats.password_file: ")),
            "{errs:?}"
        );
    }

    #[test]
    fn only_one_authentication_method_at_a_time() {
        let pairs: [AuthKeys<'_>; 4] = [
            AuthKeys {
                token_file: Some("/t"),
                nkey_seed_file: Some("/s"),
                ..Default::default()
            },
            AuthKeys {
                user: Some("u"),
                password_env: Some("P"),
                creds_file: Some("/c"),
                ..Default::default()
            },
            AuthKeys {
                nkey_seed_file: Some("/s"),
                creds_file: Some("/c"),
                ..Default::default()
            },
            AuthKeys {
                token_env: Some("T"),
                user: Some("u"),
                password_file: Some("/p"),
                ..Default::default()
            },
        ];
        for k in pairs {
            let (_, errs) = auth(k);
            assert!(
                errs.iter()
                    .any(|e| e.starts_with("nats: choose one authentication method")),
                "{k:?}: {errs:?}"
            );
        }
        let (a, errs) = auth(AuthKeys {
            nkey_seed_file: Some("/s"),
            ..Default::default()
        });
        assert!(errs.is_empty());
        assert_eq!(a, NatsAuth::NkeySeedFile("/s".into()));
        assert_eq!(auth(AuthKeys::default()).0, NatsAuth::None);
    }

    #[test]
    fn descriptions_name_where_a_secret_is_never_what_it_is() {
        assert_eq!(
            NatsAuth::Token(SecretSource::File("/etc/jetsink/token".into())).describe(),
            "token from file /etc/jetsink/token"
        );
        assert_eq!(
            NatsAuth::Token(SecretSource::Env("NATS_TOKEN".into())).describe(),
            "token from environment variable NATS_TOKEN"
        );
    }

    fn tls(json: serde_json::Value) -> (Option<NatsTls>, Vec<String>) {
        let raw: TlsConfig = serde_json::from_value(json).unwrap();
        let mut issues = Issues::default();
        let t = check_tls(Some(&raw), &mut issues);
        (t, issues.0.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn a_client_certificate_needs_its_key_and_the_key_its_certificate() {
        let (_, errs) = tls(serde_json::json!({"cert_file": "/c.pem"}));
        assert!(errs[0].starts_with("nats.tls.cert_file: needs"), "{errs:?}");
        let (_, errs) = tls(serde_json::json!({"key_file": "/k.pem"}));
        assert!(errs[0].starts_with("nats.tls.key_file: needs"), "{errs:?}");
        let (t, errs) = tls(
            serde_json::json!({"ca_file": "/ca.pem", "cert_file": "/c.pem", "key_file": "/k.pem"}),
        );
        assert!(errs.is_empty(), "{errs:?}");
        let t = t.unwrap();
        assert!(t.required, "a tls section means TLS by default");
        assert_eq!(
            t.describe(),
            "CA /ca.pem, client certificate /c.pem (key /k.pem), required"
        );
    }

    #[test]
    fn handshake_first_cannot_be_optional_tls() {
        let (_, errs) = tls(serde_json::json!({"handshake_first": true, "required": false}));
        assert!(
            errs[0].starts_with("nats.tls.handshake_first: "),
            "{errs:?}"
        );
        let (t, errs) = tls(serde_json::json!({"handshake_first": true}));
        assert!(errs.is_empty());
        assert!(t.unwrap().handshake_first);
    }

    #[test]
    fn empty_paths_are_refused() {
        let (_, errs) = tls(serde_json::json!({"ca_file": ""}));
        assert!(errs[0].starts_with("nats.tls.ca_file: "), "{errs:?}");
        let (_, errs) = auth(AuthKeys {
            nkey_seed_file: Some(" "),
            ..Default::default()
        });
        assert!(errs[0].starts_with("nats.nkey_seed_file: "), "{errs:?}");
    }
}
