//! The `jetsink` binary: parses the command line, sets up logging and the shutdown signal,
//! calls the library, and maps errors to exit codes (0 ok, 2 usage, 78 config, 69
//! dependency unavailable, 1 other).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tokio::sync::watch;

use jetsink::cmd::{self, publish};
use jetsink::config::{Config, LogFormat};
use jetsink::{exit, logging};

/// mimalloc instead of glibc malloc: the pipeline allocates a few small objects per
/// message (the NATS client's message, the envelope's strings), and glibc's `malloc` and
/// `free` were a sixth of the daemon's instructions in a profile of a drain. Built without
/// transparent huge pages (`no_thp`): with them, draining a 1,000,000-message backlog peaked
/// at 70 MiB of RSS instead of 20 MiB.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    Run {
        /// The JSON config file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Check a config file offline and print what it would do.
    Validate {
        /// The JSON config file.
        #[arg(long, short)]
        config: PathBuf,
        /// Message rate (msg/s) for the randomizer's expected-window estimate; repeatable.
        #[arg(long = "rate")]
        rates: Vec<f64>,
    },
    /// Print the JSON Schema of the config file.
    Schema,
    /// Publish test messages, awaiting every PubAck.
    Publish {
        /// NATS server URL.
        #[arg(long, default_value = "nats://127.0.0.1:4222")]
        server: String,
        /// Subject to publish on (a stream must capture it).
        #[arg(long, required_unless_present = "bucket_prefix")]
        subject: Option<String>,
        /// Number of messages.
        #[arg(long, default_value_t = 1000)]
        count: u64,
        /// Payload size in bytes.
        #[arg(long, default_value_t = 200)]
        size: usize,
        /// Messages per second (default: as fast as PubAcks return).
        #[arg(long)]
        rate: Option<u64>,
        /// Publishes awaiting their PubAck at once.
        #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=65536))]
        window: u64,
        /// Random subject buckets: publish each message to <PREFIX>.<i>, i uniform in
        /// 0..BUCKETS (replaces --subject).
        #[arg(long, requires = "buckets")]
        bucket_prefix: Option<String>,
        /// Number of buckets for --bucket-prefix.
        #[arg(long, requires = "bucket_prefix", value_parser = clap::value_parser!(u32).range(2..=256))]
        buckets: Option<u32>,
    },
    /// Measure the pipeline against the bare-consumer ceiling on a fresh stream.
    Bench(BenchArgs),
    /// Read a running daemon's metrics.
    Metrics {
        #[command(subcommand)]
        command: MetricsCommand,
    },
    /// Work with a sink's dead-letter queue.
    Dlq {
        #[command(subcommand)]
        command: DlqCommand,
    },
}

#[derive(Subcommand)]
enum DlqCommand {
    /// Republish dead-lettered messages to their original subject, then remove them.
    Replay {
        /// The JSON config file.
        #[arg(long, short)]
        config: PathBuf,
        /// The sink whose dead letters to replay.
        #[arg(long)]
        sink: String,
        /// Replay at most this many.
        #[arg(long)]
        limit: Option<u64>,
        /// List what would be replayed; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Only messages with this Jetsink-Error-Class (e.g. permanent).
        #[arg(long)]
        filter_error_class: Option<String>,
    },
}

#[derive(Subcommand)]
enum MetricsCommand {
    /// Print a running daemon's /metrics as `kind name value` rows.
    Show {
        /// The daemon's metrics endpoint (plain HTTP).
        #[arg(long, default_value = jetsink::cmd::metrics_show::DEFAULT_URL)]
        url: String,
        /// Show only metrics whose name matches this glob (`*`, `?`), with or without the
        /// `jetsink_` prefix, e.g. "priority_lane_*". Histogram buckets only when it
        /// contains `_bucket`.
        #[arg(long)]
        metric: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = ShowFormat::Table)]
        format: ShowFormat,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ShowFormat {
    /// Aligned kind, name, value columns.
    Table,
    /// A JSON array of {kind, name, labels, value}.
    Json,
}

#[derive(clap::Args)]
struct BenchArgs {
    /// NATS server URL.
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    server: String,
    /// Messages per pass.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    messages: u64,
    /// Payload size in bytes.
    #[arg(long, default_value_t = 200)]
    size: usize,
    /// Destination of the pipeline pass.
    #[arg(long, value_enum, default_value_t = BenchDestination::File)]
    destination: BenchDestination,
    /// Batch size of both passes.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    batch_size: u64,
    /// File destination: fdatasync each batch.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    fsync: bool,
    /// SQLite destination: synchronous pragma.
    #[arg(long, value_enum, default_value_t = BenchSync::Full)]
    synchronous: BenchSync,
    /// Use this config file's sink (its destination and delivery settings) instead.
    #[arg(long, requires = "sink")]
    config: Option<PathBuf>,
    /// The sink of --config to measure.
    #[arg(long, requires = "config")]
    sink: Option<String>,
    /// Ceiling/pipeline pairs; medians are reported.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100))]
    runs: u64,
    /// Offered load (msg/s) published during each pass instead of a prefilled backlog.
    #[arg(long)]
    rate: Option<u64>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum BenchDestination {
    /// Store nothing (the pipeline's own cost).
    None,
    /// JSON Lines files in a temporary directory.
    File,
    /// SQLite in a temporary directory.
    Sqlite,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum BenchSync {
    Off,
    Normal,
    Full,
    Extra,
}

fn main() -> ExitCode {
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

async fn dispatch(command: Command) -> u8 {
    match command {
        Command::Run { config } => run(config).await,
        Command::Bench(args) => bench(args).await,
        Command::Dlq {
            command:
                DlqCommand::Replay {
                    config,
                    sink,
                    limit,
                    dry_run,
                    filter_error_class,
                },
        } => {
            let opts = jetsink::cmd::dlq_replay::Options {
                limit,
                dry_run,
                error_class: filter_error_class,
            };
            dlq_replay(config, sink, opts).await
        }
        Command::Metrics {
            command:
                MetricsCommand::Show {
                    url,
                    metric,
                    format,
                },
        } => metrics_show(url, metric, format).await,
        Command::Validate { config, rates } => match Config::load(&config) {
            Ok(cfg) => {
                let rates = if rates.is_empty() {
                    vec![100.0, 1_000.0, 10_000.0]
                } else {
                    rates
                };
                emit(&format!(
                    "{} is valid\n{}",
                    config.display(),
                    cfg.summary(&rates)
                ));
                exit::OK
            }
            Err(e) => {
                eprintln!("error: {e}");
                exit::CONFIG
            }
        },
        Command::Schema => {
            let schema = schemars::schema_for!(jetsink::config::RawConfig);
            match serde_json::to_string_pretty(&schema) {
                Ok(text) => {
                    emit(&text);
                    exit::OK
                }
                Err(e) => {
                    eprintln!("error: cannot render the schema: {e}");
                    exit::FAILURE
                }
            }
        }
        Command::Publish {
            server,
            subject,
            count,
            size,
            rate,
            window,
            bucket_prefix,
            buckets,
        } => {
            logging::init("warn", LogFormat::Text);
            let client = match async_nats::ConnectOptions::new()
                .connection_timeout(Duration::from_secs(5))
                .connect(server.as_str())
                .await
            {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("error: cannot connect to NATS at {server}: {e}");
                    return exit::UNAVAILABLE;
                }
            };
            let js = async_nats::jetstream::new(client.clone());
            let plan = publish::PublishPlan {
                subject: subject.unwrap_or_default(),
                count,
                size,
                rate,
                window: window as usize,
                buckets: bucket_prefix.zip(buckets),
            };
            match publish::publish(&js, &plan).await {
                Ok(r) => {
                    println!(
                        "published {} messages of {} bytes to {} in {:.2}s ({:.0} msg/s)",
                        r.acknowledged,
                        plan.size,
                        match &plan.buckets {
                            Some((p, n)) => format!("{n} random buckets {p}.*"),
                            None => plan.subject.clone(),
                        },
                        r.elapsed.as_secs_f64(),
                        r.rate()
                    );
                    exit::OK
                }
                Err(e) => {
                    eprintln!("error: {e} (is there a stream capturing this subject? `jetsink run` creates one when the config has source.create_stream)");
                    exit::UNAVAILABLE
                }
            }
        }
    }
}

async fn bench(args: BenchArgs) -> u8 {
    use jetsink::cmd::bench::{self, Target};
    use jetsink::config::{DestinationConfig, FileConfig, SqliteConfig, SqliteSynchronous};
    use std::io::IsTerminal;
    logging::init("warn", LogFormat::Text);
    let target = match (&args.config, &args.sink) {
        (Some(path), Some(name)) => {
            let cfg = match Config::load(path) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("error: {e}");
                    return exit::CONFIG;
                }
            };
            match cfg.sinks.into_iter().find(|s| &s.name == name) {
                Some(s) => Target::Configured(Box::new(s)),
                None => {
                    eprintln!("error: {}: no sink named {name:?}", path.display());
                    return exit::CONFIG;
                }
            }
        }
        _ => match args.destination {
            BenchDestination::None => Target::Discard,
            BenchDestination::File => {
                Target::Builtin(Box::new(DestinationConfig::File(FileConfig {
                    directory: String::new(),
                    fsync: args.fsync,
                    rotate_bytes: 128 * 1024 * 1024,
                    rotate_interval_ms: 0,
                    prefix: "events".into(),
                })))
            }
            BenchDestination::Sqlite => {
                Target::Builtin(Box::new(DestinationConfig::Sqlite(SqliteConfig {
                    path: String::new(),
                    table: "jetsink_events".into(),
                    synchronous: match args.synchronous {
                        BenchSync::Off => SqliteSynchronous::Off,
                        BenchSync::Normal => SqliteSynchronous::Normal,
                        BenchSync::Full => SqliteSynchronous::Full,
                        BenchSync::Extra => SqliteSynchronous::Extra,
                    },
                    busy_timeout_ms: 5_000,
                })))
            }
        },
    };
    let opts = bench::Options {
        server: args.server,
        messages: args.messages,
        size: args.size,
        batch_size: args.batch_size as usize,
        runs: args.runs as usize,
        rate: args.rate,
        target,
        progress: !args.json && std::io::stderr().is_terminal(),
    };
    match bench::run(opts).await {
        Ok(report) => {
            if args.json {
                match serde_json::to_string(&report) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("error: {e}");
                        return exit::FAILURE;
                    }
                }
            } else {
                print!("{}", report.to_text());
            }
            exit::OK
        }
        Err(e) => {
            eprintln!("error: {e}");
            match e {
                bench::BenchError::Nats(_) => exit::UNAVAILABLE,
                _ => exit::FAILURE,
            }
        }
    }
}

async fn metrics_show(url: String, metric: Option<String>, format: ShowFormat) -> u8 {
    use jetsink::cmd::metrics_show::{show, Format};
    let format = match format {
        ShowFormat::Table => Format::Table,
        ShowFormat::Json => Format::Json,
    };
    let shown = tokio::task::spawn_blocking(move || show(&url, metric.as_deref(), format)).await;
    match shown {
        Ok(Ok(shown)) => {
            emit(shown.text.trim_end_matches('\n'));
            if shown.rows == 0 {
                eprintln!("no metric matches");
            }
            exit::OK
        }
        Ok(Err(e)) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
        Err(e) => {
            eprintln!("error: {e}");
            exit::FAILURE
        }
    }
}

async fn dlq_replay(path: PathBuf, sink: String, opts: jetsink::cmd::dlq_replay::Options) -> u8 {
    logging::init("warn", LogFormat::Text);
    let cfg = match Config::load(&path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::CONFIG;
        }
    };
    let Some(spec) = cfg.sinks.iter().find(|s| s.name == sink) else {
        eprintln!("error: {}: no sink named {sink:?}", path.display());
        return exit::CONFIG;
    };
    let Some(dl) = spec.dead_letter.as_ref() else {
        eprintln!(
            "error: {}: sink {sink} has no dead_letter section",
            path.display()
        );
        return exit::CONFIG;
    };
    let client = match jetsink::nats::connect(&cfg.nats, &jetsink::metrics::Metrics::new()).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::UNAVAILABLE;
        }
    };
    let js = async_nats::jetstream::new(client.clone());
    match jetsink::cmd::dlq_replay::run(&js, &sink, dl, &opts).await {
        Ok(lines) => {
            for l in &lines {
                println!(
                    "dlq seq {:<8} {:<10} -> {:<40} {}",
                    l.dlq_sequence, l.error_class, l.original_subject, l.outcome
                );
            }
            let done = lines
                .iter()
                .filter(|l| l.outcome == "replayed" || l.outcome == "would replay")
                .count();
            println!(
                "{} {done} of {} dead letter(s) examined for sink {sink}",
                if opts.dry_run {
                    "would replay"
                } else {
                    "replayed"
                },
                lines.len()
            );
            let _ = client.flush().await;
            exit::OK
        }
        Err(e) => {
            eprintln!("error: {e}");
            exit::UNAVAILABLE
        }
    }
}

async fn run(path: PathBuf) -> u8 {
    let config = match Config::load(&path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::CONFIG;
        }
    };
    logging::init(&config.logging.level, config.logging.format);
    let grace = config
        .sinks
        .iter()
        .map(|s| s.delivery.shutdown_timeout_ms)
        .max()
        .unwrap_or(0);
    let (tx, rx) = watch::channel(false);
    let signalled = tokio::spawn(wait_for_signal(tx));
    let daemon = cmd::run::run(config, rx);
    tokio::pin!(daemon);
    let result = tokio::select! {
        r = &mut daemon => r,
        _ = async {
            // Once a signal arrived, bound the wait for the runners to settle.
            let _ = signalled.await;
            tokio::time::sleep(Duration::from_millis(grace) + Duration::from_secs(5)).await;
        } => Err(cmd::run::AppError::Other("shutdown did not finish in time; unacked messages will be redelivered".into())),
    };
    match result {
        Ok(()) => {
            tracing::info!("stopped cleanly");
            exit::OK
        }
        Err(e) => {
            tracing::error!(error = %e, "jetsink stopped with an error");
            e.exit_code()
        }
    }
}

/// Writes command output to stdout; a reader that went away (`| head`) is not an error.
fn emit(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}

/// Turns the first SIGTERM or SIGINT into the shutdown signal.
async fn wait_for_signal(tx: watch::Sender<bool>) {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await
            }
        }
    };
    tokio::select! {
        _ = term => tracing::info!("SIGTERM received; stopping"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received; stopping"),
    }
    let _ = tx.send(true);
}
