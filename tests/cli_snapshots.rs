//! The command examples of the README and the docs, run as they are written: every
//! ```` ```console ```` block of the files below is a `trycmd` case (`$ ` a command, `? N` its
//! exit status when not 0, then its output, `[..]` and `...` elide what changes). Blocks
//! that need a live server are ```` ```text ```` or ```` ```sh ```` and are not run (a
//! ```` ```text ```` block then says above it how to regenerate it: `tests/docs_drift.rs`). The
//! commands run in the crate root, so `config/…` and `tests/cmd/…` paths resolve; the bad
//! configs they validate live in `tests/cmd/`.
//!
//! A changed message fails here instead of drifting from the docs. After a deliberate
//! change, `TRYCMD=overwrite cargo test --test integration cli_snapshots::` rewrites the blocks in place.

/// The files whose `console` blocks are snapshot tests.
const DOCUMENTED: &[&str] = &[
    "README.md",
    "docs/configuration.md",
    "docs/operations.md",
    "docs/encryption.md",
    "docs/randomization.md",
    "docs/job-queue.md",
];

#[test]
fn documented_commands_print_what_the_docs_show() {
    let cases = trycmd::TestCases::new();
    cases.register_bin(
        "jetsink",
        std::path::Path::new(env!("CARGO_BIN_EXE_jetsink")),
    );
    for file in DOCUMENTED {
        cases.case(file);
    }
    cases.run();
}

/// A `console` block in a file the test above does not run would never be checked: every
/// doc file with one must be listed.
#[test]
fn every_doc_with_a_console_block_is_run() {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut files = vec![format!("{root}/README.md")];
    for dir in ["docs", "docs/sinks", "deploy"] {
        for entry in std::fs::read_dir(format!("{root}/{dir}")).expect(dir) {
            let path = entry.expect("dir entry").path();
            if path.extension().is_some_and(|e| e == "md") {
                files.push(path.to_string_lossy().into_owned());
            }
        }
    }
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read doc");
        let relative = file.trim_start_matches(root).trim_start_matches('/');
        if text
            .lines()
            .any(|l| l.trim_start().starts_with("```console"))
        {
            assert!(
                DOCUMENTED.contains(&relative),
                "{relative} has a ```console block but is not run by this test"
            );
        }
    }
}
