//! `jetsink top`: one screen that says, per sink of a running daemon, what it is doing,
//! how fast it commits, how far behind it is, what it holds and what failed last — what
//! an operator on a VPS over SSH would otherwise piece together from `/metrics`,
//! `/readyz` and consumer info.
//!
//! The steps are pure and tested without a daemon: [`rows`] turns two scrapes into one
//! row per sink (the rate from the ACKed counter between them), [`state`] says what a
//! sink is doing (from the daemon's `jetsink_sink_state` gauge, or `/readyz` where a
//! daemon does not export it), [`view`] sorts and filters, [`render`] prints, [`keys`]
//! maps key presses. [`source`] is the network, [`live`] the terminal (ratatui).

mod keys;
mod live;
mod render;
mod rows;
mod source;
mod state;
#[cfg(test)]
mod tests;
mod view;

use std::path::PathBuf;
use std::time::Duration;

use source::Target;

pub use rows::{rate, Backlog, Row, Scrape};
pub use state::{SinkState, STATE_FAMILY};
pub use view::SortKey;

use crate::config::Config;
use crate::exit;
use crate::shared::server_url::redacted;

/// Output format of `top --once`; the variants' doc comments are the `--format` help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns, then one line per sink with a last error.
    Text,
    /// One JSON object: {url, ready, interval_ms, sinks: [...], notes: [...]}.
    Json,
}

/// `jetsink top`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// The daemon's metrics endpoint (plain HTTP), or its base URL; /readyz is read beside
    /// it. Default: the config's http.listen with --config, else
    /// http://127.0.0.1:9464/metrics.
    #[arg(long)]
    url: Option<String>,
    /// The daemon's JSON config file: its http.listen is the default --url, and each
    /// sink's pending, ack pending and redelivered counts are read from the NATS server
    /// (without it, from the daemon's own gauges, up to 5 s old).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Milliseconds between refreshes; with --once, between the two scrapes the rates
    /// come from. 100 to 60000.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=60000))]
    interval_ms: u64,
    /// Print one snapshot and exit, instead of the live view.
    #[arg(long)]
    once: bool,
    /// Output format of --once.
    #[arg(long, value_enum, default_value_t = Format::Text, requires = "once")]
    format: Format,
    /// Sort by this key (the live view's `s` key cycles them).
    #[arg(long, value_enum, default_value_t = SortKey::Name)]
    sort: SortKey,
    /// Show only sinks whose name or state contains this text, ignoring case (the live
    /// view's `/` key types a new one).
    #[arg(long)]
    filter: Option<String>,
}

/// The config, when given (exit 78 when it is not valid).
fn load_config(path: Option<&PathBuf>) -> Result<Option<Config>, (u8, String)> {
    let Some(path) = path else {
        return Ok(None);
    };
    Config::load(path)
        .map(Some)
        .map_err(|e| (exit::CONFIG, format!("--config: {e}")))
}

/// The URL to read: `--url`, else the config's listener, else the default.
fn url_of(url: Option<String>, config: Option<&Config>) -> Result<String, (u8, String)> {
    if let Some(u) = url {
        return Ok(u);
    }
    match config {
        Some(c) if !c.http.enabled => Err((
            exit::USAGE,
            "--config: its http.enabled is false, so the daemon serves no /metrics to read; pass --url".into(),
        )),
        Some(c) => Ok(source::url_of_listen(&c.http.listen)),
        None => Ok(crate::cmd::metrics_show::DEFAULT_URL.to_string()),
    }
}

/// A configured sink as the rows need it.
fn configured(spec: &crate::config::SinkSpec) -> rows::Configured {
    rows::Configured {
        name: spec.name.clone(),
        lanes: spec.delivery.priority_lanes.enabled,
        randomizer: spec.delivery.randomizer.enabled,
    }
}

/// Reads the config, connects to its server, and names the endpoints.
async fn target(args: &Args) -> Result<Target, (u8, String)> {
    let config = load_config(args.config.as_ref())?;
    let url = url_of(args.url.clone(), config.as_ref())?;
    let (metrics_url, readyz_url) = source::endpoints(&url);
    let server = match &config {
        Some(c) => Some(source::Server::connect(c).await),
        None => None,
    };
    Ok(Target {
        metrics_url,
        readyz_url,
        server,
        configured: config
            .map(|c| c.sinks.iter().map(configured).collect())
            .unwrap_or_default(),
        interval: Duration::from_millis(args.interval_ms),
    })
}

/// One snapshot: two scrapes `interval` apart, sorted and filtered, as text or JSON.
async fn once(
    t: &Target,
    format: Format,
    sort: SortKey,
    filter: &str,
) -> Result<String, (u8, String)> {
    let failed = |e: crate::cmd::metrics_show::FetchError| (e.exit_code(), e.to_string());
    let (first, at) = source::metrics_only(&t.metrics_url).await.map_err(failed)?;
    tokio::time::sleep(t.interval).await;
    let mut notes = Vec::new();
    let (second, at2) =
        source::scrape(&t.metrics_url, &t.readyz_url, t.server.as_ref(), &mut notes)
            .await
            .map_err(failed)?;
    let seconds = at2.duration_since(at).as_secs_f64();
    let rows = view::arrange(
        &rows::rows(&second, Some((&first, seconds)), &t.configured),
        sort,
        filter,
    );
    Ok(match format {
        Format::Text => {
            let mut text = render::table(&rows);
            for n in &notes {
                text.push_str(&format!("note: {}\n", render::clean(n)));
            }
            text
        }
        Format::Json => {
            let url = redacted(&t.metrics_url);
            let snapshot = render::Snapshot {
                url: &url,
                ready: second.ready.as_ref().map(|r| r.ok),
                interval_ms: u64::try_from(t.interval.as_millis()).unwrap_or(u64::MAX),
                sinks: &rows,
                notes: &notes,
            };
            render::json(&snapshot) + "\n"
        }
    })
}

/// `jetsink top`: the live view, or with `--once` one snapshot on stdout. Exit 69 when
/// the metrics URL does not answer, 78 for an invalid `--config`, 2 for bad flags.
pub async fn execute(args: Args) -> u8 {
    let result = async {
        let t = target(&args).await?;
        if args.once {
            let text = once(
                &t,
                args.format,
                args.sort,
                args.filter.as_deref().unwrap_or(""),
            )
            .await?;
            super::emit(text.trim_end_matches('\n'));
            Ok(())
        } else {
            live::run(
                t,
                keys::Controls::new(args.sort, args.filter.clone().unwrap_or_default()),
            )
            .await
        }
    }
    .await;
    match result {
        Ok(()) => exit::OK,
        Err((code, message)) => {
            eprintln!("error: {message}");
            code
        }
    }
}
