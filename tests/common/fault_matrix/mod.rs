//! The fault matrix's harness (issue 48): one jetsink process whose sinks cover every
//! destination, each reading the source stream through its own durable consumer, run
//! through a fault while messages keep arriving; then every destination is read back as
//! raw copies and judged against what the matrix (`tests/fault_matrix.rs`) expects of it.
//!
//! - `sinks`: the destinations, the delivery modes, the sink config of each;
//! - `world`: the servers and the config a test runs against;
//! - `flow`: the publisher and the consumers' state;
//! - `run`, `outage`, `in_flight`: the faults and the run from start to read-back;
//! - `readback`: raw copies per destination;
//! - `proxy`, `receiver`, `databases`: the services the faults act on.

pub mod databases;
pub mod flow;
pub mod in_flight;
pub mod outage;
pub mod proxy;
pub mod readback;
pub mod receiver;
pub mod run;
pub mod sinks;
pub mod world;

use std::collections::BTreeMap;

pub use run::{Event, Outcome};
pub use sinks::{Dest, Mode};
pub use world::World;

/// The source stream (`fm.>`), the dead-letter stream (`fmdlq.>`) and the republish
/// target (`copy.>`, on a server of its own).
pub const STREAM: &str = "FM";
pub const DLQ: &str = "FM_DLQ";
pub const TARGET: &str = "FMCOPY";

/// What a cell of the matrix expects of a destination under a fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Every sequence stored exactly once, counted in raw copies; none dead-lettered.
    Once,
    /// Every sequence delivered at least once with the idempotency key the receiver
    /// dedupes on, as many distinct keys as messages; none dead-lettered (HTTP, exec).
    ByKey,
    /// The fault does not exist for the destination, and why.
    NotApplicable(&'static str),
}

impl Expect {
    /// The words of the docs table.
    pub fn words(self) -> String {
        match self {
            Expect::Once => "exactly once".into(),
            Expect::ByKey => "at least once, N keys".into(),
            Expect::NotApplicable(why) => format!("n/a: {why}"),
        }
    }
}

/// Where each copy of `seqs` is, when the destination says.
fn origins(copies: &readback::Copies, seqs: &[u64]) -> String {
    let mut out = Vec::new();
    for seq in seqs {
        let at: Vec<&str> = (0..copies.seqs.len())
            .filter(|i| copies.seqs[*i] == *seq)
            .filter_map(|i| copies.origins.get(i).map(String::as_str))
            .collect();
        if !at.is_empty() {
            out.push(format!("{seq} in {at:?}"));
        }
    }
    out.join("; ")
}

/// `Ok(figures)` when `d`'s copies in `o` meet `expect`, else `Err(what is wrong)`.
pub fn judge(o: &Outcome, d: Dest, expect: Expect) -> Result<String, String> {
    let copies = &o.copies[&d];
    let mut count: BTreeMap<u64, usize> = BTreeMap::new();
    for s in &copies.seqs {
        *count.entry(*s).or_default() += 1;
    }
    let missing: Vec<u64> = (1..=o.n).filter(|s| !count.contains_key(s)).collect();
    let repeated: Vec<u64> = count
        .iter()
        .filter(|(_, c)| **c > 1)
        .map(|(s, _)| *s)
        .collect();
    let foreign: Vec<u64> = count
        .keys()
        .filter(|s| **s == 0 || **s > o.n)
        .copied()
        .collect();
    let dead = o.dead_lettered[&d];
    let figures = format!(
        "{} raw, {} distinct of {}, {} dead-lettered",
        copies.seqs.len(),
        count.len(),
        o.n,
        dead
    );
    let mut wrong = Vec::new();
    let first = |v: &[u64]| format!("{:?}", &v[..v.len().min(8)]);
    if !missing.is_empty() {
        wrong.push(format!("{} missing {}", missing.len(), first(&missing)));
    }
    if expect == Expect::Once && !repeated.is_empty() {
        let extra = copies.seqs.len() - count.len();
        let seqs = format!(
            "{}, {}",
            first(&repeated),
            origins(copies, &repeated[..2.min(repeated.len())])
        );
        wrong.push(format!(
            "{} sequences stored more than once ({extra} extra copies) {seqs}",
            repeated.len()
        ));
    }
    if !foreign.is_empty() {
        wrong.push(format!(
            "sequences outside 1..={}: {}",
            o.n,
            first(&foreign)
        ));
    }
    if dead > 0 {
        wrong.push(format!("{dead} dead-lettered"));
    }
    if let Some(p) = copies.problems.first() {
        wrong.push(format!(
            "{} malformed copies, first: {p}",
            copies.problems.len()
        ));
    }
    if let Some((metric, values)) = &o.at_work {
        if values.get(&d).is_none_or(|v| *v == 0.0) {
            wrong.push(format!(
                "{metric} stayed 0 in every process of the run and no two writes were seen waiting at once: the mode did nothing"
            ));
        }
    }
    for (event, at) in &o.at_faults {
        if at.get(&d).is_some_and(|s| s.ack_floor >= o.n) {
            wrong.push(format!(
                "the {event:?} came after its drain: nothing tested"
            ));
        }
    }
    match wrong.is_empty() {
        true => Ok(figures),
        false => Err(format!("{figures}: {}", wrong.join("; "))),
    }
}
