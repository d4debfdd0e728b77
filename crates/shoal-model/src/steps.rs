//! The steps ("fin steps" in MIOpen's vocabulary) that jobs go through, as one enum: queue names,
//! messages, job rows and worker flags all take a [`Step`], and its name is spelled once, here.
//!
//! On the wire and in the store a step is its name (`command_build`), so typing it changed no
//! byte of either; a name this build does not know is refused where it is read (a message that
//! names one does not decode, and is dead-lettered with the reason).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One step of a job: its compile step or its eval step, per backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Step {
    /// The command backend's compile step: run the spec's build command.
    CommandBuild,
    /// The command backend's eval step: run the spec's run command (or its library runner).
    CommandRun,
    /// MIOpen: compile a solver's kernels for a config, through fin.
    MiopenPerfCompile,
    /// MIOpen: tune (time) a solver's perf configs for a config, through fin.
    MiopenPerfEval,
    /// MIOpen's find steps (parsed; not yet loaded as jobs).
    MiopenFindCompile,
    MiopenFindEval,
    /// The no-op backend of benchmarks: builds and evaluations that do nothing.
    NoopBuild,
    NoopRun,
}

impl Step {
    pub const ALL: [Step; 8] = [
        Step::CommandBuild,
        Step::CommandRun,
        Step::MiopenPerfCompile,
        Step::MiopenPerfEval,
        Step::MiopenFindCompile,
        Step::MiopenFindEval,
        Step::NoopBuild,
        Step::NoopRun,
    ];

    /// The step's name, in queue names, messages, job rows and MIOpen's fin input.
    pub const fn as_str(self) -> &'static str {
        match self {
            Step::CommandBuild => "command_build",
            Step::CommandRun => "command_run",
            Step::MiopenPerfCompile => "miopen_perf_compile",
            Step::MiopenPerfEval => "miopen_perf_eval",
            Step::MiopenFindCompile => "miopen_find_compile",
            Step::MiopenFindEval => "miopen_find_eval",
            Step::NoopBuild => "noop_build",
            Step::NoopRun => "noop_run",
        }
    }

    /// Whether this is a compile step (served by compile pools) rather than an eval step.
    pub fn is_compile(self) -> bool {
        matches!(
            self,
            Step::CommandBuild
                | Step::MiopenPerfCompile
                | Step::MiopenFindCompile
                | Step::NoopBuild
        )
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A step name this build does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown step `{0}` (known: {known})", known = known_steps())]
pub struct UnknownStep(pub String);

fn known_steps() -> String {
    Step::ALL.map(Step::as_str).join(", ")
}

impl FromStr for Step {
    type Err = UnknownStep;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Step::ALL
            .into_iter()
            .find(|step| step.as_str() == s)
            .ok_or_else(|| UnknownStep(s.to_string()))
    }
}

impl TryFrom<String> for Step {
    type Error = UnknownStep;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<Step> for String {
    fn from(step: Step) -> String {
        step.as_str().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_reads_back_from_its_name_and_nothing_else_does() {
        for step in Step::ALL {
            assert_eq!(step.as_str().parse::<Step>(), Ok(step));
            assert_eq!(step.to_string(), step.as_str());
        }
        let e = "command_bulid".parse::<Step>().unwrap_err().to_string();
        assert!(
            e.contains("command_bulid") && e.contains("command_build"),
            "{e}"
        );
        assert_eq!(Step::ALL.iter().filter(|s| s.is_compile()).count(), 4);
    }
}
