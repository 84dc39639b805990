//! Pieces the network database destinations (PostgreSQL, MySQL/MariaDB) share: when an
//! error happened (which changes its class), reading the password from where the config
//! points, and naming the part of a batch an error is about.
//!
//! The same database error means different things at start-up and mid-run: a missing table
//! or a refused login at the first open is a configuration mistake (exit 78), while the same
//! error after the destination has been working is an outage someone will fix, so the batch
//! is held and retried, never dropped.

use crate::sinks::contract::SinkError;

/// When an error happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The first open at start-up: schema, login and privilege errors are configuration
    /// errors.
    Open,
    /// Writing, or reconnecting after the destination once worked: every error that is not
    /// about a message's content is transient.
    Write,
}

/// Reads the password the config points to: the environment variable `env`, or the file
/// `file` (one trailing newline removed). `None` when neither is set. A missing variable
/// or unreadable file is a configuration error; the message names the variable or file,
/// never the content.
pub fn read_password(env: Option<&str>, file: Option<&str>) -> Result<Option<String>, SinkError> {
    if let Some(var) = env {
        return std::env::var(var)
            .map(Some)
            .map_err(|_| SinkError::Misconfigured {
                message: format!(
                    "password_env: environment variable {var} is not set (or not UTF-8)"
                ),
            });
    }
    if let Some(path) = file {
        let text = crate::files::read_text(std::path::Path::new(path), crate::files::Kind::Secret)
            .map_err(|e| SinkError::Misconfigured {
                message: format!("password_file: {e}"),
            })?;
        let text = text.strip_suffix('\n').unwrap_or(&text);
        let text = text.strip_suffix('\r').unwrap_or(text);
        return Ok(Some(text.to_string()));
    }
    Ok(None)
}

/// Where `index` is, for messages: `message at batch index 3` or `batch`.
pub fn at(index: Option<usize>) -> String {
    match index {
        Some(i) => format!("message at batch index {i}"),
        None => "batch".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_from_file_drops_one_trailing_newline_only() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pw");
        std::fs::write(&p, "s3cret \n\n").unwrap();
        let got = read_password(None, Some(p.to_str().unwrap())).unwrap();
        assert_eq!(got.as_deref(), Some("s3cret \n"));
    }

    #[test]
    fn missing_password_sources_are_configuration_errors_without_content() {
        let e = read_password(Some("JETSINK_TEST_SURELY_UNSET_VAR"), None).unwrap_err();
        assert!(
            matches!(e, SinkError::Misconfigured { ref message } if message.contains("JETSINK_TEST_SURELY_UNSET_VAR"))
        );
        let e = read_password(None, Some("/nonexistent/jetsink/pw")).unwrap_err();
        assert_eq!(e.class(), "misconfigured");
        assert_eq!(read_password(None, None).unwrap(), None);
    }
}
