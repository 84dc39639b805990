//! What the config loader needs from a destination's settings, and nothing more.
//!
//! Each destination's `config.rs` implements [`DestinationSettings`] for its config type;
//! the generated `DestinationConfig` ([`super::DestinationConfig`]) dispatches to it, so `config/` validates, describes
//! and compares destinations without knowing any of them. A leaf: the destination configs
//! import it without importing the registry that lists them.

/// A destination's settings as the config loader sees them.
pub trait DestinationSettings {
    /// Every problem of the settings as `(key, message)`, the key relative to the
    /// destination object (`table`, `tls.ca_file`), so each is reported at its JSON path.
    fn problems(&self) -> Vec<(String, String)>;

    /// A short, secret-free description for `validate` and the start-up log.
    fn describe(&self) -> String;

    /// A stable, secret-free name of what is written to. Two sinks with the same target
    /// would interleave writes, so validation refuses that.
    fn target(&self) -> String;
}
