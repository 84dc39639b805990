//! Settling a batch message by message, for destinations that report one outcome per
//! envelope (`Sink::per_message`, the `exec` worker): each message is settled by its own
//! outcome, so one job that fails holds none of the others.
//!
//! - committed: its result (with `output`) is stored in job-queue mode, then it is ACKed;
//! - `Later` (the job asked to run again): handed back with the redelivery delay, or
//!   dead-lettered on its last allowed delivery;
//! - permanent or unclassified: the refusal path (dead letter or hand back, by policy);
//! - transient or misconfigured (the destination cannot run anything): held alone and
//!   retried with backoff, kept alive with `+WPI`, abandoned at shutdown like a batch.
//!
//! The `+WPI` clock is armed once for the whole batch before the first attempt and only
//! ever narrowed to the messages still held, so a message in hand never waits longer than
//! half of AckWait for its next progress acknowledgement, and a settled one gets none.

use std::sync::Arc;

use async_nats::Subject;
use tokio::time::Instant;

use super::{Settler, Stop, UNCLASSIFIED};
use crate::dlq::Reason;
use crate::envelope::Envelope;
use crate::pipeline::acks::Acknowledger;
use crate::pipeline::puller::Ahead;
use crate::pipeline::retry::backoff;
use crate::sinks::{Outcome, Output, SinkError};

/// What one message of an attempt came to.
enum Settled {
    Committed(Option<Output>),
    Later(String),
    Refused(&'static str, String),
    Held(SinkError),
}

impl<A: Acknowledger> Settler<A> {
    /// Writes `envelopes` through `write_each` and settles each by its outcome (`ids`:
    /// the job ids in job-queue mode, else empty).
    pub(in crate::pipeline) async fn settle_each(
        &mut self,
        envelopes: Vec<Envelope>,
        replies: Vec<Subject>,
        ids: Vec<String>,
        ahead: &mut Ahead,
        stop: &mut Stop,
    ) {
        let mut pending: Vec<usize> = (0..envelopes.len()).collect();
        let mut attempt: u32 = 0;
        let mut refused = false;
        let all = Arc::new(replies.clone());
        self.keep.arm(&all, 0..all.len(), ahead.waiting()).await;
        loop {
            let part: Vec<Envelope> = if pending.len() == envelopes.len() {
                envelopes.clone()
            } else {
                pending.iter().map(|&i| envelopes[i].clone()).collect()
            };
            let started = Instant::now();
            let outcomes = ahead.alongside(self.sink.write_each(&part)).await;
            self.metrics
                .write_seconds
                .observe(started.elapsed().as_secs_f64());
            let mut settled: Vec<(usize, Settled)> = Vec::with_capacity(pending.len());
            let mut outcomes = outcomes.into_iter();
            for &i in &pending {
                let s = match outcomes.next() {
                    Some(Outcome::Committed { output }) => Settled::Committed(output),
                    Some(Outcome::Later { message }) => Settled::Later(message),
                    Some(Outcome::Failed(SinkError::Permanent { message, .. })) => {
                        Settled::Refused("permanent", message)
                    }
                    Some(Outcome::Failed(SinkError::Unclassified { message })) => {
                        Settled::Refused(UNCLASSIFIED, message)
                    }
                    Some(Outcome::Failed(e)) => Settled::Held(e),
                    None => Settled::Held(SinkError::transient(
                        "the destination returned fewer outcomes than messages",
                    )),
                };
                settled.push((i, s));
            }
            let held: Vec<usize> = settled
                .iter()
                .filter(|(_, s)| matches!(s, Settled::Held(_)))
                .map(|(i, _)| *i)
                .collect();
            // From here on only the held messages are kept alive.
            self.keep
                .narrow(held.iter().map(|&i| replies[i].clone()).collect())
                .await;
            let mut held_error = None;
            let (mut done_e, mut done_r, mut done_ids, mut outputs) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for (i, s) in settled {
                match s {
                    Settled::Committed(output) => {
                        done_e.push(envelopes[i].clone());
                        done_r.push(replies[i].clone());
                        if let Some(id) = ids.get(i) {
                            done_ids.push(id.clone());
                        }
                        outputs.push(output);
                    }
                    Settled::Later(message) => {
                        self.metrics.sink_error(&SinkError::transient(""));
                        self.disposal
                            .later(&envelopes[i], &replies[i], &message)
                            .await;
                    }
                    Settled::Refused(class, message) => {
                        refused = true;
                        if class == UNCLASSIFIED {
                            self.metrics.sink_error(&SinkError::unclassified(""));
                            self.suspects.remember(&envelopes[i]);
                        } else {
                            self.metrics.sink_error(&SinkError::Permanent {
                                index: None,
                                message: String::new(),
                            });
                        }
                        self.disposal
                            .refused_as(
                                &envelopes[i],
                                &replies[i],
                                Reason::Destination,
                                class,
                                &message,
                            )
                            .await;
                    }
                    Settled::Held(e) => held_error = Some(e),
                }
            }
            if !done_r.is_empty() {
                self.committed(&done_e, &done_r, &done_ids, &outputs).await;
            }
            let Some(err) = held_error else {
                // Every message got an answer from the destination, good or bad.
                self.health.destination_ok();
                self.healthy = true;
                break;
            };
            // The destination itself failed for some: hold those, retry after backoff.
            self.metrics.sink_error(&err);
            self.metrics.batches_retried.inc();
            let message = err.to_string();
            self.health.destination_failed(&message);
            self.healthy = false;
            let delay = backoff(&self.retry, attempt, &mut self.rng);
            tracing::warn!(sink = %self.name, error = %message, messages = held.len(), attempt = attempt + 1, retry_in_ms = delay.as_millis() as u64, "destination failed for some messages; holding them");
            attempt = attempt.saturating_add(1);
            if self.hold(delay, ahead, stop).await {
                self.keep.disarm().await;
                let e: Vec<Envelope> = held.iter().map(|&i| envelopes[i].clone()).collect();
                let r: Vec<Subject> = held.iter().map(|&i| replies[i].clone()).collect();
                self.disposal.abandoned(&e, &r).await;
                self.metrics.batches_abandoned.inc();
                tracing::info!(sink = %self.name, messages = held.len(), "messages abandoned at shutdown; left for redelivery");
                return;
            }
            pending = held;
        }
        if refused {
            self.metrics.batches_isolated.inc();
        } else {
            self.metrics.batches_committed.inc();
        }
    }
}
