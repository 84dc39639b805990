//! The macro that turns the one list of destinations (the [`destinations!`] invocation in
//! `sinks/mod.rs`) into everything that depends on it. From each line — a destination's
//! variant, its `type` string, its module, its config type and its sink type — it generates
//! the `pub mod` declaration of the destination's folder, the `DestinationConfig` variant,
//! the `type` dispatch of the config loader, `KINDS` (every "supported: ..." message),
//! `kind()`, `describe()`, `target()` (the conflict check), the destination checks, and
//! `build`.
//!
//! Every generated `match` is exhaustive and nothing dispatches on the `type` string
//! outside the generated code, so a destination half-added is a compile error, not a
//! config that loads and then fails. What a destination must provide is a config type
//! implementing [`DestinationSettings`](super::settings::DestinationSettings) (in its
//! `config.rs`) and a sink type with `new(config) -> Self` implementing
//! [`Sink`](super::Sink). See "Adding a destination" in docs/architecture.md.
//!
//! The list lives in `sinks/` and not in `config/` because it names the sinks: `config/`
//! imports the enum, and nothing the sinks import leads back to `config/`. This file holds
//! only the macro, whose paths are all `$crate::`, so it imports nothing.

/// Generates the destination modules and everything that depends on the list of
/// destinations from that list. Invoked once, in `sinks/mod.rs`.
macro_rules! destinations {
    ($(
        $(#[$doc:meta])*
        $variant:ident = $kind:literal in $module:ident: $config:ident => $sink:ident;
    )*) => {
        $(pub mod $module;)*

        /// Where a sink writes. Selected by `type`.
        #[derive(Debug, Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
        #[serde(tag = "type")]
        pub enum DestinationConfig {
            $(
                $(#[$doc])*
                #[serde(rename = $kind)]
                $variant($module::$config),
            )*
        }

        /// Every supported `type`, in registration order.
        pub const KINDS: &[&str] = &[$($kind),*];

        impl DestinationConfig {
            /// The `type` value, for summaries and logs.
            pub fn kind(&self) -> &'static str {
                match self {
                    $(DestinationConfig::$variant(_) => $kind,)*
                }
            }

            /// The destination's own settings, through what the config loader needs of
            /// them.
            fn settings(&self) -> &dyn $crate::sinks::settings::DestinationSettings {
                match self {
                    $(DestinationConfig::$variant(c) => c,)*
                }
            }


            /// A short human description (no secrets) for `validate` and start-up logs.
            pub fn describe(&self) -> String {
                self.settings().describe()
            }

            /// A stable, secret-free name of what is written to; two sinks with the same
            /// target conflict.
            pub fn target(&self) -> String {
                self.settings().target()
            }

            /// Every problem of the settings as `(key, message)`, the key relative to the
            /// destination object.
            pub fn problems(&self) -> Vec<(String, String)> {
                self.settings().problems()
            }

            /// How many pulled batches the destination gathers into one write, if any.
            pub fn accumulate(&self) -> Option<$crate::sinks::settings::Accumulate> {
                self.settings().accumulate()
            }

            /// Whether the destination gathers batches by default when the sink allows it.
            pub fn rolls_over_by_default(&self) -> bool {
                self.settings().rolls_over_by_default()
            }

            /// The most messages one write may carry, if the destination has a limit.
            pub fn largest_batch(&self) -> Option<$crate::sinks::settings::BatchLimit> {
                self.settings().largest_batch()
            }

            /// Whether two batches may be written at once (`delivery.batches_in_flight`).
            pub fn writes_batches_at_once(&self) -> bool {
                self.settings().writes_batches_at_once()
            }

            /// Whether the last write wins over what the destination stored (an upsert
            /// by arrival order).
            pub fn last_write_wins(&self) -> bool {
                self.settings().last_write_wins()
            }

            /// The same destination writing into the scratch table `table`, where it has
            /// one ([`DestinationSettings::with_scratch_table`]).
            ///
            /// [`DestinationSettings::with_scratch_table`]: $crate::sinks::settings::DestinationSettings::with_scratch_table
            pub fn with_scratch_table(&self, table: &str) -> Option<DestinationConfig> {
                match self {
                    $(DestinationConfig::$variant(c) => {
                        $crate::sinks::settings::DestinationSettings::with_scratch_table(c, table)
                            .map(DestinationConfig::$variant)
                    })*
                }
            }

            /// Every local path the settings name, and what is done with it.
            pub fn paths(&self) -> Vec<$crate::sinks::settings::NamedPath> {
                self.settings().paths()
            }

            /// The server process the destination writes to, if any.
            pub fn server(&self) -> Option<$crate::sinks::settings::ServerProcess> {
                self.settings().server()
            }
        }

        /// Reads the body of a `destination` object (its `type` removed) as the
        /// destination `kind`; `None` when no destination has that `type`.
        pub(crate) fn parse_destination(
            kind: &str,
            path: &str,
            body: serde_json::Value,
        ) -> Option<Result<DestinationConfig, $crate::shared::issue::Issue>> {
            match kind {
                $($kind => Some(
                    $crate::shared::issue::deserialize_at(path, body)
                        .map(DestinationConfig::$variant),
                ),)*
                _ => None,
            }
        }

        /// Builds the destination a config describes. Nothing is opened yet.
        pub fn build(config: &DestinationConfig) -> Box<dyn $crate::sinks::contract::Sink> {
            match config {
                $(DestinationConfig::$variant(c) => Box::new($module::$sink::new(c.clone())),)*
            }
        }
    };
}
pub(crate) use destinations;
