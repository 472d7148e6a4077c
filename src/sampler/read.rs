//! The kernel's own count of each event, to set beside what the rings delivered.

use super::Sampler;
use crate::counter::Counter;
use crate::notify::Token;
use crate::Result;

impl Sampler {
    /// The kernel's count of event `event` (the index given by
    /// [`SamplerBuilder::event`](super::SamplerBuilder::event)): `read(2)` of every
    /// counter the sampler holds for it, summed. An inherited counter's count includes
    /// every thread and child that inherited it, exited ones too; per-thread counters of
    /// threads that exited have been closed and no longer count.
    ///
    /// With a fixed period, `count / period` is the number of overflows the kernel has
    /// had: the samples delivered, plus those lost, plus those still in the rings, plus
    /// what the kernel skipped (see [`Stats`](super::Stats)).
    ///
    /// # Errors
    /// [`ErrorKind::NotFound`](crate::ErrorKind::NotFound) for an unknown event; the
    /// errno of a counter's `ioctl(ID)` or `read`.
    pub fn count(&self, event: usize) -> Result<u64> {
        let Some(info) = self.events.get(event) else {
            return Err(crate::Error::new(
                crate::ErrorKind::NotFound,
                format!("Sampler::count({event})"),
                format!("the sampler has {} events", self.events.len()),
            ));
        };
        let polled = (0..self.slots.len()).filter_map(|i| self.poller.counter(Token(i as u64)));
        let held: Vec<&Counter> = self
            .inherited
            .iter()
            .chain(polled)
            .chain(self.muted.iter().map(|(_, c, _)| c))
            .collect();
        let mut total = 0u64;
        for c in held {
            // Anchors (dummies that only own a ring) and other events' counters have
            // ids of their own.
            if info.ids.contains(&c.id()?) {
                total = total.wrapping_add(c.read()?.value);
            }
        }
        Ok(total)
    }
}
