//! Stopping in order, the mini-redis way: one signal that every loop watches, and a drain
//! tracker whose completion is observed when the last guard is dropped.
//!
//! Loops stop only at safe points: between jobs, or by handing an in-flight job back. Because a
//! guard is held by each running loop, "all loops have stopped" is a fact the code can await
//! rather than a sleep.

use std::sync::OnceLock;

use tokio::sync::{mpsc, watch};

/// Why a supervised loop gave up, once one has: a fact about the whole process, which can no
/// longer do its job and must end non-zero (see [`crate::supervise::Backoff`]).
fn gave_up_cell() -> &'static watch::Sender<Option<String>> {
    static CELL: OnceLock<watch::Sender<Option<String>>> = OnceLock::new();
    CELL.get_or_init(|| watch::channel(None).0)
}

/// Records that a loop gave up, with the reason; the first reason is kept.
pub fn give_up(reason: String) {
    gave_up_cell().send_if_modified(|r| {
        if r.is_none() {
            *r = Some(reason);
            true
        } else {
            false
        }
    });
}

/// Completes, with the reason, once a supervised loop of this process has given up. The
/// commands await it beside their work and end the process non-zero.
pub async fn gave_up() -> String {
    let mut rx = gave_up_cell().subscribe();
    let reason = rx
        .wait_for(Option::is_some)
        .await
        .expect("the sender is static and never dropped");
    reason.clone().unwrap_or_default()
}

/// Sends the stop signal. Cheap to clone; can be triggered from any thread (a Ctrl-C handler).
#[derive(Clone, Debug)]
pub struct Trigger(watch::Sender<bool>);

/// Receives the stop signal.
#[derive(Clone, Debug)]
pub struct Signal(watch::Receiver<bool>);

/// A pair: trigger and signal.
pub fn channel() -> (Trigger, Signal) {
    let (tx, rx) = watch::channel(false);
    (Trigger(tx), Signal(rx))
}

impl Trigger {
    pub fn trigger(&self) {
        self.0.send_replace(true);
    }

    pub fn signal(&self) -> Signal {
        Signal(self.0.subscribe())
    }
}

impl Signal {
    pub fn is_triggered(&self) -> bool {
        *self.0.borrow()
    }

    /// Completes once the stop signal has been sent (at once if it already was, and also if the
    /// trigger is gone, which can only mean the process is going down).
    pub async fn triggered(&mut self) {
        let _ = self.0.wait_for(|stop| *stop).await;
    }
}

/// Tracks running loops. Each loop holds a [`DrainGuard`]; [`Drain::wait`] completes when all of
/// them are dropped.
pub struct Drain {
    tx: Option<mpsc::Sender<()>>,
    rx: mpsc::Receiver<()>,
}

/// Held by a running loop; dropping it says "this loop has stopped".
#[derive(Clone, Debug)]
pub struct DrainGuard(#[allow(dead_code)] mpsc::Sender<()>);

impl Default for Drain {
    fn default() -> Self {
        Self::new()
    }
}

impl Drain {
    pub fn new() -> Self {
        let (tx, rx) = mpsc::channel(1);
        Drain { tx: Some(tx), rx }
    }

    pub fn guard(&self) -> DrainGuard {
        DrainGuard(self.tx.as_ref().expect("guard after wait").clone())
    }

    /// Waits until every guard handed out has been dropped.
    pub async fn wait(mut self) {
        self.tx.take();
        let _ = self.rx.recv().await;
    }
}
