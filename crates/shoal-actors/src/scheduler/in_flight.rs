//! The Scheduler's count of a session's jobs in flight, per phase, kept as it applies changes.

use shoal_model::Transition;

/// Jobs of a session in the compile phase (queued or compiling) and in the eval phase.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InFlight {
    pub compile: i64,
    pub eval: i64,
}

impl InFlight {
    /// The phase a state belongs to: 0 compile, 1 eval, none otherwise.
    fn phase(state: shoal_model::JobState) -> Option<usize> {
        use shoal_model::JobState::*;
        match state {
            CompileQueued | Compiling => Some(0),
            EvalQueued | Evaluating => Some(1),
            _ => None,
        }
    }

    fn slot(&mut self, phase: usize) -> &mut i64 {
        if phase == 0 {
            &mut self.compile
        } else {
            &mut self.eval
        }
    }

    /// Accounts for the changes that applied.
    pub fn account<'a>(&mut self, applied: impl IntoIterator<Item = (&'a Transition, bool)>) {
        for (t, ok) in applied {
            if !ok {
                continue;
            }
            let (from, to) = (Self::phase(t.from), Self::phase(t.to));
            if from != to {
                if let Some(p) = from {
                    *self.slot(p) -= 1;
                }
                if let Some(p) = to {
                    *self.slot(p) += 1;
                }
            }
        }
    }
}
