//! A TCP proxy the fault matrix puts between jetsink and a server it talks to, so a test
//! can take the server away or hold jetsink's acknowledgements without touching the server:
//! in front of moto it makes the store unreachable while moto keeps what it stored (a
//! restarted moto is empty); in front of the source nats-server it holds every publish to
//! `$JS.ACK.…` (ACK, NAK, `+WPI`) while pulls, deliveries and everything else flow, so a
//! SIGKILL lands with committed batches whose ACKs the server never saw, every time,
//! instead of in a window a test has to hit.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::common::free_port;

struct State {
    upstream: SocketAddr,
    /// The upstream speaks NATS: the client's bytes are cut into operations.
    nats: bool,
    /// Connections are refused (accepted and closed at once) while set.
    down: AtomicBool,
    /// Acknowledgements from the client are held, not forwarded, while `true`.
    held: watch::Sender<bool>,
    /// The tasks of the open connections, so they can be cut.
    open: Mutex<Vec<AbortHandle>>,
}

/// A proxy on a free loopback port forwarding to `upstream`; it runs until dropped.
pub struct Proxy {
    pub port: u16,
    state: Arc<State>,
    listener: AbortHandle,
}

impl Proxy {
    /// A proxy to the NATS server on `upstream_port`, which can hold acknowledgements.
    pub async fn nats(upstream_port: u16) -> Proxy {
        Proxy::start(upstream_port, true).await
    }

    /// A proxy to any TCP server, which can only go down.
    pub async fn tcp(upstream_port: u16) -> Proxy {
        Proxy::start(upstream_port, false).await
    }

    async fn start(upstream_port: u16, nats: bool) -> Proxy {
        let port = free_port();
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("bind the proxy's port");
        let state = Arc::new(State {
            upstream: SocketAddr::from(([127, 0, 0, 1], upstream_port)),
            nats,
            down: AtomicBool::new(false),
            held: watch::channel(false).0,
            open: Mutex::new(Vec::new()),
        });
        let accepting = state.clone();
        let listener = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                if accepting.down.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let task = tokio::spawn(forward(client, accepting.clone()));
                let mut open = accepting.open.lock().unwrap();
                open.retain(|t| !t.is_finished());
                open.push(task.abort_handle());
            }
        })
        .abort_handle();
        Proxy {
            port,
            state,
            listener,
        }
    }

    pub fn url(&self, scheme: &str) -> String {
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// Down: every open connection is cut and new ones are closed at once.
    pub fn down(&self) {
        self.state.down.store(true, Ordering::SeqCst);
        self.cut();
    }

    /// Up again: connections are forwarded.
    pub fn up(&self) {
        self.state.down.store(false, Ordering::SeqCst);
    }

    /// Holds the acknowledgements clients publish from now on (a NATS upstream only).
    pub fn hold_acks(&self) {
        self.state.held.send_replace(true);
    }

    /// Cuts every open connection, dropping the acknowledgements held, and forwards them
    /// again.
    pub fn cut_and_release(&self) {
        self.cut();
        self.state.held.send_replace(false);
    }

    fn cut(&self) {
        for task in self.state.open.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.listener.abort();
        self.cut();
    }
}

/// Forwards one connection both ways until either side closes; the client's publishes to
/// `$JS.ACK.…` are dropped while the proxy holds them (the connection is cut before they
/// could matter: only a SIGKILLed client is held).
async fn forward(client: TcpStream, state: Arc<State>) {
    let Ok(server) = TcpStream::connect(state.upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let held = state.held.subscribe();
    let nats = state.nats;
    let upstream = async move {
        let mut buf = vec![0u8; 64 * 1024];
        let mut ops = Ops::default();
        loop {
            let n = match from_client.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let written = if nats {
                let hold = *held.borrow();
                to_server.write_all(&ops.pass(&buf[..n], hold)).await
            } else {
                to_server.write_all(&buf[..n]).await
            };
            if written.is_err() {
                return;
            }
        }
    };
    let downstream = async move {
        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
    };
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
    }
}

/// The client side of the NATS protocol cut into operations: control lines, and `PUB` /
/// `HPUB` with their payloads, so a whole acknowledgement can be left out. Bytes that are
/// not a complete operation yet wait for the next read.
#[derive(Default)]
struct Ops {
    partial: Vec<u8>,
}

impl Ops {
    /// What of `bytes` (after what waited) goes on: every complete operation, less the
    /// publishes to `$JS.ACK.` while `hold_acks`.
    fn pass(&mut self, bytes: &[u8], hold_acks: bool) -> Vec<u8> {
        self.partial.extend_from_slice(bytes);
        let mut out = Vec::with_capacity(self.partial.len());
        let mut at = 0;
        while let Some(len) = op_len(&self.partial[at..]) {
            let op = &self.partial[at..at + len];
            if !(hold_acks && is_ack(op)) {
                out.extend_from_slice(op);
            }
            at += len;
        }
        self.partial.drain(..at);
        out
    }
}

/// The length of the complete operation at the start of `b`, if it is all there.
fn op_len(b: &[u8]) -> Option<usize> {
    let line_end = b.windows(2).position(|w| w == b"\r\n")? + 2;
    let line = String::from_utf8_lossy(&b[..line_end - 2]);
    let verb = line.split(' ').next().unwrap_or("").to_ascii_uppercase();
    // The last field of PUB and HPUB is the size of what follows (HPUB: headers and
    // payload together).
    let size = line
        .split_whitespace()
        .last()
        .and_then(|s| s.parse::<usize>().ok());
    let (true, Some(size)) = (verb == "PUB" || verb == "HPUB", size) else {
        return Some(line_end);
    };
    let len = line_end + size + 2;
    (b.len() >= len).then_some(len)
}

fn is_ack(op: &[u8]) -> bool {
    let mut fields = op.split(|c| *c == b' ');
    let verb = fields.next().unwrap_or(b"");
    (verb.eq_ignore_ascii_case(b"PUB") || verb.eq_ignore_ascii_case(b"HPUB"))
        && fields.next().is_some_and(|s| s.starts_with(b"$JS.ACK."))
}

#[test]
fn the_ack_filter_drops_whole_ack_publishes_and_keeps_every_other_operation_across_reads() {
    let stream = b"CONNECT {\"verbose\":false}\r\nPING\r\nPUB $JS.ACK.FM.c.1.5.5.1.0 4\r\n+ACK\r\nHPUB $JS.API.CONSUMER.MSG.NEXT.FM.c _INBOX.x 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPUB fm.x 2\r\n{}\r\nSUB _INBOX.> 1\r\n";
    let plain: Vec<u8> = stream.to_vec();
    let without_ack: Vec<u8> = String::from_utf8_lossy(stream)
        .replace("PUB $JS.ACK.FM.c.1.5.5.1.0 4\r\n+ACK\r\n", "")
        .into_bytes();
    for cut in 1..stream.len() {
        for (hold, expected) in [(false, &plain), (true, &without_ack)] {
            let mut ops = Ops::default();
            let mut out = ops.pass(&stream[..cut], hold);
            out.extend(ops.pass(&stream[cut..], hold));
            assert_eq!(
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(expected),
                "cut at {cut}, holding {hold}"
            );
        }
    }
}
