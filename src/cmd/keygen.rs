//! `jetsink keygen`: writes a new random AES-256 key as base64 to a file created with
//! mode 0600, for an `encryption.keys[].file`. It never overwrites a file (an old key
//! lost is every row it sealed lost) and prints only the fingerprint.

use std::io::Write as _;
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
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .map_err(|e| format!("cannot create key file {}: {e}", path.display()))?;
    writeln!(file, "{}", encode_key(&key))
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("cannot write key file {}: {e}", path.display()))?;
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
    }
}
