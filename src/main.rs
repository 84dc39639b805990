//! The `jetsink` binary: the allocator, and the command tree in [`jetsink::cmd::cli`].

use std::process::ExitCode;

/// mimalloc instead of glibc malloc: the pipeline allocates a few small objects per
/// message (the NATS client's message, the envelope's strings), and glibc's `malloc` and
/// `free` were a sixth of the daemon's instructions in a profile of a drain. Built without
/// transparent huge pages (`no_thp`): with them, draining a 1,000,000-message backlog peaked
/// at 70 MiB of RSS instead of 20 MiB. How soon it returns freed memory is set in
/// [`jetsink::allocator`].
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    jetsink::allocator::return_freed_memory_sooner();
    jetsink::cmd::cli::main()
}
