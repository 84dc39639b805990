//! The commands of the `jetsink` binary, one module each, kept apart from the daemon's
//! parts (`config`, `nats`, `pipeline`, `sinks`, `dlq`, ...) that they drive: a command
//! wires those parts together for one purpose and owns its console output, while the
//! parts stay free of command-line concerns.
//!
//! Every command module has the same two entry points: `Args`, its clap flags, and
//! `execute(args) -> u8`, which does the work, prints, and answers the process exit code
//! ([`crate::exit`]). The flags sit beside the code that reads them, not in [`cli`], so
//! adding or changing an option is one file, the flag's doc comment (its `--help` text)
//! is next to its use, and [`cli`] is left with the command tree and the runtime. The
//! `Args` fields stay private: only clap fills them, so the library's API is the
//! functions each command is built on (`run::run`, `bench::run`, `publish::publish`,
//! `metrics_show::show`, `dlq_replay::run`, `submit::submit`), not the flags.

pub mod bench;
pub mod cli;
pub mod decrypt;
pub mod dlq_replay;
pub mod flag_values;
pub mod keygen;
pub mod metrics_show;
pub mod online;
pub mod pause;
pub mod preflight;
pub mod publish;
pub mod quickstart;
pub mod replay;
pub mod run;
pub mod schema;
pub mod signals;
pub mod submit;
pub mod top;
pub mod trace;
pub mod validate;

/// Writes command output to stdout; a reader that went away (`| head`) is not an error.
fn emit(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}
