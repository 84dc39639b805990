//! The destination-only pass: the same rows the pipeline writes — the same envelopes,
//! through the same preparation (metadata, lanes, encryption) and the same batch size —
//! written straight into the destination through the `Sink` contract, with no NATS at
//! all. Its rate is the destination's own limit on this machine, so a report shows how far
//! the pipeline is from the database as well as from the bare consumer.
//!
//! Envelopes are prepared outside the clock; the pass times the write calls alone, one
//! after the other as the pipeline issues them. The rows carry a stream name of their own
//! (`<stream>_D<run>`), so their idempotency keys never collide with the pipeline pass's
//! in a configured table.

use std::time::{Duration, Instant};

use async_nats::Subject;
use time::OffsetDateTime;

use super::cpu::Watched;
use super::error::BenchError;
use super::options::{describe, Options};
use super::pipeline;
use super::stats::Pass;
use super::{probe, verify};
use crate::cmd::publish::payload;
use crate::sinks::{self, Written};

/// Writes `opts.messages` rows straight into the destination of run `run`; `None` when
/// the bench stores nothing.
pub async fn pass(
    opts: &Options,
    stream: &str,
    run: usize,
    watched: &Watched,
    bar: &indicatif::ProgressBar,
) -> Result<Option<Pass>, BenchError> {
    let (Some(destination), scratch) = opts.destination(stream, run, "destination")? else {
        return Ok(None);
    };
    let measured = write_all(opts, &destination, stream, run, watched, bar).await;
    scratch.remove().await;
    measured.map(Some)
}

/// Writes and verifies the rows of [`pass`] into `destination`.
async fn write_all(
    opts: &Options,
    destination: &crate::config::DestinationConfig,
    stream: &str,
    run: usize,
    watched: &Watched,
    bar: &indicatif::ProgressBar,
) -> Result<Pass, BenchError> {
    let label = format!("{stream}_D{run}");
    let spec = pipeline::spec(
        opts,
        &label,
        "",
        format!("direct-{run}"),
        destination.clone(),
    );
    let stages = crate::pipeline::Stages::for_sink(&spec);
    let mut sink = sinks::build(destination);
    sink.attach(&sinks::Feed {
        sink: spec.name.clone(),
        stream: label.clone(),
    });
    sink.open()
        .await
        .map_err(|e| BenchError::Destination(format!("opening {}: {e}", describe(&opts.target))))?;
    let batch_size = spec.delivery.batch_size.max(1) as u64;
    let mut lags = Vec::with_capacity(opts.messages as usize);
    let mut writing = Duration::ZERO;
    probe::reset_peak_rss();
    bar.set_position(0);
    let cpu = watched.read();
    let mut next = 1u64;
    while next <= opts.messages {
        let last = (next + batch_size - 1).min(opts.messages);
        let messages = (next..=last)
            .map(|seq| message(&label, run, seq, opts.size))
            .collect();
        let (batch, refused) = stages.prepare_messages(messages);
        if refused > 0 {
            return Err(BenchError::Destination(format!(
                "{refused} generated messages were refused by the sink's metadata or lane rules"
            )));
        }
        let started = Instant::now();
        let written = sink.write(&batch.envelopes).await;
        let took = started.elapsed();
        committed(written, last + 1 - next)?;
        writing += took;
        lags.extend(std::iter::repeat_n(
            took.as_secs_f64(),
            batch.envelopes.len(),
        ));
        bar.set_position(last);
        next = last + 1;
    }
    let cpu = cpu.until(&watched.read(), opts.messages);
    let peak = probe::peak_rss_kib();
    drop(sink);
    verify::stored(destination, &label, opts.messages).await?;
    let pass = Pass::new(
        "destination",
        opts.messages,
        opts.messages * opts.size as u64,
        writing.as_secs_f64(),
        &mut lags,
        peak,
    );
    Ok(pass.with_cpu(cpu))
}

/// Message `seq` as JetStream would deliver it: the bench publisher's payload, and an
/// acknowledgement subject carrying the delivery metadata the envelope is built from.
fn message(stream: &str, run: usize, seq: u64, size: usize) -> async_nats::Message {
    let ts = OffsetDateTime::now_utc().unix_timestamp_nanos();
    let payload = payload(seq, size);
    async_nats::Message {
        subject: Subject::from(format!("jetsink.bench.direct.{run}")),
        reply: Some(Subject::from(format!(
            "$JS.ACK.{stream}.direct-{run}.1.{seq}.{seq}.{ts}.0"
        ))),
        length: payload.len(),
        payload,
        headers: None,
        status: None,
        description: None,
    }
}

/// Fails unless every one of `n` messages committed.
fn committed(written: Written, n: u64) -> Result<(), BenchError> {
    let failed = match written {
        Written::Batch(Ok(())) => return Ok(()),
        Written::Batch(Err(e)) => e.to_string(),
        Written::Each(outcomes) => {
            let bad = outcomes.iter().filter(|o| !o.is_committed()).count();
            if bad == 0 && outcomes.len() as u64 == n {
                return Ok(());
            }
            format!("{bad} of {n} messages not committed")
        }
    };
    Err(BenchError::Destination(format!(
        "writing straight into the destination failed: {failed}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_message_normalizes_like_a_delivered_one() {
        let m = message("S_D1", 1, 42, 200);
        assert_eq!(m.payload.len(), 200);
        let d = crate::nats::reply::parse(m.reply.as_ref().unwrap().as_str()).expect("v1 reply");
        assert_eq!((d.stream, d.stream_sequence, d.delivered), ("S_D1", 42, 1));
    }

    #[test]
    fn only_a_whole_commit_passes() {
        assert!(committed(Written::Batch(Ok(())), 3).is_ok());
        assert!(committed(
            Written::Batch(Err(crate::sinks::SinkError::transient("x"))),
            3
        )
        .is_err());
        let ok = || crate::sinks::Outcome::Committed { output: None };
        assert!(committed(Written::Each(vec![ok(), ok()]), 2).is_ok());
        assert!(committed(Written::Each(vec![ok()]), 2).is_err());
    }
}
