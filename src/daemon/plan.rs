//! The pure decisions of a reload and of a late destination: which sinks a new config
//! leaves alone, stops, starts or restarts, and how long a sink waits before it tries its
//! destination again.

use std::collections::BTreeMap;
use std::time::Duration;

/// What a reload does to the sinks, each list in name order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Plan {
    /// In both configs with the same resolved settings: left running, untouched.
    pub unchanged: Vec<String>,
    /// Only in the running config: stopped as at SIGTERM.
    pub removed: Vec<String>,
    /// Only in the new config: started.
    pub added: Vec<String>,
    /// In both with different settings: stopped, then started with the new ones.
    pub changed: Vec<String>,
}

impl Plan {
    /// Whether the reload changes no sink.
    pub fn is_empty(&self) -> bool {
        self.removed.is_empty() && self.added.is_empty() && self.changed.is_empty()
    }
}

/// Compares the running sinks with the new config's, each given as name → fingerprint of
/// its resolved settings.
pub fn plan(running: &BTreeMap<String, String>, new: &BTreeMap<String, String>) -> Plan {
    let mut out = Plan::default();
    for (name, old) in running {
        match new.get(name) {
            None => out.removed.push(name.clone()),
            Some(now) if now == old => out.unchanged.push(name.clone()),
            Some(_) => out.changed.push(name.clone()),
        }
    }
    out.added = new
        .keys()
        .filter(|n| !running.contains_key(*n))
        .cloned()
        .collect();
    out
}

/// Bounded exponential back-off: `first`, doubling, never above `most`.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    most: Duration,
}

impl Backoff {
    /// Starts at `first`.
    pub fn new(first: Duration, most: Duration) -> Backoff {
        Backoff {
            next: first.min(most),
            most,
        }
    }

    /// The next wait.
    pub fn next_wait(&mut self) -> Duration {
        let now = self.next;
        self.next = self.next.saturating_mul(2).min(self.most);
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_reload_sorts_every_sink_into_one_of_four_lists() {
        let running = map(&[("a", "1"), ("b", "2"), ("c", "3")]);
        let new = map(&[("a", "1"), ("c", "30"), ("d", "4")]);
        let p = plan(&running, &new);
        assert_eq!(p.unchanged, vec!["a"]);
        assert_eq!(p.removed, vec!["b"]);
        assert_eq!(p.changed, vec!["c"]);
        assert_eq!(p.added, vec!["d"]);
        assert!(!p.is_empty());
        assert!(plan(&running, &running).is_empty());
    }

    #[test]
    fn the_back_off_doubles_from_one_second_up_to_thirty() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        let waits: Vec<u64> = (0..8).map(|_| b.next_wait().as_secs()).collect();
        assert_eq!(waits, vec![1, 2, 4, 8, 16, 30, 30, 30]);
    }

    proptest! {
        #[test]
        fn every_name_lands_in_exactly_one_list(
            running in proptest::collection::btree_map("[a-e]", "[0-2]", 0..5),
            new in proptest::collection::btree_map("[a-e]", "[0-2]", 0..5),
        ) {
            let p = plan(&running, &new);
            let mut all: Vec<&String> = p.unchanged.iter().chain(&p.removed).chain(&p.added).chain(&p.changed).collect();
            all.sort();
            let mut names: Vec<&String> = running.keys().chain(new.keys()).collect();
            names.sort();
            names.dedup();
            prop_assert_eq!(all, names);
            for n in &p.unchanged {
                prop_assert_eq!(running.get(n), new.get(n));
            }
        }

        #[test]
        fn the_back_off_never_exceeds_its_bound(first in 0u64..100, most in 1u64..100, n in 0usize..50) {
            let mut b = Backoff::new(Duration::from_secs(first), Duration::from_secs(most));
            for _ in 0..n {
                prop_assert!(b.next_wait() <= Duration::from_secs(most));
            }
        }
    }
}
