//! When a failed actor starts again: the pace of restarts, in one place.
//!
//! Every actor runs under actix's `Supervisor` (the Scheduler, `scheduler/actor.rs`; the
//! workers and the control inboxes, `serving.rs`; the GpuMonitor). When its work fails or panics
//! it stops, and the supervisor starts the same actor value again with fresh state; the actor
//! asks its [`RestartPace`] how long to wait first, or whether to give up. A fault in tuned code
//! never reaches this far: it ends a child process and is reported as an outcome. What does
//! reach here is the machinery failing: the bus or store unreachable, a full disk, a bug.

use std::future::Future;
use std::time::Duration;

use actix::{Actor, ActorFutureExt, Addr, AsyncContext, Context, WrapFuture};

use crate::shutdown::{GiveUp, Signal};

/// An actor's own address, held from the start of each run until it stops for good.
///
/// actix's `Supervisor` starts a stopped actor again only while an address of it is alive.
/// An actor's feed (the adapter that brings it its work from the bus) holds one, but the feed's
/// goes with the feed: when the feed itself fails (a queue it may not declare yet, the broker
/// gone while it declared), no address is left, and without this one the actor would stop for
/// good right after logging that it restarts, its queue left unconsumed (an evaluator started
/// before the Scheduler had created the results queue did so in the chaos suite). Released
/// when the actor stops for good, so that it does stop.
pub struct OwnAddress<A: Actor>(Option<Addr<A>>);

impl<A: Actor<Context = Context<A>>> OwnAddress<A> {
    pub fn new() -> Self {
        OwnAddress(None)
    }

    /// Holds the address: at the start of a run.
    pub fn hold(&mut self, ctx: &Context<A>) {
        self.0 = Some(ctx.address());
    }

    /// Lets it go: when the actor stops for good.
    pub fn release(&mut self) {
        self.0 = None;
    }
}

impl<A: Actor<Context = Context<A>>> Default for OwnAddress<A> {
    fn default() -> Self {
        OwnAddress::new()
    }
}

/// Begins an actor's run: at once when `wait` is `None` (a first start), else once the backoff
/// of the failure before has passed ([`RestartPace::backoff`]), or, if the stop signal comes
/// first, `finish`es it. What every supervised actor's `started` does once it knows it has not
/// stopped for good.
pub fn begin_after<A>(
    wait: Option<impl Future<Output = bool> + 'static>,
    act: &mut A,
    ctx: &mut Context<A>,
    begin: fn(&mut A, &mut Context<A>),
    finish: fn(&mut A, &mut Context<A>),
) where
    A: Actor<Context = Context<A>>,
{
    match wait {
        None => begin(act, ctx),
        Some(wait) => {
            ctx.spawn(wait.into_actor(act).map(move |passed, act, ctx| {
                if passed {
                    begin(act, ctx)
                } else {
                    finish(act, ctx)
                }
            }));
        }
    }
}

/// Backoff between restarts: 100 ms doubling up to 5 s (a loop that failed because the broker or
/// the store was restarting is back within seconds of it, not half a minute); reset after a loop ran for a minute.
/// A loop that has failed every run for `give_up_after` is given up: the failure is not going
/// away by itself (a full disk, a read-only store, credentials revoked), so the process should
/// end non-zero and say why, for its supervisor (systemd, a person) to act, rather than spin.
#[derive(Clone, Debug)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
    pub give_up_after: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(5),
            give_up_after: Duration::from_secs(120),
        }
    }
}

/// What to do after a failure, by [`RestartPace::failed`].
#[derive(Debug, PartialEq, Eq)]
pub enum Restart {
    /// Start again after this delay.
    After(Duration),
    /// Every run has failed for [`Backoff::give_up_after`]: stop for good, with this reason
    /// (passed to [`crate::shutdown::GiveUp::give_up`]).
    GiveUp(String),
}

/// The one place that decides when a failed actor or loop starts again: [`Backoff`]'s delays,
/// reset after a run of a minute, and giving up after [`Backoff::give_up_after`] of runs that
/// all failed. Kept by the actor across its restarts (actix restarts the same actor value).
#[derive(Debug)]
pub struct RestartPace {
    name: String,
    backoff: Backoff,
    next_delay: Duration,
    /// When the current run started.
    run_started: Option<tokio::time::Instant>,
    /// Since when every run has failed.
    failing_since: Option<tokio::time::Instant>,
    /// The delay before the next start (zero for the first).
    pending: Duration,
}

impl RestartPace {
    pub fn new(name: impl Into<String>, backoff: Backoff) -> Self {
        RestartPace {
            name: name.into(),
            next_delay: backoff.initial,
            backoff,
            run_started: None,
            failing_since: None,
            pending: Duration::ZERO,
        }
    }

    /// A run starts now; returns how long to wait before it does its first work (the backoff
    /// of the failure before, if any).
    pub fn starting(&mut self) -> Duration {
        self.run_started = Some(tokio::time::Instant::now());
        std::mem::take(&mut self.pending)
    }

    /// The current run failed with `failure`: logs it, counts the restart, and says what next.
    pub fn failed(&mut self, failure: &str) -> Restart {
        tracing::error!(actor = %self.name, error = %failure, "failed; restarting");
        shoal_metrics::metrics().loop_restarted(&self.name);
        let started = self.run_started.unwrap_or_else(tokio::time::Instant::now);
        if started.elapsed() > Duration::from_secs(60) {
            self.next_delay = self.backoff.initial;
            self.failing_since = None;
        }
        let since = *self.failing_since.get_or_insert(started);
        if since.elapsed() >= self.backoff.give_up_after {
            let reason = format!(
                "{} has failed for {}s without a successful run; last error: {failure}",
                self.name,
                since.elapsed().as_secs()
            );
            tracing::error!(actor = %self.name, "giving up: {reason}");
            return Restart::GiveUp(reason);
        }
        self.pending = self.next_delay;
        self.next_delay = (self.next_delay * 2).min(self.backoff.max);
        Restart::After(self.pending)
    }
}

impl RestartPace {
    /// After a failure: whether the actor stops for good, because the process is stopping or
    /// the failures have lasted too long (then `give_up` hears why); else its supervisor starts
    /// it again after the backoff.
    pub fn stops_for_good(&mut self, failure: &str, stop: &Signal, give_up: &GiveUp) -> bool {
        if stop.is_triggered() {
            tracing::error!(actor = %self.name, error = %failure, "failed while stopping");
            return true;
        }
        match self.failed(failure) {
            Restart::GiveUp(reason) => {
                give_up.give_up(reason);
                true
            }
            Restart::After(_) => false,
        }
    }

    /// At a start: the backoff of the failure before, to wait out first, as a future that is
    /// `true` once it has passed and `false` if the stop signal came first; `None` when there is
    /// nothing to wait for (the first start).
    pub fn backoff(&mut self, stop: &Signal) -> Option<impl Future<Output = bool> + 'static> {
        let delay = self.starting();
        if delay.is_zero() {
            return None;
        }
        let mut stop = stop.clone();
        Some(async move {
            tokio::select! {
                _ = tokio::time::sleep(delay) => true,
                _ = stop.triggered() => false,
            }
        })
    }
}

/// The message of a caught panic.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pace(give_up_after: Duration) -> RestartPace {
        RestartPace::new(
            "test",
            Backoff {
                initial: Duration::from_millis(100),
                max: Duration::from_millis(400),
                give_up_after,
            },
        )
    }

    /// The first start waits for nothing; each failure doubles the wait up to the maximum.
    #[tokio::test(start_paused = true)]
    async fn failures_back_off_doubling_up_to_the_maximum() {
        let mut p = pace(Duration::from_secs(60));
        assert_eq!(p.starting(), Duration::ZERO);
        let mut waits = Vec::new();
        for _ in 0..4 {
            match p.failed("broker gone") {
                Restart::After(d) => waits.push(d),
                Restart::GiveUp(r) => panic!("gave up: {r}"),
            }
            assert_eq!(p.starting(), *waits.last().unwrap());
        }
        let ms: Vec<u128> = waits.iter().map(|d| d.as_millis()).collect();
        assert_eq!(ms, [100, 200, 400, 400]);
    }

    /// A run that lasted a minute before failing starts the backoff afresh.
    #[tokio::test(start_paused = true)]
    async fn a_long_run_resets_the_backoff() {
        let mut p = pace(Duration::from_secs(600));
        p.starting();
        p.failed("one");
        p.starting();
        p.failed("two");
        p.starting();
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(
            p.failed("three"),
            Restart::After(Duration::from_millis(100))
        );
    }

    /// Runs that have all failed for `give_up_after` give up, saying which and why.
    #[tokio::test(start_paused = true)]
    async fn runs_that_keep_failing_are_given_up() {
        let mut p = pace(Duration::from_secs(1));
        p.starting();
        assert!(matches!(p.failed("disk full"), Restart::After(_)));
        tokio::time::advance(Duration::from_secs(2)).await;
        p.starting();
        match p.failed("database or disk is full") {
            Restart::GiveUp(reason) => {
                assert!(reason.contains("test has failed"), "{reason}");
                assert!(reason.contains("disk is full"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
}
