//! moto, the S3-compatible store the s3 destination's tests write to, started per test on
//! a free loopback port, and the destination settings pointing at it.
//!
//! The binary: `JETSINK_TEST_MOTO_SERVER`, else `.ci/venv/bin/moto_server` or
//! `.ci/venv-s3/bin/moto_server` in the repository, else `moto_server` on PATH.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::aws::AmazonS3Builder;
use object_store::ObjectStore;
use serde_json::{json, Value};

use super::free_port;

pub fn moto_bin() -> String {
    if let Ok(p) = std::env::var("JETSINK_TEST_MOTO_SERVER") {
        return p;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for venv in [".ci/venv", ".ci/venv-s3"] {
        let p = root.join(venv).join("bin/moto_server");
        if p.exists() {
            return p.to_string_lossy().into_owned();
        }
    }
    "moto_server".into()
}

/// A moto server of this test's own.
pub struct Moto {
    child: Option<Child>,
    port: u16,
    env: Vec<(&'static str, &'static str)>,
}

impl Moto {
    pub fn start() -> Moto {
        Moto::start_with(&[])
    }

    pub fn start_with(env: &[(&'static str, &'static str)]) -> Moto {
        let mut m = Moto {
            child: None,
            port: free_port(),
            env: env.to_vec(),
        };
        m.spawn();
        m
    }

    fn spawn(&mut self) {
        let child = Command::new(moto_bin())
            .args(["-H", "127.0.0.1", "-p", &self.port.to_string()])
            .envs(self.env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto_server (pip install 'moto[server]'; see docs/sinks/s3.md)");
        self.child = Some(child);
        // Ready when it answers HTTP at all.
        let deadline = Instant::now() + Duration::from_secs(60);
        let url = self.url();
        loop {
            if super::http_blocking(reqwest::Method::GET, &url).is_some() {
                return;
            }
            assert!(Instant::now() < deadline, "moto_server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// SIGKILL; everything it stored is gone with it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A new, empty moto on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// moto accepts unsigned bucket requests while it checks no credentials.
    pub fn create_bucket(&self, bucket: &str) {
        let answer =
            super::http_blocking(reqwest::Method::PUT, &format!("{}/{bucket}", self.url()));
        assert!(
            answer.as_ref().is_some_and(|(s, _)| *s == 200),
            "create bucket {bucket}: {answer:?}"
        );
    }

    pub fn delete_bucket(&self, bucket: &str) {
        let answer =
            super::http_blocking(reqwest::Method::DELETE, &format!("{}/{bucket}", self.url()));
        assert!(
            answer.as_ref().is_some_and(|(s, _)| (200..300).contains(s)),
            "delete bucket {bucket}: {answer:?}"
        );
    }

    pub fn store(&self, bucket: &str) -> Arc<dyn ObjectStore> {
        Arc::new(
            AmazonS3Builder::new()
                .with_endpoint(self.url())
                .with_allow_http(true)
                .with_bucket_name(bucket)
                .with_region("us-east-1")
                .with_access_key_id("test")
                .with_secret_access_key("test")
                .build()
                .expect("s3 client"),
        )
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Key files for the destination (moto does not check them unless told to).
pub fn key_files(dir: &Path) -> (String, String) {
    let id = dir.join("s3-key-id");
    let secret = dir.join("s3-secret");
    std::fs::write(&id, "AKIDTEST\n").unwrap();
    std::fs::write(&secret, "not-a-real-secret\n").unwrap();
    (
        id.to_string_lossy().into_owned(),
        secret.to_string_lossy().into_owned(),
    )
}

pub fn destination(moto: &Moto, dir: &Path, bucket: &str, extra: Value) -> Value {
    let (id, secret) = key_files(dir);
    let mut d = json!({
        "type": "s3",
        "bucket": bucket,
        "prefix": "archive",
        "endpoint": moto.url(),
        "allow_http": true,
        "access_key_id_file": id,
        "secret_access_key_file": secret,
        "connect_timeout_ms": 500,
        "request_timeout_ms": 5000,
    });
    if let (Some(d), Some(extra)) = (d.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            d.insert(k.clone(), v.clone());
        }
    }
    d
}
