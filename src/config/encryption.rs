//! The `encryption` section (per sink, or top-level as every sink's default): which keys
//! seal payloads, which headers are sealed too, which subjects are covered. Validation
//! loads the keys, so a missing or malformed key file is a configuration error (exit 78)
//! naming both the JSON path and the file, before anything connects.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::crypto::keys::KeyRing;
use crate::crypto::load::{self, KeySource};
use crate::crypto::sealed::valid_key_id;
use crate::crypto::stage::KeyRule;
use crate::crypto::Encryption;
use crate::shared::issue::Issues;

/// Payload encryption at rest (AES-256-GCM, bound to the message).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EncryptionConfig {
    /// Encrypt this sink's payloads. Default true; `false` in a sink opts it out of a
    /// top-level default.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Id of the key that seals new values; the others only open old ones.
    #[serde(default)]
    pub active_key: String,
    /// The key ring: every key that may have sealed a stored value.
    #[serde(default)]
    pub keys: Vec<KeyConfig>,
    /// Headers whose values are sealed too (names, case-insensitive). Default none:
    /// headers stay clear and queryable.
    #[serde(default)]
    pub headers: Vec<String>,
    /// Encrypt only messages on these subjects (NATS wildcards). Default: every subject.
    #[serde(default)]
    pub subjects: Vec<String>,
    /// Choose the key by subject: the first rule whose `subjects` match a message's subject
    /// names the key that seals it; a message no rule matches uses `active_key`. Default
    /// none (every message uses `active_key`). A jetsink extension.
    #[serde(default)]
    pub rules: Vec<KeyRuleConfig>,
}

/// One key rule: messages on these subjects are sealed with this key.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KeyRuleConfig {
    /// Subject filters (NATS wildcards); at least one.
    pub subjects: Vec<String>,
    /// The id of a key in `keys`.
    pub key_id: String,
}

fn yes() -> bool {
    true
}

/// One key of the ring: exactly one of `file` or `env`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    /// The key id stored with each value: 1-64 of letters, digits, `.`, `_`, `-`.
    pub id: String,
    /// A file holding the key as base64 (`jetsink keygen --out FILE`); should be mode 0600.
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// An environment variable holding the key as base64.
    #[serde(default)]
    pub env: Option<String>,
}

/// Checks the section at `path`, loads its keys and builds the stage; `None` when it is
/// disabled or has problems (pushed to `issues`).
pub(crate) fn build(
    cfg: &EncryptionConfig,
    path: &str,
    issues: &mut Issues,
) -> Option<Arc<Encryption>> {
    if !cfg.enabled {
        return None;
    }
    let before = issues.0.len();
    if cfg.keys.is_empty() {
        issues.push(format!("{path}.keys"), "must list at least one key");
    }
    let mut ids = BTreeSet::new();
    let mut material = Vec::new();
    for (i, k) in cfg.keys.iter().enumerate() {
        let at = format!("{path}.keys[{i}]");
        if !valid_key_id(&k.id) {
            issues.push(
                format!("{at}.id"),
                format!(
                    "must be 1-64 letters, digits, `.`, `_` or `-`, got {:?}",
                    k.id
                ),
            );
        } else if !ids.insert(k.id.clone()) {
            issues.push(
                format!("{at}.id"),
                format!("key id {:?} is listed twice", k.id),
            );
        }
        let (source, key_path) = match (&k.file, &k.env) {
            (Some(f), None) => (KeySource::File(f.clone()), format!("{at}.file")),
            (None, Some(e)) => (KeySource::Env(e.clone()), format!("{at}.env")),
            _ => {
                issues.push(at, "give exactly one of `file` or `env`");
                continue;
            }
        };
        match load::load(&source) {
            Ok(bytes) => {
                if let Some((file, mode)) = k
                    .file
                    .as_deref()
                    .and_then(|f| load::loose_mode(f).map(|m| (f, m)))
                {
                    issues.warn(
                        key_path,
                        format!(
                            "key file {} is readable by group or others (mode {mode:o}); chmod 600 it",
                            file.display()
                        ),
                    );
                }
                material.push((k.id.clone(), bytes))
            }
            Err(e) => issues.push(key_path, e.to_string()),
        }
    }
    if cfg.active_key.is_empty() {
        issues.push(
            format!("{path}.active_key"),
            "required: the id of the key that encrypts",
        );
    } else if !cfg.keys.is_empty() && !ids.contains(&cfg.active_key) {
        issues.push(
            format!("{path}.active_key"),
            format!("{:?} is not the id of a key in `keys`", cfg.active_key),
        );
    }
    for (i, h) in cfg.headers.iter().enumerate() {
        if h.is_empty() || h.eq_ignore_ascii_case(crate::shared::idempotency::MSG_ID_HEADER) {
            issues.push(
                format!("{path}.headers[{i}]"),
                "must be a header name other than Nats-Msg-Id (it is the deduplication id and is stored as message_id)",
            );
        }
    }
    check_filters(&cfg.subjects, &format!("{path}.subjects"), issues);
    for (i, rule) in cfg.rules.iter().enumerate() {
        let at = format!("{path}.rules[{i}]");
        if rule.subjects.is_empty() {
            issues.push(format!("{at}.subjects"), "must list at least one subject");
        }
        check_filters(&rule.subjects, &format!("{at}.subjects"), issues);
        if !ids.contains(&rule.key_id) {
            issues.push(
                format!("{at}.key_id"),
                format!("{:?} is not the id of a key in `keys`", rule.key_id),
            );
        }
    }
    if issues.0.len() > before {
        return None;
    }
    let ring = KeyRing::new(material, &cfg.active_key).ok()?;
    let rules = cfg
        .rules
        .iter()
        .map(|r| KeyRule {
            subjects: r.subjects.clone(),
            key_id: r.key_id.clone(),
        })
        .collect();
    Encryption::new(ring, cfg.headers.clone(), cfg.subjects.clone())
        .with_rules(rules)
        .ok()
        .map(Arc::new)
}

fn check_filters(filters: &[String], path: &str, issues: &mut Issues) {
    for (i, s) in filters.iter().enumerate() {
        if s.is_empty() || s.split('.').any(str::is_empty) {
            issues.push(
                format!("{path}[{i}]"),
                format!("must be a subject or wildcard filter, got {s:?}"),
            );
        }
    }
}

/// Refuses destination settings that cannot hold a sealed payload: a JSON payload column
/// or a column mapping that reads the payload with JSON pointers (the bytes are
/// ciphertext, not JSON).
pub(crate) fn check_destination(
    destination: &Value,
    dest_path: &str,
    enc_path: &str,
    issues: &mut Issues,
) {
    if let Some(t @ ("json" | "jsonb")) = destination.get("payload_type").and_then(Value::as_str) {
        issues.push(
            format!("{dest_path}.payload_type"),
            format!("a {t} payload column cannot hold encrypted payloads ({enc_path} is on); use the binary payload type"),
        );
    }
    if let Some(cols) = destination.get("columns").and_then(Value::as_object) {
        for (name, source) in cols {
            if source.as_str().is_some_and(|s| s.starts_with('/')) {
                issues.push(
                    format!("{dest_path}.columns.{name}"),
                    format!("reads the payload with a JSON pointer, but the payload is encrypted ({enc_path} is on)"),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::crypto::keys::{encode_key, KEY_LEN};

    fn config(dir: &std::path::Path, sink_enc: &str, top_enc: &str) -> Result<Config, Vec<String>> {
        let text = format!(
            r#"{{"nats": {{"servers": ["nats://127.0.0.1:4222"]}},{top_enc}
                "sinks": {{
                  "a": {{"source": {{"stream": "S", "consumer": "a"}},{sink_enc}
                         "destination": {{"type": "file", "directory": "{d}/a"}}}},
                  "b": {{"source": {{"stream": "S", "consumer": "b"}},
                         "destination": {{"type": "postgres", "url": "postgres://u@h/db", "table": "t", "payload_type": "jsonb"}}}}}}}}"#,
            d = dir.display()
        );
        Config::from_json_str(&text)
            .map_err(|issues| issues.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn a_top_level_default_applies_to_sinks_without_their_own_and_a_sink_can_opt_out() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("k.key");
        std::fs::write(&key, encode_key(&[1u8; KEY_LEN])).unwrap();
        let top = format!(
            r#""encryption": {{"active_key": "k1", "keys": [{{"id": "k1", "file": "{}"}}]}},"#,
            key.display()
        );
        let errs = config(dir.path(), "", &top).unwrap_err();
        assert!(
            errs.iter().any(|e| e.starts_with("sinks.b.destination.payload_type: a jsonb payload column cannot hold encrypted payloads (encryption is on)")),
            "{errs:?}"
        );
        let cfg = config(
            dir.path(),
            r#""encryption": {"enabled": false},"#,
            &top.replace("jsonb", "bytea"),
        );
        // `b` still inherits the default and still has a jsonb column.
        assert!(cfg.is_err());
        let text_ok = config(dir.path(), r#""encryption": {"enabled": false},"#, "");
        assert!(text_ok
            .unwrap()
            .sinks
            .iter()
            .all(|s| s.encryption.is_none()));
        let sink_only = format!(
            r#""encryption": {{"active_key": "k1", "keys": [{{"id": "k1", "file": "{}"}}]}},"#,
            key.display()
        );
        let cfg = config(dir.path(), &sink_only, "").unwrap();
        let a = cfg.sinks.iter().find(|s| s.name == "a").unwrap();
        assert_eq!(a.encryption.as_ref().unwrap().ring().active_id(), "k1");
        let summary = cfg.summary(&[]);
        assert!(
            summary.contains("active key k1; keys k1 (fingerprint "),
            "{summary}"
        );
        assert!(!summary.contains(&encode_key(&[1u8; KEY_LEN])), "{summary}");
    }

    #[test]
    fn bad_keys_are_reported_at_their_json_path_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let short = dir.path().join("short.key");
        std::fs::write(&short, "AAAA").unwrap();
        let missing = dir.path().join("missing.key");
        let sink = format!(
            r#""encryption": {{"active_key": "zz", "keys": [
                {{"id": "k1", "file": "{}"}},
                {{"id": "k2", "file": "{}"}},
                {{"id": "k1", "env": "JETSINK_TEST_UNSET_KEY_VAR"}},
                {{"id": "bad id"}}],
               "headers": ["Nats-Msg-Id"]}},"#,
            short.display(),
            missing.display()
        );
        let errs = config(dir.path(), &sink, "").unwrap_err();
        let has = |prefix: &str, part: &str| {
            errs.iter()
                .any(|e| e.starts_with(prefix) && e.contains(part))
        };
        assert!(
            has(
                "sinks.a.encryption.keys[0].file: key file ",
                &format!("{} decodes to 3 bytes", short.display())
            ),
            "{errs:?}"
        );
        assert!(
            has(
                "sinks.a.encryption.keys[1].file: cannot read key file ",
                "missing.key"
            ),
            "{errs:?}"
        );
        assert!(
            has("sinks.a.encryption.keys[2].id: ", "listed twice"),
            "{errs:?}"
        );
        assert!(
            has(
                "sinks.a.encryption.keys[2].env: ",
                "JETSINK_TEST_UNSET_KEY_VAR is not set"
            ),
            "{errs:?}"
        );
        assert!(has("sinks.a.encryption.keys[3].id: ", "bad id"), "{errs:?}");
        assert!(
            has("sinks.a.encryption.keys[3]: ", "exactly one of"),
            "{errs:?}"
        );
        assert!(has("sinks.a.encryption.active_key: ", "\"zz\""), "{errs:?}");
        assert!(
            has("sinks.a.encryption.headers[0]: ", "Nats-Msg-Id"),
            "{errs:?}"
        );
    }

    #[test]
    fn key_rules_are_checked_at_their_json_path_and_choose_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("k.key");
        std::fs::write(&key, encode_key(&[1u8; KEY_LEN])).unwrap();
        let eu = dir.path().join("eu.key");
        std::fs::write(&eu, encode_key(&[2u8; KEY_LEN])).unwrap();
        let keys = format!(
            r#""active_key": "k1", "keys": [{{"id": "k1", "file": "{}"}}, {{"id": "eu", "file": "{}"}}]"#,
            key.display(),
            eu.display()
        );
        let bad = format!(
            r#""encryption": {{{keys}, "rules": [
                {{"subjects": ["pay.eu.>"], "key_id": "nope"}},
                {{"subjects": [], "key_id": "eu"}},
                {{"subjects": ["pay..x"], "key_id": "eu"}}]}},"#
        );
        let errs = config(dir.path(), &bad, "").unwrap_err();
        let has = |prefix: &str| errs.iter().any(|e| e.starts_with(prefix));
        assert!(
            has("sinks.a.encryption.rules[0].key_id: \"nope\" is not the id of a key in `keys`"),
            "{errs:?}"
        );
        assert!(
            has("sinks.a.encryption.rules[1].subjects: must list at least one subject"),
            "{errs:?}"
        );
        assert!(
            has("sinks.a.encryption.rules[2].subjects[0]: must be a subject"),
            "{errs:?}"
        );

        let good = format!(
            r#""encryption": {{{keys}, "rules": [{{"subjects": ["pay.eu.>"], "key_id": "eu"}}]}},"#
        );
        let cfg = config(dir.path(), &good, "").unwrap();
        let a = cfg.sinks.iter().find(|s| s.name == "a").unwrap();
        let enc = a.encryption.as_ref().unwrap();
        assert_eq!(enc.key_id_for("pay.eu.x"), "eu");
        assert_eq!(enc.key_id_for("pay.us.x"), "k1");
        assert!(cfg.summary(&[]).contains("key eu for pay.eu.>"));
    }
}
