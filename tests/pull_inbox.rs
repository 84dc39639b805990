//! A consumer's pulls share one reply inbox (`jetsink::nats::Pulls`): each pull takes the
//! next messages once, in order, whether the pull before it filled its count, ended on
//! "no messages" or expired empty in the server: the statuses that end a pull reach only
//! the pull they answer. A pull its connection dropped under gives the inbox up, and the
//! next opens a fresh one.

use crate::common;

use std::time::Duration;

use async_nats::jetstream::consumer::{pull, AckPolicy, PullConsumer};
use common::*;
use jetsink::config::{NatsAuth, NatsConfig};
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

#[tokio::test(flavor = "multi_thread")]
async fn a_pull_its_connection_dropped_under_gives_the_inbox_up_and_the_next_opens_a_fresh_one() {
    let mut server = NatsServer::start();
    let js = server.js().await;
    consumer(&js).await;
    // jetsink's own connection, whose drops a pull watches.
    let metrics = jetsink::metrics::Metrics::new();
    let links = jetsink::nats::Links::new(&metrics);
    let cfg = NatsConfig {
        servers: vec![server.url()],
        name: "pull-inbox".into(),
        connect_timeout_ms: 10_000,
        reconnect_delay_max_ms: 200,
        max_reconnects: None,
        request_timeout_ms: 10_000,
        auth: NatsAuth::None,
        tls: None,
    };
    let conn = jetsink::nats::connect(&cfg, "pull-inbox", &links, &metrics)
        .await
        .unwrap();
    let own = async_nats::jetstream::new(conn.client.clone());
    let c: PullConsumer = own
        .get_stream("INBOX")
        .await
        .unwrap()
        .get_consumer("c")
        .await
        .unwrap();
    let mut pulls = Pulls::default();
    publish(&js, 1, 1).await;
    let first = fetch_batch(&own, &c, LIMITS, &conn.drops, None, &mut pulls).await;
    assert_eq!(sequences(&js, first.unwrap()), [1]);
    let before = pulls.inbox().map(str::to_string);
    assert!(before.is_some());

    // A long poll waits in the server on the empty consumer while the server goes down.
    let waiting = tokio::spawn({
        let (own, c, drops) = (own.clone(), c.clone(), conn.drops.clone());
        let limits = FetchLimits {
            wait: Duration::from_secs(60),
            ..LIMITS
        };
        async move {
            let pulled = fetch_batch(&own, &c, limits, &drops, None, &mut pulls).await;
            (pulled.map_err(|e| e.to_string()), pulls)
        }
    });
    eventually(
        Duration::from_secs(30),
        "the long poll waits in the server",
        || async { consumer_info(&js, "INBOX", "c").await.num_waiting == 1 },
    )
    .await;
    server.restart();
    let (pulled, mut pulls) = waiting.await.unwrap();
    let err = pulled.expect_err("the pull ends with its connection");
    assert!(err.contains("dropped"), "{err}");
    assert_eq!(pulls.inbox(), None, "the inbox is given up");

    let js = server.js().await;
    js.publish("inbox.x", "after".into())
        .await
        .unwrap()
        .await
        .unwrap();
    // Message 1 was never ACKed, and a server killed may also forget it was delivered: the
    // pulls after the drop may take it again beside message 2, but each once.
    let mut got: Vec<u64> = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), async {
        while !got.contains(&2) {
            if let Ok(m) = fetch_batch(&own, &c, LIMITS, &conn.drops, None, &mut pulls).await {
                got.extend(sequences(&js, m));
            }
        }
    })
    .await
    .expect("the pulls after the drop take what came after it");
    let mut once = got.clone();
    once.sort_unstable();
    once.dedup();
    assert_eq!(once.len(), got.len(), "each message once: {got:?}");
    assert!(got.iter().all(|s| [1, 2].contains(s)), "{got:?}");
    let after = pulls.inbox().map(str::to_string);
    assert!(
        after.is_some() && after != before,
        "a fresh inbox: {after:?} after {before:?}"
    );
}
