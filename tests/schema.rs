//! `jetsink schema` describes the files jetsink accepts: every shipped example config is
//! valid against it (an editor using the schema marks none of them wrong), and a config
//! with a wrong type is not.

use crate::common;

use common::*;
use serde_json::Value;

fn schema() -> Value {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = jetsink(&["schema"], dir.path());
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).expect("the schema is JSON")
}

#[test]
fn every_example_config_is_valid_against_the_schema() {
    let validator = jsonschema::validator_for(&schema()).expect("the schema compiles");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).unwrap().filter_map(|e| e.ok()) {
        let path = entry.path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let config: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&config)
            .map(|e| format!("{}: {e}", e.instance_path))
            .collect();
        assert!(errors.is_empty(), "{}: {errors:#?}", path.display());
        checked += 1;
    }
    assert!(checked >= 13, "only {checked} examples found");
}

#[test]
fn a_wrong_type_is_invalid_against_the_schema() {
    let validator = jsonschema::validator_for(&schema()).expect("the schema compiles");
    let bad = serde_json::json!({
        "nats": {"servers": "nats://127.0.0.1:4222"},
        "sinks": {"s": {"source": {"stream": "S", "consumer": "c"},
                        "delivery": {"batch_size": "many"},
                        "destination": {"type": "file", "directory": "d"}}}
    });
    assert!(!validator.is_valid(&bad));
}
