//! Process exit codes, following BSD `sysexits.h` where one fits, so systemd units and
//! scripts can tell a broken config from an unreachable dependency.

/// Success.
pub const OK: u8 = 0;
/// Anything not covered below.
pub const FAILURE: u8 = 1;
/// Wrong command-line usage (clap's own code).
pub const USAGE: u8 = 2;
/// The input names nothing that exists: `jetsink trace` of a sequence the stream does not
/// hold (`EX_DATAERR`), told apart from a failure (1) and an outage (69).
pub const DATAERR: u8 = 65;
/// A dependency (NATS, a destination) is unavailable at start-up (`EX_UNAVAILABLE`).
pub const UNAVAILABLE: u8 = 69;
/// Refused for now, worth trying again later: another process holds what is needed
/// (`EX_TEMPFAIL`).
pub const TEMPFAIL: u8 = 75;
/// The configuration is invalid (`EX_CONFIG`).
pub const CONFIG: u8 = 78;
