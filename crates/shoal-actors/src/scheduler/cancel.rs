//! Cancelled sessions (`shoal session cancel`, the `CancelSession` command, which only marks
//! the session in the store): on every sessions refresh the cluster Scheduler dispatches none
//! of a cancelled session's work, and moves what is not under way — jobs `new`, `held`,
//! `compiled`, or waiting in a queue — to `skipped`. A worker that takes a queued request later
//! finds its job moved on (its replies are refused as stale). Builds and timings under way
//! finish and are applied as usual; a job handed back after the cancel lands in `new` or
//! `compiled` again and is skipped on the next refresh, so a cancelled session's jobs all end
//! within a lease of the last work under way.

use shoal_model::{JobState, SessionId, Transition};
use shoal_store::Batch;

use super::Inner;
use crate::ActorError;

/// Jobs moved per store call.
const CHUNK: u32 = 1000;

impl Inner {
    /// Skips the work of a cancelled `session` that is not under way; how many jobs it skipped.
    pub(super) async fn skip_cancelled(&mut self, session: SessionId) -> Result<u64, ActorError> {
        let mut skipped = 0;
        for state in [
            JobState::New,
            JobState::Held,
            JobState::Compiled,
            JobState::CompileQueued,
            JobState::EvalQueued,
        ] {
            loop {
                let jobs = self.store.jobs_in_state(session, state, CHUNK).await?;
                if jobs.is_empty() {
                    break;
                }
                let changes = jobs
                    .iter()
                    .map(|j| {
                        Transition::new(j.id, state, j.attempt, JobState::Skipped)
                            .expect("work not under way may be skipped")
                            .into()
                    })
                    .collect();
                let batch = Batch {
                    changes,
                    builds: vec![],
                };
                let sessions = vec![session; batch.changes.len()];
                let applied = self.apply_counted(&batch, &sessions).await?;
                let moved = applied.iter().filter(|a| **a).count() as u64;
                skipped += moved;
                // Another writer moved them first (a reply applied meanwhile): look again next
                // refresh rather than spin.
                if moved == 0 || jobs.len() < CHUNK as usize {
                    break;
                }
            }
        }
        if skipped > 0 {
            tracing::info!(%session, skipped, "cancelled session: work not under way skipped");
        }
        Ok(skipped)
    }
}
