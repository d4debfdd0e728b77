//! The [`Checkpointer`] of a file store: the WAL copied into the database file off the writer's
//! path (see the store's documentation, `super`).

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use rusqlite::Connection;

use super::ops::Ctx;
use super::{BUSY_TIMEOUT, CHECKPOINT_INTERVAL};
use crate::{Result, StoreError};

/// A thread with its own connection that runs `PRAGMA wal_checkpoint(PASSIVE)` every
/// [`CHECKPOINT_INTERVAL`]. A passive checkpoint never blocks the writer and never waits for
/// it: it copies what was committed when it began, and the writer restarts the WAL from its
/// beginning once everything in it has been copied.
pub(super) struct Checkpointer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    pub(super) fn start(path: &Path, location: &str) -> Result<Checkpointer> {
        let what = format!("opening the checkpoint connection to {location}");
        let conn = Connection::open(path).ctx(&what)?;
        conn.busy_timeout(BUSY_TIMEOUT).ctx(&what)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .ctx(&what)?;
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = Arc::clone(&stop);
        let location = location.to_string();
        let thread = std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || Self::run(conn, &flag, &location))
            .map_err(|e| StoreError::backend(what, e))?;
        Ok(Checkpointer {
            stop,
            thread: Some(thread),
        })
    }

    fn run(conn: Connection, stop: &(Mutex<bool>, Condvar), location: &str) {
        let (lock, cv) = stop;
        let mut stopped = lock.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            stopped = cv
                .wait_timeout(stopped, CHECKPOINT_INTERVAL)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            if *stopped {
                return;
            }
            // A failure is left to the next round and, failing that, to the writer's own
            // automatic checkpoint.
            let r = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
            if let Err(e) = r {
                tracing::debug!(%location, error = %e, "background checkpoint failed");
            }
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        *self.stop.0.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.stop.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
