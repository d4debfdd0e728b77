//! The Scheduler's command inbox, an actor: in cluster mode, operators' CLIs publish commands
//! (`shoal_model::command`) to `<ns>.commands`, and this actor, beside the Scheduler, reads them
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

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use actix::Addr;
use shoal_bus::{Bus, QueueOptions};
use shoal_commands::HostTools;
use shoal_model::command::CommandRequest;
use shoal_model::Message;
use shoal_store::Store;

use crate::serving::{served, Local, Served, Service};
use crate::shutdown::{DrainGuard, Signal};
use crate::ActorError;

/// The Scheduler's command inbox, as an actor ([`Served`]): `<ns>.commands` is its queue, and
/// each command is answered in turn.
pub struct CommandInbox {
    pub store: Arc<dyn Store>,
    pub bus: Arc<dyn Bus>,
    pub delivery_limit: u32,
    pub tools: HostTools,
}

/// A command request and its delivery, acked once its reply is recorded.
pub struct Answer(CommandRequest, shoal_bus::Delivery);

impl CommandInbox {
    /// Starts the inbox under actix's `Supervisor`.
    pub fn start(self, stop: Signal, guard: DrainGuard) {
        Served::start(self, stop, guard);
    }

    /// Checks, answers and replies to one command, then acks it.
    async fn answer(
        &self,
        req: CommandRequest,
        delivery: shoal_bus::Delivery,
        stop: &Signal,
    ) -> Result<(), ActorError> {
        let queue = self.bus.namespace().commands_queue();
        if let Some(problem) = req.problem(self.bus.namespace()) {
            let reason = format!("refused on {queue}: {problem}");
            tracing::error!(queue = %queue, reason = %reason, "dead-lettering a message");
            delivery.dead_letter(reason).await?;
            return Ok(());
        }
        // The database unreachable for a while (a restart, a failover) holds the command here,
        // retried, rather than sending it round the queue until its delivery limit
        // dead-letters it.
        let reply = while_unreachable(stop, STORE_PATIENCE, || {
            shoal_commands::answer(&*self.store, &self.tools, &req)
        })
        .await?;
        // The CLI may have given up waiting and gone, its reply queue with it: the outcome is
        // recorded all the same, and `shoal sessions` shows it.
        let sent = crate::publish(&*self.bus, &req.reply_to, &Message::CommandReply(reply)).await;
        if let Err(e) = sent {
            tracing::warn!(id = %req.id, reply_to = %req.reply_to, error = %e, "reply not delivered");
        }
        delivery.ack().await?;
        Ok(())
    }
}

impl Service for CommandInbox {
    type Request = Answer;
    type State = ();

    fn name(&self) -> String {
        "scheduler.commands".into()
    }

    fn fresh_state(&self) -> Result<(), ActorError> {
        Ok(())
    }

    fn feed(
        self: Rc<Self>,
        to: Addr<Served<Self>>,
        mut stop: Signal,
    ) -> Local<'static, Result<(), ActorError>> {
        Box::pin(async move {
            let bus = &self.bus;
            let queue = bus.namespace().commands_queue();
            bus.declare_queue(&queue, &QueueOptions::limited(self.delivery_limit))
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
                if !served(&to, Answer(req, delivery)).await {
                    break;
                }
            }
            Ok(())
        })
    }

    fn serve<'a>(
        &'a self,
        _: &'a mut (),
        Answer(req, delivery): Answer,
        stop: &'a Signal,
    ) -> Local<'a, Result<(), ActorError>> {
        Box::pin(self.answer(req, delivery, stop))
    }
}

/// How long a command waits for an unreachable store before the inbox fails (and is restarted,
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
