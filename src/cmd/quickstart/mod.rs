//! `jetsink quickstart`: from a fresh clone to rows in a table with one command. It runs
//! the daemon on a config (`config/quickstart.json` unless told otherwise) exactly as
//! `jetsink run` does, and beside it:
//!
//! 1. before the daemon starts, makes sure a NATS server answers at the config's first
//!    URL, starting a local `nats-server` with JetStream when none does
//!    ([`local_server`]);
//! 2. once the first sink's stream and consumer exist, publishes test messages (1000 of
//!    200 bytes to `quickstart.hello`, each awaiting its PubAck, as `jetsink publish`);
//! 3. waits until the stream's consumers hold nothing pending or unacknowledged (every
//!    message committed, then ACKed) and says so;
//! 4. keeps the daemon running until Ctrl-C or SIGTERM, then stops the server it started.
//!
//! The exit code is the daemon's (0 after a clean stop), or 69 when no server could be
//! found or started, or the test messages could not be published.

pub mod local_server;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use futures::TryStreamExt;
use tokio::sync::watch;

use super::publish::{publish, PublishPlan};
use crate::config::Config;

/// `jetsink quickstart`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// The JSON config file to run.
    #[arg(long, short, default_value = "config/quickstart.json")]
    config: PathBuf,
    /// Test messages to publish once the sink runs (0: none).
    #[arg(long, default_value_t = 1000)]
    count: u64,
    /// Their subject; the first sink's stream must capture it.
    #[arg(long, default_value = "quickstart.hello")]
    subject: String,
}

/// How often the stream and consumer state are read while waiting.
const POLL: Duration = Duration::from_millis(100);

/// Writes one quickstart line to stdout (the daemon's log goes to stderr).
fn say(line: &str) {
    super::emit(&format!("quickstart: {line}"));
}

/// `jetsink quickstart`: see the module documentation.
pub async fn execute(args: Args) -> u8 {
    let config = match Config::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return crate::exit::CONFIG;
        }
    };
    crate::logging::init(&config.logging.level, config.logging.format);
    let Some(url) = config.nats.servers.first().cloned() else {
        eprintln!("error: nats.servers is empty");
        return crate::exit::CONFIG;
    };
    let local = match local_server::ensure(&url, say).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e}");
            return crate::exit::UNAVAILABLE;
        }
    };
    let started = matches!(local, local_server::Local::Started { .. });
    let (tx, _) = watch::channel(false);
    let tx = Arc::new(tx);
    super::signals::stop_on(tx.clone(), None);
    let daemon = crate::daemon::serve(config.clone(), tx.clone(), Default::default());
    tokio::pin!(daemon);
    let code = tokio::select! {
        code = &mut daemon => code,
        fed = feed(&config, &args) => {
            let failed = fed.is_err();
            match fed {
                Ok(()) => say(&format!(
                    "jetsink keeps running; Ctrl-C stops it{}",
                    if started { " and the nats-server it started" } else { "" }
                )),
                Err(e) => {
                    eprintln!("error: {e}");
                    tx.send_replace(true);
                }
            }
            let code = daemon.await;
            if failed {
                crate::exit::UNAVAILABLE
            } else {
                code
            }
        }
    };
    if let Some(done) = local.stop().await {
        say(&done);
    }
    code
}

/// Publishes the test messages once the first sink is bound, and waits until they are
/// committed and acknowledged.
async fn feed(config: &Config, args: &Args) -> Result<(), String> {
    let Some(spec) = config.sinks.first() else {
        return Err("the config has no sink".into());
    };
    let metrics = crate::metrics::Metrics::new();
    let links = crate::nats::Links::new(&metrics);
    let conn = crate::nats::connect(&config.nats, "quickstart", &links, &metrics)
        .await
        .map_err(|e| e.to_string())?;
    say(&format!(
        "connected to the NATS server at {}",
        config.nats.servers.join(", ")
    ));
    let _quiet_close = links.closing_on_drop();
    let js = jetstream::ContextBuilder::new()
        .timeout(Duration::from_millis(config.nats.request_timeout_ms))
        .build(conn.client.clone());
    let stream = &spec.source.stream;
    // The daemon creates the stream (with `create_stream`) and the consumer at start-up.
    while consumers_settled(&js, stream).await.is_none() {
        tokio::time::sleep(POLL).await;
    }
    if args.count > 0 {
        let plan = PublishPlan {
            subject: args.subject.clone(),
            count: args.count,
            size: 200,
            rate: None,
            window: 256,
            buckets: None,
            traceparent: false,
        };
        let report = publish(&js, &plan).await.map_err(|e| e.to_string())?;
        say(&format!(
            "published {} messages of {} bytes to {}",
            report.acknowledged, plan.size, plan.subject
        ));
    }
    while consumers_settled(&js, stream).await != Some(true) {
        tokio::time::sleep(POLL).await;
    }
    say(&format!(
        "sink {} committed every message of stream {stream} and acknowledged it: {}",
        spec.name,
        spec.destination.describe()
    ));
    Ok(())
}

/// `None` while the stream or its consumers do not exist yet; else whether every consumer
/// of `stream` has nothing pending and nothing unacknowledged.
async fn consumers_settled(js: &jetstream::Context, stream: &str) -> Option<bool> {
    let s = js.get_stream(stream).await.ok()?;
    let infos: Vec<_> = s.consumers().try_collect().await.ok()?;
    if infos.is_empty() {
        return None;
    }
    Some(
        infos
            .iter()
            .all(|i| i.num_pending == 0 && i.num_ack_pending == 0),
    )
}
