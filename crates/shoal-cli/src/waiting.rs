//! What an operator's command says while the database does not answer.
//!
//! The cluster's store waits out an outage call by call ([`shoal_store::patient`]), so a
//! command that reads it simply pauses. A pause without a word looks like a hang: these helpers
//! say, every few seconds, where the database is, that it is being retried and that nothing is
//! lost, and the command carries on when it answers.

use std::future::Future;
use std::time::Duration;

/// How often the operator is told while the database does not answer.
const TELL_EVERY: Duration = Duration::from_secs(5);

/// Runs `work`, passing the waiting message to `tell` every few seconds while the database
/// does not answer.
pub async fn telling<T>(work: impl Future<Output = T>, mut tell: impl FnMut(&str)) -> T {
    tokio::pin!(work);
    let mut every = tokio::time::interval(TELL_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await;
    loop {
        tokio::select! {
            out = &mut work => return out,
            _ = every.tick() => {
                if let Some(m) = shoal_store::patient::outages().waiting_message() {
                    tell(&m);
                }
            }
        }
    }
}

/// [`telling`] on standard error: for commands that print their answer once.
pub async fn on_stderr<T>(work: impl Future<Output = T>) -> T {
    telling(work, |m| eprintln!("shoal: {m}")).await
}
