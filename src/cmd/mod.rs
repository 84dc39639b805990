//! The commands of the `jetsink` binary, one module each, kept apart from the daemon's
//! parts (`config`, `nats`, `pipeline`, `sinks`, `dlq`, ...) that they drive: a command
//! wires those parts together for one purpose and owns its console output, while the
//! parts stay free of command-line concerns.

pub mod bench;
pub mod dlq_replay;
pub mod metrics_show;
pub mod publish;
pub mod run;
