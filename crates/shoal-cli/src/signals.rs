//! Ctrl-C and SIGTERM (ctrlc with its `termination` feature; the one signal mechanism of the
//! process). The first signal asks for a clean stop: take no more work, hand in-flight jobs back,
//! let the store commit, exit. The second stops at once: it kills every child process group still
//! running and exits with 130; everything already committed stays committed.

use std::sync::atomic::{AtomicU32, Ordering};

use shoal_actors::shutdown::{self, Signal};

static PRESSES: AtomicU32 = AtomicU32::new(0);

/// Installs the handler and returns the signal the commands watch.
pub fn install() -> anyhow::Result<Signal> {
    let (trigger, signal) = shutdown::channel();
    ctrlc::set_handler(move || match PRESSES.fetch_add(1, Ordering::SeqCst) {
        0 => {
            eprintln!(
                "\nshoal: stopping: in-flight jobs are handed back (press Ctrl-C again to stop at once)"
            );
            // Nothing waits for a database that does not answer any more: what is held goes
            // back to its queue, and the next process finds it there.
            shoal_store::patient::stop_waiting();
            trigger.trigger();
        }
        _ => {
            shoal_backend::process::kill_all();
            eprintln!("\nshoal: stopped at once; committed work is kept");
            std::process::exit(130);
        }
    })?;
    Ok(signal)
}
