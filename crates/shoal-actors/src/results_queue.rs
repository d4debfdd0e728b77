//! The results queue as a worker (a compile pool, an evaluator) sees it: the Scheduler's, which
//! the worker publishes to and must not find missing.
//!
//! A worker declares it before it takes a request, so that a result is never published to a
//! queue that does not exist (the broker would drop it). In a cluster only the Scheduler may
//! create it: creating a queue with a dead-letter exchange needs rights on that exchange a
//! worker's broker user is not given. A worker that starts before the Scheduler is therefore
//! refused; it waits for the queue, saying so once, rather than failing and being restarted
//! with an error in the log. It waits a bounded time: a Scheduler that never comes (a worker
//! pointed at the wrong namespace) is still an error, and the supervisor's restarts and
//! give-up apply as before.
//!
//! Tested on the real broker with a user of the eval role's permissions
//! (`crates/shoal-actors/tests/results_queue.rs`).

use std::time::Duration;

use shoal_bus::{Bus, BusError, QueueOptions};

use crate::shutdown::Signal;

/// How long a worker waits for the Scheduler to create the results queue before it fails.
pub const WAIT: Duration = Duration::from_secs(30);
/// How often it looks.
const POLL: Duration = Duration::from_millis(200);

/// Declares the results queue `name`, waiting up to `wait` while the declare is refused because
/// the queue does not exist yet. `Ok(false)`: stopped while waiting. The refusal is returned
/// when the queue exists (another reason), when the broker cannot be asked, or after `wait`.
pub async fn declare(
    bus: &dyn Bus,
    name: &str,
    options: &QueueOptions,
    wait: Duration,
    stop: &mut Signal,
) -> Result<bool, BusError> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut said = false;
    loop {
        let refused = match bus.declare_queue(name, options).await {
            Ok(()) => return Ok(true),
            Err(e) => e,
        };
        // A passive look needs no rights: it tells a queue not created yet from anything else.
        if !matches!(bus.queue_depth(name).await, Err(BusError::NoSuchQueue(_)))
            || tokio::time::Instant::now() >= deadline
        {
            return Err(refused);
        }
        if !said {
            tracing::info!(queue = name, error = %refused, "waiting for the Scheduler to create the results queue");
            said = true;
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = stop.triggered() => return Ok(false),
        }
    }
}
