//! Runs the jobs: one child per message, payload on stdin, bounded stdout, a timeout that
//! kills the child's whole process group, up to `concurrency` children at once.
//!
//! Each job runs in a process group of its own. When it ends, whatever it left running in
//! that group (a background child that closed its output) is killed, so a committed job
//! leaves nothing behind. At the runner's shutdown deadline ([`CutShort`]) the jobs still
//! running are stopped — SIGTERM to the group, SIGKILL [`STOP_GRACE`] later — and reported
//! as "run again later", which the runner hands back at once.

use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use super::capture::Bounded;
use super::classify::{classify, ended, Ended, Verdict};
use super::config::ExecConfig;
use crate::envelope::Envelope;
use crate::shared::traceparent::{self, TRACEPARENT_HEADER, TRACESTATE_HEADER};
use crate::sinks::contract::{CutShort, Feed, Outcome, Probe, Sink, SinkError, Written};

/// How long a killed child may take to be reaped before jetsink stops waiting for it.
const REAP_WAIT: Duration = Duration::from_secs(5);

/// How long a job stopped at the shutdown deadline gets between SIGTERM and SIGKILL: well
/// inside the 5 s the daemon allows past the deadline before it gives up on its sinks.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Passes the producer's trace context to the job the way OpenTelemetry propagates it
/// through a process's environment (`TRACEPARENT`, `TRACESTATE`), so a traced program
/// continues the message's trace, and its trace id as `JETSINK_TRACE_ID`, the value the
/// destinations that keep metadata store. Only a valid `traceparent` is passed (an invalid
/// one is treated as absent, as everywhere in jetsink); set after `env` and `pass_env`, so
/// a configured value never stands in for the message's own, and a configured
/// `TRACESTATE` is removed rather than paired with another trace.
fn trace_context(cmd: &mut Command, e: &Envelope) {
    let Some(value) = traceparent::header(&e.headers, TRACEPARENT_HEADER) else {
        return;
    };
    let Some(parsed) = traceparent::parse(value) else {
        return;
    };
    cmd.env("TRACEPARENT", value.trim_matches(|c| c == ' ' || c == '\t'))
        .env("JETSINK_TRACE_ID", parsed.trace_id);
    match traceparent::header(&e.headers, TRACESTATE_HEADER) {
        Some(state) => cmd.env("TRACESTATE", state),
        None => cmd.env_remove("TRACESTATE"),
    };
}

/// The `exec` destination.
pub struct ExecSink {
    config: ExecConfig,
    feed: Feed,
    /// `env` plus the `pass_env` variables found at open.
    base_env: Vec<(String, String)>,
    /// The runner's shutdown-deadline signal.
    cut: CutShort,
}

impl ExecSink {
    /// A sink running `config.command`; nothing is checked until `open`.
    pub fn new(config: ExecConfig) -> ExecSink {
        ExecSink {
            config,
            feed: Feed::default(),
            base_env: Vec::new(),
            cut: CutShort::never(),
        }
    }

    fn program(&self) -> &str {
        self.config.command.first().map_or("", String::as_str)
    }

    /// The program is an executable regular file.
    /// The program exists and is executable, and the working directory is one.
    fn check_setup(&self) -> Result<(), SinkError> {
        self.check_program()?;
        if let Some(dir) = &self.config.working_dir {
            if !std::path::Path::new(dir).is_dir() {
                return Err(SinkError::Misconfigured {
                    message: format!("working_dir {dir}: not a directory"),
                });
            }
        }
        Ok(())
    }

    fn check_program(&self) -> Result<(), SinkError> {
        let prog = self.program();
        let meta = std::fs::metadata(prog).map_err(|e| {
            let message = format!("command[0] {prog}: {e}");
            match e.kind() {
                ErrorKind::NotFound | ErrorKind::PermissionDenied => {
                    SinkError::Misconfigured { message }
                }
                _ => SinkError::transient(message),
            }
        })?;
        if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
            return Err(SinkError::Misconfigured {
                message: format!("command[0] {prog}: not an executable file"),
            });
        }
        Ok(())
    }

    /// The child for `e`, with its environment and pipes.
    fn command(&self, e: &Envelope) -> Command {
        let argv = &self.config.command;
        let mut cmd = Command::new(self.program());
        cmd.args(argv.iter().skip(1))
            .env_clear()
            .envs(self.base_env.iter().map(|(k, v)| (k, v)))
            .env("JETSINK_SINK", &self.feed.sink)
            .env("JETSINK_SUBJECT", &e.subject)
            .env("JETSINK_STREAM", &e.stream)
            .env("JETSINK_SEQUENCE", e.stream_sequence.to_string())
            .env("JETSINK_DELIVERED", e.delivered.to_string())
            .env("JETSINK_IDEMPOTENCY_KEY", &e.idempotency_key)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so a timeout kills what it started too.
            .process_group(0)
            .kill_on_drop(true);
        if let Some(id) = &e.job_id {
            cmd.env("JETSINK_JOB_ID", id);
        }
        trace_context(&mut cmd, e);
        if let Some(dir) = &self.config.working_dir {
            cmd.current_dir(dir);
        }
        cmd
    }

    /// Runs one job to its outcome.
    async fn run(&self, e: &Envelope) -> Outcome {
        if self.cut.fired() {
            // The shutdown deadline passed before its turn came: never started.
            return self.verdict(Ended::Stopped, None);
        }
        let started = Instant::now();
        let mut child = match self.command(e).spawn() {
            Ok(c) => c,
            Err(err) => {
                let message = format!("cannot start {}: {err}", self.program());
                return Outcome::Failed(match err.kind() {
                    ErrorKind::NotFound | ErrorKind::PermissionDenied => {
                        SinkError::Misconfigured { message }
                    }
                    _ => SinkError::transient(message),
                });
            }
        };
        let group = child.id();
        let timeout = Duration::from_millis(self.config.timeout_ms);
        let mut cut = self.cut.clone();
        let ran = tokio::select! {
            ran = tokio::time::timeout(timeout, self.drive(&mut child, e)) => Some(ran),
            () = cut.wait() => None,
        };
        let (how, out, err_bytes) = match ran {
            Some(Ok(Ok((status, out, err_bytes)))) => (
                ended(status.code(), unix_signal(&status)),
                Some(out),
                err_bytes,
            ),
            Some(Ok(Err(err))) => {
                kill(&mut child).await;
                return Outcome::Failed(SinkError::transient(format!(
                    "waiting for {}: {err}",
                    self.program()
                )));
            }
            Some(Err(_)) => {
                kill(&mut child).await;
                (Ended::TimedOut, None, 0)
            }
            None => {
                stop(&mut child).await;
                (Ended::Stopped, None, 0)
            }
        };
        // Whatever the job left running in its group goes with it.
        kill_group(group, rustix::process::Signal::KILL);
        let out_bytes = out.as_ref().map_or(0, Bounded::total);
        tracing::debug!(
            sink = %self.feed.sink,
            stream = %e.stream,
            stream_sequence = e.stream_sequence,
            delivered = e.delivered,
            ended = ?how,
            stdout_bytes = out_bytes,
            stderr_bytes = err_bytes,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "job finished"
        );
        self.verdict(how, out)
    }

    /// The outcome of a job that ended as `how`.
    fn verdict(&self, how: Ended, out: Option<Bounded>) -> Outcome {
        match classify(
            how,
            &self.config.transient_exit_codes,
            self.config.timeout_ms,
        ) {
            Verdict::Committed => Outcome::Committed {
                output: out.map(Bounded::finish),
            },
            Verdict::Later(message) => Outcome::Later { message },
            Verdict::Refused(message) => Outcome::Failed(SinkError::Permanent {
                index: None,
                message,
            }),
        }
    }

    /// Runs every job of `batch`, up to `concurrency` at once; one outcome each, in order.
    async fn run_all(&self, batch: &[Envelope]) -> Vec<Outcome> {
        // Boxed in a loop, not mapped by a closure: the trait's future must be Send for
        // every lifetime, which a closure returning a borrowing future cannot promise.
        let mut jobs: Vec<futures::future::BoxFuture<'_, Outcome>> =
            Vec::with_capacity(batch.len());
        for e in batch {
            jobs.push(Box::pin(self.run(e)));
        }
        futures::stream::iter(jobs)
            .buffered(self.config.concurrency.max(1))
            .collect()
            .await
    }

    /// Feeds stdin, reads stdout (bounded) and stderr (counted), then reaps the child.
    async fn drive(
        &self,
        child: &mut Child,
        e: &Envelope,
    ) -> std::io::Result<(std::process::ExitStatus, Bounded, u64)> {
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let payload = e.payload.clone();
        let feed = async move {
            if let Some(mut s) = stdin {
                // A program that does not read its input closes the pipe: not an error.
                let _ = s.write_all(&payload).await;
            }
        };
        let mut out = Bounded::new(self.config.max_output_bytes);
        let mut err = Bounded::new(0);
        let ((), r1, r2) = tokio::join!(
            feed,
            read_into(stdout, &mut out),
            read_into(stderr, &mut err)
        );
        r1?;
        r2?;
        let status = child.wait().await?;
        Ok((status, out, err.total()))
    }
}

/// Reads `from` to its end into `into`.
async fn read_into<R: AsyncRead + Unpin>(
    from: Option<R>,
    into: &mut Bounded,
) -> std::io::Result<()> {
    let Some(mut r) = from else { return Ok(()) };
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        into.push(&buf[..n]);
    }
}

/// The signal that ended a child, if one did.
fn unix_signal(status: &std::process::ExitStatus) -> Option<i32> {
    std::os::unix::process::ExitStatusExt::signal(status)
}

/// Sends `signal` to the process group `group` led a job (its pid), if any is left.
fn kill_group(group: Option<u32>, signal: rustix::process::Signal) {
    if let Some(pid) = group.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
        let _ = rustix::process::kill_process_group(pid, signal);
    }
}

/// Kills the child's process group (what it started too) and the child, and reaps it.
async fn kill(child: &mut Child) {
    kill_group(child.id(), rustix::process::Signal::KILL);
    let _ = child.start_kill();
    let _ = tokio::time::timeout(REAP_WAIT, child.wait()).await;
}

/// Stops a job at the shutdown deadline: SIGTERM to its group, so it can clean up, then
/// SIGKILL if it has not ended within [`STOP_GRACE`].
async fn stop(child: &mut Child) {
    kill_group(child.id(), rustix::process::Signal::TERM);
    if tokio::time::timeout(STOP_GRACE, child.wait())
        .await
        .is_err()
    {
        kill(child).await;
    }
}

#[async_trait]
impl Sink for ExecSink {
    fn attach(&mut self, feed: &Feed) {
        self.feed = feed.clone();
    }

    async fn open(&mut self) -> Result<(), SinkError> {
        self.check_setup()?;
        let mut env: Vec<(String, String)> = self
            .config
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for name in &self.config.pass_env {
            match std::env::var(name) {
                Ok(v) => env.push((name.clone(), v)),
                Err(_) => {
                    tracing::warn!(sink = %self.feed.sink, variable = %name, "pass_env: not set in jetsink's environment (or not UTF-8); the program runs without it")
                }
            }
        }
        self.base_env = env;
        Ok(())
    }

    /// What `open` checks, which writes nothing: the program and the working directory.
    async fn probe(&mut self) -> Result<Probe, SinkError> {
        self.check_setup()?;
        Ok(Probe::Ready(format!(
            "program {} exists and is executable",
            self.program()
        )))
    }

    /// The jobs as one batch, for tools that drive a destination batch-wise: the first job
    /// that did not commit decides (the daemon calls [`Sink::write`] instead).
    async fn write_batch(&mut self, batch: &[Envelope]) -> Result<(), SinkError> {
        for (i, o) in self.run_all(batch).await.into_iter().enumerate() {
            match o {
                Outcome::Committed { .. } | Outcome::AlreadyStored => {}
                Outcome::Later { message } => return Err(SinkError::transient(message)),
                Outcome::Failed(SinkError::Permanent { message, .. }) => {
                    return Err(SinkError::Permanent {
                        index: Some(i),
                        message,
                    })
                }
                Outcome::Failed(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Each job settled by its own outcome: one that fails holds none of the others.
    async fn write(&mut self, batch: &[Envelope]) -> Written {
        Written::Each(self.run_all(batch).await)
    }

    fn cut_short_by(&mut self, signal: CutShort) {
        self.cut = signal;
    }

    async fn health(&mut self) -> Result<(), SinkError> {
        self.check_program()
    }
}
