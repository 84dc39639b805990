//! Object keys. Pure: envelopes and settings in, keys out.
//!
//! A key is `<prefix>/<partition folders>/<name>.<extension>`, with the partition from the
//! `partition` template rendered for each message. A batch touching several partitions is
//! written as one object per partition ([`plan`]).
//!
//! The name is a function of the set of stream sequences the object holds
//! ([`object_name`]), so writing the same messages again (a retried upload, a redelivered
//! batch with the same members) overwrites the same object instead of adding one:
//! - `<first>-<last>` when the object holds every sequence from first to last (the usual
//!   case: then the range alone determines the set);
//! - `<first>-<last>-<hash>` otherwise (a batch with gaps: messages refused, delayed by the
//!   randomizer, in other buckets, or already stored), where `hash` is 12 hex digits of
//!   the SHA-256 of the sorted sequences. Without it, two different sets with the same
//!   first and last sequence (possible after redeliveries) would overwrite each other and
//!   lose messages.
//!
//! Messages that come again cut into other batches do not make objects that *overlap* (a
//! message in two objects): before an object is written, each of its messages is checked
//! against what its partition folder holds (`super::stored`, by the rules of
//! [`crate::sinks::util::archive`]), and those found are left out of it
//! ([`Planned::without`]), its name following what remains. A message is written again
//! only when that look cannot tell (an unreadable object with a matching name), never
//! skipped.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use object_store::path::{Path, PathPart};

use crate::envelope::Envelope;
pub use crate::sinks::util::archive::object_name;

/// The longest key S3 accepts, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;

/// One piece of a partition folder's name.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Stream,
    Year,
    Month,
    Day,
    Hour,
    /// The N-th subject token, from 1.
    Token(usize),
}

/// Why a `partition` template was refused; each names the template as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartitionError {
    /// `//`, or a `/` at either end.
    #[error("{template:?} has an empty folder (a leading, trailing or double `/`)")]
    EmptyFolder {
        /// The template.
        template: String,
    },
    /// A `{` without its `}`.
    #[error("{template:?}: `{{` without `}}`")]
    Unclosed {
        /// The template.
        template: String,
    },
    /// A `}` without its `{`.
    #[error("{template:?}: `}}` without `{{`")]
    Unopened {
        /// The template.
        template: String,
    },
    /// A placeholder the language does not have.
    #[error(
        "{template:?}: unknown placeholder {{{name}}}; use {{stream}}, {{yyyy}}, {{mm}}, {{dd}}, {{hh}} or {{subject.N}} (N from 1 to 32)"
    )]
    UnknownPlaceholder {
        /// The template.
        template: String,
        /// What was inside the braces.
        name: String,
    },
    /// A folder that is `.` or `..`, which object stores and file systems read as a path.
    #[error("{template:?}: `.` and `..` are not folder names")]
    DotFolder {
        /// The template.
        template: String,
    },
}

/// A parsed `partition` template: its folders, each a list of pieces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    folders: Vec<Vec<Piece>>,
}

impl Template {
    /// Parses `text`; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Template, PartitionError> {
        let template = || text.to_string();
        if text.is_empty() {
            return Ok(Template { folders: vec![] });
        }
        let mut folders = Vec::new();
        for folder in text.split('/') {
            if folder.is_empty() {
                return Err(PartitionError::EmptyFolder {
                    template: template(),
                });
            }
            let mut pieces = Vec::new();
            let mut rest = folder;
            while !rest.is_empty() {
                if let Some(after) = rest.strip_prefix('{') {
                    let Some(end) = after.find('}') else {
                        return Err(PartitionError::Unclosed {
                            template: template(),
                        });
                    };
                    let name = &after[..end];
                    pieces.push(match name {
                        "stream" => Piece::Stream,
                        "yyyy" => Piece::Year,
                        "mm" => Piece::Month,
                        "dd" => Piece::Day,
                        "hh" => Piece::Hour,
                        _ => match name.strip_prefix("subject.").map(str::parse::<usize>) {
                            Some(Ok(n)) if (1..=32).contains(&n) => Piece::Token(n),
                            _ => {
                                return Err(PartitionError::UnknownPlaceholder {
                                    template: template(),
                                    name: name.to_string(),
                                })
                            }
                        },
                    });
                    rest = &after[end + 1..];
                } else {
                    let end = rest.find('{').unwrap_or(rest.len());
                    let literal = &rest[..end];
                    if literal.contains('}') {
                        return Err(PartitionError::Unopened {
                            template: template(),
                        });
                    }
                    pieces.push(Piece::Text(literal.to_string()));
                    rest = &rest[end..];
                }
            }
            if pieces == [Piece::Text(".".into())] || pieces == [Piece::Text("..".into())] {
                return Err(PartitionError::DotFolder {
                    template: template(),
                });
            }
            folders.push(pieces);
        }
        Ok(Template { folders })
    }

    /// The folder names of `e`'s partition. A missing subject token is `_`, and so is a
    /// folder that would be empty, `.` or `..`.
    pub fn render(&self, e: &Envelope) -> Vec<String> {
        let t = e.published_at.to_offset(time::UtcOffset::UTC);
        self.folders
            .iter()
            .map(|pieces| {
                let mut s = String::new();
                for p in pieces {
                    // Writing to a String cannot fail.
                    let _ = match p {
                        Piece::Text(x) => write!(s, "{x}"),
                        Piece::Stream => write!(s, "{}", e.stream),
                        Piece::Year => write!(s, "{:04}", t.year()),
                        Piece::Month => write!(s, "{:02}", u8::from(t.month())),
                        Piece::Day => write!(s, "{:02}", t.day()),
                        Piece::Hour => write!(s, "{:02}", t.hour()),
                        Piece::Token(n) => {
                            write!(s, "{}", e.subject.split('.').nth(n - 1).unwrap_or("_"))
                        }
                    };
                }
                if s.is_empty() || s == "." || s == ".." {
                    "_".to_string()
                } else {
                    s
                }
            })
            .collect()
    }
}

/// One object to write: its key and the batch positions of its messages, in stream order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// The folder of its partition, prefix included (the root without either).
    pub folder: Path,
    /// The object's key.
    pub path: Path,
    /// Positions in the batch, sorted by stream sequence.
    pub members: Vec<usize>,
}

impl Planned {
    /// The object of `members` (positions in `batch`, sorted by stream sequence) in
    /// `folder`; the error names the first member when the key would exceed
    /// [`MAX_KEY_BYTES`].
    fn new(
        batch: &[Envelope],
        folder: Path,
        members: Vec<usize>,
        extension: &str,
    ) -> Result<Planned, (usize, String)> {
        let seqs: Vec<u64> = members.iter().map(|&i| batch[i].stream_sequence).collect();
        let name = format!("{}.{extension}", object_name(&seqs));
        let path = folder.clone().join(name.as_str());
        if path.as_ref().len() > MAX_KEY_BYTES {
            return Err((
                members.first().copied().unwrap_or_default(),
                format!(
                    "object key of {} bytes exceeds S3's {MAX_KEY_BYTES} (a long subject token in `partition`?)",
                    path.as_ref().len()
                ),
            ));
        }
        Ok(Planned {
            folder,
            path,
            members,
        })
    }

    /// This object with only `members` (a subset of its own, in its order), named after
    /// them: what is left once the messages already stored are taken out.
    pub fn without(
        &self,
        batch: &[Envelope],
        members: Vec<usize>,
        extension: &str,
    ) -> Result<Planned, (usize, String)> {
        Planned::new(batch, self.folder.clone(), members, extension)
    }
}

/// The objects of `batch`: one per partition, keys as described in the module doc. The
/// error names the position of a message whose key would exceed [`MAX_KEY_BYTES`] (a
/// long subject token), which only that message's content causes.
pub fn plan(
    batch: &[Envelope],
    template: &Template,
    prefix: &str,
    extension: &str,
) -> Result<Vec<Planned>, (usize, String)> {
    let mut groups: BTreeMap<Vec<String>, Vec<usize>> = BTreeMap::new();
    for (i, e) in batch.iter().enumerate() {
        groups.entry(template.render(e)).or_default().push(i);
    }
    let mut out = Vec::with_capacity(groups.len());
    for (folders, mut members) in groups {
        members.sort_by_key(|&i| batch[i].stream_sequence);
        let folder = Path::from_iter(
            prefix
                .split('/')
                .filter(|p| !p.is_empty())
                .map(PathPart::from)
                .chain(folders.iter().map(|f| PathPart::from(f.as_str()))),
        );
        out.push(Planned::new(batch, folder, members, extension)?);
    }
    Ok(out)
}
