//! The README tells the whole truth about what a newcomer runs first, and these tests keep
//! it so: its commands table lists every command `jetsink --help` shows (and nothing
//! else), its opening paragraph names every destination `jetsink schema` knows, and
//! `.ci/run` runs exactly the test commands its Development section gives.
//!
//! Each check is a pure function over the texts, so the tests below also feed it a
//! README with a row or a name taken out and see it fail.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

fn repo_file(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("read {}: {e}", full.display()))
}

fn help_of(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_jetsink"))
        .args(args)
        .arg("--help")
        .output()
        .expect("run jetsink --help");
    assert!(out.status.success(), "jetsink {args:?} --help failed");
    String::from_utf8(out.stdout).expect("utf-8 help")
}

/// The subcommand names of one `--help` text (its `Commands:` section), without `help`.
fn subcommands_in(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// Every command path of the binary, nested ones as `metrics show`: a command with
/// subcommands counts only through them.
fn binary_commands() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for top in subcommands_in(&help_of(&[])) {
        let nested = subcommands_in(&help_of(&[&top]));
        if nested.is_empty() {
            out.insert(top);
        } else {
            out.extend(nested.into_iter().map(|n| format!("{top} {n}")));
        }
    }
    out
}

/// The commands the README's `## Commands` table lists: the lowercase words after
/// `jetsink` at the start of each row (`| \`jetsink dlq replay --config …` → `dlq replay`).
fn table_commands(readme: &str) -> BTreeSet<String> {
    readme
        .lines()
        .skip_while(|l| l.trim() != "## Commands")
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .filter_map(|l| l.strip_prefix("| `jetsink "))
        .map(|rest| {
            rest.split(|c: char| c.is_whitespace() || c == '`')
                .take_while(|w| {
                    w.starts_with(|c: char| c.is_ascii_lowercase())
                        && w.chars().all(|c| c.is_ascii_lowercase() || c == '-')
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// What the table and the binary disagree on: (missing from the table, not a command).
fn table_drift(readme: &str, commands: &BTreeSet<String>) -> (Vec<String>, Vec<String>) {
    let table = table_commands(readme);
    (
        commands.difference(&table).cloned().collect(),
        table.difference(commands).cloned().collect(),
    )
}

#[test]
fn the_commands_table_lists_every_command_of_jetsink_help() {
    let (missing, stale) = table_drift(&repo_file("README.md"), &binary_commands());
    assert!(
        missing.is_empty(),
        "README.md's commands table lacks {missing:?}: add a row for each (`jetsink --help` shows them)"
    );
    assert!(
        stale.is_empty(),
        "README.md's commands table lists {stale:?}, which `jetsink --help` does not show"
    );
}

#[test]
fn a_command_taken_out_of_the_table_is_reported() {
    let readme = repo_file("README.md");
    let without: String = readme
        .lines()
        .filter(|l| !l.starts_with("| `jetsink submit "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(without, readme, "the README has a submit row to take out");
    let (missing, stale) = table_drift(&without, &binary_commands());
    assert_eq!((missing, stale), (vec!["submit".to_string()], vec![]));
}

/// How the README's opening paragraph names each destination type of `jetsink schema`.
const DESTINATION_NAMES: &[(&str, &str)] = &[
    ("sqlite", "SQLite"),
    ("file", "JSON Lines"),
    ("postgres", "PostgreSQL"),
    ("mysql", "MySQL"),
    ("s3", "S3"),
    ("http", "HTTP endpoint"),
    ("nats", "JetStream stream"),
    ("exec", "exec worker"),
];

/// The `type` values of the destinations in the config's JSON Schema.
fn destination_types() -> BTreeSet<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_jetsink"))
        .arg("schema")
        .output()
        .expect("run jetsink schema");
    let schema: serde_json::Value = serde_json::from_slice(&out.stdout).expect("schema json");
    schema["$defs"]["DestinationConfig"]["oneOf"]
        .as_array()
        .expect("DestinationConfig.oneOf")
        .iter()
        .filter_map(|d| {
            d["properties"]["type"]["const"]
                .as_str()
                .map(str::to_string)
        })
        .collect()
}

/// The README's first paragraph, after the title.
fn opening(readme: &str) -> String {
    readme
        .lines()
        .skip_while(|l| !l.starts_with("# "))
        .skip(1)
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The destination types the opening paragraph does not name (or this test cannot name).
fn unnamed_destinations(readme: &str, types: &BTreeSet<String>) -> Vec<String> {
    let text = opening(readme);
    types
        .iter()
        .filter(|t| {
            DESTINATION_NAMES
                .iter()
                .find(|(ty, _)| ty == t)
                .is_none_or(|(_, name)| !text.contains(name))
        })
        .cloned()
        .collect()
}

#[test]
fn the_opening_paragraph_names_every_destination() {
    let types = destination_types();
    assert!(types.len() >= 8, "{types:?}");
    let unnamed = unnamed_destinations(&repo_file("README.md"), &types);
    assert!(
        unnamed.is_empty(),
        "README.md's opening paragraph does not name the destinations {unnamed:?} \
         (a new one: name it there and in DESTINATION_NAMES)"
    );
    let without_s3 = repo_file("README.md").replace("S3", "object");
    assert_eq!(unnamed_destinations(&without_s3, &types), ["s3"]);
}

/// The lines of the `sh` block that follows `marker` in `text`.
fn sh_block_after(text: &str, marker: &str) -> Vec<String> {
    text.lines()
        .skip_while(|l| !l.contains(marker))
        .skip_while(|l| l.trim() != "```sh")
        .skip(1)
        .take_while(|l| l.trim() != "```")
        .map(str::to_string)
        .collect()
}

/// The commands `.ci/run` runs that start with `cargo test` or set the test server first,
/// with the `2>&1 | tee …` it adds to keep a log taken off.
fn ci_test_commands(script: &str) -> Vec<String> {
    script
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.contains("cargo test"))
        .map(|l| l.split(" 2>&1 | tee ").next().unwrap_or(l).to_string())
        .collect()
}

#[test]
fn ci_runs_exactly_the_test_commands_the_readme_gives() {
    let readme = sh_block_after(&repo_file("README.md"), "CI runs these two commands");
    assert_eq!(readme.len(), 2, "{readme:?}");
    assert!(
        readme.iter().all(|c| c.contains("--no-fail-fast")),
        "each pass runs every test binary: {readme:?}"
    );
    assert_eq!(ci_test_commands(&repo_file(".ci/run")), readme);
}

#[test]
fn every_destination_page_is_linked_from_the_documentation_list() {
    let readme: String = repo_file("README.md")
        .lines()
        .skip_while(|l| l.trim() != "## Documentation")
        .take_while(|l| l.trim() == "## Documentation" || !l.starts_with("## "))
        .collect();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/sinks");
    for entry in std::fs::read_dir(&dir).expect("docs/sinks") {
        let name = entry.expect("entry").file_name();
        let link = format!("(docs/sinks/{})", name.to_string_lossy());
        assert!(
            readme.contains(&link),
            "README.md's Documentation list does not link {link}"
        );
    }
}
