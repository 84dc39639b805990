//! The ceiling pass: a bare pull consumer on the same stream, batch size and server, that
//! ACKs each message and flushes once per batch — what JetStream itself allows on this
//! machine, which the other passes are measured against.

use std::time::Instant;

use async_nats::jetstream::{self, consumer::pull, consumer::AckPolicy};
use time::OffsetDateTime;

use super::cpu::Watched;
use super::error::BenchError;
use super::feeder;
use super::options::{limits, Options};
use super::probe;
use super::stats::Pass;
use crate::nats::{fetch_batch, Pulls};

/// Drains `subject` with a bare consumer and ACKs every message.
pub async fn pass(
    opts: &Options,
    js: &jetstream::Context,
    stream: &str,
    subject: &str,
    run: usize,
    watched: &Watched,
    bar: &indicatif::ProgressBar,
) -> Result<Pass, BenchError> {
    let delivery = opts.delivery();
    let consumer = js
        .get_stream(stream)
        .await
        .map_err(|e| BenchError::Nats(e.to_string()))?
        .create_consumer(pull::Config {
            durable_name: Some(format!("ceiling-{run}")),
            filter_subject: subject.to_string(),
            ack_policy: AckPolicy::Explicit,
            max_ack_pending: 10_000,
            ..Default::default()
        })
        .await
        .map_err(|e| BenchError::Nats(format!("creating the ceiling consumer: {e}")))?;
    let lim = limits(&delivery);
    let mut lags = Vec::with_capacity(opts.messages as usize);
    let mut done = 0u64;
    let mut bytes = 0u64;
    probe::reset_peak_rss();
    bar.set_position(0);
    let feeder = feeder::start(opts, js, subject);
    let cpu = watched.read();
    let started = Instant::now();
    // One reply inbox for every pull, as a sink keeps (its cadence is never updated: each
    // pull takes what is ready, lingering as a first pull does).
    let mut pulls = Pulls::default();
    while done < opts.messages {
        let batch = fetch_batch(js, &consumer, lim, &Default::default(), None, &mut pulls)
            .await
            .map_err(|e| BenchError::Nats(format!("ceiling pull: {e}")))?;
        let now = OffsetDateTime::now_utc();
        // A bare consumer as the client hands it out: each message with its context.
        let batch: Vec<jetstream::Message> = batch
            .into_iter()
            .map(|message| jetstream::Message {
                message,
                context: js.clone(),
            })
            .collect();
        for m in &batch {
            if let Ok(info) = m.info() {
                lags.push((now - info.published).as_seconds_f64().max(0.0));
            }
            bytes += m.payload.len() as u64;
            m.ack()
                .await
                .map_err(|e| BenchError::Nats(format!("ceiling ack: {e}")))?;
        }
        js.client()
            .flush()
            .await
            .map_err(|e| BenchError::Nats(format!("ceiling flush: {e}")))?;
        done += batch.len() as u64;
        bar.set_position(done);
    }
    let elapsed = started.elapsed();
    let cpu = cpu.until(&watched.read(), done);
    if let Some(f) = feeder {
        f.finish().await;
    }
    let pass = Pass::new(
        "ceiling",
        done,
        bytes,
        elapsed.as_secs_f64(),
        &mut lags,
        probe::peak_rss_kib(),
    );
    Ok(pass.with_cpu(cpu))
}
