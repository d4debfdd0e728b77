//! Workers as actix actors: [`Served`] runs a [`Service`] (a compile slot, a device's
//! Evaluator), whose requests arrive as [`Serve`] messages from a thin bus adapter (its
//! [`Service::feed`]) and are served one at a time, with the run's state owned by the actor.
//!
//! - **State.** A run's state (a slot's work directory, a device's artifact cache, runner and
//!   replies in flight) is the actor's. Serving a request moves it into the request's future and
//!   back; requests are served one at a time, in order, and nothing else can reach the state:
//!   no lock, no `RefCell`. The serving is spawned into the actor's context, not awaited with
//!   `ctx.wait`, so that the feed is polled meanwhile: it may hold the bus's channel lock in the
//!   middle of an operation that the serving then needs too.
//! - **Adapter.** The feed consumes the service's queue and sends each request, waiting for it to
//!   be served before it takes the next: the queue's prefetch, not the mailbox, bounds what is in
//!   hand. It lives as long as one run of the actor.
//! - **Restarts.** A request whose serving fails (the machinery: the broker, the store, a full
//!   disk) or panics, or a feed that fails, stops the actor; actix's `Supervisor` starts it again
//!   with fresh state after [`RestartPace`]'s backoff, or the process is told it gave up. A fault
//!   in tuned code never gets here: it is an outcome, replied like any other.
//! - **Stop.** On the stop signal the feed ends; the service finishes what it has in hand
//!   ([`Service::finish`]) and the actor stops for good, dropping its drain guard.

use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::rc::Rc;

use actix::prelude::*;
use futures_util::FutureExt;
use tokio::sync::oneshot;

use crate::shutdown::{DrainGuard, Signal};
use crate::supervise::{panic_message, Backoff, OwnAddress, RestartPace};
use crate::ActorError;

/// A future on the actor's thread.
pub(crate) type Local<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// What a worker actor does: the requests it serves and the state a run keeps.
pub(crate) trait Service: Sized + 'static {
    /// One request, as the feed took it from the bus (with its delivery, settled by
    /// [`Service::serve`]).
    type Request: Send + Unpin + 'static;
    /// What one run keeps between requests.
    type State: Unpin + 'static;

    /// The name in logs, metrics and give-up reasons.
    fn name(&self) -> String;

    /// How restarts are paced.
    fn backoff(&self) -> Backoff {
        Backoff::default()
    }

    /// A run's fresh state.
    fn fresh_state(&self) -> Result<Self::State, ActorError>;

    /// The adapter of one run: declares and consumes the service's queue and sends each request
    /// to `to`, waiting until it is served, until the stop signal or the end of the queue.
    fn feed(
        self: Rc<Self>,
        to: Addr<Served<Self>>,
        stop: Signal,
    ) -> Local<'static, Result<(), ActorError>>;

    /// Serves one request.
    fn serve<'a>(
        &'a self,
        state: &'a mut Self::State,
        request: Self::Request,
        stop: &'a Signal,
    ) -> Local<'a, Result<(), ActorError>>;

    /// Ends a run: what the state still has in hand is settled (replies sent and acked). Nothing,
    /// for a service that settles each request as it serves it.
    fn finish<'a>(&'a self, _state: &'a mut Self::State) -> Local<'a, Result<(), ActorError>> {
        Box::pin(async { Ok(()) })
    }
}

/// One request for the actor to serve.
pub(crate) struct Serve<R>(pub R);

impl<R: Send + 'static> Message for Serve<R> {
    type Result = ();
}

/// The feed ended (the stop signal): finish and stop for good.
pub(crate) struct FeedEnded;

impl Message for FeedEnded {
    type Result = ();
}

/// A request waiting to be served (`None`: the end of the run), with who waits for its end.
type Queued<R> = (Option<R>, Option<oneshot::Sender<()>>);

/// The actor that runs a [`Service`].
pub(crate) struct Served<S: Service> {
    service: Rc<S>,
    /// This run's state: `None` while a request holds it, and between a failure and the restart.
    state: Option<S::State>,
    stop: Signal,
    guard: DrainGuard,
    pace: RestartPace,
    /// Requests that came while another was served (`None`: end the run), each with who waits
    /// for its end.
    queue: VecDeque<Queued<S::Request>>,
    /// Whether a request holds the state now.
    busy: bool,
    /// Stopped for good: not started again.
    finished: bool,
    /// Held while it may be started again (see [`OwnAddress`]).
    own: OwnAddress<Self>,
}

impl<S: Service> Served<S> {
    /// Starts `service` under actix's `Supervisor`.
    pub(crate) fn start(service: S, stop: Signal, guard: DrainGuard) -> Addr<Self> {
        let pace = RestartPace::new(service.name(), service.backoff());
        Supervisor::start(move |_| Served {
            service: Rc::new(service),
            state: None,
            stop,
            guard,
            pace,
            queue: VecDeque::new(),
            busy: false,
            finished: false,
            own: OwnAddress::new(),
        })
    }

    /// Starts a run: fresh state and the feed.
    fn begin(&mut self, ctx: &mut Context<Self>) {
        self.own.hold(ctx);
        match self.service.fresh_state() {
            Ok(state) => self.state = Some(state),
            Err(e) => return self.failed(ctx, e.to_string()),
        }
        let feed = self.service.clone().feed(ctx.address(), self.stop.clone());
        ctx.spawn(feed.into_actor(self).map(|out, act, ctx| match out {
            Ok(()) => ctx.notify(FeedEnded),
            Err(e) => act.failed(ctx, e.to_string()),
        }));
    }

    /// Queues `request` (or, with `None`, the end of the run); `done` hears when it has run.
    fn enqueue(
        &mut self,
        ctx: &mut Context<Self>,
        request: Option<S::Request>,
        done: Option<oneshot::Sender<()>>,
    ) {
        self.queue.push_back((request, done));
        self.pump(ctx);
    }

    /// Serves the next queued request on the state (or ends the run), unless one is being
    /// served: one at a time, in order.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        if self.busy {
            return;
        }
        let Some((request, done)) = self.queue.pop_front() else {
            return;
        };
        let ends_run = request.is_none();
        let Some(mut state) = self.state.take() else {
            // Between a failure and its restart: the request's delivery, dropped unsettled,
            // goes back to its queue.
            if ends_run {
                self.finish(ctx);
            }
            return;
        };
        self.busy = true;
        let (service, stop) = (self.service.clone(), self.stop.clone());
        let fut = AssertUnwindSafe(async move {
            let out = match request {
                Some(request) => service.serve(&mut state, request, &stop).await,
                None => Ok(()),
            };
            if out.is_err() || ends_run {
                // Whatever ended the run, what is in hand is settled first.
                let finished = service.finish(&mut state).await;
                return out.and(finished).map(|()| state);
            }
            out.map(|()| state)
        })
        .catch_unwind();
        ctx.spawn(fut.into_actor(self).map(move |out, act, ctx| {
            act.busy = false;
            if let Some(done) = done {
                let _ = done.send(());
            }
            match out {
                Ok(Ok(_)) if ends_run => act.finish(ctx),
                Ok(Ok(state)) => {
                    act.state = Some(state);
                    act.pump(ctx);
                }
                Ok(Err(e)) => act.failed(ctx, e.to_string()),
                Err(panic) => act.failed(ctx, format!("panic: {}", panic_message(&*panic))),
            }
        }));
    }

    /// The run failed: stop, and let the supervisor start again after the backoff, unless the
    /// process is stopping or the failures have lasted too long.
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

    /// Stops for good.
    fn finish(&mut self, ctx: &mut Context<Self>) {
        self.finished = true;
        self.own.release();
        self.state = None;
        self.queue.clear();
        ctx.stop();
    }
}

impl<S: Service> Actor for Served<S> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.finished {
            // Started again because an address was still alive when it stopped for good: the
            // feed that held it went with the last run, so this stop is the last.
            ctx.stop();
            return;
        }
        let wait = self.pace.backoff(&self.stop);
        crate::supervise::begin_after(wait, self, ctx, Self::begin, Self::finish);
    }
}

impl<S: Service> Supervised for Served<S> {
    fn restarting(&mut self, _ctx: &mut Context<Self>) {
        self.state = None;
        self.queue.clear();
        self.busy = false;
    }
}

impl<S: Service> Handler<Serve<S::Request>> for Served<S> {
    /// Completes once the request is served: the feed takes the next one then.
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: Serve<S::Request>, ctx: &mut Context<Self>) -> Self::Result {
        let (done, served) = oneshot::channel();
        self.enqueue(ctx, Some(msg.0), Some(done));
        Box::pin(async move {
            let _ = served.await;
        })
    }
}

impl<S: Service> Handler<FeedEnded> for Served<S> {
    type Result = ();

    fn handle(&mut self, _: FeedEnded, ctx: &mut Context<Self>) {
        self.enqueue(ctx, None, None);
    }
}

/// Sends `request` to the actor and waits until it is served; `false` once the actor has
/// stopped (the feed then ends: its run is over).
pub(crate) async fn served<S: Service>(to: &Addr<Served<S>>, request: S::Request) -> bool {
    to.send(Serve(request)).await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shutdown::{channel, Drain};
    use std::cell::Cell;
    use std::time::Duration;

    /// A service whose feed sends one request per run and then waits for the stop; serving it
    /// panics in the first run (`panics`) or fails in every run.
    struct Toy {
        panics: bool,
        /// The feed fails in the first run before it sends anything (as a feed does whose queue
        /// cannot be declared yet); serving then succeeds.
        feed_fails_first: bool,
        runs: Rc<Cell<u32>>,
        served: Rc<Cell<u32>>,
    }

    impl Service for Toy {
        type Request = u32;
        type State = ();

        fn name(&self) -> String {
            "toy".into()
        }

        fn backoff(&self) -> Backoff {
            Backoff {
                initial: Duration::from_millis(10),
                max: Duration::from_millis(20),
                give_up_after: Duration::from_millis(200),
            }
        }

        fn fresh_state(&self) -> Result<(), ActorError> {
            self.runs.set(self.runs.get() + 1);
            Ok(())
        }

        fn feed(
            self: Rc<Self>,
            to: Addr<Served<Self>>,
            mut stop: Signal,
        ) -> Local<'static, Result<(), ActorError>> {
            Box::pin(async move {
                if self.feed_fails_first && self.runs.get() == 1 {
                    return Err(ActorError::DiskFull("the queue cannot be declared".into()));
                }
                served(&to, self.runs.get()).await;
                stop.triggered().await;
                Ok(())
            })
        }

        fn serve<'a>(
            &'a self,
            _: &'a mut (),
            run: u32,
            _: &'a Signal,
        ) -> Local<'a, Result<(), ActorError>> {
            Box::pin(async move {
                self.served.set(self.served.get() + 1);
                if self.feed_fails_first {
                    return Ok(());
                }
                match (self.panics, run) {
                    (true, 1) => panic!("a bug"),
                    (true, _) => Ok(()),
                    (false, _) => Err(ActorError::DiskFull("the disk is full".into())),
                }
            })
        }
    }

    fn toy(panics: bool) -> (Toy, Rc<Cell<u32>>, Rc<Cell<u32>>) {
        let (runs, served) = (Rc::new(Cell::new(0)), Rc::new(Cell::new(0)));
        let toy = Toy {
            panics,
            feed_fails_first: false,
            runs: runs.clone(),
            served: served.clone(),
        };
        (toy, runs, served)
    }

    /// A request that panics stops the actor; its supervisor starts it again with fresh state,
    /// whose request is served. The stop signal then ends it for good.
    #[actix::test]
    async fn an_actor_that_panics_is_started_again_by_its_supervisor() {
        let (service, runs, served) = toy(true);
        let (trigger, signal) = channel();
        let drain = Drain::new();
        Served::start(service, signal, drain.guard());
        for _ in 0..200 {
            if served.get() >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!((runs.get(), served.get()), (2, 2));
        trigger.trigger();
        tokio::time::timeout(Duration::from_secs(5), drain.wait())
            .await
            .expect("stopped for good");
    }

    /// A feed that fails before it has sent anything (its queue cannot be declared yet) stops
    /// the actor with no address of it left but the one the actor keeps: its supervisor starts
    /// it again, and the second run's feed and request go through. Without that address the
    /// actor stopped for good after logging that it restarts (seen in the chaos suite, where
    /// an evaluator may declare the results queue before the Scheduler has created it).
    #[actix::test]
    async fn an_actor_whose_feed_fails_is_started_again() {
        let (mut service, runs, served) = toy(false);
        service.feed_fails_first = true;
        let (trigger, signal) = channel();
        let drain = Drain::new();
        Served::start(service, signal, drain.guard());
        for _ in 0..200 {
            if served.get() >= 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            (runs.get(), served.get()),
            (2, 1),
            "a second run served its request"
        );
        trigger.trigger();
        tokio::time::timeout(Duration::from_secs(5), drain.wait())
            .await
            .expect("stopped for good");
    }

    /// An actor that fails run after run for `give_up_after` gives up: the process learns why,
    /// and the actor stops for good without a stop signal.
    #[actix::test]
    async fn an_actor_that_keeps_failing_gives_up() {
        let (service, runs, _) = toy(false);
        let (_trigger, signal) = channel();
        let drain = Drain::new();
        let give_up = drain.guard().give_up();
        Served::start(service, signal, drain.guard());
        let reason = tokio::time::timeout(Duration::from_secs(10), give_up.gave_up())
            .await
            .expect("given up within the bound");
        assert!(reason.contains("toy has failed"), "{reason}");
        assert!(reason.contains("the disk is full"), "{reason}");
        assert!(
            runs.get() >= 3,
            "it was started again first: {}",
            runs.get()
        );
        tokio::time::timeout(Duration::from_secs(5), drain.wait())
            .await
            .expect("stopped for good");
    }
}
