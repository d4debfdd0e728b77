//! Running an actor's loops under supervision: a loop that fails or panics is started again
//! with exponential backoff, and the failure is logged with the actor's name.
//!
//! Actors own long-running async loops (consume, work, reply). actix's `Supervisor` restarts an
//! actor whose context stops; here the unit of restart is the loop, so that one failed compile
//! slot does not cancel the other slots' in-flight work. A fault in tuned code never reaches this
//! far: it ends a child process and is reported as an outcome. What does reach here is the
//! machinery failing: the bus or store unreachable, a bug.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt;

use crate::shutdown::{DrainGuard, Signal};

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

/// The message of a caught panic.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Spawns `make()` on the current actix arbiter, again and again, until it returns `Ok(())` or
/// the shutdown signal is sent. `Ok(())` means the loop stopped on purpose (shutdown). For the
/// loops that are no actor (an operator's control inbox, the command inbox); an actor restarts
/// through actix's `Supervisor`, paced by the same [`RestartPace`].
pub fn supervise<F, Fut, E>(
    name: String,
    backoff: Backoff,
    mut stop: Signal,
    guard: DrainGuard,
    mut make: F,
) where
    F: FnMut() -> Fut + 'static,
    Fut: Future<Output = Result<(), E>> + 'static,
    E: std::fmt::Display + 'static,
{
    let give_up = guard.give_up();
    actix::spawn(async move {
        let _guard = guard;
        let mut pace = RestartPace::new(name.clone(), backoff);
        loop {
            let delay = pace.starting();
            if !delay.is_zero() {
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = stop.triggered() => break,
                }
            }
            let failure = match AssertUnwindSafe(make()).catch_unwind().await {
                Ok(Ok(())) => break,
                Ok(Err(e)) => e.to_string(),
                Err(panic) => format!("panic: {}", panic_message(&*panic)),
            };
            if stop.is_triggered() {
                break;
            }
            if let Restart::GiveUp(reason) = pace.failed(&failure) {
                give_up.give_up(reason);
                break;
            }
        }
        tracing::debug!(actor = %name, "loop stopped");
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shutdown::{channel, Drain};
    use std::cell::Cell;
    use std::rc::Rc;

    #[actix::test]
    async fn a_failing_loop_is_restarted_until_it_succeeds() {
        let (_trigger, signal) = channel();
        let drain = Drain::new();
        let runs = Rc::new(Cell::new(0));
        let r = runs.clone();
        supervise(
            "test".into(),
            Backoff {
                initial: Duration::from_millis(1),
                max: Duration::from_millis(5),
                give_up_after: Duration::from_secs(60),
            },
            signal,
            drain.guard(),
            move || {
                let r = r.clone();
                async move {
                    r.set(r.get() + 1);
                    match r.get() {
                        1 => Err("first run fails".to_string()),
                        2 => panic!("second run panics"),
                        _ => Ok(()),
                    }
                }
            },
        );
        drain.wait().await;
        assert_eq!(runs.get(), 3);
    }

    /// A loop that never succeeds is given up after `give_up_after`, and the process learns
    /// why (it then ends non-zero).
    #[actix::test]
    async fn a_loop_that_keeps_failing_is_given_up() {
        let (_trigger, signal) = channel();
        let drain = Drain::new();
        supervise(
            "disk".into(),
            Backoff {
                initial: Duration::from_millis(1),
                max: Duration::from_millis(5),
                give_up_after: Duration::from_millis(100),
            },
            signal,
            drain.guard(),
            || async { Err::<(), _>("database or disk is full".to_string()) },
        );
        let give_up = drain.guard().give_up();
        let reason = tokio::time::timeout(Duration::from_secs(10), give_up.gave_up())
            .await
            .expect("given up within the bound");
        assert!(
            reason.contains("disk has failed") && reason.contains("disk is full"),
            "{reason}"
        );
        drain.wait().await;
    }
}
