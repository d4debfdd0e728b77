//! The loop of the Scheduler's command inbox: in cluster mode, operators' CLIs publish commands
//! (`shoal_model::command`) to `<ns>.commands`, and this loop, beside the Scheduler, reads them
//! and hands each to `shoal_commands::answer`, which applies it once per id and records its reply
//! (what each command does, and why once, is said there).
//!
//! Each request is verified and decoded like every message (a forged, corrupt or foreign one is
//! dead-lettered with its reason), then checked ([`CommandRequest::problem`]: its id, its reply
//! queue, its size), then answered; the reply is sent to the CLI's reply queue and the request
//! acknowledged only after the reply is recorded. A command published while no Scheduler runs
//! waits in the durable queue, and is applied when one starts.
//!
//! [`CommandRequest::problem`]: shoal_model::command::CommandRequest::problem

use std::sync::Arc;
use std::time::Duration;

use shoal_bus::{Bus, QueueOptions};
use shoal_commands::HostTools;
use shoal_model::Message;
use shoal_store::Store;

use crate::shutdown::Signal;
use crate::ActorError;

/// Serves `<ns>.commands` until `stop`.
pub async fn serve(
    store: Arc<dyn Store>,
    bus: Arc<dyn Bus>,
    delivery_limit: u32,
    tools: HostTools,
    mut stop: Signal,
) -> Result<(), ActorError> {
    let queue = bus.namespace().commands_queue();
    bus.declare_queue(&queue, &QueueOptions::limited(delivery_limit))
        .await?;
    let mut consumer = bus.consume(&queue, 1).await?;
    while let Some((req, delivery)) = crate::next_request(
        bus.codec(),
        &mut *consumer,
        &mut stop,
        &queue,
        "command",
        |m| match m {
            Message::Command(r) => Some(r),
            _ => None,
        },
    )
    .await?
    {
        if let Some(problem) = req.problem(bus.namespace()) {
            let reason = format!("refused on {queue}: {problem}");
            tracing::error!(queue = %queue, reason = %reason, "dead-lettering a message");
            delivery.dead_letter(reason).await?;
            continue;
        }
        // The database unreachable for a while (a restart, a failover) holds the command here,
        // retried, rather than sending it round the queue until its delivery limit
        // dead-letters it.
        let reply = while_unreachable(&stop, STORE_PATIENCE, || {
            shoal_commands::answer(&*store, &tools, &req)
        })
        .await?;
        // The CLI may have given up waiting and gone, its reply queue with it: the outcome is
        // recorded all the same, and `shoal sessions` shows it.
        if let Err(e) = crate::publish(&*bus, &req.reply_to, &Message::CommandReply(reply)).await {
            tracing::warn!(id = %req.id, reply_to = %req.reply_to, error = %e, "reply not delivered");
        }
        delivery.ack().await?;
    }
    Ok(())
}

/// How long a command waits for an unreachable store before the loop fails (and is restarted,
/// and the command delivered again).
const STORE_PATIENCE: Duration = Duration::from_secs(300);

/// Runs `op` again while it fails because the store cannot be reached (a backend error), with
/// backoff from 100 ms to 5 s, for at most `patience` and not past `stop`; any other error,
/// and the last one, is returned.
async fn while_unreachable<T, F, Fut>(
    stop: &Signal,
    patience: Duration,
    mut op: F,
) -> shoal_store::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = shoal_store::Result<T>>,
{
    let give_up = tokio::time::Instant::now() + patience;
    let mut delay = Duration::from_millis(100);
    loop {
        match op().await {
            Err(
                e @ (shoal_store::StoreError::Backend { .. }
                | shoal_store::StoreError::Unreachable { .. }),
            ) if tokio::time::Instant::now() < give_up && !stop.is_triggered() => {
                tracing::warn!(error = %e, retry_in = ?delay, "store unreachable; the command waits");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests;
