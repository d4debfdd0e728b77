//! Failed candidates grouped so that a person can act on them: by kind and by the error the
//! tool itself printed, each group with the candidates it hit and the first lines of that
//! output. `shoal status`, `shoal failures` and the dashboard all show these groups.
//!
//! Why group by error text and not only by kind: a spec with one broken tile size and one
//! missing header has two problems, both `build_failed`. Why not by the whole message: the
//! compiler names the parameters (`-DBM=128`, `tile 128 > 64`), so one mistake reads a little
//! differently for every candidate. The group's signature is the first line of the tool's output
//! that says "error" (else its first line), with every run of digits replaced by `N`.

use std::collections::HashMap;

use serde::Serialize;
use shoal_model::{FinalResult, Params};

use crate::failure_of;

/// How many lines of the tool's own output a group shows.
pub const OUTPUT_LINES: usize = 8;

/// One failed candidate: its problem and its parameters.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FailedCandidate {
    pub job: i64,
    pub shape: String,
    pub params: String,
}

/// Failed candidates that share a kind and an error.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FailureGroup {
    /// The failure kind (`build_failed`, `crashed`, `timed_out`, …).
    pub kind: String,
    /// The line the group is known by: the tool's error line of the first candidate, as printed.
    pub error: String,
    /// What Shoal said of the first candidate (`build exited with code 1; stderr:`).
    pub headline: String,
    /// The first [`OUTPUT_LINES`] non-empty lines of the tool's own output, first candidate.
    pub output: Vec<String>,
    /// Every candidate of the group, in job order.
    pub candidates: Vec<FailedCandidate>,
}

impl FailureGroup {
    pub fn count(&self) -> usize {
        self.candidates.len()
    }
}

/// A session's failed jobs ([`failure_of`]), grouped by kind and error, largest group first
/// (ties in order of first appearance).
pub fn failure_groups(results: &[FinalResult]) -> Vec<FailureGroup> {
    let mut groups: Vec<FailureGroup> = Vec::new();
    let mut index: HashMap<(String, String), usize> = HashMap::new();
    for r in results {
        let Some((kind, message)) = failure_of(r) else {
            continue;
        };
        let message = message.unwrap_or_default();
        let (headline, output) = split_message(&message);
        let error = error_line(&headline, &output);
        let candidate = FailedCandidate {
            job: r.job.0,
            shape: r.config_params.to_string(),
            params: candidate_params(&r.compile_params, &r.run_params),
        };
        let key = (kind.clone(), signature(&error));
        match index.get(&key) {
            Some(&i) => groups[i].candidates.push(candidate),
            None => {
                index.insert(key, groups.len());
                groups.push(FailureGroup {
                    kind,
                    error,
                    headline,
                    output: output.into_iter().take(OUTPUT_LINES).collect(),
                    candidates: vec![candidate],
                });
            }
        }
    }
    // Stable: equal counts keep their order of first appearance.
    groups.sort_by_key(|g| std::cmp::Reverse(g.count()));
    groups
}

/// The parameters of a candidate as one `name=value,…` list (compile, then run).
fn candidate_params(compile: &Params, run: &Params) -> String {
    compile.chain(run).to_string()
}

/// Shoal's own first line, and the non-empty lines of the tool's output after it.
fn split_message(message: &str) -> (String, Vec<String>) {
    let mut lines = message.lines().filter(|l| !l.trim().is_empty());
    let headline = lines.next().unwrap_or("").trim_end().to_string();
    let output = lines.map(|l| l.trim_end().to_string()).collect();
    (headline, output)
}

/// The tool's line that says what went wrong: the first that mentions an error, else the
/// first line of its output, else Shoal's own line.
fn error_line(headline: &str, output: &[String]) -> String {
    output
        .iter()
        .find(|l| l.to_ascii_lowercase().contains("error"))
        .or_else(|| output.first())
        .cloned()
        .unwrap_or_else(|| headline.to_string())
}

/// The error line with every run of digits replaced by `N`, so that one mistake hit with
/// different parameter values (or at different columns) is one group.
fn signature(error: &str) -> String {
    let mut out = String::with_capacity(error.len());
    let mut in_digits = false;
    for c in error.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('N');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    out
}

/// The groups as text for a terminal: per group its kind, size and error line, the tool's
/// first lines of output, and up to `shown` of its candidates' parameters (`None`: all of
/// them). Indented by two spaces; no trailing newline on the lines.
pub fn failure_text(groups: &[FailureGroup], shown: Option<usize>) -> Vec<String> {
    let mut out = Vec::new();
    for g in groups {
        out.push(format!("  {} × {}: {}", g.kind, g.count(), g.error));
        out.push(format!("    {}", g.headline));
        for line in &g.output {
            out.push(format!("    | {line}"));
        }
        let n = shown.unwrap_or(usize::MAX).min(g.count());
        for c in &g.candidates[..n] {
            out.push(format!(
                "    candidate {} (shape {}, job {})",
                c.params, c.shape, c.job
            ));
        }
        if n < g.count() {
            out.push(format!(
                "    … and {} more (`shoal failures` lists them all)",
                g.count() - n
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_model::{ConfigId, FailureKind, JobId, JobState, Step};

    fn failed(job: i64, bm: &str, kind: FailureKind, message: &str) -> FinalResult {
        let mut compile = Params::new();
        compile.push("BM", bm);
        let mut shape = Params::new();
        shape.push("M", "64");
        FinalResult {
            job: JobId(job),
            config: ConfigId(1),
            config_params: shape,
            solver: "s".into(),
            compile_params: compile,
            run_params: Params::new(),
            state: JobState::Errored,
            outcome: None,
            failure: Some(kind),
            last_error: Some(message.into()),
            worker: None,
            device: None,
            eval_step: Step::ExecRun,
        }
    }

    #[test]
    fn one_mistake_hit_with_different_values_is_one_group_with_every_candidate() {
        let compiler = |n: u32| {
            format!(
                "build exited with code 1; stderr:\nkernel.c: In function 'gemm':\n\
                 kernel.c:{n}:5: error: static assertion failed: \"tile {n} too big\"\n"
            )
        };
        let results = vec![
            failed(1, "64", FailureKind::BuildFailed, &compiler(12)),
            failed(
                2,
                "128",
                FailureKind::BuildFailed,
                "build exited with code 1; stderr:\nfatal error: missing.h: No such file",
            ),
            failed(3, "256", FailureKind::BuildFailed, &compiler(14)),
            failed(4, "32", FailureKind::Crashed, "killed by SIGSEGV"),
        ];
        let groups = failure_groups(&results);
        assert_eq!(groups.len(), 3);
        let g = &groups[0];
        assert_eq!((g.kind.as_str(), g.count()), ("build_failed", 2));
        assert_eq!(
            g.error,
            "kernel.c:12:5: error: static assertion failed: \"tile 12 too big\""
        );
        assert_eq!(g.headline, "build exited with code 1; stderr:");
        assert_eq!(g.output[0], "kernel.c: In function 'gemm':");
        let params: Vec<_> = g.candidates.iter().map(|c| c.params.as_str()).collect();
        assert_eq!(params, ["BM=64", "BM=256"]);
        assert_eq!(g.candidates[0].shape, "M=64");
        assert_eq!(groups[1].error, "fatal error: missing.h: No such file");
        assert_eq!(
            (groups[2].kind.as_str(), groups[2].error.as_str()),
            ("crashed", "killed by SIGSEGV"),
            "no output: Shoal's own line"
        );
    }

    #[test]
    fn the_output_shown_is_bounded_and_measured_jobs_are_not_failures() {
        let long: String = (0..40).map(|i| format!("line {i}\n")).collect();
        let mut results = vec![failed(
            1,
            "64",
            FailureKind::BuildFailed,
            &format!("build exited with code 2; stdout:\n{long}"),
        )];
        let mut ok = failed(2, "8", FailureKind::BuildFailed, "");
        ok.state = JobState::Evaluated;
        ok.failure = None;
        ok.outcome = Some(shoal_model::Outcome::Measured(shoal_model::Measurement {
            time_us: 1.0,
            samples_us: vec![1.0],
            workspace: 0,
            details: Params::new(),
        }));
        results.push(ok);
        let groups = failure_groups(&results);
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].output.len(), OUTPUT_LINES);
        assert_eq!(groups[0].error, "line 0", "no line says error: the first");
    }

    #[test]
    fn the_text_names_the_error_the_output_and_the_candidates() {
        let message = "build exited with code 1; stderr:\nkernel.c:3:1: error: expected ';'";
        let results: Vec<_> = (1..=5)
            .map(|i| failed(i, &(i * 16).to_string(), FailureKind::BuildFailed, message))
            .collect();
        let groups = failure_groups(&results);
        let text = failure_text(&groups, Some(2));
        assert_eq!(
            text,
            [
                "  build_failed × 5: kernel.c:3:1: error: expected ';'",
                "    build exited with code 1; stderr:",
                "    | kernel.c:3:1: error: expected ';'",
                "    candidate BM=16 (shape M=64, job 1)",
                "    candidate BM=32 (shape M=64, job 2)",
                "    … and 3 more (`shoal failures` lists them all)",
            ]
        );
        assert_eq!(failure_text(&groups, None).len(), 3 + 5);
    }
}
