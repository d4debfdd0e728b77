//! Faults on demand, so that tests can make "fin" misbehave the ways real fin and GPUs do.
//! Each variable holds a comma-separated list of solver names, or `*` for every solver:
//!
//! | variable | effect when a step reaches a listed solver |
//! |---|---|
//! | `SHOAL_FIN_STANDIN_CRASH_SOLVER` | eval steps: `abort()` (SIGABRT, no output file) — a GPU fault in tuned code |
//! | `SHOAL_FIN_STANDIN_HANG_SOLVER` | eval steps: sleep forever — a hung kernel |
//! | `SHOAL_FIN_STANDIN_CRASH_COMPILE_SOLVER` | compile steps: `abort()` |
//! | `SHOAL_FIN_STANDIN_HANG_COMPILE_SOLVER` | compile steps: sleep forever |
//! | `SHOAL_FIN_STANDIN_FAIL_SOLVER` | any step: report failure (`evaluated`/`*_compiled` false, a reason) |
//!
//! And: `SHOAL_FIN_STANDIN_DELAY_MS=<n>` sleeps n ms for every solver a compile or eval step
//! works on; `SHOAL_FIN_STANDIN_GARBLE_OUTPUT=1` writes half of the output file and exits 0 (as
//! when fin's output is cut short); `SHOAL_FIN_STANDIN_EXIT_CODE=<n>` exits with n after
//! writing the output.

use std::time::Duration;

/// Which kind of step reached a solver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Compile,
    Eval,
}

#[derive(Clone, Debug, Default)]
pub struct Faults {
    crash_eval: Vec<String>,
    hang_eval: Vec<String>,
    crash_compile: Vec<String>,
    hang_compile: Vec<String>,
    fail: Vec<String>,
    delay: Option<Duration>,
    pub garble_output: bool,
    pub exit_code: Option<i32>,
}

fn list(var: &str) -> Vec<String> {
    std::env::var(var)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn listed(list: &[String], solver: &str) -> bool {
    list.iter().any(|s| s == "*" || s == solver)
}

impl Faults {
    pub fn from_env() -> Faults {
        let flag = |v: &str| matches!(std::env::var(v).as_deref(), Ok("1" | "true" | "yes" | "on"));
        Faults {
            crash_eval: list("SHOAL_FIN_STANDIN_CRASH_SOLVER"),
            hang_eval: list("SHOAL_FIN_STANDIN_HANG_SOLVER"),
            crash_compile: list("SHOAL_FIN_STANDIN_CRASH_COMPILE_SOLVER"),
            hang_compile: list("SHOAL_FIN_STANDIN_HANG_COMPILE_SOLVER"),
            fail: list("SHOAL_FIN_STANDIN_FAIL_SOLVER"),
            delay: std::env::var("SHOAL_FIN_STANDIN_DELAY_MS")
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .map(Duration::from_millis),
            garble_output: flag("SHOAL_FIN_STANDIN_GARBLE_OUTPUT"),
            exit_code: std::env::var("SHOAL_FIN_STANDIN_EXIT_CODE")
                .ok()
                .and_then(|v| v.trim().parse().ok()),
        }
    }

    /// A step starts work on `solver`: crash, hang or delay as configured; `Some(reason)` when
    /// the solver should be reported as failed.
    pub fn reach(&self, phase: Phase, solver: &str) -> Option<String> {
        let (crash, hang) = match phase {
            Phase::Compile => (&self.crash_compile, &self.hang_compile),
            Phase::Eval => (&self.crash_eval, &self.hang_eval),
        };
        if listed(crash, solver) {
            eprintln!("fin (stand-in): injected crash in {solver}");
            std::process::abort();
        }
        if listed(hang, solver) {
            eprintln!("fin (stand-in): injected hang in {solver}");
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
        if let Some(d) = self.delay {
            std::thread::sleep(d);
        }
        listed(&self.fail, solver).then(|| match phase {
            Phase::Compile => {
                "No solutions: injected failure (SHOAL_FIN_STANDIN_FAIL_SOLVER)".into()
            }
            Phase::Eval => {
                "Invoker exception: injected failure (SHOAL_FIN_STANDIN_FAIL_SOLVER)".into()
            }
        })
    }
}
