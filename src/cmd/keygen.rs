//! `jetsink keygen`: writes a new random AES-256 key as base64 to a file created with
//! mode 0600, for an `encryption.keys[].file`. It never overwrites a file (an old key
//! lost is every row it sealed lost) nor writes through a link, and prints only the
//! fingerprint. The file is written by [`crate::files::create_new`]: a temporary file
//! created new beside it, synced, then linked to the name only if nothing has that name,
//! so no reader ever sees half a key.

use std::path::{Path, PathBuf};

use ring::rand::{SecureRandom, SystemRandom};

use super::emit;
use crate::crypto::keys::{encode_key, fingerprint, KEY_LEN};
use crate::exit;

/// `jetsink keygen`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// The key file to create (must not exist).
    #[arg(long)]
    out: PathBuf,
}

/// Creates the key file; the exit code (1 when it exists or cannot be written).
pub fn execute(args: Args) -> u8 {
    match write_key(&args.out) {
        Ok(fp) => {
            emit(&format!(
                "wrote a new AES-256 key to {} (mode 0600, fingerprint {fp})",
                args.out.display()
            ));
            exit::OK
        }
        Err(e) => {
            eprintln!("error: {e}");
            exit::FAILURE
        }
    }
}

/// Writes a fresh key to `path` (created, mode 0600, synced); its fingerprint.
pub fn write_key(path: &Path) -> Result<String, String> {
    let mut key = [0u8; KEY_LEN];
    SystemRandom::new()
        .fill(&mut key)
        .map_err(|_| "the operating system's random generator failed".to_string())?;
    let text = format!("{}\n", encode_key(&key));
    crate::files::create_new(path, text.as_bytes(), 0o600).map_err(|e| match e {
        crate::files::WriteError::Exists { .. } => format!(
            "cannot create key file {}: it exists (keygen never replaces a key: every row it \
             sealed would be lost)",
            path.display()
        ),
        e => format!("cannot create key file {}: {e}", path.display()),
    })?;
    Ok(fingerprint(&key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_key_file_is_private_loadable_and_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.key");
        let fp = write_key(&path).unwrap();
        assert_eq!(crate::crypto::load::loose_mode(&path), None);
        let key =
            crate::crypto::load::load(&crate::crypto::load::KeySource::File(path.clone())).unwrap();
        assert_eq!(fingerprint(&key), fp);
        let err = write_key(&path).unwrap_err();
        assert!(err.contains("cannot create key file"), "{err}");
        assert!(err.contains("it exists"), "{err}");
    }

    #[test]
    fn a_link_at_the_key_path_is_refused_and_its_target_keeps_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let link = dir.path().join("k.key");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let err = write_key(&link).unwrap_err();
        assert!(err.contains("it exists"), "{err}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 2, "no temporary file left");
    }
}
