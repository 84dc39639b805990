//! One pull request sent and its replies read: the messages, and why the pull ended.
//!
//! The replies come to a subject of the pull's own under an [`Inbox`]. A consumer's puller
//! keeps its inbox from one pull to the next ([`Pulls`]), so a pull costs one PUB instead
//! of a SUB, a PUB and an UNSUB (and the server's subject index is not changed twice per
//! batch). A status the server sends for an earlier pull of the inbox names that pull's
//! subject and is passed over. A stored message names its own subject, not the pull's, so
//! it cannot be told apart — nor need it be: it is a delivery like the others, written and
//! ACKed with the batch it arrives in. Every pull that ends before its request does — it
//! timed out locally, its connection dropped — gives the inbox up, and the next opens a
//! fresh one, so what such a request still delivers reaches no subscription (it is
//! redelivered after AckWait, as before); a pull that ends with its full count leaves
//! nothing to come.

use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::Context;
use async_nats::{Message, StatusCode, Subject};
use futures::StreamExt;
use tokio::sync::watch;
use tokio::time::Instant;

use super::connect::Drops;
use super::inbox::Inbox;
use super::linger::Cadence;
use super::pin::{Pin, PullRequest, PIN_HEADER};

/// What the pulls of one consumer carry from one to the next.
#[derive(Debug, Default)]
pub struct Pulls {
    /// What the last came back as, which decides how the next lingers.
    pub cadence: Cadence,
    /// The reply subscription they share, opened by the first that needs it.
    inbox: Option<Inbox>,
}

impl Pulls {
    /// The prefix of the reply inbox the next pull replies under, while one is kept: what
    /// tells whether pulls shared one.
    pub fn inbox(&self) -> Option<&str> {
        self.inbox.as_ref().map(Inbox::prefix)
    }
}

/// Largest message count a pull's vector is sized for up front.
const MAX_PRESIZE: usize = 4_096;

/// Sends `request` and reads its replies for up to `limit`: the messages received, and
/// why the pull ended early, if it did. With `pin`, each message's `Nats-Pin-Id` is noted
/// and a `423` drops the pin id (the pull then simply ends empty). With `pulls`, the
/// replies come to the inbox they keep; without, to one opened for this pull alone.
pub(super) async fn pull(
    js: &Context,
    consumer: &PullConsumer,
    request: PullRequest<'_>,
    limit: Duration,
    drops: &Drops,
    pin: Option<&Pin>,
    pulls: Option<&mut Pulls>,
) -> Result<(Vec<Message>, Option<async_nats::Error>), async_nats::Error> {
    let mut own = None;
    let kept = match pulls {
        Some(p) => &mut p.inbox,
        None => &mut own,
    };
    let dropped = drops.watch();
    let client = js.client();
    if kept.is_none() {
        *kept = Some(Inbox::open(&client).await?);
    }
    let Some(inbox) = kept.as_mut() else {
        return Err("no reply inbox for the pull".into());
    };
    let reply = inbox.next_reply();
    let info = consumer.cached_info();
    let subject = format!(
        "$JS.API.CONSUMER.MSG.NEXT.{}.{}",
        info.stream_name, info.name
    );
    let max_messages = request.batch;
    client
        .publish_with_reply(subject, reply.clone(), request.body().into())
        .await?;
    let read = read(inbox, &reply, max_messages, limit, dropped, pin).await;
    if !read.answered {
        *kept = None;
    }
    Ok((read.out, read.err))
}

/// What reading a pull's replies came to.
struct Read {
    out: Vec<Message>,
    err: Option<async_nats::Error>,
    /// The server answered the request to its end: no reply to it can come later. Not so
    /// after a local timeout or a dropped connection, nor once the subscription ended.
    answered: bool,
}

/// Reads the replies to the request sent with reply subject `reply` until the pull ends,
/// `max_messages` are in, `limit` passes or the connection drops.
async fn read(
    inbox: &mut Inbox,
    reply: &Subject,
    max_messages: usize,
    limit: Duration,
    mut dropped: watch::Receiver<u64>,
    pin: Option<&Pin>,
) -> Read {
    let deadline = Instant::now() + limit;
    let mut out = Vec::new();
    let ended = |out, err, answered| Read { out, err, answered };
    loop {
        let next = tokio::select! {
            // Messages already received come out before the drop is noticed.
            biased;
            next = tokio::time::timeout_at(deadline, inbox.replies().next()) => next,
            _ = connection_dropped(&mut dropped) => {
                return ended(out, Some(DROPPED_MID_PULL.into()), false);
            }
        };
        let message = match next {
            Ok(Some(message)) => message,
            Ok(None) => return ended(out, None, false),
            Err(_) => {
                let e = format!("pull did not finish within {limit:?}");
                return ended(out, Some(e.into()), false);
            }
        };
        let stored = message.reply.as_ref().is_some_and(|r| is_stored(r));
        if !stored && message.subject != *reply {
            // A late status of an earlier pull of this inbox: it ends nothing here.
            continue;
        }
        match pull_reply(message.status, message.description.as_deref(), stored) {
            PullReply::Message => {
                if let (Some(pin), Some(id)) = (
                    pin,
                    message
                        .headers
                        .as_ref()
                        .and_then(|h| h.get_last(PIN_HEADER)),
                ) {
                    pin.delivered(id.as_str());
                }
                if out.is_empty() {
                    out.reserve(max_messages.min(MAX_PRESIZE));
                }
                out.push(message);
                if out.len() >= max_messages {
                    return ended(out, None, true);
                }
            }
            PullReply::Ignore => {}
            PullReply::End => return ended(out, None, true),
            PullReply::PinLost => {
                if let Some(pin) = pin {
                    pin.lost();
                }
                return ended(out, None, true);
            }
            PullReply::Fail => {
                let e = format!(
                    "error while processing messages from the stream: {}, {:?}",
                    message.status.unwrap_or(StatusCode::OK),
                    message.description
                );
                return ended(out, Some(e.into()), true);
            }
        }
    }
}

/// What a reply to a no-wait pull means for the pull.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PullReply {
    /// A message: keep it.
    Message,
    /// A status that ends nothing: a heartbeat, or nats-server 2.14's `409 Batch Completed`,
    /// which an R3 consumer sends before the messages it counts.
    Ignore,
    /// The pull is over: nothing (more) ready, or it expired.
    End,
    /// `423`: the pull carried a pin id that is not the current pin of its priority group
    /// (the server pinned another client); the pull is over.
    PinLost,
    /// Any other status: the pull failed (the text says why, for example MaxBytes).
    Fail,
}

/// What a reply to a pull is. `stored`: it carries a `$JS.ACK` reply subject, so it is a
/// message of the stream, whatever status its own header block puts on its version line
/// (a publisher may store `NATS/1.0 503`): the server's own statuses never carry one.
fn pull_reply(status: Option<StatusCode>, description: Option<&str>, stored: bool) -> PullReply {
    if stored {
        return PullReply::Message;
    }
    match status {
        None | Some(StatusCode::OK) => PullReply::Message,
        Some(StatusCode::IDLE_HEARTBEAT) => PullReply::Ignore,
        Some(StatusCode::NOT_FOUND) | Some(StatusCode::TIMEOUT) => PullReply::End,
        Some(StatusCode::PIN_ID_MISMATCH) => PullReply::PinLost,
        Some(StatusCode::REQUEST_TERMINATED)
            if description.is_some_and(|d| d.eq_ignore_ascii_case("batch completed")) =>
        {
            PullReply::Ignore
        }
        Some(_) => PullReply::Fail,
    }
}

/// Whether a reply subject is a JetStream acknowledgement subject, which only a delivered
/// stream message carries (both layouts: `$JS.ACK.<stream>…` and `$JS.ACK.<domain>.<hash>…`).
fn is_stored(reply: &str) -> bool {
    reply.starts_with("$JS.ACK.")
}

/// The error of a pull its connection dropped under.
pub const DROPPED_MID_PULL: &str = "the NATS connection dropped during the pull";

/// Resolves when the connection drops; never if its drop count can no longer change.
async fn connection_dropped(dropped: &mut watch::Receiver<u64>) {
    if dropped.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_completed_409_does_not_end_the_pull_but_other_409s_fail_it() {
        let conflict = Some(StatusCode::REQUEST_TERMINATED);
        assert_eq!(pull_reply(None, None, false), PullReply::Message);
        assert_eq!(
            pull_reply(conflict, Some("Batch Completed"), false),
            PullReply::Ignore
        );
        assert_eq!(
            pull_reply(Some(StatusCode::IDLE_HEARTBEAT), None, false),
            PullReply::Ignore
        );
        assert_eq!(
            pull_reply(Some(StatusCode::NOT_FOUND), Some("No Messages"), false),
            PullReply::End
        );
        assert_eq!(
            pull_reply(Some(StatusCode::TIMEOUT), Some("Request Timeout"), false),
            PullReply::End
        );
        for other in [
            "Message Size Exceeds MaxBytes",
            "Consumer Deleted",
            "Exceeded MaxRequestBatch of 10",
        ] {
            assert_eq!(
                pull_reply(conflict, Some(other), false),
                PullReply::Fail,
                "{other}"
            );
        }
        assert_eq!(pull_reply(conflict, None, false), PullReply::Fail);
        for description in ["Nats-Pin-Id mismatch", "Nats-Wrong-Pin-Id"] {
            assert_eq!(
                pull_reply(Some(StatusCode::PIN_ID_MISMATCH), Some(description), false),
                PullReply::PinLost
            );
        }
        assert_eq!(
            pull_reply(Some(StatusCode::NO_RESPONDERS), None, false),
            PullReply::Fail
        );
    }

    #[test]
    fn a_stored_message_is_a_message_whatever_status_its_own_header_block_carries() {
        // A publisher may store `NATS/1.0 503` or `NATS/1.0 404`: the server delivers it
        // with its ACK reply subject, and it must reach the sink, not end the pull.
        for status in [
            None,
            Some(StatusCode::OK),
            Some(StatusCode::NO_RESPONDERS),
            Some(StatusCode::NOT_FOUND),
            Some(StatusCode::TIMEOUT),
            Some(StatusCode::IDLE_HEARTBEAT),
            Some(StatusCode::REQUEST_TERMINATED),
        ] {
            assert_eq!(
                pull_reply(status, Some("x"), true),
                PullReply::Message,
                "{status:?}"
            );
        }
        assert!(is_stored("$JS.ACK.ORDERS.db.1.2.3.4.5"));
        assert!(is_stored("$JS.ACK.hub.ACC.ORDERS.db.1.2.3.4.5.tok"));
        assert!(!is_stored("_INBOX.abc"));
        assert!(!is_stored("$JS.FC.ORDERS.x"));
    }
}
