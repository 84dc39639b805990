//! What every write of the settle loop runs beside: the pull ahead, and with two batches
//! in flight the puller pulling on for the second writer.

use super::stop::Stop;
use crate::pipeline::puller::{Ahead, Puller};

/// What a write runs beside: the pull ahead, and the puller that pulls on while a second
/// writer waits.
pub(super) struct Beside<'a> {
    pub(super) ahead: &'a mut Ahead,
    pub(super) puller: Option<&'a mut Puller>,
}

impl Beside<'_> {
    /// Runs `work`, a write. While the destination is `healthy` (and no stop is
    /// signalled) a batch pulled ahead meanwhile is written ahead with the writer lent to
    /// the pull ahead (`delivery.batches_in_flight` 2), and given the puller, pulling goes
    /// on whenever the slot has room while that writer is lent: a pull ahead that came back
    /// empty would otherwise leave it idle for the rest of a long write, however many
    /// messages arrive meanwhile (and no pull starts once `stop` is signalled: it would only
    /// be handed back). With one writer the pull started before the write is the only one
    /// (the next starts when the runner takes a batch). A failing destination gets no write
    /// ahead and no pull ahead.
    pub(super) async fn run<F: std::future::Future>(
        &mut self,
        healthy: bool,
        stop: &Stop,
        work: F,
    ) -> F::Output {
        let lent = self.ahead.lent();
        let stopped = || stop.signalled();
        match (healthy, self.puller.as_deref_mut()) {
            (true, Some(puller)) if lent => {
                puller.alongside_writing(self.ahead, stopped, work).await
            }
            (true, _) => self.ahead.alongside_writing(work).await,
            (false, _) => self.ahead.alongside(work).await,
        }
    }
}
