//! The sections of a tuning spec after checking: which backend it names, the build and run
//! steps, where timings run, what a measurement reports and in which unit.

use std::time::Duration;

use regex::Regex;
use toml::Spanned;

use super::error::{Ctx, SpecError};
use super::Template;

/// The build step: an argv template and its timeout.
#[derive(Clone, Debug)]
pub struct BuildSpec {
    /// The argv as written, placeholders unsubstituted.
    pub argv: Vec<String>,
    pub timeout: Duration,
    pub(super) templates: Vec<Template>,
}

/// Where a spec's candidates are timed: `shoal tune` picks the device from this.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceClass {
    Cpu,
    Gpu,
}

impl DeviceClass {
    pub fn parse(s: &str) -> Option<DeviceClass> {
        match s {
            "cpu" => Some(DeviceClass::Cpu),
            "gpu" => Some(DeviceClass::Gpu),
            _ => None,
        }
    }
}

/// How a candidate is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunMode {
    /// A child process per run: the artifact is an executable started by the run command.
    Process,
    /// The artifact is a shared object with the entry points of `include/shoal_kernel.h`,
    /// loaded by the device's long-lived runner ([`crate::library`]).
    Library,
}

impl RunMode {
    pub fn parse(s: &str) -> Option<RunMode> {
        match s {
            "process" => Some(RunMode::Process),
            "library" => Some(RunMode::Library),
            _ => None,
        }
    }
}

/// The run step: an argv template, its timeout and the run counts.
#[derive(Clone, Debug)]
pub struct RunSpec {
    pub mode: RunMode,
    /// The argv as written, placeholders unsubstituted (empty in library mode).
    pub argv: Vec<String>,
    /// Process mode: the limit of each single run. Library mode: the limit of one candidate on
    /// one problem (loading, warm-up and timed runs together).
    pub timeout: Duration,
    pub warmup: u32,
    /// Timed runs; with `adaptive`, the most a candidate gets.
    pub repeat: u32,
    /// `repeat = "adaptive"`: runs decided one by one against the shape's best so far.
    pub adaptive: Option<shoal_model::repeats::AdaptiveRepeat>,
    pub statistic: Statistic,
    pub(super) templates: Vec<Template>,
}

/// How to read a run's output.
#[derive(Clone, Debug)]
pub struct OutputSpec {
    /// A regex with one capture group holding the time; `None`: use the wall time.
    pub time: Option<Regex>,
    pub time_unit: TimeUnit,
    /// When given, it must match stdout or the run is a wrong answer.
    pub pass: Option<Regex>,
    /// When it matches stdout, the run is a wrong answer.
    pub fail: Option<Regex>,
}

/// The statistic reported over the timed runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Statistic {
    Median,
    Min,
    Mean,
}

impl Statistic {
    pub fn parse(s: &str) -> Option<Statistic> {
        match s {
            "median" => Some(Statistic::Median),
            "min" => Some(Statistic::Min),
            "mean" => Some(Statistic::Mean),
            _ => None,
        }
    }

    /// The statistic over non-empty samples (`NaN` for none).
    pub fn apply(self, samples: &[f64]) -> f64 {
        if samples.is_empty() {
            return f64::NAN;
        }
        match self {
            Statistic::Min => samples.iter().copied().fold(f64::INFINITY, f64::min),
            Statistic::Mean => samples.iter().sum::<f64>() / samples.len() as f64,
            Statistic::Median => shoal_model::repeats::median(samples),
        }
    }
}

/// The unit of the time printed by a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeUnit {
    S,
    Ms,
    Us,
    Ns,
}

impl TimeUnit {
    pub fn parse(s: &str) -> Option<TimeUnit> {
        match s {
            "s" => Some(TimeUnit::S),
            "ms" => Some(TimeUnit::Ms),
            "us" => Some(TimeUnit::Us),
            "ns" => Some(TimeUnit::Ns),
            _ => None,
        }
    }

    /// Converts a value in this unit to microseconds.
    pub fn to_us(self, value: f64) -> f64 {
        match self {
            TimeUnit::S => value * 1e6,
            TimeUnit::Ms => value * 1e3,
            TimeUnit::Us => value,
            TimeUnit::Ns => value / 1e3,
        }
    }
}

/// What a spec's `backend` key names: candidates built and run by execing the spec's commands
/// (the exec backend, the default), or answers replayed from a recorded space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SpecBackend {
    Exec,
    Replay,
}

impl SpecBackend {
    /// The names the key takes, in the order an error lists them.
    pub(super) const NAMES: [(&'static str, SpecBackend); 2] =
        [("exec", SpecBackend::Exec), ("replay", SpecBackend::Replay)];

    /// Names the key took before, each with the name that replaced it: still read, with a
    /// warning, so that a spec written for an older release keeps loading.
    pub(super) const OLD_NAMES: [(&'static str, &'static str); 1] = [("command", "exec")];

    fn named(name: &str) -> Option<SpecBackend> {
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, backend)| *backend)
    }

    /// The backend a spec's `backend` key names, the exec backend where there is no key. An old
    /// name is read as the name that replaced it, and adds a warning that says so; a name that
    /// is neither is an error listing the names.
    pub(super) fn from_key(
        ctx: Ctx,
        key: Option<&Spanned<String>>,
        warnings: &mut Vec<String>,
    ) -> Result<SpecBackend, SpecError> {
        let Some(key) = key else {
            return Ok(SpecBackend::Exec);
        };
        let name = key.get_ref().as_str();
        let old = Self::OLD_NAMES.iter().find(|(old, _)| *old == name);
        if let Some((old, new)) = old {
            warnings.push(
                ctx.at(
                    key.span(),
                    "backend",
                    format!("`{old}` is the old name of `{new}`: write `backend = \"{new}\"`"),
                )
                .to_string(),
            );
        }
        Self::named(old.map_or(name, |(_, new)| new)).ok_or_else(|| {
            ctx.at(
                key.span(),
                "backend",
                format!(
                    "`{name}` is not one of {}",
                    Self::NAMES.map(|(n, _)| n).join(", ")
                ),
            )
        })
    }
}
