//! The offered load of a `--rate` pass. It is published by a separate `jetsink publish`
//! process, so the CPU the bench reads from its own `/proc/self/stat` is the pipeline's
//! alone: an in-process publisher at 5,000 msg/s cost as much CPU as the pipeline it
//! measured, and hid what a steady rate costs jetsink. A server given through `--config`
//! (credentials, TLS) cannot be handed to that process; its load is published in this
//! process instead, and the report says its CPU is counted in jetsink's.

use async_nats::jetstream;
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use super::options::{plan, Options, Server};
use crate::cmd::publish::publish;

/// A pass's publisher, running.
pub enum Feeder {
    /// `jetsink publish`, a process of its own.
    Process(Child),
    /// In this process (a configured server).
    Task(JoinHandle<()>),
}

/// Whether a `--rate` pass publishes from a process of its own (its CPU out of jetsink's).
pub fn separate(opts: &Options) -> bool {
    matches!(opts.server, Server::Url(_))
}

/// Starts the offered load for one pass on `subject`, when `--rate` is set.
pub fn start(opts: &Options, js: &jetstream::Context, subject: &str) -> Option<Feeder> {
    let rate = opts.rate?;
    if let Server::Url(url) = &opts.server {
        match spawn(opts, url, subject, rate) {
            Ok(child) => return Some(Feeder::Process(child)),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start `jetsink publish`; publishing in this process, its CPU counted in jetsink's")
            }
        }
    }
    let js = js.clone();
    let plan = plan(subject.to_string(), opts, Some(rate));
    Some(Feeder::Task(tokio::spawn(async move {
        if let Err(e) = publish(&js, &plan).await {
            tracing::error!(error = %e, "benchmark publisher failed");
        }
    })))
}

/// `jetsink publish` (this executable) with the pass's plan.
fn spawn(opts: &Options, url: &str, subject: &str, rate: u64) -> std::io::Result<Child> {
    let exe = std::env::current_exe()?;
    let p = plan(subject.to_string(), opts, Some(rate));
    let mut cmd = Command::new(exe);
    cmd.args(["publish", "--server", url, "--subject", subject])
        .args([
            "--count",
            &p.count.to_string(),
            "--size",
            &p.size.to_string(),
        ])
        .args([
            "--rate",
            &rate.to_string(),
            "--window",
            &p.window.to_string(),
        ])
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true);
    if p.traceparent {
        cmd.arg("--traceparent");
    }
    cmd.spawn()
}

impl Feeder {
    /// Waits for the publisher to finish (it has, once the pass received every message).
    pub async fn finish(self) {
        match self {
            Feeder::Process(mut child) => match child.wait().await {
                Ok(status) if !status.success() => {
                    tracing::error!(%status, "benchmark publisher `jetsink publish` failed")
                }
                Ok(_) => {}
                Err(e) => tracing::error!(error = %e, "waiting for the benchmark publisher"),
            },
            Feeder::Task(task) => {
                let _ = task.await;
            }
        }
    }
}
