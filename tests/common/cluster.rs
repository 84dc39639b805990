//! A private three-node JetStream cluster on loopback ports, for failover tests: each node
//! has its own store directory, config file and log, routes to the two others, and can be
//! SIGKILLed, stopped with SIGTERM and started again on the same ports and store.
//!
//! Readiness is always observed, never slept for: a node is up when its monitoring
//! `/healthz` answers 200, and a stream or consumer replica is back when the leader's info
//! lists it as current.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use async_nats::jetstream::stream::ClusterInfo;

use super::{eventually, free_port, nats_server_binary};

/// One node: its name (the `server_name` that stream and consumer info report) and ports.
pub struct Node {
    pub name: String,
    pub client_port: u16,
    pub monitor_port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Node {
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.client_port)
    }

    /// The node's log, for failure messages.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }
}

/// Three JetStream nodes clustered over routes; every process dies with the guard.
pub struct Cluster {
    pub nodes: Vec<Node>,
    _root: tempfile::TempDir,
}

impl Cluster {
    /// Starts three nodes and waits until each answers `/healthz` and the cluster can
    /// serve the JetStream API (a meta leader is elected).
    pub async fn start() -> Cluster {
        let root = tempfile::tempdir().expect("cluster dir");
        let route_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let mut nodes = Vec::new();
        for (i, route_port) in route_ports.iter().enumerate() {
            let name = format!("n{}", i + 1);
            let dir = root.path().join(&name);
            std::fs::create_dir_all(&dir).expect("node dir");
            let node = Node {
                name: name.clone(),
                client_port: free_port(),
                monitor_port: free_port(),
                dir,
                child: None,
            };
            let routes: Vec<String> = route_ports
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, p)| format!("\"nats-route://127.0.0.1:{p}\""))
                .collect();
            let config = format!(
                "server_name: {name}\n\
                 listen: \"127.0.0.1:{client}\"\n\
                 http: \"127.0.0.1:{monitor}\"\n\
                 jetstream {{ store_dir: \"{store}\" }}\n\
                 cluster {{\n  name: jetsink-test\n  listen: \"127.0.0.1:{route_port}\"\n  routes: [{routes}]\n}}\n",
                client = node.client_port,
                monitor = node.monitor_port,
                store = node.dir.join("js").display(),
                routes = routes.join(", "),
            );
            std::fs::write(node.dir.join("server.conf"), config).expect("node config");
            nodes.push(node);
        }
        let mut cluster = Cluster { nodes, _root: root };
        for i in 0..cluster.nodes.len() {
            cluster.spawn(i);
        }
        for i in 0..cluster.nodes.len() {
            cluster.wait_healthy(i).await;
        }
        let client = cluster.client().await;
        eventually(Duration::from_secs(30), "a JetStream meta leader", || {
            let client = client.clone();
            async move {
                matches!(
                    tokio::time::timeout(
                        Duration::from_secs(2),
                        client.request("$JS.API.INFO", "".into())
                    )
                    .await,
                    Ok(Ok(m)) if !String::from_utf8_lossy(&m.payload).contains("\"error\"")
                )
            }
        })
        .await;
        cluster.wait_r3_placement().await;
        cluster
    }

    /// Waits until the meta group knows all three peers, so an R3 stream can be placed: a
    /// meta leader is elected before the last peer has joined, and creating an R3 stream in
    /// that window fails with "no suitable peers for placement" (10005). Proven by creating
    /// and deleting a probe R3 stream.
    async fn wait_r3_placement(&self) {
        let js = self.js().await;
        self.create_r3_stream(
            &js,
            jetstream::stream::Config {
                name: "PLACEMENT_PROBE".to_string(),
                subjects: vec!["placement.probe".to_string()],
                num_replicas: 3,
                ..Default::default()
            },
        )
        .await;
        eventually(Duration::from_secs(60), "the probe stream deleted", || {
            let js = js.clone();
            async move {
                // Any answer will do (deleted, or gone already): what counts is the get.
                tokio::time::timeout(Duration::from_secs(10), js.delete_stream("PLACEMENT_PROBE"))
                    .await
                    .is_ok()
                    && matches!(
                    tokio::time::timeout(Duration::from_secs(10), js.get_stream("PLACEMENT_PROBE"))
                        .await,
                    Ok(Err(e)) if matches!(e.kind(), jetstream::context::GetStreamErrorKind::JetStream(j) if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND)
                )
            }
        })
        .await;
    }

    /// Creates a replicated stream, asking again until the cluster answers: a create
    /// proposed while the meta group or a fresh stream group is still electing its leader
    /// can go unanswered (seen once on 2.14 in CI, a 30 s timeout right after the probe
    /// stream had been placed), and the same create asked again is answered with the
    /// stream's info whether or not the first one took effect, since the config is the
    /// same. The node logs are printed if it never succeeds.
    pub async fn create_r3_stream(
        &self,
        js: &jetstream::Context,
        config: jetstream::stream::Config,
    ) -> jetstream::stream::Stream {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let last = match tokio::time::timeout(
                Duration::from_secs(15),
                js.create_stream(config.clone()),
            )
            .await
            {
                Ok(Ok(stream)) => {
                    // A create answered again may come back before the stream's group
                    // has elected its leader.
                    eventually(
                        Duration::from_secs(60),
                        "the new stream's leader",
                        || async {
                            stream_cluster(js, &config.name)
                                .await
                                .is_some_and(|c| c.leader.is_some())
                        },
                    )
                    .await;
                    return stream;
                }
                Ok(Err(e)) => format!("{e}"),
                Err(_) => "no answer within 15 s".to_string(),
            };
            if Instant::now() >= deadline {
                let logs: Vec<String> = self
                    .nodes
                    .iter()
                    .map(|n| format!("--- {} ---\n{}", n.name, n.log_text()))
                    .collect();
                panic!(
                    "creating the R3 stream {} never succeeded (last: {last})\n{}",
                    config.name,
                    logs.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Every node's client URL, for the `nats.servers` list of a config.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Node::url).collect()
    }

    /// A client that knows every node and reconnects to a live one.
    pub async fn client(&self) -> async_nats::Client {
        let addrs: Vec<async_nats::ServerAddr> = self
            .urls()
            .iter()
            .map(|u| u.parse().expect("server url"))
            .collect();
        async_nats::ConnectOptions::new()
            .retry_on_initial_connect()
            .connect(addrs)
            .await
            .expect("connect to the test cluster")
    }

    /// The tests' JetStream context, with a 30 s request timeout instead of 5 s: a
    /// freshly formed or just restarted cluster on a loaded machine answered an R3 stream
    /// create after more than 5 s (2.14, four test threads), and the create is the test's
    /// setup, not what it proves.
    pub async fn js(&self) -> jetstream::Context {
        let mut js = jetstream::new(self.client().await);
        js.set_timeout(Duration::from_secs(30));
        js
    }

    pub fn index_of(&self, name: &str) -> usize {
        self.nodes
            .iter()
            .position(|n| n.name == name)
            .unwrap_or_else(|| panic!("no node named {name}"))
    }

    fn spawn(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(node.dir.join("server.log"))
            .expect("node log");
        let child = Command::new(nats_server_binary())
            .arg("-c")
            .arg(node.dir.join("server.conf"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start nats-server node");
        node.child = Some(child);
    }

    async fn wait_healthy(&self, i: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let node = &self.nodes[i];
            let port = node.monitor_port;
            let ok = super::http(
                reqwest::Method::GET,
                &format!("http://127.0.0.1:{port}/healthz"),
            )
            .await
            .is_some_and(|(status, _)| status == 200);
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "node {} did not become healthy:\n{}",
                node.name,
                node.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILLs node `name` (its store stays).
    pub fn kill(&mut self, name: &str) {
        let i = self.index_of(name);
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM to node `name` and waits for it to exit (a graceful shutdown, as a rolling
    /// restart does it); SIGKILL if it has not exited within 30 s.
    pub fn stop(&mut self, name: &str) {
        let i = self.index_of(name);
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(30);
            while !matches!(c.try_wait(), Ok(Some(_))) {
                if Instant::now() > deadline {
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Starts node `name` again on its ports and store and waits for its `/healthz`.
    pub async fn start_node(&mut self, name: &str) {
        let i = self.index_of(name);
        self.spawn(i);
        self.wait_healthy(i).await;
    }

    /// Every node's log, for failure messages.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("--- {} ---\n{}", n.name, n.log_text()))
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut c) = node.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// The stream's cluster info (leader and replicas), or `None` while it cannot be read
/// (no leader yet, request timed out).
pub async fn stream_cluster(js: &jetstream::Context, stream: &str) -> Option<ClusterInfo> {
    let fut = async {
        let mut s = js.get_stream(stream).await.ok()?;
        s.info().await.ok()?.cluster.clone()
    };
    tokio::time::timeout(Duration::from_secs(3), fut)
        .await
        .ok()
        .flatten()
}

/// The consumer's cluster info, or `None` while it cannot be read.
pub async fn consumer_cluster(
    js: &jetstream::Context,
    stream: &str,
    consumer: &str,
) -> Option<ClusterInfo> {
    let fut = async {
        let s = js.get_stream(stream).await.ok()?;
        s.consumer_info(consumer).await.ok()?.cluster
    };
    tokio::time::timeout(Duration::from_secs(3), fut)
        .await
        .ok()
        .flatten()
}

/// True when `info` has a leader and `node` is that leader or a current, online replica.
pub fn node_current(info: &ClusterInfo, node: &str) -> bool {
    info.leader.is_some()
        && (info.leader.as_deref() == Some(node)
            || info
                .replicas
                .iter()
                .any(|p| p.name == node && p.current && !p.offline))
}

/// Waits until both the stream and its consumer list `node` as leader or current replica:
/// the node has caught up and the next one may be taken down without losing quorum.
pub async fn wait_node_current(js: &jetstream::Context, stream: &str, consumer: &str, node: &str) {
    eventually(
        Duration::from_secs(60),
        &format!("node {node} current in stream {stream} and consumer {consumer}"),
        || async {
            stream_cluster(js, stream)
                .await
                .is_some_and(|c| node_current(&c, node))
                && consumer_cluster(js, stream, consumer)
                    .await
                    .is_some_and(|c| node_current(&c, node))
        },
    )
    .await;
}
