//! The best time of each shape this process has measured, for adaptive repetitions
//! ([`shoal_model::repeats`]): a candidate's runs are weighed against it.
//!
//! Kept per process (one board per session's spec, shared by that process's evaluators) rather
//! than sent with each request, so the wire format does not change: in the embedded mode it sees
//! every measurement; in a cluster each evaluating process sees its own, which only means fewer
//! candidates stop early (a best that is higher than the fleet's stops fewer), never a wrong
//! winner. A restarted process starts with an empty board, likewise.

use std::collections::HashMap;
use std::sync::Mutex;

/// Shape key → the lowest time (µs) measured on it so far.
#[derive(Debug, Default)]
pub struct Leaders {
    best: Mutex<HashMap<String, f64>>,
}

impl Leaders {
    /// The best time measured on `shape` so far.
    pub fn best(&self, shape: &str) -> Option<f64> {
        self.best.lock().ok()?.get(shape).copied()
    }

    /// Records a candidate's time on `shape`.
    pub fn offer(&self, shape: &str, time_us: f64) {
        if !time_us.is_finite() || time_us <= 0.0 {
            return;
        }
        if let Ok(mut best) = self.best.lock() {
            let b = best.entry(shape.to_string()).or_insert(time_us);
            *b = b.min(time_us);
        }
    }
}
