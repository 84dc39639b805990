//! The `exec` destination's settings and their checks.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::sinks::settings::DestinationSettings;

/// The `exec` destination: runs `command` once per message, the payload on stdin.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecConfig {
    /// The program and its arguments, e.g. `["/usr/local/bin/grade", "--strict"]`. No
    /// shell: the first element is an absolute path, started directly; the payload arrives
    /// on its stdin.
    pub command: Vec<String>,
    /// How long one job may run, in milliseconds, 1 – 86400000. Default 60000. A job that
    /// outlasts it is killed (its whole process group) and refused as permanent.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Jobs of a batch run at once, 1 – 1024. Default 4. Set `delivery.batch_size` to a
    /// small multiple of it: a batch's jobs are settled when its last job ends.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Environment variables set for the program, name → value. The environment is
    /// otherwise empty except for `pass_env` and the `JETSINK_*` job variables. Not for
    /// secrets: `validate` prints the names (never the values); use `pass_env`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Names of variables copied from jetsink's own environment when set there (e.g.
    /// `PATH`, `HOME`, a token).
    #[serde(default)]
    pub pass_env: Vec<String>,
    /// Most bytes of standard output kept as the job's `output`, 0 – 16777216. Default
    /// 65536. The rest is read and discarded, and the result says `output_truncated`.
    #[serde(default = "default_max_output_bytes")]
    pub max_output_bytes: usize,
    /// Exit codes meaning "try again later", 1 – 255. Default `[75]` (EX_TEMPFAIL). Such a
    /// job is handed back and redelivered; any other non-zero exit, a signal or the
    /// timeout is permanent.
    #[serde(default = "default_transient_exit_codes")]
    pub transient_exit_codes: Vec<i32>,
    /// The directory the program runs in. Default: jetsink's own.
    #[serde(default)]
    pub working_dir: Option<String>,
}

fn default_timeout_ms() -> u64 {
    60_000
}
fn default_concurrency() -> usize {
    4
}
fn default_max_output_bytes() -> usize {
    65_536
}
fn default_transient_exit_codes() -> Vec<i32> {
    vec![75]
}

/// Names jetsink sets itself for every job.
pub const RESERVED_PREFIX: &str = "JETSINK_";

/// Whether `name` can be an environment variable name: letters, digits and `_`, not
/// starting with a digit.
pub fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

impl DestinationSettings for ExecConfig {
    fn problems(&self) -> Vec<(String, String)> {
        let mut p = Vec::new();
        match self.command.first() {
            None => p.push(("command".into(), "must name a program: [\"/path/to/program\", args...]".into())),
            Some(prog) if !prog.starts_with('/') => p.push((
                "command[0]".into(),
                format!("{prog:?} is not an absolute path (no shell and no PATH search: name the program by its full path)"),
            )),
            Some(_) => {}
        }
        for (i, a) in self.command.iter().enumerate() {
            if a.contains('\0') {
                p.push((format!("command[{i}]"), "contains a NUL byte".into()));
            }
        }
        if !(1..=86_400_000).contains(&self.timeout_ms) {
            p.push((
                "timeout_ms".into(),
                format!("{} is out of range 1 – 86400000", self.timeout_ms),
            ));
        }
        if !(1..=1024).contains(&self.concurrency) {
            p.push((
                "concurrency".into(),
                format!("{} is out of range 1 – 1024", self.concurrency),
            ));
        }
        if self.max_output_bytes > 16 * 1024 * 1024 {
            p.push((
                "max_output_bytes".into(),
                format!("{} is over 16777216", self.max_output_bytes),
            ));
        }
        for (name, value) in &self.env {
            let key = format!("env.{name}");
            if !is_env_name(name) {
                p.push((
                    key,
                    "is not a variable name (letters, digits, '_'; not starting with a digit)"
                        .into(),
                ));
            } else if name.starts_with(RESERVED_PREFIX) {
                p.push((
                    key,
                    format!(
                        "names starting with {RESERVED_PREFIX} are set by jetsink for each job"
                    ),
                ));
            } else if value.contains('\0') {
                p.push((key, "the value contains a NUL byte".into()));
            }
        }
        for (i, name) in self.pass_env.iter().enumerate() {
            let key = format!("pass_env[{i}]");
            if !is_env_name(name) {
                p.push((key, format!("{name:?} is not a variable name")));
            } else if name.starts_with(RESERVED_PREFIX) {
                p.push((
                    key,
                    format!(
                        "names starting with {RESERVED_PREFIX} are set by jetsink for each job"
                    ),
                ));
            } else if self.env.contains_key(name) {
                p.push((key, format!("{name} is also set in env")));
            }
        }
        for (i, code) in self.transient_exit_codes.iter().enumerate() {
            if !(1..=255).contains(code) {
                p.push((
                    format!("transient_exit_codes[{i}]"),
                    format!("{code} is not an exit code 1 – 255 (0 means success)"),
                ));
            }
        }
        if let Some(d) = &self.working_dir {
            if !d.starts_with('/') {
                p.push((
                    "working_dir".into(),
                    format!("{d:?} is not an absolute path"),
                ));
            }
        }
        p
    }

    fn describe(&self) -> String {
        format!(
            "exec {} ({} argument(s)), concurrency {}, timeout {} ms",
            self.command.first().map_or("?", String::as_str),
            self.command.len().saturating_sub(1),
            self.concurrency,
            self.timeout_ms
        )
    }

    fn target(&self) -> String {
        // A program is not a place written to: two sinks may run the same one. The
        // whole config makes the name, so only two identical destinations conflict.
        format!(
            "exec:{}",
            serde_json::to_string(self).unwrap_or_else(|_| self.command.join(" "))
        )
    }
}
