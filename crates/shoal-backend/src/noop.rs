//! The no-op backend: the machinery without the work. Its builds and timings do nothing at once
//! (`scripts/bench-dispatch` measures Shoal itself that way), or, when a job asks, sleep for the
//! time it names, so that a simulated fleet (`shoal-bench fleet`) keeps its simulated devices
//! exactly as busy as real ones with those times would be:
//! - a compile parameter [`BUILD_SLEEP_MS`] makes the build sleep that long;
//! - a run parameter [`EVAL_SLEEP_US`] makes the evaluation sleep that long and report it as the
//!   measured time, with when it started (`eval_started_ms`) and how long it held the device
//!   (`eval_wall_us`), as the exec backend reports them.
//!
//! Sleeps are bounded by [`MAX_SLEEP`], inside the backend's time limits.

use std::time::{Duration, Instant};

use shoal_model::{Measurement, Outcome, Params};

/// Compile parameter: milliseconds the build sleeps.
pub const BUILD_SLEEP_MS: &str = "build_sleep_ms";
/// Run parameter: microseconds the evaluation sleeps.
pub const EVAL_SLEEP_US: &str = "sleep_us";
/// The longest either sleeps, whatever a parameter says.
pub const MAX_SLEEP: Duration = Duration::from_secs(5);

/// How long a parameter says to sleep, bounded; `None` without the parameter.
fn sleep_of(params: &Params, name: &str, unit: fn(u64) -> Duration) -> Option<Duration> {
    let n = params.get(name)?.parse::<u64>().ok()?;
    Some(unit(n).min(MAX_SLEEP))
}

/// Sleeps for `d` within about 0.1 ms: tokio's timer rounds up to the next millisecond, which
/// would make a 2 ms evaluation take 3; a thread's sleep does not.
async fn precise_sleep(d: Duration) {
    // A sleeping thread cannot panic: there is no error to handle.
    let _ = tokio::task::spawn_blocking(move || std::thread::sleep(d)).await;
}

/// Builds nothing; sleeps first if the compile parameters say so.
pub async fn build(compile: &Params) -> crate::exec::Artifact {
    if let Some(d) = sleep_of(compile, BUILD_SLEEP_MS, Duration::from_millis) {
        tokio::time::sleep(d).await;
    }
    crate::exec::pack(b"noop")
}

/// Measures 1 µs at once, or sleeps for the run parameters' time and measures that.
pub async fn evaluate(run: &Params) -> Outcome {
    let Some(d) = sleep_of(run, EVAL_SLEEP_US, Duration::from_micros) else {
        return Outcome::Measured(Measurement {
            time_us: 1.0,
            samples_us: vec![1.0],
            workspace: 0,
            details: Params::new(),
        });
    };
    let started_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let clock = Instant::now();
    precise_sleep(d).await;
    let wall_us = (clock.elapsed().as_secs_f64() * 1e6).max(1.0);
    let mut details = Params::new();
    details.push("eval_started_ms", started_ms.to_string());
    details.push("eval_wall_us", format!("{wall_us:.0}"));
    Outcome::Measured(Measurement {
        time_us: wall_us,
        samples_us: vec![wall_us],
        workspace: 0,
        details,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(name: &str, value: &str) -> Params {
        let mut p = Params::new();
        p.push(name, value);
        p
    }

    #[tokio::test]
    async fn without_a_sleep_it_measures_one_microsecond() {
        let Outcome::Measured(m) = evaluate(&Params::new()).await else {
            panic!("measured")
        };
        assert_eq!(m.time_us, 1.0);
        assert!(m.details.is_empty());
    }

    #[tokio::test]
    async fn a_sleep_is_measured_and_dated() {
        let t = Instant::now();
        let Outcome::Measured(m) = evaluate(&params(EVAL_SLEEP_US, "20000")).await else {
            panic!("measured")
        };
        assert!(t.elapsed() >= Duration::from_millis(20));
        assert!(m.time_us >= 20_000.0, "{}", m.time_us);
        assert!(m.details.get_i64("eval_started_ms").unwrap() > 0);
        assert!(m.details.get_i64("eval_wall_us").unwrap() >= 20_000);
    }

    #[test]
    fn sleeps_are_bounded_and_malformed_ones_ignored() {
        let p = params(EVAL_SLEEP_US, "999999999999");
        assert_eq!(
            sleep_of(&p, EVAL_SLEEP_US, Duration::from_micros),
            Some(MAX_SLEEP)
        );
        let p = params(EVAL_SLEEP_US, "-3");
        assert_eq!(sleep_of(&p, EVAL_SLEEP_US, Duration::from_micros), None);
    }
}
