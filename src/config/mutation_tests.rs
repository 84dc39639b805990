//! Generated tests: every shipped example config, with one value anywhere in it replaced
//! by a hostile one or removed, is either accepted or refused with issues that name a
//! place — validation never panics, whatever an operator writes.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::Config;

/// Every example in `config/`, read once: a new example is covered without a list to edit.
fn examples() -> &'static [(std::path::PathBuf, String)] {
    static EXAMPLES: std::sync::OnceLock<Vec<(std::path::PathBuf, String)>> =
        std::sync::OnceLock::new();
    EXAMPLES.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
        let mut paths: Vec<_> = std::fs::read_dir(dir)
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
            .unwrap_or_default();
        paths.retain(|p| p.extension().is_some_and(|x| x == "json"));
        paths.sort();
        paths
            .into_iter()
            .filter_map(|p| std::fs::read_to_string(&p).ok().map(|t| (p, t)))
            .collect()
    })
}

/// Values that break naive validation: extremes, wrong types, odd strings.
fn hostile() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        prop::sample::select(vec![
            json!(0),
            json!(-1),
            json!(1),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(1e308),
            json!(-0.0),
            json!(0.5),
            json!(4_294_967_296u64),
        ]),
        any::<i64>().prop_map(Value::from),
        prop::sample::select(vec![
            "",
            " ",
            ">",
            "*",
            "a.>",
            "a..b",
            "../../etc/passwd",
            "$header:",
            "$nope",
            "/",
            "~",
            "nats://u:p@h:4222",
            "💥",
            "\u{0}",
            "x".repeat(300).leak(),
        ])
        .prop_map(|s: &str| Value::from(s)),
        any::<String>().prop_map(Value::String),
        Just(json!([])),
        Just(json!({})),
        Just(json!([1, "a", null])),
        Just(json!({"unknown": 1})),
    ]
}

/// Every place in a document, as a path of keys and indexes.
fn places(v: &Value, path: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                path.push(Step::Key(k.clone()));
                out.push(path.clone());
                places(child, path, out);
                path.pop();
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                path.push(Step::Index(i));
                out.push(path.clone());
                places(child, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

#[derive(Debug, Clone)]
enum Step {
    Key(String),
    Index(usize),
}

/// Replaces (or, with `None`, removes) the value at `path`.
fn mutate(v: &mut Value, path: &[Step], with: Option<Value>) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut at = v;
    for step in parents {
        at = match (step, at) {
            (Step::Key(k), Value::Object(m)) => match m.get_mut(k) {
                Some(c) => c,
                None => return,
            },
            (Step::Index(i), Value::Array(a)) => match a.get_mut(*i) {
                Some(c) => c,
                None => return,
            },
            _ => return,
        };
    }
    match (last, at, with) {
        (Step::Key(k), Value::Object(m), Some(w)) => {
            m.insert(k.clone(), w);
        }
        (Step::Key(k), Value::Object(m), None) => {
            m.remove(k);
        }
        (Step::Index(i), Value::Array(a), Some(w)) if *i < a.len() => a[*i] = w,
        (Step::Index(i), Value::Array(a), None) if *i < a.len() => {
            a.remove(*i);
        }
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3_000))]

    #[test]
    fn a_hostile_value_anywhere_in_an_example_config_is_accepted_or_refused_with_a_place(
        example in 0..examples().len(),
        at in any::<prop::sample::Index>(),
        with in prop::option::weighted(0.85, hostile()),
    ) {
        let mut doc: Value = serde_json::from_str(&examples()[example].1).unwrap();
        let mut all = Vec::new();
        places(&doc, &mut Vec::new(), &mut all);
        prop_assume!(!all.is_empty());
        mutate(&mut doc, &all[at.index(all.len())], with);
        if let Err(issues) = Config::from_json_str(&doc.to_string()) {
            prop_assert!(!issues.is_empty());
            for issue in &issues {
                prop_assert!(!issue.message.is_empty(), "{:?}", issue);
            }
        }
    }
}

#[test]
fn every_example_config_is_valid_as_shipped() {
    assert!(
        examples().len() >= 13,
        "the examples in config/ were not found"
    );
    for (path, _) in examples() {
        // Loaded from its file, so key files resolve next to it as in `jetsink run`.
        if let Err(e) = Config::load(path) {
            panic!("{} is refused: {e}", path.display());
        }
    }
}
