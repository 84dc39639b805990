//! Credentials written into a server URL (`nats://user:pw@host`, `nats://token@host`; also
//! the OTLP endpoint of `telemetry.otlp`).
//!
//! Such a URL would be accepted by the client, but the config is printed by `validate`,
//! logged in connection errors and copied into tickets, so the secret would leak; the
//! config has `nats.user` + `password_env`, `token_env` and `creds_file` for it instead.
//! A leaf: pure string handling, nothing imported from the rest of `config`.

/// The authority part of a server URL (`host:port`, with any `userinfo@` in front), and
/// the byte range it occupies in `url`.
fn authority(url: &str) -> (usize, &str) {
    let start = url.find("://").map(|i| i + 3).unwrap_or(0);
    let rest = &url[start..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    (start, &rest[..end])
}

/// Whether `url` carries a user, password or token before its host.
pub fn has_credentials(url: &str) -> bool {
    authority(url).1.contains('@')
}

/// `url` with any credentials replaced by `***`, safe to print.
pub fn redacted(url: &str) -> String {
    let (start, auth) = authority(url);
    match auth.rfind('@') {
        Some(at) => format!("{}***{}", &url[..start], &url[start + at..]),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn user_password_and_token_urls_are_found_and_redacted() {
        assert!(has_credentials("nats://alice:s3cret@host:4222"));
        assert!(has_credentials("nats://tok3n@host"));
        assert!(has_credentials("alice:s3cret@host:4222"));
        assert!(has_credentials("tls://a:b@host"));
        assert!(!has_credentials("nats://host:4222"));
        assert!(!has_credentials("nats://host:4222/path@x"));
        assert!(!has_credentials("127.0.0.1:4222"));
        assert_eq!(
            redacted("nats://alice:s3cret@host:4222"),
            "nats://***@host:4222"
        );
        assert_eq!(redacted("tok3n@host"), "***@host");
        assert_eq!(redacted("nats://host:4222"), "nats://host:4222");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        #[test]
        fn a_redacted_url_never_contains_the_secret(
            scheme in prop::option::of("(nats|tls|ws)"),
            secret in "[A-Za-z0-9:%!$]{6,30}",
            host in "[a-z0-9.]{1,20}",
            port in prop::option::of(1u16..),
        ) {
            let mut url = String::new();
            if let Some(s) = &scheme {
                url.push_str(s);
                url.push_str("://");
            }
            url.push_str(&format!("{secret}@{host}"));
            if let Some(p) = port {
                url.push_str(&format!(":{p}"));
            }
            prop_assert!(has_credentials(&url));
            let r = redacted(&url);
            prop_assert!(!r.contains(&secret), "{}", r);
            prop_assert!(r.ends_with(&url[url.rfind('@').unwrap()..]));
        }

        #[test]
        fn any_text_is_answered_without_panicking(s in ".{0,60}") {
            let _ = has_credentials(&s);
            let _ = redacted(&s);
        }
    }
}
