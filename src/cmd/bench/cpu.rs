//! Where a pass's CPU time goes: the seconds spent by jetsink itself, by the nats-server it
//! talks to, and by the database server it writes to, read from `/proc` before and after
//! the pass. A server that does not run on this machine (or cannot be found) is reported
//! as such, never as zero.
//!
//! The nats-server is the process listening on the bench's port (found through
//! `/proc/net/tcp` and the processes' socket descriptors); a database server is every
//! process of its name (PostgreSQL runs one per connection). Linux only, which is where
//! jetsink is benchmarked; elsewhere every figure is "not measured".

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::sinks::settings::ServerProcess;

/// Whose CPU time a pass reports.
#[derive(Debug, Clone, Default)]
pub struct Watched {
    /// The nats-server's pid, when it runs here.
    pub nats: Option<u32>,
    /// The database server's process names, for a database destination on this machine.
    pub database: Option<&'static [&'static str]>,
}

/// Whether `host` names this machine.
fn is_local(host: &str) -> bool {
    matches!(
        host,
        "127.0.0.1" | "localhost" | "::1" | "[::1]" | "0.0.0.0" | ""
    )
}

/// CPU seconds per 100,000 messages of one pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CpuUse {
    /// jetsink (this process: the runner, the destination's client, the bench itself).
    pub jetsink: f64,
    /// The nats-server; `None` when it does not run on this machine.
    pub nats_server: Option<f64>,
    /// The database server; `None` for a destination without one, or one elsewhere.
    pub database: Option<f64>,
}

impl CpuUse {
    /// The rate at which the measured processes together would keep `cores` CPUs busy:
    /// the most a pass costing this much CPU per message could reach on this machine,
    /// whatever it waits on. `None` unless nats-server runs here (its share is measured).
    pub fn bound(&self, cores: usize) -> Option<f64> {
        let total = self.jetsink + self.nats_server? + self.database.unwrap_or(0.0);
        (total > 0.0).then(|| cores as f64 * 100_000.0 / total)
    }
}

/// A reading of the watched processes' CPU seconds.
#[derive(Debug, Clone, Default)]
pub struct Reading {
    jetsink: f64,
    nats: Option<f64>,
    database: Option<f64>,
}

impl Watched {
    /// The processes to watch: the nats-server listening on `port` when `host` is this
    /// machine, and the database server a destination names, when it runs here.
    pub fn find(host: &str, port: u16, database: Option<ServerProcess>) -> Watched {
        Watched {
            nats: is_local(host).then(|| listener_pid(port)).flatten(),
            database: database
                .filter(|d| is_local(&d.host))
                .map(|d| d.names)
                .filter(|names| local_database(names)),
        }
    }

    /// The CPU seconds of each watched process now.
    pub fn read(&self) -> Reading {
        Reading {
            jetsink: seconds(Path::new("/proc/self/stat")).unwrap_or(0.0),
            nats: self
                .nats
                .and_then(|pid| seconds(&Path::new("/proc").join(pid.to_string()).join("stat"))),
            database: self.database.map(named_seconds),
        }
    }
}

impl Reading {
    /// The CPU use from `self` to `later`, per 100,000 of `messages`.
    pub fn until(&self, later: &Reading, messages: u64) -> CpuUse {
        let per = 100_000.0 / messages.max(1) as f64;
        let delta = |a: Option<f64>, b: Option<f64>| Some(((b? - a?) * per).max(0.0));
        CpuUse {
            jetsink: ((later.jetsink - self.jetsink) * per).max(0.0),
            nats_server: delta(self.nats, later.nats),
            database: delta(self.database, later.database),
        }
    }
}

/// Clock ticks per second of `/proc/<pid>/stat`.
fn ticks() -> f64 {
    match rustix::param::clock_ticks_per_second() {
        0 => 100.0,
        t => t as f64,
    }
}

/// User plus system CPU seconds of the process whose `stat` file is `path`.
fn seconds(path: &Path) -> Option<f64> {
    let text = crate::files::read_text(path, crate::files::Kind::Proc).ok()?;
    stat_seconds(&text, ticks())
}

/// utime + stime of a `/proc/<pid>/stat` line, in seconds (pure). The command name is in
/// parentheses and may hold spaces, so fields are counted after its closing one.
pub fn stat_seconds(stat: &str, ticks: f64) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3 of the line, utime 14 and stime 15.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / ticks)
}

/// The CPU seconds of every process of one of `names`, summed.
fn named_seconds(names: &[&str]) -> f64 {
    processes()
        .into_iter()
        .filter(|(_, comm)| names.contains(&comm.as_str()))
        .filter_map(|(pid, _)| seconds(&Path::new("/proc").join(pid.to_string()).join("stat")))
        .sum()
}

/// Whether a process of one of `names` runs on this machine.
fn local_database(names: &[&str]) -> bool {
    processes()
        .iter()
        .any(|(_, comm)| names.contains(&comm.as_str()))
}

/// Every process's pid and command name.
fn processes() -> Vec<(u32, String)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let comm = Path::new("/proc").join(pid.to_string()).join("comm");
            let comm = crate::files::read_text(&comm, crate::files::Kind::Proc).ok()?;
            Some((pid, comm.trim().to_string()))
        })
        .collect()
}

/// The pid of the process listening on TCP `port`, through the listening socket's inode.
fn listener_pid(port: u16) -> Option<u32> {
    let mut inodes = BTreeMap::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        if let Ok(text) = crate::files::read_text(Path::new(table), crate::files::Kind::Proc) {
            for inode in listening_inodes(&text, port) {
                inodes.insert(inode, ());
            }
        }
    }
    if inodes.is_empty() {
        return None;
    }
    processes().into_iter().map(|(pid, _)| pid).find(|pid| {
        std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
            fds.filter_map(|fd| fd.ok())
                .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                .any(|link| {
                    let link = link.to_string_lossy();
                    link.strip_prefix("socket:[")
                        .and_then(|r| r.strip_suffix(']'))
                        .and_then(|n| n.parse::<u64>().ok())
                        .is_some_and(|n| inodes.contains_key(&n))
                })
        })
    })
}

/// The inodes of the sockets listening on `port` in a `/proc/net/tcp` table (pure).
pub fn listening_inodes(table: &str, port: u16) -> Vec<u64> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local = f.get(1)?;
            let p = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
            // State 0A is LISTEN.
            (p == port && *f.get(3)? == "0A").then(|| f.get(9)?.parse().ok())?
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utime_and_stime_are_read_after_a_name_with_spaces() {
        let stat =
            "4242 (nats server) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 100 0 0";
        assert_eq!(stat_seconds(stat, 100.0), Some(3.0));
        assert_eq!(stat_seconds("garbage", 100.0), None);
    }

    #[test]
    fn the_listening_socket_of_a_port_is_found_in_the_table() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:108E 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 55501 1 0000000000000000 100 0 0 10 0\n   1: 0100007F:108E 0100007F:D2A4 01 00000000:00000000 00:00000000 00000000     0        0 55502 1 0000000000000000 20 4 30 10 -1\n";
        assert_eq!(listening_inodes(table, 4238), vec![55501]);
        assert!(listening_inodes(table, 4222).is_empty());
    }

    #[test]
    fn a_server_not_measured_stays_unknown_and_rates_scale_to_100000_messages() {
        let a = Reading {
            jetsink: 1.0,
            nats: Some(2.0),
            database: None,
        };
        let b = Reading {
            jetsink: 2.0,
            nats: Some(6.0),
            database: None,
        };
        let u = a.until(&b, 200_000);
        assert_eq!(u.jetsink, 0.5);
        assert_eq!(u.nats_server, Some(2.0));
        assert_eq!(u.database, None);
    }

    #[test]
    fn the_cpu_bound_is_the_rate_that_keeps_every_core_busy() {
        let cost = |nats| CpuUse {
            jetsink: 0.5,
            nats_server: nats,
            database: Some(0.5),
        };
        // 2 CPU seconds per 100,000 messages on 2 cores: 100,000 msg/s at most.
        assert_eq!(cost(Some(1.0)).bound(2), Some(100_000.0));
        assert_eq!(cost(Some(1.0)).bound(1), Some(50_000.0));
        // A server elsewhere: its share is unknown, so no bound is claimed.
        assert_eq!(cost(None).bound(2), None);
    }
}
