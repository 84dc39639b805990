//! Docs that cannot drift from the binary (issue 52): what the docs show a program print is
//! either run by a test or marked as an illustration with the command that regenerates it;
//! every log line the docs quote names the module that logs it; the numbers the docs state
//! about the code are read from the code's constants; and configuration.md's key tables
//! agree with `jetsink schema` on every key, type and default.
//!
//! Each check is a pure function over the texts, and each is also fed a doctored copy to
//! prove that it fails when the docs and the code disagree.

use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn repo_file(path: &str) -> String {
    let full = Path::new(ROOT).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("read {}: {e}", full.display()))
}

/// README.md and every page under docs/, as paths relative to the crate root.
fn doc_files() -> Vec<String> {
    let mut files = vec!["README.md".to_string()];
    for dir in ["docs", "docs/sinks"] {
        let mut found: Vec<String> = std::fs::read_dir(Path::new(ROOT).join(dir))
            .expect(dir)
            .map(|e| e.expect("dir entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .map(|p| format!("{dir}/{}", p.file_name().expect("name").to_string_lossy()))
            .collect();
        found.sort();
        files.extend(found);
    }
    files
}

/// One fenced block: its info string, the line of its opening fence (1-based), the last
/// non-blank line before it, and its lines.
struct Block<'a> {
    info: &'a str,
    line: usize,
    before: &'a str,
    body: Vec<&'a str>,
}

/// The fenced blocks of a Markdown text (fences may be indented, as in list items).
fn blocks(text: &str) -> Vec<Block<'_>> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    let mut before = "";
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match open.take() {
            Some(b) if trimmed.starts_with("```") => {
                out.push(b);
                before = trimmed;
            }
            Some(mut b) => {
                b.body.push(line);
                open = Some(b);
            }
            None if trimmed.starts_with("```") => {
                open = Some(Block {
                    info: trimmed.trim_start_matches('`').trim(),
                    line: i + 1,
                    before,
                    body: Vec::new(),
                })
            }
            None if !trimmed.is_empty() => before = trimmed,
            None => {}
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Output blocks: run, checked, or marked.

/// A `console` block is a trycmd case (`tests/cli_snapshots.rs` runs it); any other block
/// of what a program prints is `text` or untagged, and says above it what it is:
/// `<!-- illustrative: regenerate with … -->` (output captured once, with the command
/// that shows it again), `<!-- checked by FILE: ID -->` (a test finds the block by ID and
/// compares it with what the binary does), or `<!-- not output: … -->` (a diagram, a
/// usage synopsis, a file-name pattern, a config snippet).
const MARKERS: &[&str] = &[
    "<!-- illustrative: regenerate with ",
    "<!-- checked by ",
    "<!-- not output: ",
];

/// The `text` and untagged blocks of `text` without a marker above them: (line, first
/// line of the block).
fn unmarked_output_blocks(text: &str) -> Vec<(usize, String)> {
    blocks(text)
        .into_iter()
        .filter(|b| b.info.is_empty() || b.info == "text")
        .filter(|b| !MARKERS.iter().any(|m| b.before.starts_with(m)))
        .map(|b| {
            let first = b.body.first().map_or("", |l| l.trim());
            (b.line, first.chars().take(80).collect())
        })
        .collect()
}

#[test]
fn every_output_block_is_run_checked_or_marked_illustrative() {
    let mut unmarked = Vec::new();
    for file in doc_files() {
        for (line, first) in unmarked_output_blocks(&repo_file(&file)) {
            unmarked.push(format!("{file}:{line}: {first}"));
        }
    }
    assert!(
        unmarked.is_empty(),
        "output blocks with no marker above them (make them ```console blocks run by \
         tests/cli_snapshots.rs, or add `<!-- illustrative: regenerate with CMD -->`, \
         `<!-- checked by FILE: ID -->` or `<!-- not output: WHAT -->`):\n{}",
        unmarked.join("\n")
    );
}

#[test]
fn an_output_block_without_a_marker_is_reported() {
    let doc = "Intro.\n\n<!-- illustrative: regenerate with `jetsink --version` -->\n```text\n\
               jetsink 1\n```\n\nThen:\n\n```text\n$ jetsink bench\nrun pass\n```\n\n```sh\n\
               jetsink run\n```\n";
    assert_eq!(
        unmarked_output_blocks(doc),
        vec![(10, "$ jetsink bench".to_string())]
    );
}

/// The `checked by FILE: ID` markers whose FILE does not exist or does not mention ID:
/// a test that no longer reads the block it claims to check.
fn stale_checked_markers(text: &str, read: impl Fn(&str) -> Option<String>) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("<!-- checked by "))
        .filter_map(|rest| rest.strip_suffix(" -->"))
        .filter(|claim| {
            let Some((file, id)) = claim.split_once(": ") else {
                return true;
            };
            !read(file).is_some_and(|source| source.contains(id))
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn every_checked_marker_names_a_test_that_reads_its_block() {
    let read = |path: &str| std::fs::read_to_string(Path::new(ROOT).join(path)).ok();
    let mut stale = Vec::new();
    for file in doc_files() {
        for claim in stale_checked_markers(&repo_file(&file), read) {
            stale.push(format!("{file}: checked by {claim}"));
        }
    }
    assert!(
        stale.is_empty(),
        "markers naming no test that reads the block:\n{}",
        stale.join("\n")
    );
    let doctored = "<!-- checked by tests/cli.rs: no-such-block-id -->\n";
    assert_eq!(stale_checked_markers(doctored, read).len(), 1);
}

// ---------------------------------------------------------------------------------------
// Log lines: the target the docs print is the module that logs the message.

/// The source files of a `tracing` target (the module path of the logging call).
fn target_files(target: &str) -> Vec<String> {
    let Some(path) = target.strip_prefix("jetsink::") else {
        return Vec::new();
    };
    let path = path.replace("::", "/");
    vec![format!("src/{path}.rs"), format!("src/{path}/mod.rs")]
}

/// The literal start of a logged message as the docs print it: up to the first field
/// (` key=`) and the first digit or quote, where a formatted value may begin.
fn message_literal(message: &str) -> &str {
    let end = message
        .find(|c: char| c.is_ascii_digit() || c == '"' || c == '`')
        .unwrap_or(message.len());
    let fields = message
        .match_indices(' ')
        .map(|(i, _)| i)
        .find(|&i| {
            let word = &message[i + 1..];
            word.find('=').is_some_and(|eq| {
                word[..eq]
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_')
                    && eq > 0
            })
        })
        .unwrap_or(message.len());
    message[..end.min(fields)].trim_end()
}

/// Every log line quoted in a doc's blocks: (target, message literal).
fn quoted_log_lines(text: &str) -> Vec<(String, String)> {
    const LEVELS: &[&str] = &["TRACE ", "DEBUG ", "INFO ", "WARN ", "ERROR "];
    let mut out = Vec::new();
    for block in blocks(text) {
        for line in &block.body {
            for level in LEVELS {
                let Some(at) = line.find(&format!("{level}jetsink::")) else {
                    continue;
                };
                let rest = &line[at + level.len()..];
                if let Some((target, message)) = rest.split_once(": ") {
                    out.push((target.to_string(), message_literal(message).to_string()));
                }
            }
        }
    }
    out
}

/// The quoted log lines whose target's source files do not log that message.
fn misattributed(lines: &[(String, String)], read: impl Fn(&str) -> Option<String>) -> Vec<String> {
    lines
        .iter()
        .filter(|(target, message)| {
            !target_files(target)
                .iter()
                .filter_map(|f| read(f))
                .any(|source| source.contains(message.as_str()))
        })
        .map(|(target, message)| format!("{target}: {message}"))
        .collect()
}

#[test]
fn every_quoted_log_line_names_the_module_that_logs_it() {
    let read = |path: &str| std::fs::read_to_string(Path::new(ROOT).join(path)).ok();
    let mut wrong = Vec::new();
    let mut seen = 0;
    for file in doc_files() {
        let lines = quoted_log_lines(&repo_file(&file));
        seen += lines.len();
        for bad in misattributed(&lines, read) {
            wrong.push(format!("{file}: {bad}"));
        }
    }
    assert!(seen >= 20, "only {seen} log lines found in the docs");
    assert!(
        wrong.is_empty(),
        "log lines the docs attribute to a module that does not log them:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn a_log_line_under_the_wrong_target_is_reported() {
    let read = |path: &str| std::fs::read_to_string(Path::new(ROOT).join(path)).ok();
    let doc = "```text\n\
        2026-11-30T05:45:04Z  WARN jetsink::pipeline::runner: destination failed; holding the batch sink=a attempt=1\n\
        2026-11-30T05:45:04Z  WARN jetsink::pipeline::settle: destination failed; holding the batch sink=a messages=5\n\
        ```\n";
    let lines = quoted_log_lines(doc);
    assert_eq!(
        lines[0],
        (
            "jetsink::pipeline::runner".to_string(),
            "destination failed; holding the batch".to_string()
        )
    );
    assert_eq!(
        misattributed(&lines, read),
        vec!["jetsink::pipeline::runner: destination failed; holding the batch".to_string()]
    );
}

// ---------------------------------------------------------------------------------------
// Numbers the docs state about the code, read from the code.

/// Whether `doc` holds every one of `sentences` (whitespace runs, line breaks included,
/// compare as one space).
fn missing_sentences(doc: &str, sentences: &[String]) -> Vec<String> {
    let flat = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    sentences
        .iter()
        .filter(|s| !flat.contains(s.as_str()))
        .cloned()
        .collect()
}

fn assert_states(file: &str, sentences: &[String]) {
    let missing = missing_sentences(&repo_file(file), sentences);
    assert!(
        missing.is_empty(),
        "{file} no longer states what the code does; missing:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_batches_held_and_pulled_ahead_are_the_codes() {
    use jetsink::pipeline::documented::{PULL_DEPTH, SCHEDULED_DEPTH};
    assert_states(
        "README.md",
        &[format!(
            "it holds the failing batch and at most the {PULL_DEPTH} pulled ahead of it, \
             {SCHEDULED_DEPTH} with in-batch or weighted priority lanes or the randomizer"
        )],
    );
    assert_states(
        "docs/architecture.md",
        &[
            format!("with a backlog up to {PULL_DEPTH} batches ahead"),
            format!("keeps up to **{PULL_DEPTH}** batches pulled ahead (`PULL_DEPTH`; {SCHEDULED_DEPTH} with in-batch or weighted priority lanes or the randomizer, `SCHEDULED_DEPTH`"),
            format!("those pulled ahead: up to {PULL_DEPTH} (with"),
        ],
    );
    assert_states(
        "docs/operations.md",
        &[format!(
            "pulled ahead before the failure are held (up to {PULL_DEPTH}, {SCHEDULED_DEPTH} with in-batch or weighted priority lanes"
        )],
    );
}

#[test]
fn the_default_linger_and_its_rate_sample_are_the_codes() {
    use jetsink::pipeline::documented::{DEFAULT_LINGER_MS, LINGER_RATE_SAMPLE};
    assert_states(
        "docs/configuration.md",
        &[format!(
            "| `linger_ms` | integer | `{DEFAULT_LINGER_MS}`; `0` with `results`"
        )],
    );
    assert_states(
        "docs/architecture.md",
        &[
            format!("**linger** (`delivery.linger_ms`, default {DEFAULT_LINGER_MS} ms;"),
            format!("the pull before it, from {LINGER_RATE_SAMPLE} messages on)"),
        ],
    );
    assert_states(
        "docs/operations.md",
        &[format!(
            "`delivery.linger_ms` (default {DEFAULT_LINGER_MS} ms)"
        )],
    );
    assert_states(
        "docs/job-queue.md",
        &[format!(
            "| `delivery.linger_ms` | `0` | `{DEFAULT_LINGER_MS}` |"
        )],
    );
}

#[test]
fn the_readiness_stage_thresholds_are_the_codes() {
    use jetsink::nats::{fetch::NO_WAIT_LIMIT, BIND_REQUEST_ATTEMPTS};
    use jetsink::pipeline::documented::REBIND_AFTER;
    assert_states(
        "docs/operations.md",
        &[
            format!("After {REBIND_AFTER} failed pulls in a row, when re-binding the sink's consumer fails too"),
            format!(
                "a pull made while the connection is down fails at its local bound of {} s",
                NO_WAIT_LIMIT.as_secs()
            ),
            format!("the re-binding's stream lookup is asked {BIND_REQUEST_ATTEMPTS} times"),
            format!("(re-binding after {REBIND_AFTER} failed pulls did not succeed)"),
        ],
    );
}

#[test]
fn the_retry_stages_and_the_outage_timeline_are_the_codes() {
    use jetsink::config::RetryConfig;
    use jetsink::nats::{fetch::NO_WAIT_LIMIT, BIND_REQUEST_ATTEMPTS};
    use jetsink::pipeline::documented::REBIND_AFTER;
    let retry = RetryConfig::default();
    let stage = |n: i32| {
        ((retry.initial_backoff_ms as f64) * retry.multiplier.powi(n))
            .min(retry.max_backoff_ms as f64)
    };
    assert_eq!(retry.multiplier, 2.0, "the docs say the delays double");
    let request_timeout = schema_keys(&the_schema())
        .get("nats.request_timeout_ms")
        .and_then(|k| k.default.as_ref()?.as_u64())
        .expect("nats.request_timeout_ms has a default");
    // The pull cut by the drop fails at once; the ones after it wait out their bound.
    let failed_pulls_s = u64::from(REBIND_AFTER - 1) * NO_WAIT_LIMIT.as_secs();
    let lookups_s = u64::from(BIND_REQUEST_ATTEMPTS) * request_timeout / 1000;
    assert_states(
        "docs/operations.md",
        &[
            format!(
                "from {} ms doubling up to {} s by default",
                retry.initial_backoff_ms,
                retry.max_backoff_ms / 1000
            ),
            format!(
                "({}, {}, {} ms at most with the defaults)",
                stage(0),
                stage(1),
                stage(2)
            ),
            format!("`nats.request_timeout_ms` ({request_timeout} by default)"),
            format!("about {failed_pulls_s} s of failed pulls plus {lookups_s} s of lookups"),
        ],
    );
}

#[test]
fn the_settlers_log_lines_carry_its_target() {
    use jetsink::pipeline::documented::SETTLE_LOG_TARGET;
    assert_eq!(SETTLE_LOG_TARGET, "jetsink::pipeline::settle");
    assert_states(
        "docs/operations.md",
        &[
            format!("{SETTLE_LOG_TARGET}: destination failed; holding the batch"),
            format!("{SETTLE_LOG_TARGET}: batch abandoned at shutdown; left for redelivery"),
            format!("{SETTLE_LOG_TARGET}: destination recovered"),
            format!(
                "(`error`, `messages`, `attempt`, `retry_in_ms`; target `{SETTLE_LOG_TARGET}`)"
            ),
            format!("(`attempts`; target `{SETTLE_LOG_TARGET}`)"),
            format!("(`messages`; target `{SETTLE_LOG_TARGET}`)"),
        ],
    );
}

#[test]
fn a_doc_that_says_another_number_is_reported() {
    let doc = "it holds the failing batch and at most\nthe 2 pulled ahead of it";
    let want = vec!["at most the 4 pulled ahead".to_string()];
    assert_eq!(missing_sentences(doc, &want), want);
    assert!(missing_sentences(doc, &["at most the 2 pulled ahead".to_string()]).is_empty());
}

// ---------------------------------------------------------------------------------------
// configuration.md's key tables against `jetsink schema`.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// One config key as the schema gives it: its JSON types and its default, if any.
#[derive(Debug, Clone, PartialEq)]
struct SchemaKey {
    types: BTreeSet<String>,
    /// The types of an array's items (empty when it is no array).
    items: BTreeSet<String>,
    default: Option<Value>,
}

/// The item types of the arrays a schema node allows.
fn item_types(node: &Value, defs: &Value) -> BTreeSet<String> {
    let node = resolve(node, defs);
    let mut out: BTreeSet<String> = node
        .get("items")
        .map(|i| schema_types(i, defs))
        .unwrap_or_default();
    for sub in subschemas(&node) {
        out.extend(item_types(sub, defs));
    }
    out
}

/// The item type an `array of strings` / `array of integers` cell names.
fn doc_item_type(cell: &str) -> Option<&'static str> {
    let lower = cell.to_lowercase();
    if lower.contains("array of strings") {
        Some("string")
    } else if lower.contains("array of integers") {
        Some("integer")
    } else {
        None
    }
}

/// `node` with its `$ref` replaced by the definition (the node's own keywords, such as a
/// `default`, win).
fn resolve(node: &Value, defs: &Value) -> Value {
    let mut node = node.clone();
    while let Some(name) = node.get("$ref").and_then(Value::as_str) {
        let name = name.rsplit('/').next().unwrap_or(name);
        let mut merged = defs.get(name).cloned().unwrap_or(Value::Null);
        if let (Some(target), Some(own)) = (merged.as_object_mut(), node.as_object()) {
            for (k, v) in own.iter().filter(|(k, _)| k.as_str() != "$ref") {
                target.insert(k.clone(), v.clone());
            }
        }
        node = merged;
    }
    node
}

/// The JSON types a schema node allows, through `anyOf`/`oneOf`/`allOf`, enums and consts.
fn schema_types(node: &Value, defs: &Value) -> BTreeSet<String> {
    let node = resolve(node, defs);
    let mut out = BTreeSet::new();
    match node.get("type") {
        Some(Value::String(t)) => {
            out.insert(t.clone());
        }
        Some(Value::Array(ts)) => out.extend(ts.iter().filter_map(Value::as_str).map(String::from)),
        _ => {}
    }
    for sub in subschemas(&node) {
        out.extend(schema_types(sub, defs));
    }
    if node.get("type").is_none() {
        for e in node
            .get("enum")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            out.insert(json_type(e).to_string());
        }
        if let Some(c) = node.get("const") {
            out.insert(json_type(c).to_string());
        }
    }
    if out.is_empty() && node.get("properties").is_some() {
        out.insert("object".into());
    }
    out
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The tag of a destination variant: its `type` property's constant.
fn variant_tag(node: &Value, defs: &Value) -> Option<String> {
    let tag = resolve(node.get("properties")?.get("type")?, defs);
    tag.get("const")
        .or_else(|| tag.get("enum").and_then(|e| e.get(0)))
        .and_then(Value::as_str)
        .map(String::from)
}

/// Every key under `node`, by path: `sinks.<name>.delivery.retry.jitter`, array items as
/// `lanes[].name`, a destination variant's keys as `destination[sqlite].path`.
fn walk(node: &Value, path: &str, defs: &Value, out: &mut BTreeMap<String, SchemaKey>) {
    let node = resolve(node, defs);
    for sub in subschemas(&node) {
        let sub = resolve(sub, defs);
        match variant_tag(&sub, defs) {
            Some(tag) => walk(&sub, &format!("{path}[{tag}]"), defs, out),
            None => walk(&sub, path, defs, out),
        }
    }
    let join = |key: &str| match path {
        "" => key.to_string(),
        _ => format!("{path}.{key}"),
    };
    for (key, sub) in node
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let full = join(key);
        let default = sub
            .get("default")
            .cloned()
            .or_else(|| resolve(sub, defs).get("default").cloned());
        out.entry(full.clone()).or_insert(SchemaKey {
            types: schema_types(sub, defs),
            items: item_types(sub, defs),
            default,
        });
        walk(sub, &full, defs, out);
    }
    if let Some(items) = node.get("items").filter(|i| i.is_object()) {
        walk(items, &format!("{path}[]"), defs, out);
    }
    if let Some(map) = node.get("additionalProperties").filter(|m| m.is_object()) {
        walk(map, &join("<name>"), defs, out);
    }
}

fn schema_keys(schema: &Value) -> BTreeMap<String, SchemaKey> {
    let defs = schema
        .get("$defs")
        .or_else(|| schema.get("definitions"))
        .cloned()
        .unwrap_or(Value::Null);
    let mut out = BTreeMap::new();
    walk(schema, "", &defs, &mut out);
    out
}

/// A row of configuration.md's key tables: its type and default cells.
#[derive(Debug, Clone, PartialEq)]
struct DocRow {
    ty: String,
    default: String,
}

/// The path prefix a configuration.md heading stands for: `` for "Top level", the
/// destination variant for "type: sqlite", the heading itself for a key path
/// (`sinks.<name>.source`), none for prose sections.
fn heading_prefix(heading: &str) -> Option<String> {
    let heading = heading.replace("&lt;", "<").replace("&gt;", ">");
    if heading == "Top level" {
        return Some(String::new());
    }
    if let Some(tag) = heading.strip_prefix("type: ") {
        return Some(format!("sinks.<name>.destination[{tag}]"));
    }
    let is_path = !heading.is_empty()
        && heading
            .chars()
            .all(|c| c.is_ascii_lowercase() || matches!(c, '_' | '.' | '<' | '>'));
    is_path.then_some(heading)
}

/// Every row of every `| key | type | default | …` table, by full path.
fn doc_rows(md: &str) -> BTreeMap<String, DocRow> {
    let mut out = BTreeMap::new();
    let (mut prefix, mut in_table) = (None, false);
    for line in md.lines() {
        if line.starts_with('#') {
            prefix = heading_prefix(line.trim_start_matches('#').trim());
            in_table = false;
        } else if line.starts_with("| key | type | default |") {
            in_table = true;
        } else if !line.starts_with('|') {
            in_table = false;
        } else if let (true, Some(prefix)) = (in_table, prefix.as_ref()) {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            let Some(key) = cells
                .first()
                .and_then(|k| k.strip_prefix('`')?.strip_suffix('`'))
            else {
                continue;
            };
            let path = if prefix.is_empty() {
                key.to_string()
            } else {
                format!("{prefix}.{key}")
            };
            out.insert(
                path,
                DocRow {
                    ty: cells.get(1).unwrap_or(&"").to_string(),
                    default: cells.get(2).unwrap_or(&"").to_string(),
                },
            );
        }
    }
    out
}

/// The JSON types a type cell names: `integer`, `string, or array of strings`,
/// `integer or \`null\``, `"arrival"` or object …`, `object of name → value`.
fn doc_types(cell: &str) -> BTreeSet<String> {
    let lower = cell.trim().to_lowercase();
    let word = |alt: &str| -> String {
        let alt = alt.trim().trim_matches(',').trim().trim_matches('`');
        if alt.starts_with('"') {
            return "string".into();
        }
        match alt.split_whitespace().next().unwrap_or("") {
            "destination" => "object".into(),
            w => w.to_string(),
        }
    };
    if lower.starts_with("object of") || lower.starts_with("array of") {
        return BTreeSet::from([word(&lower)]);
    }
    lower.split(" or ").map(word).collect()
}

/// The first backquoted literal of a default cell, read as JSON (`` `500` ``,
/// `` `"full"` ``, `` `[]` ``).
fn doc_default(cell: &str) -> Option<Value> {
    let literal = cell.split('`').nth(1)?;
    serde_json::from_str(literal).ok()
}

/// Two defaults are the same value (`2.0` and `2` are).
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_value(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_value(v, w)))
        }
        _ => a == b,
    }
}

/// Keys configuration.md describes elsewhere than in a key table of their own path: the
/// single-sink shape's aliases of `sinks.<name>.…` (its mapping table), and a destination's
/// `type` (the Destinations table).
fn described_elsewhere(path: &str) -> bool {
    const SINGLE_SINK: &[&str] = &[
        "sink",
        "delivery",
        "dead_letter",
        "message_metadata",
        "encryption",
    ];
    const SINGLE_SINK_NATS: &[&str] = &[
        "nats.stream",
        "nats.consumer",
        "nats.subject",
        "nats.ack_wait_ms",
        "nats.max_deliver",
        "nats.max_ack_pending",
        "nats.create_stream",
    ];
    let first = path.split(['.', '[']).next().unwrap_or(path);
    (first != path && SINGLE_SINK.contains(&first))
        || SINGLE_SINK_NATS
            .iter()
            .any(|k| path == *k || path.starts_with(&format!("{k}.")))
        || (path.starts_with("sinks.<name>.destination[") && path.ends_with("].type"))
}

/// Where configuration.md and the schema disagree: keys one lacks, types, defaults.
fn config_doc_drift(schema: &BTreeMap<String, SchemaKey>, md: &str) -> Vec<String> {
    let rows = doc_rows(md);
    let mut out = Vec::new();
    for (path, key) in schema.iter().filter(|(p, _)| !described_elsewhere(p)) {
        let Some(row) = rows.get(path) else {
            out.push(format!("{path}: in the schema, in no key table"));
            continue;
        };
        let mut wanted = key.types.clone();
        let documented = doc_types(&row.ty);
        if !documented.contains("null") {
            wanted.remove("null");
        }
        if let Some(item) = doc_item_type(&row.ty) {
            if key.items != BTreeSet::from([item.to_string()]) {
                out.push(format!(
                    "{path}: items {:?} in the schema, {} in the docs",
                    key.items, row.ty
                ));
            }
        }
        if wanted != documented {
            out.push(format!(
                "{path}: type {:?} in the schema, {} in the docs",
                wanted, row.ty
            ));
        }
        let Some(default) = key
            .default
            .as_ref()
            .filter(|d| !d.is_null() && !d.is_object())
        else {
            continue;
        };
        if !doc_default(&row.default).is_some_and(|d| same_value(&d, default)) {
            out.push(format!(
                "{path}: default {default} in the schema, {} in the docs",
                row.default
            ));
        }
    }
    for path in rows.keys().filter(|p| !schema.contains_key(*p)) {
        out.push(format!("{path}: in a key table, not in the schema"));
    }
    for alias in [
        "stream",
        "consumer",
        "subject",
        "ack_wait_ms",
        "max_deliver",
        "max_ack_pending",
        "create_stream",
    ] {
        if schema.contains_key(&format!("nats.{alias}")) && !md.contains(&format!("`nats.{alias}`"))
        {
            out.push(format!(
                "nats.{alias}: the single-sink shape's table does not list it"
            ));
        }
    }
    out
}

fn the_schema() -> Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_jetsink"))
        .arg("schema")
        .output()
        .expect("run jetsink schema");
    assert!(out.status.success(), "jetsink schema failed");
    serde_json::from_slice(&out.stdout).expect("the schema is JSON")
}

#[test]
fn configuration_md_lists_every_schema_key_with_its_type_and_default() {
    let schema = schema_keys(&the_schema());
    assert!(
        schema.len() > 300,
        "only {} schema keys found",
        schema.len()
    );
    let drift = config_doc_drift(&schema, &repo_file("docs/configuration.md"));
    assert!(
        drift.is_empty(),
        "docs/configuration.md and `jetsink schema` disagree:\n{}",
        drift.join("\n")
    );
}

#[test]
fn a_key_type_or_default_that_disagrees_with_the_schema_is_reported() {
    let schema = schema_keys(&the_schema());
    let md = repo_file("docs/configuration.md");
    let doctored = md
        .replace(
            "| `batch_size` | integer | `500` |",
            "| `batch_size` | integer | `400` |",
        )
        .replace(
            "| `pass_env` | array of strings |",
            "| `pass_env` | array of integers |",
        )
        .replace(
            "| `fsync` | boolean | `true` |",
            "| `fsync` | string | `true` |",
        )
        .lines()
        .filter(|l| !l.starts_with("| `max_held_ms` |"))
        .chain([
            "## sinks.&lt;name&gt;.delivery.retry",
            "",
            "| key | type | default | meaning |",
            "| `max_tries` | integer | `3` | x |",
        ])
        .collect::<Vec<_>>()
        .join("\n");
    assert_ne!(doctored, md);
    let drift = config_doc_drift(&schema, &doctored);
    let expected = [
        "sinks.<name>.delivery.batch_size: default 500 in the schema, `400` in the docs",
        "sinks.<name>.delivery.retry.max_held_ms: in the schema, in no key table",
        "sinks.<name>.destination[file].fsync: type {\"boolean\"} in the schema, string in the docs",
        "sinks.<name>.delivery.retry.max_tries: in a key table, not in the schema",
        "sinks.<name>.destination[exec].pass_env: items {\"string\"} in the schema, array of integers in the docs",
    ];
    for e in expected {
        assert!(
            drift.iter().any(|d| d.starts_with(e)),
            "{e} not reported in {drift:#?}"
        );
    }
    assert_eq!(drift.len(), expected.len(), "{drift:#?}");
}

/// The alternatives and parts of a schema node (`anyOf`, `oneOf`, `allOf`), which every
/// walk of the schema descends into.
fn subschemas(node: &Value) -> impl Iterator<Item = &Value> {
    ["anyOf", "oneOf", "allOf"]
        .into_iter()
        .filter_map(|key| node.get(key).and_then(Value::as_array))
        .flatten()
}
