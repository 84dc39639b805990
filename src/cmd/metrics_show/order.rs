//! Which of `jetsink metrics get`'s two positional arguments is the metric and which the
//! snapshot file. jetsink documents `get NAME FILE`; the priority-lane source document
//! (seed 003) writes `get FILE NAME`, and a script written against either must work. The
//! arguments tell themselves apart: an existing file is the FILE, and otherwise only one
//! of them can be a Prometheus metric name (a snapshot path has a `.` or a `/`). When
//! neither fact decides, guessing could read the wrong file or report a wrong metric as
//! absent, so it is an error naming both arguments.

/// Why the two arguments could not be told apart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("jetsink metrics get {first:?} {second:?}: cannot tell which is the metric NAME and which the snapshot FILE ({why}); give NAME first and an existing FILE second")]
pub struct OrderError {
    /// The first positional argument.
    pub first: String,
    /// The second positional argument.
    pub second: String,
    /// What made the order undecidable.
    pub why: &'static str,
}

/// Whether `text` is a valid Prometheus metric name: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
pub fn looks_like_metric(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// The metric name and the snapshot file (if any) of `get`'s positional arguments, in
/// either order; `is_file` says whether a path names an existing file. One argument is
/// always the name.
pub fn name_and_file<'a>(
    first: &'a str,
    second: Option<&'a str>,
    is_file: impl Fn(&str) -> bool,
) -> Result<(&'a str, Option<&'a str>), OrderError> {
    let Some(second) = second else {
        return Ok((first, None));
    };
    let as_written = Ok((first, Some(second)));
    let swapped = Ok((second, Some(first)));
    let undecided = |why| {
        Err(OrderError {
            first: first.to_string(),
            second: second.to_string(),
            why,
        })
    };
    match (is_file(first), is_file(second)) {
        (false, true) => return as_written,
        (true, false) => return swapped,
        _ => {}
    }
    let both_files = is_file(first);
    match (looks_like_metric(first), looks_like_metric(second)) {
        (true, false) => as_written,
        (false, true) => swapped,
        (true, true) if both_files => {
            undecided("both are existing files and either could be a metric name")
        }
        (true, true) => undecided("neither is an existing file and either could be a metric name"),
        (false, false) => undecided("neither is a valid metric name"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn none(_: &str) -> bool {
        false
    }

    #[test]
    fn the_source_documents_file_first_order_reads_as_name_then_file() {
        let exists = |p: &str| p == "metrics.json";
        let name = "current_priority_lanes_active";
        assert_eq!(
            name_and_file("metrics.json", Some(name), exists),
            Ok((name, Some("metrics.json")))
        );
        assert_eq!(
            name_and_file(name, Some("metrics.json"), exists),
            Ok((name, Some("metrics.json")))
        );
    }

    #[test]
    fn a_missing_file_is_still_told_apart_by_its_path_so_the_error_names_it() {
        assert_eq!(
            name_and_file("x", Some("nope.json"), none),
            Ok(("x", Some("nope.json")))
        );
        assert_eq!(
            name_and_file("state/metrics", Some("up"), none),
            Ok(("up", Some("state/metrics")))
        );
    }

    #[test]
    fn an_existing_file_decides_even_when_its_name_could_be_a_metric() {
        let exists = |p: &str| p == "snapshot";
        assert_eq!(
            name_and_file("snapshot", Some("up"), exists),
            Ok(("up", Some("snapshot")))
        );
    }

    #[test]
    fn undecidable_pairs_are_errors_naming_both_arguments() {
        let e = name_and_file("up", Some("snapshot"), none).unwrap_err();
        assert_eq!(
            e.why,
            "neither is an existing file and either could be a metric name"
        );
        assert!(e.to_string().contains("\"up\" \"snapshot\""), "{e}");
        let both = |_: &str| true;
        assert!(name_and_file("up", Some("snapshot"), both).is_err());
        let e = name_and_file("a.json", Some("b.json"), none).unwrap_err();
        assert_eq!(e.why, "neither is a valid metric name");
    }

    #[test]
    fn one_argument_is_the_name() {
        assert_eq!(name_and_file("up", None, none), Ok(("up", None)));
    }

    proptest! {
        /// A metric name and a snapshot path (it has a `.` or `/`) read the same in either
        /// order, whether the file exists or not.
        #[test]
        fn either_order_gives_the_same_name_and_file(
            name in "[a-zA-Z_:][a-zA-Z0-9_:]{0,40}",
            path in "[a-z0-9_/-]{0,20}[./][a-z0-9_.-]{0,20}",
            exists: bool,
        ) {
            let is_file = |p: &str| exists && p == path;
            let want = Ok((name.as_str(), Some(path.as_str())));
            prop_assert_eq!(name_and_file(&name, Some(&path), is_file), want.clone());
            prop_assert_eq!(name_and_file(&path, Some(&name), is_file), want);
        }
    }
}
