//! Turning verdicts into acknowledgements: the committed messages of an attempt first
//! (in job-queue mode once their results are stored), then the handed-back and refused
//! ones one by one; jobs without a usable id; messages refused before the write; what
//! shutdown abandons. Every acknowledgement goes out only after the keeper let go of its
//! message, so each stays kept alive until then.

use std::sync::Arc;

use async_nats::jetstream::AckKind;
use async_nats::Subject;
use time::OffsetDateTime;

use super::verdict::{RefusalClass, Verdict};
use super::{InHand, Settler, Stop};
use crate::dlq::Reason;
use crate::envelope::Envelope;
use crate::jobs::{ResultPublisher, INVALID_JOB_ID};
use crate::pipeline::acks::Acknowledger;
use crate::pipeline::batch::{Refused, RefusedBy};
use crate::sinks::{ErrorClass, Outcome, Output, SinkError, Written};
use crate::telemetry::Outcome as Traced;

impl<A: Acknowledger> Settler<A> {
    /// Counts one attempt's failures in `jetsink_sink_errors_total`: a failed batch once, a
    /// per-message answer once per message handed back or refused plus once for those held;
    /// and the messages the destination already held in `jetsink_sink_already_stored_total`.
    pub(super) fn count_errors(&self, written: &Written) {
        match written {
            Written::Batch(Ok(())) => {}
            Written::Batch(Err(e)) => self.metrics.sink_error(e),
            Written::Each(outcomes) => {
                let mut held = None;
                let mut already = 0u64;
                for o in outcomes {
                    match o {
                        Outcome::Committed { .. } => {}
                        Outcome::AlreadyStored => already += 1,
                        Outcome::Later { .. } => self.metrics.error_of(ErrorClass::Transient),
                        Outcome::Failed(
                            e @ (SinkError::Permanent { .. } | SinkError::Unclassified { .. }),
                        ) => self.metrics.sink_error(e),
                        Outcome::Failed(e) => held = Some(e.kind()),
                    }
                }
                if let Some(class) = held {
                    self.metrics.error_of(class);
                }
                if already > 0 {
                    self.metrics.already_stored.inc_by(already);
                    tracing::debug!(sink = %self.name, messages = already, "messages delivered again are already stored; committed without writing them again");
                }
            }
        }
    }

    /// Settles one attempt's verdicts: the committed first, then those handed back or
    /// refused. Returns the positions still held and why, if any are.
    pub(super) async fn settle_verdicts(
        &mut self,
        hand: &InHand,
        positions: &[usize],
        verdicts: Vec<Verdict>,
        stop: &mut Stop,
        refused: &mut bool,
    ) -> (Vec<usize>, Option<SinkError>) {
        let mut commits: Vec<(usize, Option<Output>)> = Vec::new();
        let mut others: Vec<(usize, Verdict)> = Vec::new();
        let mut held = Vec::new();
        let mut error = None;
        for (&p, v) in positions.iter().zip(verdicts) {
            match v {
                Verdict::Commit(output) => commits.push((p, output)),
                Verdict::Hold(e) => {
                    held.push(p);
                    error = Some(e);
                }
                other => others.push((p, other)),
            }
        }
        if !commits.is_empty() {
            self.committed(hand, commits).await;
        }
        for (p, v) in others {
            let e = &hand.envelopes[p];
            let kind = match v {
                // Stopped by the shutdown deadline (or asked to run again while stopping):
                // handed back at once, for another instance.
                Verdict::Later(_) if stop.stopping() => {
                    hand.traced([p], Traced::Abandoned);
                    self.disposal.abandoned(e).await
                }
                Verdict::Later(message) => {
                    hand.traced([p], Traced::HandedBack(&message));
                    self.disposal.later(e, &message).await
                }
                Verdict::Refuse(class, message) => {
                    hand.traced([p], Traced::Refused(&message));
                    *refused = true;
                    if class == RefusalClass::Unclassified {
                        self.suspects.remember(e);
                    }
                    self.disposal
                        .refused(e, Reason::Destination, class.as_str(), &message)
                        .await
                }
                Verdict::Commit(_) | Verdict::Hold(_) => continue,
            };
            self.send(&hand.replies, p, kind).await;
        }
        (held, error)
    }

    /// Sends `kind` for the message at `position`, once the keeper has let go of it.
    async fn send(&mut self, replies: &[Subject], position: usize, kind: AckKind) {
        self.keeper.settle([position]).await;
        self.acks
            .acknowledger()
            .send(vec![replies[position].clone()], kind)
            .await;
    }

    /// Records commit latency and hands the ACKs to a background task; in job-queue mode
    /// only once the results stream stored each job's result. The messages stay kept alive
    /// until their ACK is handed over.
    async fn committed(&mut self, hand: &InHand, commits: Vec<(usize, Option<Output>)>) {
        let now = OffsetDateTime::now_utc();
        for (p, _) in &commits {
            let lag = (now - hand.envelopes[*p].published_at).as_seconds_f64();
            self.metrics.commit_lag.observe(lag.max(0.0));
        }
        let mut ack: Vec<usize> = commits.iter().map(|(p, _)| *p).collect();
        let mut back = Vec::new();
        if let Some(results) = &self.results {
            let jobs: Vec<(&Envelope, &str)> = ack
                .iter()
                .map(|&p| (&hand.envelopes[p], hand.ids[p].as_str()))
                .collect();
            let outputs: Vec<Option<Output>> = commits.into_iter().map(|(_, o)| o).collect();
            let stored = results.publish_committed(&jobs, &outputs).await;
            let (kept, failed): (Vec<_>, Vec<_>) = ack.iter().zip(stored).partition(|(_, ok)| *ok);
            back = failed.into_iter().map(|(p, _)| *p).collect();
            ack = kept.into_iter().map(|(p, _)| *p).collect();
        }
        hand.traced(
            back.iter().copied(),
            Traced::HandedBack("job result not stored"),
        );
        hand.traced(ack.iter().copied(), Traced::Committed);
        for p in back {
            let kind = self.disposal.result_failed(&hand.envelopes[p]);
            self.send(&hand.replies, p, kind).await;
        }
        self.keeper.settle(ack.iter().copied()).await;
        let replies = ack.iter().map(|&p| hand.replies[p].clone()).collect();
        self.acks.committed(replies).await;
    }

    /// Hands back (or, on their last delivery, dead-letters) the messages at `positions`.
    pub(super) async fn abandon(&mut self, hand: &InHand, positions: &[usize]) {
        hand.traced(positions.iter().copied(), Traced::Abandoned);
        let mut naks = Vec::with_capacity(positions.len());
        for &p in positions {
            match self.disposal.abandoned(&hand.envelopes[p]).await {
                AckKind::Nak(None) => naks.push(p),
                kind => self.send(&hand.replies, p, kind).await,
            }
        }
        self.keeper.settle(naks.iter().copied()).await;
        let replies = naks.iter().map(|&p| hand.replies[p].clone()).collect();
        self.acks
            .acknowledger()
            .send(replies, AckKind::Nak(None))
            .await;
    }

    /// Splits a batch into jobs with a usable id (kept, with their ids, and made the
    /// batch in hand) and jobs without, which are refused with class `invalid_job_id`.
    pub(super) async fn sort_jobs(
        &mut self,
        results: &ResultPublisher,
        envelopes: Vec<Envelope>,
        replies: &Arc<Vec<Subject>>,
    ) -> InHand {
        let mut kept = (Vec::with_capacity(envelopes.len()), Vec::new(), Vec::new());
        for (p, mut e) in envelopes.into_iter().enumerate() {
            match results.job_id(&e) {
                Ok(id) => {
                    e.job_id = Some(id.clone());
                    kept.0.push(e);
                    kept.1.push(replies[p].clone());
                    kept.2.push(id);
                }
                Err(why) => {
                    let kind = self
                        .disposal
                        .refused(&e, Reason::Metadata, INVALID_JOB_ID, &why.to_string())
                        .await;
                    self.send(replies, p, kind).await;
                }
            }
        }
        let replies = Arc::new(kept.1);
        self.keeper.hold(replies.clone()).await;
        InHand {
            envelopes: kept.0,
            replies,
            ids: kept.2,
            spans: None,
        }
    }

    /// A message refused before the write (metadata or lane rules), at `position` in the
    /// hand the runner took from the puller.
    pub(in crate::pipeline) async fn refuse_early(
        &mut self,
        r: Refused,
        replies: &[Subject],
        position: usize,
    ) {
        let reason = match r.by {
            RefusedBy::Metadata => Reason::Metadata,
            RefusedBy::Lane => {
                self.metrics.lanes.rejected.inc();
                Reason::Lane
            }
        };
        let kind = self
            .disposal
            .refused(
                &r.envelope,
                reason,
                ErrorClass::Permanent.as_str(),
                &r.reason,
            )
            .await;
        self.send(replies, position, kind).await;
    }
}
