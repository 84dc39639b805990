//! A consumer's pulls share one reply inbox (`jetsink::nats::Pulls`): each pull takes the
//! next messages once, in order, whether the pull before it filled its count, ended on
//! "no messages" or expired empty in the server: the statuses that end a pull reach only
//! the pull they answer.

use crate::common;

use std::time::Duration;

use async_nats::jetstream::consumer::{pull, AckPolicy, PullConsumer};
use common::*;
use jetsink::nats::{fetch_batch, Drops, FetchLimits, Pulls};

/// The stream sequences of `messages`, from their ACK subjects.
fn sequences(js: &async_nats::jetstream::Context, messages: Vec<async_nats::Message>) -> Vec<u64> {
    messages
        .into_iter()
        .map(|message| {
            let m = async_nats::jetstream::Message {
                message,
                context: js.clone(),
            };
            m.info()
                .expect("a delivered message's ACK subject")
                .stream_sequence
        })
        .collect()
}

async fn consumer(js: &async_nats::jetstream::Context) -> PullConsumer {
    create_stream(js, "INBOX", "inbox.>").await;
    let stream = js.get_stream("INBOX").await.unwrap();
    let config = pull::Config {
        durable_name: Some("c".into()),
        ack_policy: AckPolicy::Explicit,
        ..Default::default()
    };
    stream.create_consumer(config).await.unwrap()
}

async fn publish(js: &async_nats::jetstream::Context, n: usize, pending: u64) {
    for i in 0..n {
        js.publish("inbox.x", format!("{i}").into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    // A no-wait pull answers from what the consumer counts as pending.
    eventually(
        Duration::from_secs(30),
        "the consumer counts them",
        || async { consumer_info(js, "INBOX", "c").await.num_pending == pending },
    )
    .await;
}

const LIMITS: FetchLimits = FetchLimits {
    max_messages: 3,
    max_bytes: 1 << 20,
    wait: Duration::from_millis(300),
    linger: Duration::ZERO,
};

#[tokio::test(flavor = "multi_thread")]
async fn consecutive_pulls_reply_to_one_inbox_and_each_takes_the_next_messages_once() {
    let server = NatsServer::start();
    let js = server.js().await;
    let c = consumer(&js).await;
    let drops = Drops::default();
    let mut pulls = Pulls::default();
    assert_eq!(pulls.inbox(), None, "no inbox before the first pull");
    publish(&js, 5, 5).await;

    let full = fetch_batch(&js, &c, LIMITS, &drops, None, &mut pulls).await;
    assert_eq!(sequences(&js, full.unwrap()), [1, 2, 3], "a full count");
    let inbox = pulls.inbox().map(str::to_string);
    assert!(inbox.is_some(), "the first pull keeps its inbox");

    // Two ready, then the server's "no messages" for this pull.
    let partial = fetch_batch(&js, &c, LIMITS, &drops, None, &mut pulls).await;
    assert_eq!(sequences(&js, partial.unwrap()), [4, 5], "the rest, once");
    assert_eq!(pulls.inbox().map(str::to_string), inbox, "the same inbox");

    // Nothing ready: the long poll expires in the server with a 408 for it alone.
    let empty = fetch_batch(&js, &c, LIMITS, &drops, None, &mut pulls).await;
    assert!(empty.unwrap().is_empty(), "nothing to take");
    assert_eq!(
        pulls.inbox().map(str::to_string),
        inbox,
        "still the same inbox"
    );

    publish(&js, 2, 2).await;
    let next = fetch_batch(&js, &c, LIMITS, &drops, None, &mut pulls).await;
    assert_eq!(
        sequences(&js, next.unwrap()),
        [6, 7],
        "what came after, once"
    );
    assert_eq!(
        pulls.inbox().map(str::to_string),
        inbox,
        "one inbox throughout"
    );
}
