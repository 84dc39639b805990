//! The `jetsink` command tree: parses the command line, starts the async runtime and hands
//! the command to its module under `cmd`, which does the work, prints, and answers the
//! exit code (0 ok, 2 usage, 78 config, 69 dependency unavailable, 65 no such message, 1 other).
//!
//! Each command's flags live beside its code (`cmd::<command>::Args`); this file holds only
//! the shape of the command tree, so `jetsink --help` reads the same as the modules. It
//! is in the library rather than in `main.rs` so that the release build compiles it with
//! the library's codegen units instead of as one more crate at the end of the build.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::{cmd, exit};

#[derive(Parser)]
#[command(
    name = "jetsink",
    version,
    about = "Moves messages from NATS JetStream into durable destinations, ACKing each only after it is committed."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon until SIGTERM or SIGINT.
    Run(cmd::run::Args),
    /// Run a config with test messages, starting a local nats-server if none answers.
    Quickstart(cmd::quickstart::Args),
    /// Check a config file offline and print what it would do; with --online, against
    /// the live servers too, changing nothing.
    Validate(cmd::validate::Args),
    /// Print the JSON Schema of the config file.
    Schema,
    /// Publish test messages, awaiting every PubAck.
    Publish(cmd::publish::Args),
    /// Measure the pipeline against the bare-consumer ceiling on a fresh stream.
    Bench(cmd::bench::Args),
    /// Submit one job to a sink in job-queue mode and wait for its result.
    Submit(cmd::submit::Args),
    /// Read a running daemon's metrics, or the snapshot file it writes.
    Metrics {
        #[command(subcommand)]
        command: MetricsCommand,
    },
    /// A live view of a running daemon, one line per sink: state, rate, backlog, what it
    /// holds, what failed last; --once prints one snapshot.
    Top(cmd::top::Args),
    /// Print stored records of an encrypted sink in clear, verifying each belongs to its row.
    Decrypt(cmd::decrypt::Args),
    /// Write a new random AES-256 key file (mode 0600) for `encryption.keys`.
    Keygen(cmd::keygen::Args),
    /// Write a range of a sink's stream into its destination again, idempotently,
    /// without moving the sink's consumer.
    Replay(cmd::replay::Args),
    /// Pause a sink's consumer in the server (nats-server 2.11+) until a time, for a
    /// duration, or until resumed: every running instance stops pulling meanwhile.
    Pause(cmd::pause::Args),
    /// Resume a paused sink's consumer at once.
    Resume(cmd::pause::ResumeArgs),
    /// Say where one message is: in the stream, delivered or ACKed by the sink's
    /// consumers, stored in the destination, dead-lettered and why.
    Trace(cmd::trace::Args),
    /// Work with a sink's dead-letter queue.
    Dlq {
        #[command(subcommand)]
        command: DlqCommand,
    },
}

#[derive(Subcommand)]
enum DlqCommand {
    /// Republish dead-lettered messages to their original subject, then remove them.
    Replay(cmd::dlq_replay::Args),
}

#[derive(Subcommand)]
enum MetricsCommand {
    /// Print a running daemon's /metrics (or its snapshot file) as `kind name value` rows.
    Show(cmd::metrics_show::Args),
    /// Print one metric's value, for scripts.
    Get(cmd::metrics_show::get::Args),
}

/// The whole binary after the allocator: parses the command line, starts the runtime,
/// runs the command and answers its exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    let code = runtime.block_on(dispatch(cli.command));
    // Blocking destination calls may still be finishing after a shutdown timeout.
    runtime.shutdown_timeout(Duration::from_secs(1));
    ExitCode::from(code)
}

/// Runs the command; its exit code.
async fn dispatch(command: Command) -> u8 {
    match command {
        Command::Run(args) => cmd::run::execute(args).await,
        Command::Quickstart(args) => cmd::quickstart::execute(args).await,
        Command::Validate(args) => cmd::validate::execute(args).await,
        Command::Schema => cmd::schema::execute(),
        Command::Publish(args) => cmd::publish::execute(args).await,
        Command::Bench(args) => cmd::bench::execute(args).await,
        Command::Submit(args) => cmd::submit::execute(args).await,
        Command::Decrypt(args) => cmd::decrypt::execute(args),
        Command::Keygen(args) => cmd::keygen::execute(args),
        Command::Metrics {
            command: MetricsCommand::Show(args),
        } => cmd::metrics_show::execute(args).await,
        Command::Metrics {
            command: MetricsCommand::Get(args),
        } => cmd::metrics_show::get::execute(args).await,
        Command::Top(args) => cmd::top::execute(args).await,
        Command::Replay(args) => cmd::replay::execute(args).await,
        Command::Pause(args) => cmd::pause::execute(args).await,
        Command::Resume(args) => cmd::pause::execute_resume(args).await,
        Command::Trace(args) => cmd::trace::execute(args).await,
        Command::Dlq {
            command: DlqCommand::Replay(args),
        } => cmd::dlq_replay::execute(args).await,
    }
}
