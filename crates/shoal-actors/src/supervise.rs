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

/// Spawns `make()` on the current actix arbiter, again and again, until it returns `Ok(())` or
/// the shutdown signal is sent. `Ok(())` means the loop stopped on purpose (shutdown).
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
    actix::spawn(async move {
        let _guard = guard;
        let mut delay = backoff.initial;
        // Since when every run has failed.
        let mut failing_since: Option<tokio::time::Instant> = None;
        loop {
            let started = tokio::time::Instant::now();
            let outcome = AssertUnwindSafe(make()).catch_unwind().await;
            let failure = match outcome {
                Ok(Ok(())) => break,
                Ok(Err(e)) => {
                    tracing::error!(actor = %name, error = %e, "loop failed; restarting");
                    e.to_string()
                }
                Err(panic) => {
                    let msg = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown panic".into());
                    tracing::error!(actor = %name, panic = %msg, "loop panicked; restarting");
                    format!("panic: {msg}")
                }
            };
            if stop.is_triggered() {
                break;
            }
            shoal_metrics::metrics().loop_restarted(&name);
            if started.elapsed() > Duration::from_secs(60) {
                delay = backoff.initial;
                failing_since = None;
            }
            let since = *failing_since.get_or_insert(started);
            if since.elapsed() >= backoff.give_up_after {
                let reason = format!(
                    "{name} has failed for {}s without a successful run; last error: {failure}",
                    since.elapsed().as_secs()
                );
                tracing::error!(actor = %name, "giving up: {reason}");
                crate::shutdown::give_up(reason);
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = stop.triggered() => break,
            }
            delay = (delay * 2).min(backoff.max);
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
        let reason = tokio::time::timeout(Duration::from_secs(10), crate::shutdown::gave_up())
            .await
            .expect("given up within the bound");
        assert!(
            reason.contains("disk has failed") && reason.contains("disk is full"),
            "{reason}"
        );
        drain.wait().await;
    }
}
