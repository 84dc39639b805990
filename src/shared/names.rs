//! The naming rules of NATS that several config sections share: stream and consumer names,
//! subjects and subject filters.
//!
//! A leaf: it imports nothing from the rest of `config`, so the section checks use it
//! without importing the module that assembles them.

/// A stream or consumer name the server accepts: 1 to 255 characters without whitespace,
/// control characters, `.`, `*`, `>`, `/` or `\`.
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.chars().any(|c| {
            c.is_whitespace() || c.is_control() || matches!(c, '.' | '*' | '>' | '/' | '\\')
        })
}

/// A NATS subject or filter: dot-separated non-empty tokens; `*` is a whole token; `>` only
/// as the last token.
pub fn check_subject(subject: &str) -> Result<(), &'static str> {
    if subject.is_empty() {
        return Err("subject must not be empty");
    }
    if subject.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("subject must not contain whitespace");
    }
    let tokens: Vec<&str> = subject.split('.').collect();
    for (i, t) in tokens.iter().enumerate() {
        if t.is_empty() {
            return Err("subject has an empty token");
        }
        if t.contains('>') && (*t != ">" || i != tokens.len() - 1) {
            return Err("`>` must be the whole last token");
        }
        if t.contains('*') && *t != "*" {
            return Err("`*` must be a whole token");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subject_rules() {
        assert!(check_subject("a.b.>").is_ok());
        assert!(check_subject("a.*.c").is_ok());
        assert!(check_subject("a.>.c").is_err());
        assert!(check_subject("a..b").is_err());
        assert!(check_subject("a.b*").is_err());
        assert!(check_subject("a b").is_err());
    }
}
