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

use std::time::Duration;

use shoal_bus::{Bus, BusError, QueueOptions};

use crate::shutdown::Signal;

/// How long a worker waits for the Scheduler to create the results queue before it fails.
pub(crate) const WAIT: Duration = Duration::from_secs(30);
/// How often it looks.
const POLL: Duration = Duration::from_millis(200);

/// Declares the results queue `name`, waiting up to `wait` while the declare is refused because
/// the queue does not exist yet. `Ok(false)`: stopped while waiting. The refusal is returned
/// when the queue exists (another reason), when the broker cannot be asked, or after `wait`.
pub(crate) async fn declare(
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use async_trait::async_trait;
    use shoal_bus::{Consumer, MemoryBus};
    use shoal_model::envelope::Codec;
    use shoal_model::queue::Namespace;

    use super::*;

    /// The in-process bus as a worker's broker user sees it: it may declare a queue that exists,
    /// and is refused one that does not (only the Scheduler, on `inner`, creates them).
    struct WorkerBus {
        inner: Arc<MemoryBus>,
    }

    #[async_trait]
    impl Bus for WorkerBus {
        fn namespace(&self) -> &Namespace {
            self.inner.namespace()
        }
        fn codec(&self) -> &Codec {
            self.inner.codec()
        }
        async fn declare_queue(&self, name: &str, options: &QueueOptions) -> shoal_bus::Result<()> {
            self.inner
                .queue_depth(name)
                .await
                .map_err(|_| BusError::Backend {
                    context: format!("declare queue `{name}`"),
                    source: "ACCESS_REFUSED".into(),
                })?;
            self.inner.declare_queue(name, options).await
        }
        async fn publish(&self, queue: &str, payloads: Vec<Vec<u8>>) -> shoal_bus::Result<()> {
            self.inner.publish(queue, payloads).await
        }
        async fn consume(
            &self,
            queue: &str,
            prefetch: u16,
        ) -> shoal_bus::Result<Box<dyn Consumer>> {
            self.inner.consume(queue, prefetch).await
        }
        async fn queue_depth(&self, queue: &str) -> shoal_bus::Result<u64> {
            self.inner.queue_depth(queue).await
        }
        async fn consumer_count(&self, queue: &str) -> shoal_bus::Result<u32> {
            self.inner.consumer_count(queue).await
        }
        async fn publish_topic(
            &self,
            topic: &str,
            key: &str,
            payload: Vec<u8>,
        ) -> shoal_bus::Result<()> {
            self.inner.publish_topic(topic, key, payload).await
        }
        async fn subscribe(
            &self,
            topic: &str,
            pattern: &str,
        ) -> shoal_bus::Result<Box<dyn Consumer>> {
            self.inner.subscribe(topic, pattern).await
        }
        async fn close(&self) -> shoal_bus::Result<()> {
            self.inner.close().await
        }
    }

    fn buses() -> (Arc<MemoryBus>, WorkerBus) {
        let inner = MemoryBus::new(Namespace::new("results-queue-test").unwrap());
        let worker = WorkerBus {
            inner: inner.clone(),
        };
        (inner, worker)
    }

    #[tokio::test(start_paused = true)]
    async fn a_worker_first_waits_for_the_scheduler_to_create_the_queue() {
        let (scheduler, worker) = buses();
        let (_trigger, mut stop) = crate::shutdown::channel();
        let options = QueueOptions::limited(5);
        let name = scheduler.namespace().results_queue();
        let creates = {
            let (scheduler, name, options) = (scheduler.clone(), name.clone(), options.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(2)).await;
                scheduler.declare_queue(&name, &options).await
            })
        };
        let started = tokio::time::Instant::now();
        let declared = declare(&worker, &name, &options, WAIT, &mut stop).await;
        assert!(matches!(declared, Ok(true)), "{declared:?}");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(2) && waited < Duration::from_secs(3),
            "{waited:?}"
        );
        creates.await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_queue_that_never_comes_is_an_error_after_the_wait() {
        let (scheduler, worker) = buses();
        let (_trigger, mut stop) = crate::shutdown::channel();
        let name = scheduler.namespace().results_queue();
        let declared = declare(&worker, &name, &QueueOptions::limited(5), WAIT, &mut stop).await;
        assert!(
            matches!(declared, Err(BusError::Backend { .. })),
            "{declared:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_ends_the_wait() {
        let (scheduler, worker) = buses();
        let (trigger, mut stop) = crate::shutdown::channel();
        trigger.trigger();
        let name = scheduler.namespace().results_queue();
        let declared = declare(&worker, &name, &QueueOptions::limited(5), WAIT, &mut stop).await;
        assert!(matches!(declared, Ok(false)), "{declared:?}");
    }
}
