//! The Scheduler as an actix actor: its messages, its state, its restarts, and the adapter
//! that feeds it the results queue (see the module above for what each turn does).

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures_util::FutureExt;
use shoal_bus::{Bus, Consumer, Delivery, QueueOptions};
use shoal_model::SessionId;
use shoal_store::{Batch, Store};
use tokio::sync::oneshot;

use super::{Clock, DispatchPace, Inner, Parts, SchedulerConfig, SystemClock, STARTED_DEBOUNCE};
use crate::backends::SessionBackends;
use crate::shutdown::{DrainGuard, Signal};
use crate::supervise::{panic_message, Backoff, OwnAddress, RestartPace};
use crate::ActorError;

/// The Scheduler actor. It owns no job state in memory that the store does not also have,
/// except the set of builds in progress (lost on restart, which costs at most a duplicate build).
/// Start it with [`Scheduler::start_supervised`], so that a failure restarts it.
pub struct Scheduler {
    parts: Parts,
    /// This run's state: `None` while a message's work holds it (no other message is taken
    /// meanwhile), and while the actor waits out a backoff after a failure.
    state: Option<State>,
    stop: Signal,
    /// Held until the actor is gone for good: the process's stop waits for it.
    guard: DrainGuard,
    pace: RestartPace,
    /// Work that arrived while other work ran, in order, each with who waits for its end (and
    /// hears how long until the next turn).
    queue: VecDeque<(Work, Option<oneshot::Sender<Duration>>)>,
    /// Whether a message's work holds the state now.
    busy: bool,
    /// Stopped for good (drained, given up, or stopped while failing): not started again.
    finished: bool,
    /// Held while it may be started again (see [`OwnAddress`]).
    own: OwnAddress<Self>,
}

/// A batch of deliveries from the results queue, applied in one transaction (see [`apply`]);
/// a turn of dispatch follows.
#[derive(Message)]
#[rtype(result = "Duration")]
pub struct Replies(pub Vec<Delivery>);

/// A turn of dispatch, after writing the started notices that are due: sent by the adapter
/// when no reply came within the wait the last work asked for (at once after a turn that made
/// progress).
#[derive(Message)]
#[rtype(result = "Duration")]
pub struct Turn;

/// The last message: the results queue is empty after the stop signal (the workers stopped
/// first, so it is final); the started notices held back are written, and the actor stops for
/// good.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Drained;

/// What a message's work asks for next.
enum Next {
    /// Another turn of dispatch after this long.
    TurnIn(Duration),
    /// Nothing: the actor is done.
    Finished,
}

/// The state of one run of the Scheduler: its caches and counts, and the pace of dispatch.
struct State {
    inner: Inner,
    dispatch: DispatchPace,
}

impl State {
    fn new(parts: &Parts) -> Self {
        let inner = Inner::new(parts);
        let dispatch = DispatchPace::new(&inner);
        State { inner, dispatch }
    }

    /// The work of one message.
    async fn work(&mut self, work: Work, stop: &Signal) -> Result<Next, ActorError> {
        match work {
            Work::Replies(batch) => self.inner.apply_deliveries(batch, stop).await?,
            // Write the started notices that are due.
            Work::Turn => self.inner.apply_deliveries(Vec::new(), stop).await?,
            Work::Drained => {
                let (changes, tags) = self.inner.started.drain();
                if !changes.is_empty() {
                    let sessions: Vec<SessionId> = tags.iter().map(|t| t.session).collect();
                    let batch = Batch {
                        changes,
                        builds: vec![],
                    };
                    self.inner.apply_counted(&batch, &sessions).await?;
                }
                return Ok(Next::Finished);
            }
        }
        if stop.is_triggered() {
            // No more dispatch: the adapter drains the results queue and sends `Drained`.
            return Ok(Next::TurnIn(Duration::MAX));
        }
        let t0 = std::time::Instant::now();
        let progressed = self.dispatch.turn(&mut self.inner).await?;
        shoal_metrics::metrics().dispatch_took(t0.elapsed());
        Ok(Next::TurnIn(if progressed {
            // Look for replies, then dispatch again.
            Duration::ZERO
        } else {
            // (Started notices held back are written at least twice per debounce.)
            self.inner.config.tick.min(STARTED_DEBOUNCE / 2)
        }))
    }
}

/// The work a message brings.
enum Work {
    Replies(Vec<Delivery>),
    Turn,
    Drained,
}

impl Scheduler {
    pub fn new(
        store: Arc<dyn Store>,
        bus: Arc<dyn Bus>,
        backends: SessionBackends,
        config: SchedulerConfig,
        stop: Signal,
        guard: DrainGuard,
    ) -> Self {
        let config_give_up = config.give_up_after;
        Scheduler {
            parts: Parts {
                store,
                bus,
                backends,
                config,
                clock: Arc::new(SystemClock),
            },
            state: None,
            stop,
            pace: RestartPace::new(
                "scheduler",
                Backoff {
                    give_up_after: config_give_up,
                    ..Backoff::default()
                },
            ),
            guard,
            queue: VecDeque::new(),
            busy: false,
            finished: false,
            own: OwnAddress::new(),
        }
    }

    /// Starts the actor under actix's `Supervisor`: a failure or a panic of a message's work
    /// stops it, and the supervisor starts it again with fresh state.
    pub fn start_supervised(self) -> Addr<Self> {
        actix::Supervisor::start(|_| self)
    }

    /// The same Scheduler reading time from `clock`.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.parts.clock = clock;
        self
    }

    /// Fresh state for one run, for tests that drive its steps one by one.
    #[cfg(test)]
    pub(super) fn fresh_inner(&self) -> Inner {
        Inner::new(&self.parts)
    }

    /// Starts this run: fresh state, the results queue's adapter, and the first turn; after a
    /// failure, once its backoff has passed (or at once if the stop signal comes first).
    fn begin(&mut self, ctx: &mut Context<Self>) {
        if self.finished {
            return;
        }
        self.own.hold(ctx);
        self.state = Some(State::new(&self.parts));
        let feed = feed_replies(
            ctx.address(),
            self.parts.bus.clone(),
            self.parts.config.clone(),
            self.stop.clone(),
        );
        ctx.spawn(feed.into_actor(self).map(|out, act, ctx| {
            if let Err(e) = out {
                act.failed(ctx, e.to_string());
            }
        }));
    }

    /// Queues a message's work; `done` hears when it has run.
    fn enqueue(
        &mut self,
        ctx: &mut Context<Self>,
        work: Work,
        done: Option<oneshot::Sender<Duration>>,
    ) {
        self.queue.push_back((work, done));
        self.pump(ctx);
    }

    /// Runs the next queued work on the state, unless work runs already: one at a time, in the
    /// order they came. The work is spawned into the context rather than awaited with
    /// `ctx.wait`, so that the adapter goes on being polled meanwhile: it may hold the bus's
    /// channel lock in the middle of an operation, and the work needs the same lock.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        if self.busy {
            return;
        }
        let Some((work, done)) = self.queue.pop_front() else {
            return;
        };
        let Some(mut state) = self.state.take() else {
            // Between a failure and the restart (replies dropped unacked go back to the
            // queue), or a drain while backing off: nothing to drain then.
            if let Work::Drained = work {
                self.finish(ctx);
            }
            return;
        };
        self.busy = true;
        let stop = self.stop.clone();
        let fut = AssertUnwindSafe(async move {
            let next = state.work(work, &stop).await?;
            Ok::<_, ActorError>((state, next))
        })
        .catch_unwind();
        ctx.spawn(fut.into_actor(self).map(move |out, act, ctx| {
            act.busy = false;
            match out {
                Ok(Ok((state, Next::TurnIn(wait)))) => {
                    act.state = Some(state);
                    if let Some(done) = done {
                        let _ = done.send(wait);
                    }
                    act.pump(ctx);
                }
                Ok(Ok((_, Next::Finished))) => {
                    if let Some(done) = done {
                        let _ = done.send(Duration::MAX);
                    }
                    act.finish(ctx)
                }
                Ok(Err(e)) => act.failed(ctx, e.to_string()),
                Err(panic) => act.failed(ctx, format!("panic: {}", panic_message(&*panic))),
            }
        }));
    }

    /// A message's work or the adapter failed: the actor stops, and its supervisor starts it
    /// again after the backoff — unless the process is stopping or the failures have lasted too
    /// long (the process is told it gave up).
    fn failed(&mut self, ctx: &mut Context<Self>, failure: String) {
        self.state = None;
        self.queue.clear();
        if self
            .pace
            .stops_for_good(&failure, &self.stop, &self.guard.give_up())
        {
            return self.finish(ctx);
        }
        ctx.stop();
    }

    /// Stops for good: the supervisor does not start it again.
    fn finish(&mut self, ctx: &mut Context<Self>) {
        self.finished = true;
        self.own.release();
        self.state = None;
        self.queue.clear();
        ctx.stop();
    }
}

impl Actor for Scheduler {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.finished {
            // Restarted after it stopped for good, because an address was still alive: stop
            // again; nothing holds an address now (the adapter went with the last run).
            ctx.stop();
            return;
        }
        let wait = self.pace.backoff(&self.stop);
        crate::supervise::begin_after(wait, self, ctx, Self::begin, Self::finish);
    }
}

impl Supervised for Scheduler {
    fn restarting(&mut self, _ctx: &mut Context<Self>) {
        // Everything in memory goes: the next run derives it again from the store.
        self.state = None;
        self.queue.clear();
        self.busy = false;
    }
}

impl Handler<Replies> for Scheduler {
    /// Completes once the batch is applied and dispatch has turned, with how long until the
    /// next turn unless replies come first.
    type Result = ResponseFuture<Duration>;

    fn handle(&mut self, msg: Replies, ctx: &mut Context<Self>) -> Self::Result {
        let (done, next) = oneshot::channel();
        self.enqueue(ctx, Work::Replies(msg.0), Some(done));
        Box::pin(async move { next.await.unwrap_or(Duration::MAX) })
    }
}

impl Handler<Turn> for Scheduler {
    /// Completes once dispatch has turned, with how long until the next turn.
    type Result = ResponseFuture<Duration>;

    fn handle(&mut self, _: Turn, ctx: &mut Context<Self>) -> Self::Result {
        let (done, next) = oneshot::channel();
        self.enqueue(ctx, Work::Turn, Some(done));
        Box::pin(async move { next.await.unwrap_or(Duration::MAX) })
    }
}

impl Handler<Drained> for Scheduler {
    /// Completes once the last work is done.
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Drained, ctx: &mut Context<Self>) -> Self::Result {
        let (done, drained) = oneshot::channel();
        self.enqueue(ctx, Work::Drained, Some(done));
        Box::pin(async move {
            let _ = drained.await;
        })
    }
}

/// The results queue's adapter, and the pace of dispatch: consumes the queue and sends its
/// deliveries to the Scheduler in batches ([`Replies`]), each once the one before is applied (a
/// batch waits on the broker, unacked, not in memory); when no reply comes within the wait the
/// last work asked for, it sends a [`Turn`]. A reply that is there is taken before a turn, as
/// the single loop this replaced did. On the stop signal it sends what is left on the queue (the
/// workers stopped first, so it is final), then [`Drained`]. It lives as long as one run of the
/// actor: an error here fails the run.
async fn feed_replies(
    scheduler: Addr<Scheduler>,
    bus: Arc<dyn Bus>,
    config: SchedulerConfig,
    mut stop: Signal,
) -> Result<(), ActorError> {
    let queue = bus.namespace().results_queue();
    bus.declare_queue(&queue, &QueueOptions::limited(config.delivery_limit))
        .await?;
    let prefetch = config.result_batch.min(u16::MAX as usize) as u16;
    let mut consumer = bus.consume(&queue, prefetch).await?;
    // Dispatch at once, then after each piece of work: a reply that is there is taken first.
    let mut wait = Duration::ZERO;
    loop {
        let first = tokio::select! {
            biased;
            _ = stop.triggered() => break,
            d = consumer.next() => Some(d),
            _ = tokio::time::sleep(wait) => None,
        };
        let next = match first {
            Some(None) => return Ok(()),
            Some(Some(first)) => {
                let mut batch = vec![first?];
                fill_batch(&mut *consumer, &mut batch, config.result_batch).await?;
                scheduler.send(Replies(batch)).await
            }
            None => scheduler.send(Turn).await,
        };
        match next {
            // The actor stopped: this run is over.
            Err(_) => return Ok(()),
            Ok(w) => wait = w,
        }
    }
    loop {
        let mut batch = Vec::new();
        fill_batch(&mut *consumer, &mut batch, config.result_batch).await?;
        if batch.is_empty() {
            let _ = scheduler.send(Drained).await;
            return Ok(());
        }
        if scheduler.send(Replies(batch)).await.is_err() {
            return Ok(());
        }
    }
}

/// Takes whatever else arrives within a few milliseconds, up to `max` deliveries.
async fn fill_batch(
    consumer: &mut dyn Consumer,
    batch: &mut Vec<Delivery>,
    max: usize,
) -> Result<(), ActorError> {
    while batch.len() < max {
        match tokio::time::timeout(Duration::from_millis(3), consumer.next()).await {
            Ok(Some(d)) => batch.push(d?),
            _ => break,
        }
    }
    Ok(())
}
