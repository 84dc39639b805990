//! How soon the binary's allocator (mimalloc, see `main.rs`) gives freed memory back to
//! the system.
//!
//! mimalloc v3 keeps freed pages for `purge_delay`, 1,000 ms by default, before it returns
//! them. A daemon that frees a batch's worth of memory many times a second then holds up to
//! a second of it at any moment: draining 1,000,000 messages into MariaDB peaked anywhere
//! between 28 and 37 MiB of RSS, depending on where the purges fell. With 10 ms (mimalloc
//! v2's default) the same drains peaked at 27–28 MiB, at the same CPU per message; with 0
//! at 24.6 MiB but about a tenth more CPU (docs/benchmarks.md). jetsink sets 10 ms at
//! start-up unless the operator chose a delay in the environment (`MIMALLOC_PURGE_DELAY`,
//! which mimalloc itself reads).

use std::ffi::OsStr;
use std::os::raw::c_long;

/// The delay jetsink gives mimalloc, in milliseconds.
pub const PURGE_DELAY_MS: c_long = 10;

/// `mi_option_purge_delay` in mimalloc.h (v2 and v3 alike): libmimalloc-sys 0.1.49 names
/// it for neither. The test below proves the index still means this option.
const PURGE_DELAY_OPTION: libmimalloc_sys::mi_option_t = 15;

/// The environment names mimalloc reads the delay from (the second is its older name);
/// mimalloc compares them ignoring case.
const PURGE_DELAY_VARS: [&str; 2] = ["MIMALLOC_PURGE_DELAY", "MIMALLOC_RESET_DELAY"];

/// The delay to set, given the names in the environment: `None` when the operator has
/// named one (mimalloc has already read it, and it is theirs).
pub fn purge_delay_to_set(names: impl IntoIterator<Item = impl AsRef<OsStr>>) -> Option<c_long> {
    let chosen = names.into_iter().any(|name| {
        name.as_ref().to_str().is_some_and(|name| {
            PURGE_DELAY_VARS
                .iter()
                .any(|var| var.eq_ignore_ascii_case(name))
        })
    });
    (!chosen).then_some(PURGE_DELAY_MS)
}

/// Gives mimalloc jetsink's purge delay unless the environment names one. Called first
/// thing in `main`; mimalloc reads the option at each purge, so it holds from then on.
pub fn return_freed_memory_sooner() {
    if let Some(ms) = purge_delay_to_set(std::env::vars_os().map(|(name, _)| name)) {
        // SAFETY: mi_option_set stores one value in mimalloc's option table; any index
        // below mimalloc's option count is valid, and 15 is (the test below).
        unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY_OPTION, ms) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: [&str; 0] = [];

    #[test]
    fn without_a_delay_in_the_environment_jetsink_sets_ten_milliseconds() {
        assert_eq!(purge_delay_to_set(NONE), Some(10));
        assert_eq!(
            purge_delay_to_set(["PATH", "HOME", "MIMALLOC_VERBOSE", "PURGE_DELAY"]),
            Some(10)
        );
    }

    #[test]
    fn a_delay_the_operator_named_is_left_as_mimalloc_read_it_in_any_case() {
        for set in [
            "MIMALLOC_PURGE_DELAY",
            "mimalloc_purge_delay",
            "Mimalloc_Purge_Delay",
            "MIMALLOC_RESET_DELAY",
        ] {
            assert_eq!(purge_delay_to_set(["PATH", set]), None, "{set}");
        }
    }

    /// The option index is a bare number: if an upgrade of mimalloc moved the option, this
    /// fails instead of jetsink silently setting some other option. Option 15 holds what
    /// the environment says, or else mimalloc v3's built-in 1,000 ms, which no other
    /// option has as its default. Nothing in the test process sets it.
    #[test]
    fn option_fifteen_is_mimallocs_purge_delay() {
        let from_env = std::env::vars_os()
            .find(|(name, _)| purge_delay_to_set([name]).is_none())
            .and_then(|(_, value)| value.to_str()?.trim().parse::<c_long>().ok());
        // SAFETY: reads one entry of mimalloc's option table.
        let got = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY_OPTION) };
        assert_eq!(got, from_env.unwrap_or(1000));
    }
}
