//! The target subject template: parsed once from the config, rendered once per message.
//!
//! An operator writes it and the source subject (network input) fills it, so both halves
//! are checked here, without I/O: [`Template::parse`] refuses anything that could render
//! an invalid subject, and [`Template::render`] fails only when a message's subject has
//! fewer tokens than the template asks for, which is that message's problem alone.
//!
//! The language: literal text, and placeholders in braces —
//! - `{subject}`: the whole source subject;
//! - `{sink}`: the sink's name;
//! - `{token[i]}`: token `i` (from 0) of the source subject.
//!
//! Literal text may not hold whitespace, control characters, braces, `*` or `>`, and
//! every dot-separated token of the template must be non-empty, so a rendered subject is
//! always a valid concrete subject (the placeholders never render empty).

use std::fmt;

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Copied as written.
    Literal(String),
    /// The whole source subject.
    Subject,
    /// The sink's name.
    Sink,
    /// Token `i` of the source subject.
    Token(usize),
}

/// A checked subject template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

/// Why a template was refused; the position is a byte offset into the template.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// Nothing to publish to.
    #[error("must not be empty")]
    Empty,
    /// A `{` without its `}`.
    #[error("`{{` at {at} is not closed")]
    Unclosed {
        /// Offset of the `{`.
        at: usize,
    },
    /// A placeholder the language does not have.
    #[error("unknown placeholder {{{name}}} at {at}; use {{subject}}, {{sink}} or {{token[i]}}")]
    Unknown {
        /// What was inside the braces.
        name: String,
        /// Offset of the `{`.
        at: usize,
    },
    /// A character a subject cannot hold, or a brace without its pair.
    #[error("character {ch:?} at {at} is not allowed in a subject template")]
    BadChar {
        /// The character.
        ch: char,
        /// Its offset.
        at: usize,
    },
    /// Two dots in a row, or a dot at either end.
    #[error("token {index} (from 0) is empty")]
    EmptyToken {
        /// Which dot-separated token.
        index: usize,
    },
}

/// Why one message's subject cannot fill the template.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// `{token[i]}` with `i` past the end of the subject.
    #[error("the template needs token {index} of subject {subject:?}, which has {tokens}")]
    NoToken {
        /// The token asked for.
        index: usize,
        /// How many the subject has.
        tokens: usize,
        /// The source subject.
        subject: String,
    },
}

/// Highest token index accepted, far beyond any subject a server stores.
const MAX_TOKEN: usize = 255;

impl Template {
    /// Parses and checks a template.
    pub fn parse(text: &str) -> Result<Template, TemplateError> {
        if text.is_empty() {
            return Err(TemplateError::Empty);
        }
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut chars = text.char_indices().peekable();
        while let Some((at, ch)) = chars.next() {
            match ch {
                '{' => {
                    let mut name = String::new();
                    let mut closed = false;
                    for (_, c) in chars.by_ref() {
                        if c == '}' {
                            closed = true;
                            break;
                        }
                        name.push(c);
                    }
                    if !closed {
                        return Err(TemplateError::Unclosed { at });
                    }
                    let part = placeholder(&name).ok_or(TemplateError::Unknown { name, at })?;
                    if !literal.is_empty() {
                        parts.push(Part::Literal(std::mem::take(&mut literal)));
                    }
                    parts.push(part);
                }
                c if c.is_whitespace() || c.is_control() || matches!(c, '}' | '*' | '>') => {
                    return Err(TemplateError::BadChar { ch: c, at });
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Literal(literal));
        }
        let template = Template { parts };
        template.check_tokens()?;
        Ok(template)
    }

    /// Every dot-separated token must hold a placeholder or a literal character.
    fn check_tokens(&self) -> Result<(), TemplateError> {
        let mut index = 0;
        let mut filled = false;
        for part in &self.parts {
            match part {
                Part::Literal(s) => {
                    for ch in s.chars() {
                        if ch == '.' {
                            if !filled {
                                return Err(TemplateError::EmptyToken { index });
                            }
                            index += 1;
                            filled = false;
                        } else {
                            filled = true;
                        }
                    }
                }
                _ => filled = true,
            }
        }
        if filled {
            Ok(())
        } else {
            Err(TemplateError::EmptyToken { index })
        }
    }

    /// The parts, in order.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// Whether the template names the sink; such a template needs the sink's name to
    /// render.
    pub fn uses_sink(&self) -> bool {
        self.parts.contains(&Part::Sink)
    }

    /// The subject for one message, appended to `out` (cleared first).
    pub fn render(&self, subject: &str, sink: &str, out: &mut String) -> Result<(), RenderError> {
        out.clear();
        for part in &self.parts {
            match part {
                Part::Literal(s) => out.push_str(s),
                Part::Subject => out.push_str(subject),
                Part::Sink => out.push_str(sink),
                Part::Token(i) => match subject.split('.').nth(*i) {
                    Some(t) => out.push_str(t),
                    None => {
                        return Err(RenderError::NoToken {
                            index: *i,
                            tokens: subject.split('.').count(),
                            subject: subject.to_string(),
                        })
                    }
                },
            }
        }
        Ok(())
    }

    /// A subject filter matching every subject the template can render (and possibly
    /// more), for the loop and target-stream checks: a token holding `{subject}` becomes
    /// `>` and ends the filter, any other token holding a placeholder becomes `*`.
    pub fn filter(&self, sink: &str) -> String {
        let mut tokens: Vec<String> = Vec::new();
        let mut current = String::new();
        let mut wild = false;
        let flush = |current: &mut String, wild: &mut bool, tokens: &mut Vec<String>| {
            tokens.push(if *wild {
                "*".to_string()
            } else {
                std::mem::take(current)
            });
            current.clear();
            *wild = false;
        };
        for part in &self.parts {
            match part {
                Part::Literal(s) => {
                    let mut pieces = s.split('.');
                    if let Some(first) = pieces.next() {
                        current.push_str(first);
                    }
                    for piece in pieces {
                        flush(&mut current, &mut wild, &mut tokens);
                        current.push_str(piece);
                    }
                }
                Part::Sink => current.push_str(sink),
                Part::Token(_) => wild = true,
                Part::Subject => {
                    tokens.push(">".to_string());
                    return tokens.join(".");
                }
            }
        }
        flush(&mut current, &mut wild, &mut tokens);
        tokens.join(".")
    }
}

fn placeholder(name: &str) -> Option<Part> {
    match name {
        "subject" => Some(Part::Subject),
        "sink" => Some(Part::Sink),
        _ => {
            let index = name.strip_prefix("token[")?.strip_suffix(']')?;
            if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) || index.len() > 3 {
                return None;
            }
            let i: usize = index.parse().ok()?;
            (i <= MAX_TOKEN).then_some(Part::Token(i))
        }
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for part in &self.parts {
            match part {
                Part::Literal(s) => f.write_str(s)?,
                Part::Subject => f.write_str("{subject}")?,
                Part::Sink => f.write_str("{sink}")?,
                Part::Token(i) => write!(f, "{{token[{i}]}}")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::names::check_subject;
    use crate::shared::subject_match::matches;
    use proptest::prelude::*;

    fn render(t: &str, subject: &str) -> Result<String, RenderError> {
        let mut out = String::new();
        Template::parse(t)
            .expect("valid template")
            .render(subject, "main", &mut out)?;
        Ok(out)
    }

    #[test]
    fn placeholders_render_from_the_source_subject() {
        assert_eq!(
            render("copy.{subject}", "orders.eu").unwrap(),
            "copy.orders.eu"
        );
        assert_eq!(render("{sink}.{token[1]}", "orders.eu").unwrap(), "main.eu");
        assert_eq!(
            render("x-{token[0]}-y.z", "orders.eu").unwrap(),
            "x-orders-y.z"
        );
        assert_eq!(render("fixed", "a.b").unwrap(), "fixed");
    }

    #[test]
    fn a_missing_token_is_that_messages_error() {
        assert_eq!(
            render("c.{token[2]}", "a.b"),
            Err(RenderError::NoToken {
                index: 2,
                tokens: 2,
                subject: "a.b".into()
            })
        );
    }

    #[test]
    fn bad_templates_are_refused_with_where() {
        use TemplateError::*;
        assert_eq!(Template::parse(""), Err(Empty));
        assert_eq!(Template::parse("a.{subject"), Err(Unclosed { at: 2 }));
        assert_eq!(
            Template::parse("a.{stream}"),
            Err(Unknown {
                name: "stream".into(),
                at: 2
            })
        );
        assert_eq!(
            Template::parse("a.{token[x]}"),
            Err(Unknown {
                name: "token[x]".into(),
                at: 2
            })
        );
        assert!(matches!(
            Template::parse("a.{token[256]}"),
            Err(Unknown { .. })
        ));
        assert_eq!(Template::parse("a.*"), Err(BadChar { ch: '*', at: 2 }));
        assert_eq!(Template::parse("a.>"), Err(BadChar { ch: '>', at: 2 }));
        assert_eq!(Template::parse("a b"), Err(BadChar { ch: ' ', at: 1 }));
        assert_eq!(Template::parse("a}"), Err(BadChar { ch: '}', at: 1 }));
        assert_eq!(Template::parse("a..b"), Err(EmptyToken { index: 1 }));
        assert_eq!(Template::parse(".a"), Err(EmptyToken { index: 0 }));
        assert_eq!(
            Template::parse("a.{subject}."),
            Err(EmptyToken { index: 2 })
        );
    }

    #[test]
    fn the_filter_covers_what_the_template_renders() {
        let f = |t: &str| Template::parse(t).unwrap().filter("main");
        assert_eq!(f("copy.{subject}"), "copy.>");
        assert_eq!(f("copy.{subject}.tail"), "copy.>");
        assert_eq!(f("{sink}.x-{token[0]}.y"), "main.*.y");
        assert_eq!(f("a.b"), "a.b");
        assert_eq!(f("{token[3]}"), "*");
    }

    fn subject() -> impl Strategy<Value = String> {
        prop::collection::vec("[a-z0-9_-]{1,6}", 1..6).prop_map(|t| t.join("."))
    }

    fn template_text() -> impl Strategy<Value = String> {
        prop::collection::vec(
            prop_oneof![
                3 => "[a-z.-]{1,5}".prop_map(|s| s),
                1 => Just("{subject}".to_string()),
                1 => Just("{sink}".to_string()),
                1 => (0usize..6).prop_map(|i| format!("{{token[{i}]}}")),
            ],
            1..6,
        )
        .prop_map(|p| p.concat())
    }

    proptest! {
        #[test]
        fn parsing_any_text_never_panics(text in "\\PC{0,40}") {
            let _ = Template::parse(&text);
        }

        #[test]
        fn a_parsed_template_renders_valid_subjects_inside_its_filter(
            text in template_text(),
            source in subject(),
        ) {
            let Ok(t) = Template::parse(&text) else { return Ok(()) };
            prop_assert_eq!(Template::parse(&t.to_string()), Ok(t.clone()));
            let mut out = String::new();
            match t.render(&source, "main", &mut out) {
                Ok(()) => {
                    prop_assert!(check_subject(&out).is_ok(), "{} -> {}", text, out);
                    prop_assert!(!out.contains('*') && !out.contains('>'));
                    prop_assert!(matches(&t.filter("main"), &out), "{} !~ {}", out, t.filter("main"));
                }
                Err(RenderError::NoToken { index, tokens, .. }) => {
                    prop_assert!(index >= tokens);
                }
            }
        }
    }
}
