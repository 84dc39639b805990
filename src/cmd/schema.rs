//! `jetsink schema`: prints the JSON Schema of the config file, generated from the raw
//! config types ([`crate::config::RawConfig`]), so editors can complete and check a config
//! and the schema can never drift from what the parser accepts.

use super::emit;
use crate::exit;

/// Prints the schema; the exit code.
pub fn execute() -> u8 {
    let schema = schemars::schema_for!(crate::config::RawConfig);
    match serde_json::to_string_pretty(&schema) {
        Ok(text) => {
            emit(&text);
            exit::OK
        }
        Err(e) => {
            eprintln!("error: cannot render the schema: {e}");
            exit::FAILURE
        }
    }
}
