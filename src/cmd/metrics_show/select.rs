//! Which samples `--metric` names: an anchored shell glob, matched with and without the
//! `jetsink_` prefix, that leaves histogram buckets out unless it asks for them. Pure.

use crate::shared::prometheus_text::Sample;

/// The prefix of every jetsink metric, optional in a glob.
pub const PREFIX: &str = "jetsink_";

/// Shell-style glob match of the whole `text`: `*` matches any run of characters (also
/// none), `?` exactly one, every other character itself. Case-sensitive.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    // Where the last `*` was, and the text position it is currently taken to match up to.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(&c) if c == '?' || c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                // Let the last `*` swallow one more character and retry.
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Whether `glob` names `name`, with or without the `jetsink_` prefix.
fn names(glob: &str, name: &str) -> bool {
    glob_match(glob, name)
        || name
            .strip_prefix(PREFIX)
            .is_some_and(|n| glob_match(glob, n))
}

/// The samples to show, in exposition order. Without a glob, every sample except
/// histogram buckets. With one, the samples whose name or family name it matches (with or
/// without the `jetsink_` prefix); buckets only when the glob contains `_bucket` and
/// matches the bucket's own name.
pub fn select<'a>(samples: &'a [Sample], glob: Option<&str>) -> Vec<&'a Sample> {
    samples
        .iter()
        .filter(|s| match glob {
            None => !s.is_bucket(),
            Some(g) if s.is_bucket() => g.contains("_bucket") && names(g, &s.name),
            Some(g) => names(g, &s.name) || names(g, &s.family),
        })
        .collect()
}
