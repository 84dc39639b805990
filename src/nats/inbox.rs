//! A reply subscription kept across requests.
//!
//! A request that subscribes a fresh inbox for its replies costs a SUB and an UNSUB on
//! the connection, a subscription set up and torn down in the client, and the server's
//! subject index changed twice — per request. For a sink pulling a batch every few
//! milliseconds at a steady rate that was a measurable part of its cost per message.
//! One wildcard subscription, each request replying to a subject of its own under it,
//! pays that once; the client renews it across reconnects.

use async_nats::client::SubscribeError;
use async_nats::{Client, Subject, Subscriber};

/// One subscription to `<prefix>.>`, the replies of every request sent with a reply
/// subject under `prefix`.
#[derive(Debug)]
pub struct Inbox {
    prefix: String,
    sub: Subscriber,
    /// The last request's number, which names its reply subject.
    sent: u64,
}

impl Inbox {
    /// Subscribes to a fresh inbox on `client`.
    pub async fn open(client: &Client) -> Result<Inbox, SubscribeError> {
        let prefix = client.new_inbox();
        let sub = client.subscribe(format!("{prefix}.>")).await?;
        Ok(Inbox {
            prefix,
            sub,
            sent: 0,
        })
    }

    /// The subjects of this inbox begin with this (then a dot).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A reply subject no earlier request of this inbox used, so that a late reply to one
    /// of them is told apart from the replies to the next.
    pub fn next_reply(&mut self) -> Subject {
        self.sent += 1;
        let mut subject = String::with_capacity(self.prefix.len() + 21);
        subject.push_str(&self.prefix);
        subject.push('.');
        subject.push_str(itoa::Buffer::new().format(self.sent));
        Subject::from(subject)
    }

    /// Where the replies arrive.
    pub fn replies(&mut self) -> &mut Subscriber {
        &mut self.sub
    }
}
