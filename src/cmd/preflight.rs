//! The check `jetsink run` makes of the job API's bearer token before it serves, with the
//! code `run` uses, for `jetsink validate --online`: that mode runs on the host that runs
//! the daemon, where the token file lives, so what it accepts gets past this in `run`.
//! (The NATS identity and TLS files are read by its connection, as `run`'s are; the
//! encryption keys by loading the config.) Plain `validate` does not read secret files: it
//! checks a config anywhere, also where the secrets do not live (a CI job).

use crate::config::{Config, Issue};

/// Why `run` would refuse the job API's token source, at the key that names it; `None`
/// when it reads one (or the config has no token).
pub fn api_token(cfg: &Config) -> Option<Issue> {
    let source = cfg.api.as_ref().and_then(|a| a.token())?;
    match crate::api::load_token(&source) {
        Ok(_) => None,
        Err(crate::api::ApiError::Token { key, message }) => Some(Issue {
            path: format!("api.{key}"),
            message,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> Config {
        let text = format!(
            r#"{{"nats": {{"servers": ["nats://127.0.0.1:4222"] {extra} }},
                "sinks": {{"a": {{"source": {{"stream": "S", "subjects": "s", "consumer": "c"}},
                "destination": {{"type": "file", "directory": "out"}}}}}}}}"#
        );
        Config::from_json_str(&text).unwrap()
    }

    fn with_api(token_file: &std::path::Path) -> Config {
        let mut c = config("");
        let api = format!(r#"{{"token_file": "{}"}}"#, token_file.display());
        c.api = Some(serde_json::from_str(&api).unwrap());
        c
    }

    #[test]
    fn a_token_file_run_would_refuse_is_named_at_its_key() {
        let dir = tempfile::tempdir().unwrap();
        assert!(api_token(&config("")).is_none());
        let issue = api_token(&with_api(std::path::Path::new("/dev/zero"))).unwrap();
        assert_eq!(
            issue.to_string(),
            "api.token_file: /dev/zero is a character device, not a regular file"
        );
        let missing = dir.path().join("none");
        assert!(api_token(&with_api(&missing))
            .unwrap()
            .to_string()
            .starts_with("api.token_file: cannot read"));
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        assert!(api_token(&with_api(&empty))
            .unwrap()
            .message
            .contains("is empty"));
        let good = dir.path().join("good");
        std::fs::write(&good, "t0ken\n").unwrap();
        assert!(api_token(&with_api(&good)).is_none());
    }
}
