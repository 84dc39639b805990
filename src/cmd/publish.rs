//! `jetsink publish`: a test and benchmark publisher that awaits every PubAck.
//!
//! Up to `window` publishes are in flight at once so the PubAck round trips overlap; a
//! message counts as published only once the stream has acknowledged it. Payloads are
//! JSON objects padded to the requested size (or plain text below 24 bytes), so every
//! destination stores them in their readable form.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::config::buckets::bucket_subject;
use crate::pipeline::randomizer::random_bucket;
use bytes::Bytes;

/// What to publish.
#[derive(Debug, Clone)]
pub struct PublishPlan {
    /// Subject of every message.
    pub subject: String,
    /// How many messages.
    pub count: u64,
    /// Payload size in bytes.
    pub size: usize,
    /// Messages per second; `None` publishes as fast as acks come back.
    pub rate: Option<u64>,
    /// Publishes awaiting their PubAck at once.
    pub window: usize,
    /// Random subject buckets `(prefix, count)`: each message goes to `<prefix>.<i>` with
    /// `i` uniform in `0..count`, instead of `subject`.
    pub buckets: Option<(String, u32)>,
    /// Each message carries a fresh random W3C `traceparent` (flagged sampled), as a
    /// traced producer's would: what `telemetry.otlp` follows.
    pub traceparent: bool,
}

/// A random valid `traceparent`: version 00, a trace id and a span id never all zero,
/// flags "sampled".
pub fn random_traceparent(rng: &mut impl rand::Rng) -> String {
    let trace: u128 = rng.random_range(1..=u128::MAX);
    let span: u64 = rng.random_range(1..=u64::MAX);
    format!("00-{trace:032x}-{span:016x}-01")
}

/// Why publishing stopped.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// No stream captures the subject, or the server refused the message.
    #[error("publish to {subject} failed after {done} acknowledged messages: {message}")]
    Rejected {
        /// The subject.
        subject: String,
        /// Messages acknowledged before the failure.
        done: u64,
        /// The server's or client's reason.
        message: String,
    },
}

/// The result of a finished run.
#[derive(Debug, Clone, Copy)]
pub struct PublishReport {
    /// Messages acknowledged by the stream.
    pub acknowledged: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
}

impl PublishReport {
    /// Messages per second.
    pub fn rate(&self) -> f64 {
        self.acknowledged as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// A payload of exactly `size` bytes for message `n`.
pub fn payload(n: u64, size: usize) -> Bytes {
    let head = format!("{{\"n\":{n},\"pad\":\"");
    if size < head.len() + 2 {
        let mut text = format!("{n:0>width$}", width = size).into_bytes();
        text.truncate(size);
        return Bytes::from(text);
    }
    let mut v = Vec::with_capacity(size);
    v.extend_from_slice(head.as_bytes());
    v.resize(size - 2, b'x');
    v.extend_from_slice(b"\"}");
    Bytes::from(v)
}

/// Publishes the plan, awaiting every PubAck.
pub async fn publish(
    js: &jetstream::Context,
    plan: &PublishPlan,
) -> Result<PublishReport, PublishError> {
    let started = Instant::now();
    let mut rng = StdRng::from_os_rng();
    let mut inflight = VecDeque::with_capacity(plan.window);
    let mut done = 0u64;
    let fail = |done: u64, e: &dyn std::fmt::Display| PublishError::Rejected {
        subject: plan.subject.clone(),
        done,
        message: e.to_string(),
    };
    for n in 0..plan.count {
        if let Some(rate) = plan.rate.filter(|r| *r > 0) {
            let due = started + Duration::from_secs_f64(n as f64 / rate as f64);
            tokio::time::sleep_until(due.into()).await;
        }
        let subject = match &plan.buckets {
            Some((prefix, count)) => bucket_subject(prefix, random_bucket(*count, &mut rng)),
            None => plan.subject.clone(),
        };
        let ack = match plan.traceparent {
            false => js.publish(subject, payload(n, plan.size)).await,
            true => {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert("traceparent", random_traceparent(&mut rng).as_str());
                js.publish_with_headers(subject, headers, payload(n, plan.size))
                    .await
            }
        }
        .map_err(|e| fail(done, &e))?;
        inflight.push_back(ack);
        if inflight.len() >= plan.window {
            if let Some(a) = inflight.pop_front() {
                a.await.map_err(|e| fail(done, &e))?;
                done += 1;
            }
        }
    }
    while let Some(a) = inflight.pop_front() {
        a.await.map_err(|e| fail(done, &e))?;
        done += 1;
    }
    Ok(PublishReport {
        acknowledged: done,
        elapsed: started.elapsed(),
    })
}

/// `jetsink publish`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// NATS server URL.
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    server: String,
    /// Subject to publish on (a stream must capture it).
    #[arg(
        long,
        required_unless_present = "bucket_prefix",
        conflicts_with = "bucket_prefix"
    )]
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
    // This doc comment is the flag's `--help` text, which writes placeholders the way
    // clap does; rustdoc would read them as HTML tags.
    #[allow(rustdoc::invalid_html_tags)]
    /// Random subject buckets: publish each message to <PREFIX>.<i>, i uniform in
    /// 0..BUCKETS (replaces --subject).
    #[arg(long, requires = "buckets")]
    bucket_prefix: Option<String>,
    /// Number of buckets for --bucket-prefix.
    #[arg(long, requires = "bucket_prefix", value_parser = clap::value_parser!(u32).range(2..=256))]
    buckets: Option<u32>,
    /// Give every message a fresh random W3C traceparent header (sampled), as a traced
    /// producer does.
    #[arg(long)]
    traceparent: bool,
}

/// `jetsink publish`: connects, publishes the plan and prints one summary line; a server
/// that cannot be reached or a refused publish is exit 69.
pub async fn execute(args: Args) -> u8 {
    crate::logging::init("warn", crate::config::LogFormat::Text);
    let server = args.server;
    let client = match async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(5))
        .connect(server.as_str())
        .await
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: cannot connect to NATS at {server}: {e}");
            return crate::exit::UNAVAILABLE;
        }
    };
    let info = client.server_info();
    if !info.jetstream {
        eprintln!(
            "error: NATS server {} ({}) at {server} has JetStream disabled; start it with -js",
            info.server_name, info.version
        );
        return crate::exit::UNAVAILABLE;
    }
    let js = jetstream::new(client.clone());
    let plan = PublishPlan {
        subject: args.subject.unwrap_or_default(),
        count: args.count,
        size: args.size,
        rate: args.rate,
        window: args.window as usize,
        buckets: args.bucket_prefix.zip(args.buckets),
        traceparent: args.traceparent,
    };
    match publish(&js, &plan).await {
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
            crate::exit::OK
        }
        Err(e) => {
            eprintln!("error: {e} (is there a stream capturing this subject? `jetsink run` creates one when the config has source.create_stream)");
            crate::exit::UNAVAILABLE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_have_the_requested_size_and_are_json_when_large_enough() {
        for size in [0usize, 1, 5, 23, 24, 25, 200, 4096] {
            let p = payload(12345, size);
            assert_eq!(p.len(), size, "size {size}");
        }
        let p = payload(7, 200);
        let v: serde_json::Value = serde_json::from_slice(&p).unwrap();
        assert_eq!(v["n"], 7);
    }
}
