//! The Scheduler's side of [`shape`](super::shape): how many items of a session may be in eval
//! phases now, from the devices consuming its eval queues (asked of the broker at most every
//! [`CONSUMERS_FRESH_FOR`]), and how many items one of its requests carries.

use std::time::{Duration, Instant};

use shoal_model::{SessionId, Step};

use super::Inner;
use crate::ActorError;

/// How long a queue's consumer count is used before it is asked again: devices come and go in
/// seconds (a worker starts, a GPU is paused), and asking costs a broker round trip.
pub(super) const CONSUMERS_FRESH_FOR: Duration = Duration::from_secs(2);

impl Inner {
    /// Items of `session` that may still go into eval phases now.
    pub(super) async fn eval_room(&mut self, session: SessionId) -> Result<u64, ActorError> {
        let in_flight = self.in_flight_of(session).await?.eval.max(0) as u64;
        Ok(self.eval_bound(session).await?.saturating_sub(in_flight))
    }

    /// The most items of `session` in eval phases: for each eval step of its backend, the
    /// shaped bound for the devices consuming that step's queue; the largest of them.
    async fn eval_bound(&mut self, session: SessionId) -> Result<u64, ActorError> {
        let mut bound = 0;
        for step in self.eval_steps(session).await? {
            let consumers = self.consumers(session, step).await?;
            bound = bound.max(self.shape.in_flight(session, step, consumers));
        }
        Ok(bound)
    }

    /// Items per eval request of `session`'s `step` now.
    pub(super) fn eval_batch(&self, session: SessionId, step: Step) -> usize {
        self.shape.batch(session, step)
    }

    /// The largest request `session` may be sent now, in items, for its queue lease.
    pub(super) async fn largest_eval_batch(
        &mut self,
        session: SessionId,
    ) -> Result<usize, ActorError> {
        let steps = self.eval_steps(session).await?;
        Ok(steps
            .into_iter()
            .map(|step| self.eval_batch(session, step))
            .max()
            .unwrap_or(1))
    }

    async fn eval_steps(&mut self, session: SessionId) -> Result<Vec<Step>, ActorError> {
        let backend = self.backends.get(&*self.store, session).await?;
        Ok(backend.steps().iter().map(|(_, eval)| *eval).collect())
    }

    /// Consumers of the eval queue of `session`'s `step`: cached, and 0 while the broker cannot
    /// say (dispatch then keeps one device's worth in flight).
    async fn consumers(&mut self, session: SessionId, step: Step) -> Result<u32, ActorError> {
        let info = self.session(session).await?.info;
        let queue = self
            .bus
            .namespace()
            .eval_queue(step, &info.arch, info.num_cu);
        if let Some((n, at)) = self.consumers.get(&queue) {
            if at.elapsed() < CONSUMERS_FRESH_FOR {
                return Ok(*n);
            }
        }
        // Declared first (once), as before a publish to it: asking about a queue that does not
        // exist yet would close the channel it is asked on.
        self.ensure_queue(&queue).await?;
        let n = match self.bus.consumer_count(&queue).await {
            Ok(n) => n,
            Err(shoal_bus::BusError::NoSuchQueue(_)) => 0,
            Err(e) => {
                tracing::warn!(queue = %queue, error = %e, "consumer count unknown; taken as none");
                0
            }
        };
        self.consumers.insert(queue, (n, Instant::now()));
        Ok(n)
    }
}
