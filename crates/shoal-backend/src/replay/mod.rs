//! The replay backend: a recorded search space ([`t4`]) answers each candidate with its recorded
//! time, or its recorded failure, instead of building and running anything. With it a search
//! strategy, the Scheduler's batching or a whole fleet can be studied on the spaces the
//! autotuning community publishes, without the GPU they were recorded on.
//!
//! A spec names the file (`backend = "replay"`, `space = "file.json.gz"`; see
//! [`crate::spec`]): its parameters are the file's, each recorded configuration is a
//! candidate and nothing else is. How long an answer takes is the worker's choice
//! ([`ReplayTime`], `--replay-time`): at once by default, or the recorded compile and run
//! times scaled, so that the devices are as busy as they were when the space was recorded.

pub mod t4;

use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

use shoal_model::{FailureKind, Measurement, Outcome, Params};

use crate::exec::Artifact;

/// The longest one replayed step sleeps, whatever the recording and the scale say.
pub const MAX_SLEEP: Duration = Duration::from_secs(600);

/// How long a replayed answer takes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum ReplayTime {
    /// At once.
    #[default]
    Instant,
    /// The recorded compile time (for a build) or the sum of the recorded runs (for an
    /// evaluation), times this factor.
    Scaled(f64),
}

/// A `--replay-time` that is neither `instant` nor `scaled:F` with F from 0 to 1000.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplayTimeError {
    #[error("`{text}`: expected `instant` or `scaled:F` (e.g. scaled:0.1)")]
    Unknown { text: String },
    #[error("`{text}`: the factor must be a number from 0 to 1000 (e.g. scaled:0.1)")]
    BadFactor { text: String },
}

impl FromStr for ReplayTime {
    type Err = ReplayTimeError;

    /// `instant` or `scaled:F`, with F a finite factor from 0 to 1000.
    fn from_str(s: &str) -> Result<Self, ReplayTimeError> {
        if s == "instant" {
            return Ok(ReplayTime::Instant);
        }
        let text = || s.to_string();
        let factor = s
            .strip_prefix("scaled:")
            .ok_or_else(|| ReplayTimeError::Unknown { text: text() })?;
        match factor.parse::<f64>() {
            Ok(f) if f.is_finite() && (0.0..=1000.0).contains(&f) => Ok(ReplayTime::Scaled(f)),
            _ => Err(ReplayTimeError::BadFactor { text: text() }),
        }
    }
}

impl ReplayTime {
    /// How long a step recorded as taking `recorded_ms` sleeps.
    fn sleep_for(self, recorded_ms: f64) -> Duration {
        match self {
            ReplayTime::Instant => Duration::ZERO,
            ReplayTime::Scaled(f) => {
                Duration::from_secs_f64((recorded_ms * f / 1e3).clamp(0.0, MAX_SLEEP.as_secs_f64()))
            }
        }
    }
}

/// Why a recorded space cannot be served.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplaySpaceError {
    #[error("the recorded space has no configuration")]
    Empty,
    #[error("the recorded space has no correct configuration with a time")]
    NothingTimed,
    /// `results[index]` is a configuration (its [`Params::key`]) recorded before: which of its
    /// two times would be the answer?
    #[error("results[{index}]: the configuration {key} is recorded twice")]
    RecordedTwice { index: usize, key: String },
}

/// A recorded space as the replay backend serves it.
#[derive(Debug)]
pub struct ReplaySpace {
    /// The parameters' names, in the file's order.
    pub names: Vec<String>,
    /// Each parameter's distinct values, numbers in numeric order, else in text order.
    pub values: Vec<Vec<String>>,
    entries: Vec<t4::Entry>,
    /// A configuration's [`Params::key`] → its entry.
    index: HashMap<String, usize>,
    /// The longest recorded compile and the longest recorded set of runs, in milliseconds.
    longest_ms: (f64, f64),
}

impl ReplaySpace {
    /// Indexes a recorded space. A configuration recorded twice is an error (which of its two
    /// times would be the answer?), and so is a space with no correct configuration.
    pub fn new(recorded: t4::Recorded) -> Result<ReplaySpace, ReplaySpaceError> {
        let t4::Recorded { names, entries } = recorded;
        if names.is_empty() || entries.is_empty() {
            return Err(ReplaySpaceError::Empty);
        }
        if !entries.iter().any(|e| e.time_ms.is_some()) {
            return Err(ReplaySpaceError::NothingTimed);
        }
        let mut values: Vec<Vec<String>> = vec![Vec::new(); names.len()];
        let mut index = HashMap::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            for (vs, v) in values.iter_mut().zip(&e.values) {
                if !vs.contains(v) {
                    vs.push(v.clone());
                }
            }
            let key = params_of(&names, &e.values).key();
            if index.insert(key.clone(), i).is_some() {
                return Err(ReplaySpaceError::RecordedTwice { index: i, key });
            }
        }
        for vs in &mut values {
            vs.sort_by(|a, b| match (a.parse::<f64>(), b.parse::<f64>()) {
                (Ok(x), Ok(y)) => x.total_cmp(&y),
                _ => a.cmp(b),
            });
        }
        let longest = |f: fn(&t4::Entry) -> f64| entries.iter().map(f).fold(0.0, f64::max);
        let longest_ms = (
            longest(|e| e.compile_ms.unwrap_or(0.0)),
            longest(|e| e.runtimes_ms.iter().sum()),
        );
        Ok(ReplaySpace {
            names,
            values,
            entries,
            index,
            longest_ms,
        })
    }

    /// Every recorded configuration, in the file's order.
    pub fn entries(&self) -> &[t4::Entry] {
        &self.entries
    }

    /// The recorded entry of a candidate's compile parameters.
    pub fn entry(&self, compile: &Params) -> Option<&t4::Entry> {
        self.index.get(&compile.key()).map(|&i| &self.entries[i])
    }

    /// Whether these parameters are a recorded configuration.
    pub fn contains(&self, compile: &Params) -> bool {
        self.index.contains_key(&compile.key())
    }

    /// The longest a build and an evaluation may take under `time`, for leases.
    pub fn time_limits(&self, time: ReplayTime) -> (Duration, Duration) {
        let slack = Duration::from_secs(10);
        (
            time.sleep_for(self.longest_ms.0) + slack,
            time.sleep_for(self.longest_ms.1) + slack,
        )
    }
}

fn params_of(names: &[String], values: &[String]) -> Params {
    let mut p = Params::new();
    for (n, v) in names.iter().zip(values) {
        p.push(n.clone(), v.clone());
    }
    p
}

/// The failure a recorded invalidity stands for.
fn failure_of(invalidity: &str) -> FailureKind {
    match invalidity {
        "compile" => FailureKind::BuildFailed,
        "correctness" => FailureKind::WrongAnswer,
        "timeout" => FailureKind::Timeout,
        _ => FailureKind::RunFailed,
    }
}

/// "Builds" a candidate: a configuration recorded as failing to compile fails here, as it did.
pub async fn build(
    space: &ReplaySpace,
    compile: &Params,
    time: ReplayTime,
) -> Result<Artifact, (FailureKind, String)> {
    let entry = space.entry(compile).ok_or_else(|| {
        (
            FailureKind::Infrastructure,
            format!("{} is not in the recorded space", compile.key()),
        )
    })?;
    tokio::time::sleep(time.sleep_for(entry.compile_ms.unwrap_or(0.0))).await;
    if entry.invalidity == "compile" {
        return Err((
            FailureKind::BuildFailed,
            "recorded as failing to compile".into(),
        ));
    }
    Ok(crate::exec::pack(b"replay"))
}

/// Answers a candidate with its recorded runs, or its recorded failure.
pub async fn evaluate(space: &ReplaySpace, compile: &Params, time: ReplayTime) -> Outcome {
    let Some(entry) = space.entry(compile) else {
        return Outcome::failed(
            FailureKind::Infrastructure,
            format!("{} is not in the recorded space", compile.key()),
        );
    };
    tokio::time::sleep(time.sleep_for(entry.runtimes_ms.iter().sum())).await;
    let Some(time_ms) = entry.time_ms else {
        return Outcome::failed(
            failure_of(&entry.invalidity),
            format!("recorded as invalid ({})", entry.invalidity),
        );
    };
    let mut details = Params::new();
    details.push("replayed", "1");
    Outcome::Measured(Measurement {
        time_us: time_ms * 1e3,
        samples_us: entry.runtimes_ms.iter().map(|t| t * 1e3).collect(),
        workspace: 0,
        details,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space() -> ReplaySpace {
        let doc = br#"{"results": [
            {"configuration": {"a": 10, "b": 1}, "invalidity": "correct",
             "times": {"compilation": 50, "runtimes": [2.0, 2.2]},
             "measurements": [{"name": "time", "value": 2.1}]},
            {"configuration": {"a": 2, "b": 1}, "invalidity": "compile", "times": {}},
            {"configuration": {"a": 2, "b": 2}, "invalidity": "runtime", "times": {}}
        ]}"#;
        ReplaySpace::new(t4::parse(doc).unwrap()).unwrap()
    }

    fn params(a: &str, b: &str) -> Params {
        params_of(&["a".into(), "b".into()], &[a.into(), b.into()])
    }

    #[test]
    fn values_are_in_numeric_order() {
        assert_eq!(space().values, [vec!["2", "10"], vec!["1", "2"]]);
    }

    #[tokio::test]
    async fn answers_with_the_recording() {
        let s = space();
        let t = ReplayTime::Instant;
        assert!(build(&s, &params("10", "1"), t).await.is_ok());
        let Outcome::Measured(m) = evaluate(&s, &params("10", "1"), t).await else {
            panic!("a correct configuration is measured");
        };
        assert_eq!(m.time_us, 2100.0);
        assert_eq!(m.samples_us, [2000.0, 2200.0]);
        let e = build(&s, &params("2", "1"), t).await.unwrap_err();
        assert_eq!(e.0, FailureKind::BuildFailed);
        let Outcome::Failed { kind, .. } = evaluate(&s, &params("2", "2"), t).await else {
            panic!("a runtime failure fails");
        };
        assert_eq!(kind, FailureKind::RunFailed);
        assert!(!s.contains(&params("10", "2")));
        let e = build(&s, &params("10", "2"), t).await.unwrap_err();
        assert_eq!(e.0, FailureKind::Infrastructure);
    }

    #[tokio::test]
    async fn scaled_time_sleeps_the_recorded_time() {
        let s = space();
        let clock = std::time::Instant::now();
        evaluate(&s, &params("10", "1"), ReplayTime::Scaled(10.0)).await;
        assert!(clock.elapsed() >= Duration::from_millis(42), "4.2 ms × 10");
    }

    #[test]
    fn replay_time_parses() {
        assert_eq!("instant".parse(), Ok(ReplayTime::Instant));
        assert_eq!("scaled:0.5".parse(), Ok(ReplayTime::Scaled(0.5)));
        for bad in ["scaled:", "scaled:-1", "scaled:nan", "fast", "scaled:1e9"] {
            assert!(bad.parse::<ReplayTime>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_configuration_recorded_twice_is_refused() {
        let doc = br#"{"results": [
            {"configuration": {"a": 1}, "invalidity": "correct", "times": {"runtimes": [1]}},
            {"configuration": {"a": 1}, "invalidity": "correct", "times": {"runtimes": [2]}}
        ]}"#;
        let e = ReplaySpace::new(t4::parse(doc).unwrap()).unwrap_err();
        assert!(
            matches!(e, ReplaySpaceError::RecordedTwice { index: 1, .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("recorded twice"), "{e}");
    }
}
