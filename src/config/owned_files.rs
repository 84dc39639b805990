//! Every local path the config names, and the check `validate` and `run` make over them
//! once the config is valid ([`super::Config::load`]): a path jetsink writes — the
//! metrics snapshot, an SQLite database (and its journal, WAL and shared-memory files), a
//! file destination's directory — must not be a path another setting names (the config
//! file itself, a key, token, password, credentials or TLS file, another destination),
//! and must not be there as anything but what it writes: a device, FIFO, socket or
//! directory where a file is meant, or a file where a directory is meant. Each refusal
//! names both settings by JSON path (exit 78).
//!
//! The paths are resolved here (an existing file by device and inode, so links, `..` and
//! two spellings of one file agree; a path not there yet by its directory's real path and
//! its name); which pairs collide is decided by [`super::path_collisions`], pure.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::api::ApiConfig;
use super::encryption::EncryptionConfig;
use super::metrics::MetricsConfig;
use super::path_collisions::{collisions, lexical, Identity};
use super::raw::RawNats;
use crate::shared::issue::Issue;
use crate::sinks::settings::{NamedPath, PathRole};

/// The JSON path shown for the config file itself.
const CONFIG_FILE: &str = "the config file";

/// `path` at the JSON path `key`, read.
fn read(key: &str, path: Option<&String>) -> Option<NamedPath> {
    NamedPath::read(key, path)
}

/// The paths of the top-level sections: `nats`, `api`, `metrics`, `encryption`.
pub(crate) fn top_level(
    nats: &RawNats,
    api: Option<&ApiConfig>,
    metrics: Option<&MetricsConfig>,
    encryption: Option<&EncryptionConfig>,
) -> Vec<NamedPath> {
    let tls = nats.tls.as_ref();
    let mut out: Vec<NamedPath> = [
        read("nats.password_file", nats.password_file.as_ref()),
        read("nats.token_file", nats.token_file.as_ref()),
        read("nats.nkey_seed_file", nats.nkey_seed_file.as_ref()),
        read("nats.creds_file", nats.creds_file.as_ref()),
        read("nats.tls.ca_file", tls.and_then(|t| t.ca_file.as_ref())),
        read("nats.tls.cert_file", tls.and_then(|t| t.cert_file.as_ref())),
        read("nats.tls.key_file", tls.and_then(|t| t.key_file.as_ref())),
        read("api.token_file", api.and_then(|a| a.token_file.as_ref())),
    ]
    .into_iter()
    .flatten()
    .collect();
    if let Some(m) = metrics {
        out.push(NamedPath {
            key: "metrics.snapshot_file".into(),
            path: m.snapshot_file.clone(),
            role: PathRole::WritesFile,
        });
    }
    if let Some(e) = encryption {
        out.extend(key_files("encryption", e));
    }
    out
}

/// The key files of the `encryption` section at `at`.
pub(crate) fn key_files(at: &str, e: &EncryptionConfig) -> Vec<NamedPath> {
    e.keys
        .iter()
        .enumerate()
        .filter_map(|(i, k)| {
            k.file.as_ref().map(|f| NamedPath {
                key: format!("{at}.keys[{i}].file"),
                path: f.to_string_lossy().into_owned(),
                role: PathRole::Read,
            })
        })
        .collect()
}

/// A destination's paths, their keys under its JSON path `at`.
pub(crate) fn of_destination(at: &str, paths: Vec<NamedPath>) -> Vec<NamedPath> {
    paths
        .into_iter()
        .map(|p| NamedPath {
            key: format!("{at}.{}", p.key),
            ..p
        })
        .collect()
}

/// Where `path` is: an existing file by device and inode, else its absolute name with
/// its existing directory resolved.
fn identity(cwd: &Path, path: &Path) -> Identity {
    if let Ok(m) = std::fs::metadata(path) {
        return Identity::Inode(m.dev(), m.ino());
    }
    let abs = lexical(cwd, path);
    let real = abs
        .parent()
        .zip(abs.file_name())
        .and_then(|(dir, name)| std::fs::canonicalize(dir).ok().map(|d| d.join(name)));
    Identity::Path(real.unwrap_or(abs))
}

/// Why a written path cannot be written as it stands, if it cannot.
fn wrong_kind(p: &NamedPath) -> Option<String> {
    let meta = std::fs::metadata(&p.path).ok()?;
    let what = crate::files::what(meta.file_type());
    match p.role {
        PathRole::WritesFile if !meta.is_file() => Some(format!(
            "{} is {what}, not a regular file; jetsink writes a file there and replaces or \
             opens only regular files",
            p.path
        )),
        PathRole::WritesDirectory if !meta.is_dir() => Some(format!(
            "{} is {}, not a directory; jetsink writes its files into a directory there",
            p.path,
            if meta.is_file() {
                "a regular file"
            } else {
                what
            }
        )),
        _ => None,
    }
}

/// Every problem of the paths `paths` and the config file `config`, by JSON path.
pub(crate) fn check(config: &Path, paths: &[NamedPath]) -> Vec<Issue> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    let mut issues: Vec<Issue> = paths
        .iter()
        .filter_map(|p| {
            wrong_kind(p).map(|message| Issue {
                path: p.key.clone(),
                message,
            })
        })
        .collect();
    let mut all = vec![NamedPath {
        key: CONFIG_FILE.into(),
        path: config.display().to_string(),
        role: PathRole::Read,
    }];
    all.extend(paths.iter().cloned());
    let entries: Vec<(PathRole, Identity)> = all
        .iter()
        .map(|p| (p.role, identity(&cwd, Path::new(&p.path))))
        .collect();
    for (i, j) in collisions(&entries) {
        // The issue sits at the written one (the first one when both are written: the
        // top-level settings, the snapshot, come before the destinations).
        let (w, o) = if all[i].role != PathRole::Read {
            (&all[i], &all[j])
        } else {
            (&all[j], &all[i])
        };
        let other = if o.key == CONFIG_FILE {
            format!("the config file {}", o.path)
        } else {
            format!("{} ({})", o.key, o.path)
        };
        issues.push(Issue {
            path: w.key.clone(),
            message: format!(
                "{} is the same file as {other}; jetsink writes here, so one would overwrite \
                 the other: give each its own path",
                w.path
            ),
        });
    }
    issues
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(key: &str, path: &Path, role: PathRole) -> NamedPath {
        NamedPath {
            key: key.into(),
            path: path.display().to_string(),
            role,
        }
    }

    #[test]
    fn a_snapshot_at_the_database_the_key_or_the_config_is_refused_naming_both() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("jetsink.json");
        let key = dir.path().join("k.key");
        std::fs::write(&config, "{}").unwrap();
        std::fs::write(&key, "k").unwrap();
        let db = dir.path().join("x.db");
        // Spelled another way: through `..`, and a database that does not exist yet.
        let db_too = dir.path().join("sub/../x.db");
        for (victim, key_name) in [
            (&config, "the config file"),
            (&key, "encryption.keys[0].file"),
            (&db, "sinks.a.destination.path"),
        ] {
            // In the order the config is collected: top-level sections first.
            let paths = [
                named("metrics.snapshot_file", victim, PathRole::WritesFile),
                named("encryption.keys[0].file", &key, PathRole::Read),
                named("sinks.a.destination.path", &db, PathRole::WritesFile),
            ];
            let issues = check(&config, &paths);
            assert_eq!(issues.len(), 1, "{issues:?}");
            assert_eq!(issues[0].path, "metrics.snapshot_file");
            assert!(
                issues[0].message.contains(key_name),
                "{}",
                issues[0].message
            );
        }
        let _ = std::fs::create_dir(dir.path().join("sub"));
        let paths = [
            named("sinks.a.destination.path", &db, PathRole::WritesFile),
            named("sinks.b.destination.path", &db_too, PathRole::WritesFile),
        ];
        assert_eq!(check(&config, &paths).len(), 1);
    }

    #[test]
    fn a_device_fifo_or_directory_where_a_file_is_written_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("c.json");
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        for (path, what) in [
            (fifo.as_path(), "a FIFO"),
            (Path::new("/dev/null"), "a character device"),
            (dir.path(), "a directory"),
        ] {
            let issues = check(
                &config,
                &[named("metrics.snapshot_file", path, PathRole::WritesFile)],
            );
            assert_eq!(issues.len(), 1, "{issues:?}");
            assert!(
                issues[0]
                    .message
                    .starts_with(&format!("{} is {what}, not a regular file", path.display())),
                "{}",
                issues[0].message
            );
        }
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        let issues = check(
            &config,
            &[named("sink.directory", &file, PathRole::WritesDirectory)],
        );
        assert!(issues[0]
            .message
            .contains("is a regular file, not a directory"));
        // Two readers of one file, and two file destinations in one directory: fine.
        let ok = [
            named("nats.tls.ca_file", &file, PathRole::Read),
            named("sinks.a.destination.tls.ca_file", &file, PathRole::Read),
            named(
                "sinks.a.destination.directory",
                dir.path(),
                PathRole::WritesDirectory,
            ),
            named(
                "sinks.b.destination.directory",
                dir.path(),
                PathRole::WritesDirectory,
            ),
        ];
        assert!(check(&config, &ok).is_empty());
    }
}
