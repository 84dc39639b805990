//! What `validate --online` found: one line per check and the exit code they add up to.

use crate::nats::BindError;

/// What one check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// As `jetsink run` needs it.
    Ok,
    /// Missing, and `jetsink run` would create it.
    WouldCreate,
    /// Differs in a setting `jetsink run` changes on the server at start (a consumer's
    /// `ack_wait`, `max_deliver`, ...): a config change on its way, not an error.
    WouldUpdate,
    /// Unreachable, or missing with nothing to create it (exit 69).
    Unavailable,
    /// The config and the server disagree (exit 78).
    Mismatch,
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was found.
    pub outcome: Outcome,
    /// What was checked, where, and what was found.
    pub text: String,
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tag = match self.outcome {
            Outcome::Ok => "ok",
            Outcome::WouldCreate => "would create",
            Outcome::WouldUpdate => "would update",
            Outcome::Unavailable | Outcome::Mismatch => "FAIL",
        };
        write!(f, "{tag}: {}", self.text)
    }
}

/// Every check of one run, in order.
#[derive(Debug, Default)]
pub struct Report(pub Vec<Check>);

impl Report {
    pub(super) fn push(&mut self, outcome: Outcome, text: impl Into<String>) {
        self.0.push(Check {
            outcome,
            text: text.into(),
        });
    }

    /// 69 when anything was unavailable, else 78 when anything disagreed, else 0.
    pub fn exit_code(&self) -> u8 {
        let any = |o: Outcome| self.0.iter().any(|c| c.outcome == o);
        if any(Outcome::Unavailable) {
            crate::exit::UNAVAILABLE
        } else if any(Outcome::Mismatch) {
            crate::exit::CONFIG
        } else {
            crate::exit::OK
        }
    }

    /// The closing line: how many checks ended which way.
    pub fn totals(&self) -> String {
        let n = |f: &dyn Fn(Outcome) -> bool| self.0.iter().filter(|c| f(c.outcome)).count();
        format!(
            "online checks: {} ok, {} would create, {} would update, {} failed",
            n(&|o| o == Outcome::Ok),
            n(&|o| o == Outcome::WouldCreate),
            n(&|o| o == Outcome::WouldUpdate),
            n(&|o| matches!(o, Outcome::Unavailable | Outcome::Mismatch)),
        )
    }
}

pub(super) fn bind_outcome(e: &BindError) -> Outcome {
    if e.is_config() {
        Outcome::Mismatch
    } else {
        Outcome::Unavailable
    }
}
