//! How a job's child ended → its outcome. Pure.
//!
//! Exit 0 commits; an exit code listed in `transient_exit_codes` (75, EX_TEMPFAIL, by
//! default) asks for the job to run again later; so does a stop: jetsink stopping the job
//! at its shutdown deadline, or a termination signal (SIGTERM, SIGINT, SIGHUP) from outside
//! — a service manager stopping the unit sends one to every process of it, and a job
//! stopped that way says nothing about its input. Any other exit, another signal (a crash:
//! SIGSEGV, SIGABRT, SIGKILL) or the timeout refuses the job as permanent (dead-lettered
//! on the delivery the sink's policy says).

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this code.
    Exited(i32),
    /// A signal ended it (not sent by jetsink).
    Signalled(i32),
    /// It outlasted `timeout_ms` and jetsink killed it.
    TimedOut,
    /// jetsink stopped it at its own shutdown deadline (or never started it then).
    Stopped,
}

/// The signals that stop a program rather than report on its input: a service manager's
/// stop (SIGTERM), a terminal's interrupt (SIGINT), a hang-up (SIGHUP).
const STOP_SIGNALS: [i32; 3] = [1, 2, 15];

/// What the runner is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Exit 0.
    Committed,
    /// A transient exit code: run it again later.
    Later(String),
    /// Anything else: refused as permanent.
    Refused(String),
}

/// The verdict on a child that ended as `ended`; `timeout_ms` only names the bound.
pub fn classify(ended: Ended, transient: &[i32], timeout_ms: u64) -> Verdict {
    match ended {
        Ended::Exited(0) => Verdict::Committed,
        Ended::Exited(code) if transient.contains(&code) => Verdict::Later(format!(
            "program exited with {code} (a transient_exit_codes value: retry later)"
        )),
        Ended::Exited(code) => Verdict::Refused(format!("program exited with {code}")),
        Ended::Signalled(sig) if STOP_SIGNALS.contains(&sig) => Verdict::Later(format!(
            "program was stopped by signal {sig} (a stop, not a verdict on the job): run again later"
        )),
        Ended::Signalled(sig) => Verdict::Refused(format!("program was killed by signal {sig}")),
        Ended::Stopped => Verdict::Later(
            "stopped by jetsink at the shutdown deadline: handed back to run again".into(),
        ),
        Ended::TimedOut => Verdict::Refused(format!(
            "program ran longer than timeout_ms ({timeout_ms} ms) and was killed"
        )),
    }
}

/// How a wait status ended, from its code or its signal (one of them is set on Unix).
pub fn ended(code: Option<i32>, signal: Option<i32>) -> Ended {
    match (code, signal) {
        (Some(c), _) => Ended::Exited(c),
        (None, Some(s)) => Ended::Signalled(s),
        // Not reachable on Unix; treated as a failure that names itself.
        (None, None) => Ended::Exited(-1),
    }
}
