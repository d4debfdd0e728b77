//! Stopping in order, the mini-redis way: one signal that every loop watches, and a drain
//! tracker whose completion is observed when the last guard is dropped.
//!
//! Loops stop only at safe points: between jobs, or by handing an in-flight job back. Because a
//! guard is held by each running loop, "all loops have stopped" is a fact the code can await
//! rather than a sleep.

use tokio::sync::{mpsc, watch};

/// Where a supervised actor or loop says it gave up, and where the process learns it: a fact
/// about the whole process, which can no longer do its job and must end non-zero (see
/// [`crate::supervise::Backoff`]). One per process (per [`crate::topology::start`]), handed to
/// every loop inside its [`DrainGuard`]; cheap to clone. The first reason is kept.
#[derive(Clone, Debug)]
pub struct GiveUp(watch::Sender<Option<String>>);

impl Default for GiveUp {
    fn default() -> Self {
        GiveUp(watch::channel(None).0)
    }
}

impl GiveUp {
    /// Records that a loop gave up, with the reason; the first reason is kept.
    pub fn give_up(&self, reason: String) {
        self.0.send_if_modified(|r| {
            if r.is_none() {
                *r = Some(reason);
                true
            } else {
                false
            }
        });
    }

    /// Completes, with the reason, once a loop has given up. The commands await it beside their
    /// work and end the process non-zero.
    pub async fn gave_up(&self) -> String {
        let mut rx = self.0.subscribe();
        let reason = rx
            .wait_for(Option::is_some)
            .await
            .map(|reason| reason.clone().unwrap_or_default());
        match reason {
            Ok(reason) => reason,
            // Unreachable: `self` holds the sender.
            Err(_) => std::future::pending().await,
        }
    }
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
    give_up: GiveUp,
}

/// Held by a running loop; dropping it says "this loop has stopped". It also carries where the
/// loop says it gave up ([`DrainGuard::give_up`]).
#[derive(Clone, Debug)]
pub struct DrainGuard {
    _running: mpsc::Sender<()>,
    give_up: GiveUp,
}

impl DrainGuard {
    /// Where the holder says it gave up: the process's, shared by every drain of it.
    pub fn give_up(&self) -> GiveUp {
        self.give_up.clone()
    }
}

impl Default for Drain {
    fn default() -> Self {
        Self::new()
    }
}

impl Drain {
    /// A drain whose loops give up to a [`GiveUp`] of their own (tests, a lone loop).
    pub fn new() -> Self {
        Self::with_give_up(GiveUp::default())
    }

    /// A drain whose loops say where `give_up` listens that they gave up: every drain of a
    /// process shares the process's.
    pub fn with_give_up(give_up: GiveUp) -> Self {
        let (tx, rx) = mpsc::channel(1);
        Drain {
            tx: Some(tx),
            rx,
            give_up,
        }
    }

    pub fn guard(&self) -> DrainGuard {
        DrainGuard {
            _running: self.tx.as_ref().expect("guard after wait").clone(),
            give_up: self.give_up.clone(),
        }
    }

    /// Waits until every guard handed out has been dropped.
    pub async fn wait(mut self) {
        self.tx.take();
        let _ = self.rx.recv().await;
    }
}
