//! Reading key material: a file holding base64 text (`jetsink keygen` writes one), or an
//! environment variable holding the same. The only I/O of the crypto module; errors name
//! the file or variable, never the content.

use std::path::{Path, PathBuf};

use super::keys::{decode_key, KeyError, KEY_LEN};

/// Where one key's material is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// A file holding the base64 key.
    File(PathBuf),
    /// An environment variable holding the base64 key.
    Env(String),
}

/// Why a key could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read: missing, unreadable, not a regular file, or larger
    /// than a key file may be.
    #[error("{}", read_error(.0))]
    Read(crate::files::FileError),
    /// The file does not hold a key.
    #[error("key file {} {source}", .path.display())]
    FileKey {
        /// The file.
        path: PathBuf,
        /// What is wrong with its content.
        source: KeyError,
    },
    /// The variable is unset or not Unicode.
    #[error("environment variable {0} is not set")]
    EnvMissing(String),
    /// The variable does not hold a key.
    #[error("environment variable {name} {source}")]
    EnvKey {
        /// The variable.
        name: String,
        /// What is wrong with its value.
        source: KeyError,
    },
}

fn read_error(e: &crate::files::FileError) -> String {
    match e {
        crate::files::FileError::Io { path, source } => {
            format!("cannot read key file {}: {source}", path.display())
        }
        other => format!("key file {other}"),
    }
}

/// Loads one key. Whether a key file is readable by group or others is
/// [`loose_mode`]'s to tell; the config loader turns that into a warning the caller shows
/// (this runs before logging starts, so a log line here would be lost).
pub fn load(source: &KeySource) -> Result<[u8; KEY_LEN], LoadError> {
    match source {
        KeySource::File(path) => {
            let text =
                crate::files::read_text(path, crate::files::Kind::Key).map_err(LoadError::Read)?;
            decode_key(&text).map_err(|source| LoadError::FileKey {
                path: path.clone(),
                source,
            })
        }
        KeySource::Env(name) => {
            let text = std::env::var(name).map_err(|_| LoadError::EnvMissing(name.clone()))?;
            decode_key(&text).map_err(|source| LoadError::EnvKey {
                name: name.clone(),
                source,
            })
        }
    }
}

/// The file's permission bits when group or others may read or write it.
#[cfg(unix)]
pub fn loose_mode(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
    (mode & 0o077 != 0).then_some(mode)
}

/// Permissions are not checked on this platform.
#[cfg(not(unix))]
pub fn loose_mode(_path: &Path) -> Option<u32> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::keys::encode_key;

    #[test]
    fn a_file_with_a_bad_key_is_refused_naming_the_path_not_the_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("short.key");
        std::fs::write(&path, "c2VjcmV0\n").unwrap();
        let err = load(&KeySource::File(path.clone()))
            .unwrap_err()
            .to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(err.contains("6 bytes"), "{err}");
        assert!(!err.contains("c2VjcmV0"), "{err}");
    }

    #[test]
    fn a_good_key_file_loads_and_loose_permissions_are_noticed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.key");
        std::fs::write(&path, encode_key(&[3u8; KEY_LEN])).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            load(&KeySource::File(path.clone())).unwrap(),
            [3u8; KEY_LEN]
        );
        assert_eq!(loose_mode(&path), Some(0o644));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(loose_mode(&path), None);
    }
}
