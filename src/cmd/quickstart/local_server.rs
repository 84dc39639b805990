//! The NATS server `jetsink quickstart` starts when nothing answers at the config's first
//! server URL: `nats-server` from `PATH` (or Debian's `/usr/sbin`, which an ordinary
//! user's `PATH` lacks), with JetStream on, listening on that URL's loopback address and
//! port, its store and log under `data/`, and stopped again when jetsink stops.
//!
//! The server runs in a process group of its own, so the Ctrl-C that stops jetsink does
//! not reach it too: jetsink still needs it while it settles its last batch and flushes
//! the acknowledgements, and stops it afterwards. A quickstart killed with SIGKILL leaves
//! it running; the next one finds it listening and uses it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

/// Where the server keeps its JetStream store, relative to the working directory (like
/// the quickstart config's `data/jetsink.db`).
pub const STORE_DIR: &str = "data/nats-server";
/// Its log (stdout and stderr).
pub const LOG_FILE: &str = "data/nats-server.log";
/// Directories searched after `PATH`: Debian and Ubuntu install the binary in `/usr/sbin`.
pub const EXTRA_DIRS: &[&str] = &["/usr/sbin", "/usr/local/sbin"];

/// How long a started server may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long it may take to stop on SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Why no server could be found or started.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// The URL could not be read as host and port.
    #[error("nats.servers[0] = {url}: cannot tell its host and port")]
    BadUrl {
        /// The URL.
        url: String,
    },
    /// Nothing answers and the address is not on this machine.
    #[error("nothing answers at {url}, and quickstart starts a NATS server only on this machine (127.0.0.1, localhost or ::1); start one there, or point nats.servers at one")]
    NotLocal {
        /// The URL.
        url: String,
    },
    /// Nothing answers and no binary was found.
    #[error("nothing answers at {url} and no nats-server was found on PATH or in {dirs}: install it (Debian/Ubuntu: sudo apt-get install -y nats-server), or start a NATS server with JetStream (nats-server -js) yourself")]
    NotInstalled {
        /// The URL.
        url: String,
        /// The extra directories searched.
        dirs: String,
    },
    /// The server could not be started or did not listen.
    #[error("{binary} did not start listening on {addr}: {reason} (its log: {LOG_FILE})")]
    NotStarted {
        /// The binary.
        binary: String,
        /// The address.
        addr: String,
        /// What happened.
        reason: String,
    },
}

/// The server quickstart uses.
#[derive(Debug)]
pub enum Local {
    /// One already answered; it is left alone.
    Existing,
    /// Started here; [`Local::stop`] stops it.
    Started {
        /// The running server.
        child: Box<Child>,
        /// The binary, for the messages.
        binary: PathBuf,
    },
}

impl Local {
    /// Stops a server quickstart started: SIGTERM, then SIGKILL after 10 s. Answers what
    /// it did, for the console (`None` for a server it did not start).
    pub async fn stop(self) -> Option<String> {
        let Local::Started { mut child, binary } = self else {
            return None;
        };
        if let Some(pid) = child
            .id()
            .and_then(|p| rustix::process::Pid::from_raw(p as i32))
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let how = match tokio::time::timeout(STOP_TIMEOUT, child.wait()).await {
            Ok(_) => "stopped",
            Err(_) => {
                let _ = child.kill().await;
                "killed (it did not stop within 10 s of SIGTERM)"
            }
        };
        Some(format!(
            "{how} the nats-server it started ({}); its store stays in {STORE_DIR}",
            binary.display()
        ))
    }
}

/// `host:port` of a server URL (`nats://127.0.0.1:4222`, `tls://h`, `h:4222`, `[::1]:4222`),
/// with NATS's default port 4222 when none is given.
pub fn host_port(url: &str) -> Option<(String, u16)> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => 4222,
    };
    (!host.is_empty()).then(|| (host.to_string(), port))
}

/// Whether quickstart may start a server for `host`: only on this machine.
pub fn is_loopback(host: &str) -> bool {
    matches!(host, "localhost" | "::1")
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|a| a.is_loopback())
}

/// The first executable `nats-server` in `dirs`, in order.
pub fn find_binary<I, P>(dirs: I) -> Option<PathBuf>
where
    I: IntoIterator<Item = P>,
    P: AsRef<Path>,
{
    use std::os::unix::fs::PermissionsExt;
    dirs.into_iter()
        .map(|d| d.as_ref().join("nats-server"))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The directories searched for the binary: `PATH`'s, then [`EXTRA_DIRS`].
fn search_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(EXTRA_DIRS.iter().map(PathBuf::from));
    dirs
}

/// Whether something accepts TCP connections at `host:port` within a second.
async fn answers(host: &str, port: u16) -> bool {
    let connect = tokio::net::TcpStream::connect((host, port));
    matches!(
        tokio::time::timeout(Duration::from_secs(1), connect).await,
        Ok(Ok(_))
    )
}

/// Uses the server at `url` when something answers there, else starts one (see the
/// module documentation). `say` receives the lines for the console.
pub async fn ensure(url: &str, say: impl Fn(&str)) -> Result<Local, LocalError> {
    let bad = || LocalError::BadUrl {
        url: url.to_string(),
    };
    let (host, port) = host_port(url).ok_or_else(bad)?;
    if answers(&host, port).await {
        // Only TCP answered: whether a NATS server is there shows when the connection is
        // made, and quickstart says "connected" only then.
        say(&format!(
            "something accepts connections at {url}: trying it as the NATS server"
        ));
        return Ok(Local::Existing);
    }
    if !is_loopback(&host) {
        return Err(LocalError::NotLocal {
            url: url.to_string(),
        });
    }
    let binary = find_binary(search_dirs()).ok_or_else(|| LocalError::NotInstalled {
        url: url.to_string(),
        dirs: EXTRA_DIRS.join(", "),
    })?;
    let addr = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let not_started = |reason: String| LocalError::NotStarted {
        binary: binary.display().to_string(),
        addr: addr.clone(),
        reason,
    };
    std::fs::create_dir_all(STORE_DIR)
        .map_err(|e| not_started(format!("cannot create {STORE_DIR}: {e}")))?;
    // Written in place (the server holds it open), but never through a link.
    let log = crate::files::open_in_place(std::path::Path::new(LOG_FILE), true)
        .map_err(|e| not_started(e.to_string()))?;
    let err_log = log
        .try_clone()
        .map_err(|e| not_started(format!("cannot open {LOG_FILE}: {e}")))?;
    say(&format!(
        "nothing answers at {url}: starting {} with JetStream on {addr} (store {STORE_DIR}, log {LOG_FILE})",
        binary.display()
    ));
    let mut child = Command::new(&binary)
        .args([
            "-js",
            "-a",
            &host,
            "-p",
            &port.to_string(),
            "-sd",
            STORE_DIR,
        ])
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err_log)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| not_started(e.to_string()))?;
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    while !answers(&host, port).await {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(not_started(format!("it exited ({status})")));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(not_started(format!(
                "not listening after {} s",
                START_TIMEOUT.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(Local::Started {
        child: Box::new(child),
        binary,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_comes_from_the_url_with_the_default_port() {
        assert_eq!(
            host_port("nats://127.0.0.1:4222"),
            Some(("127.0.0.1".into(), 4222))
        );
        assert_eq!(
            host_port("nats://localhost"),
            Some(("localhost".into(), 4222))
        );
        assert_eq!(
            host_port("127.0.0.1:14222"),
            Some(("127.0.0.1".into(), 14222))
        );
        assert_eq!(host_port("tls://[::1]:4443"), Some(("::1".into(), 4443)));
        assert_eq!(host_port("nats://[::1]"), Some(("::1".into(), 4222)));
        assert_eq!(host_port("nats://u:p@h:1/x"), Some(("h".into(), 1)));
        assert_eq!(host_port("nats://h:port"), None);
        assert_eq!(host_port("nats://"), None);
    }

    #[test]
    fn only_this_machine_gets_a_server() {
        for local in ["127.0.0.1", "127.1.2.3", "localhost", "::1"] {
            assert!(is_loopback(local), "{local}");
        }
        for remote in ["10.0.0.1", "nats.example.com", "0.0.0.0"] {
            assert!(!is_loopback(remote), "{remote}");
        }
    }

    #[test]
    fn the_first_executable_binary_in_order_is_found() {
        use std::os::unix::fs::PermissionsExt;
        let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let write = |d: &tempfile::TempDir, mode: u32| {
            let p = d.path().join("nats-server");
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            p
        };
        write(&dirs[0], 0o644);
        let second = write(&dirs[1], 0o755);
        write(&dirs[2], 0o755);
        assert_eq!(find_binary(dirs.iter().map(|d| d.path())), Some(second));
        assert_eq!(find_binary(dirs[..1].iter().map(|d| d.path())), None);
    }
}
