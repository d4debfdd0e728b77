//! How far a session is and when it will be done: the rate over the recent past and the ETA it
//! implies, as `shoal status` and the dashboard show them. One definition, so the two agree.

use serde::Serialize;

/// The window the rate is measured over: long enough to smooth batches, short enough to follow
/// a fleet that grew or shrank.
pub const RATE_WINDOW_MS: i64 = 5 * 60 * 1000;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Progress {
    /// Jobs in a final state (evaluated, errored, skipped).
    pub done: u64,
    pub total: u64,
    /// Jobs finished per second over the window; `None` with fewer than two in it.
    pub per_s: Option<f64>,
    /// Seconds until every job is final at that rate.
    pub eta_s: Option<f64>,
}

impl Progress {
    /// `finish_times` are the finish times (ms) of the jobs that ended within
    /// [`RATE_WINDOW_MS`] before `now_ms`, oldest first.
    pub fn new(done: u64, total: u64, finish_times: &[i64], now_ms: i64) -> Progress {
        let recent: Vec<i64> = finish_times
            .iter()
            .copied()
            .filter(|t| now_ms - t <= RATE_WINDOW_MS)
            .collect();
        let per_s = match recent.first() {
            Some(first) if recent.len() >= 2 => {
                let span_s = ((now_ms - first) as f64 / 1000.0).max(1.0);
                Some(recent.len() as f64 / span_s)
            }
            _ => None,
        };
        let remaining = total.saturating_sub(done);
        let eta_s = match per_s {
            _ if remaining == 0 => Some(0.0),
            Some(r) if r > 0.0 => Some(remaining as f64 / r),
            _ => None,
        };
        Progress {
            done,
            total,
            per_s,
            eta_s,
        }
    }

    /// Done as a percentage of the total (100 for an empty session).
    pub fn percent(&self) -> f64 {
        if self.total == 0 {
            100.0
        } else {
            100.0 * self.done as f64 / self.total as f64
        }
    }
}

/// `42s`, `3m 05s`, `2h 10m`: a duration for people.
pub fn human_duration(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match s {
        0..=99 => format!("{s}s"),
        100..=5999 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_is_measured_over_the_recent_window_and_eta_follows() {
        let now = 1_000_000;
        // 10 jobs in the last 20 s: 0.5 per second; 90 left take 180 s.
        let times: Vec<i64> = (0..10).map(|i| now - 20_000 + i * 2_000).collect();
        let p = Progress::new(10, 100, &times, now);
        assert!((p.per_s.unwrap() - 0.5).abs() < 1e-9, "{p:?}");
        assert!((p.eta_s.unwrap() - 180.0).abs() < 1e-6, "{p:?}");
        assert!((p.percent() - 10.0).abs() < 1e-9);
        // Finished long ago: no rate, no ETA (stalled or idle).
        let old: Vec<i64> = times.iter().map(|t| t - RATE_WINDOW_MS - 60_000).collect();
        let p = Progress::new(10, 100, &old, now);
        assert_eq!((p.per_s, p.eta_s), (None, None));
        // All done: nothing left to wait for.
        assert_eq!(Progress::new(5, 5, &[], now).eta_s, Some(0.0));
    }

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(human_duration(42.4), "42s");
        assert_eq!(human_duration(185.0), "3m 05s");
        assert_eq!(human_duration(7_800.0), "2h 10m");
    }
}
