//! The steps ("fin steps" in MIOpen's vocabulary) that jobs go through, as one enum: queue names,
//! messages, job rows and worker flags all take a [`Step`], and its name is spelled once, here.
//!
//! On the wire and in the store a step is its name (`exec_build`), so typing it changed no
//! byte of either; a name this build does not know is refused where it is read (a message that
//! names one does not decode, and is dead-lettered with the reason). The exec backend's steps
//! were `command_build` and `command_run` before wire version 5 and store schema 12, whose
//! migration renames them in the store; a message of an older wire version does not decode.

use crate::names::named_enum;

named_enum! {
    /// One step of a job: its compile step or its eval step, per backend.
    pub enum Step("step") {
        /// The exec backend's compile step: run the spec's build command.
        ExecBuild => "exec_build",
        /// The exec backend's eval step: run the spec's run command (or its library runner).
        ExecRun => "exec_run",
        /// MIOpen: compile a solver's kernels for a config, through fin.
        MiopenPerfCompile => "miopen_perf_compile",
        /// MIOpen: tune (time) a solver's perf configs for a config, through fin.
        MiopenPerfEval => "miopen_perf_eval",
        /// MIOpen: compile the solution Find would run, for any applicable solver.
        MiopenFindCompile => "miopen_find_compile",
        /// MIOpen: time that solution, as Find does.
        MiopenFindEval => "miopen_find_eval",
        /// The no-op backend of benchmarks: builds and evaluations that do nothing.
        NoopBuild => "noop_build",
        NoopRun => "noop_run",
    }
}

impl Step {
    /// Whether this is a compile step (served by compile pools) rather than an eval step.
    pub fn is_compile(self) -> bool {
        matches!(
            self,
            Step::ExecBuild | Step::MiopenPerfCompile | Step::MiopenFindCompile | Step::NoopBuild
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_reads_back_from_its_name_and_nothing_else_does() {
        for &step in Step::ALL {
            assert_eq!(step.as_str().parse::<Step>(), Ok(step));
            assert_eq!(step.to_string(), step.as_str());
        }
        let e = "exec_bulid".parse::<Step>().unwrap_err().to_string();
        assert!(e.contains("exec_bulid") && e.contains("exec_build"), "{e}");
        assert_eq!(Step::ALL.iter().filter(|s| s.is_compile()).count(), 4);
    }
}
