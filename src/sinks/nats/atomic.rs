//! The I/O of one atomic batch publish: every copy sent with the batch headers and a reply
//! subject of its own under the sink's reply inbox (`<inbox>.<batch id>.<sequence>`), then
//! the replies read until the commit's, all within one request timeout. The decisions are
//! [`super::batch`]'s.

use std::time::Duration;

use async_nats::{Client, HeaderMap, StatusCode};
use bytes::Bytes;
use futures::StreamExt;

use super::batch::{parse_reply, Attempt, Reply};
use crate::nats::inbox::Inbox;
use crate::sinks::contract::SinkError;

/// One copy ready to send: subject, headers (batch headers set), payload.
pub(super) type Outgoing = (String, HeaderMap, Bytes);

/// Sends `copies` as batch `id` and reads what the server answers. A copy the client
/// refuses to send for its size is that message's refusal; any other send failure leaves
/// a batch the server will time out, and is transient.
pub(super) async fn publish(
    client: &Client,
    inbox: &mut Inbox,
    id: &str,
    copies: Vec<Outgoing>,
    timeout: Duration,
) -> Result<Attempt, SinkError> {
    let n = copies.len();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut reply = String::with_capacity(inbox.prefix().len() + id.len() + 8);
    for (i, (subject, headers, payload)) in copies.into_iter().enumerate() {
        reply.clear();
        reply.push_str(inbox.prefix());
        reply.push('.');
        reply.push_str(id);
        reply.push('.');
        reply.push_str(itoa::Buffer::new().format(i + 1));
        let sent = client
            .publish_with_reply_and_headers(subject, reply.clone(), headers, payload)
            .await;
        if let Err(e) = sent {
            return Err(match e.kind() {
                async_nats::client::PublishErrorKind::MaxPayloadExceeded => {
                    SinkError::Permanent {
                        index: Some(i),
                        message: format!(
                            "message {i} of the atomic batch: larger than the target server's max_payload"
                        ),
                    }
                }
                _ => SinkError::transient(format!(
                    "message {i} of the atomic batch could not be sent: {e}"
                )),
            });
        }
    }
    client
        .flush()
        .await
        .map_err(|e| SinkError::transient(format!("flush of the atomic batch: {e}")))?;
    let mut attempt = Attempt::default();
    let mine = format!("{}.{id}.", inbox.prefix());
    loop {
        let msg = match tokio::time::timeout_at(deadline, inbox.replies().next()).await {
            Ok(Some(msg)) => msg,
            // Closed (the client is gone) or no commit in time: `commit` stays `None`.
            Ok(None) | Err(_) => return Ok(attempt),
        };
        // A reply of an earlier attempt that timed out is not this batch's.
        let Some(seq) = msg
            .subject
            .strip_prefix(mine.as_str())
            .and_then(|s| s.parse::<usize>().ok())
        else {
            continue;
        };
        let answer = parse_reply(&msg.payload, msg.status == Some(StatusCode::NO_RESPONDERS));
        if seq == n {
            attempt.commit = Some(answer);
            return Ok(attempt);
        }
        if answer != Reply::Staged && attempt.refused.is_none() && seq >= 1 {
            attempt.refused = Some((seq - 1, answer));
        }
    }
}
