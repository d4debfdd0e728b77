//! The developers' bench, `shoal-bench` (a test of that package): it lists the commands that
//! the release `shoal` does not carry (dispatch, fleet, search, search-summary, hostile) with
//! their flags, `dispatch` prints its one line of figures in the format that
//! scripts/bench-dispatch and BENCHMARKS.md read, and `search-summary` gives from `search`'s raw
//! ratios the same figures `search` printed (one implementation of the statistics).

use std::process::{Command, Output};

fn bench(dir: &std::path::Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shoal-bench"));
    cmd.current_dir(dir).env("RUST_LOG", "warn");
    cmd
}

fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_bench_lists_its_commands_with_their_flags() {
    let dir = tempfile::tempdir().unwrap();
    let help = stdout(&run_ok(bench(dir.path()).arg("--help")));
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        commands,
        [
            "dispatch",
            "fleet",
            "search",
            "search-warm",
            "search-overhead",
            "search-summary",
            "hostile",
            "help"
        ],
        "{help}"
    );
    for (command, flags) in [
        (
            "dispatch",
            &["--mode", "--jobs", "--builds", "--eval-batch", "--preload"][..],
        ),
        (
            "fleet",
            &[
                "--mode",
                "--devices",
                "--hosts",
                "--eval-ms",
                "--space",
                "--session-times",
                "--db",
                "--netns",
            ][..],
        ),
        (
            "search",
            &[
                "--space",
                "--budget",
                "--reps",
                "--batch",
                "--async",
                "--in-flight",
                "--strategy",
                "--ratios",
            ][..],
        ),
        (
            "search-warm",
            &[
                "--space",
                "--prior",
                "--budget",
                "--reps",
                "--batch",
                "--inverted",
            ][..],
        ),
        (
            "search-overhead",
            &["--candidates", "--budget", "--seed", "--slots", "--from"][..],
        ),
        ("search-summary", &["[FILES]..."][..]),
        (
            "hostile",
            &[
                "--marker",
                "--export-to",
                "--signed",
                "--garbage",
                "--insider",
            ][..],
        ),
    ] {
        let help = stdout(&run_ok(bench(dir.path()).args([command, "--help"])));
        for flag in flags {
            assert!(help.contains(flag), "`{command}` lacks {flag}:\n{help}");
        }
    }
}

/// A small embedded run (every actor in one process, SQLite): its last line has the words, in
/// the order, that the scripts and BENCHMARKS.md read.
#[test]
fn an_embedded_dispatch_prints_its_line_of_figures() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_ok(bench(dir.path()).args([
        "dispatch", "--mode", "embedded", "--jobs", "300", "--builds", "10",
    ]));
    let text = stdout(&out);
    let line = text.lines().last().unwrap_or_default();
    let keys: Vec<&str> = line
        .split_whitespace()
        .map(|w| w.split('=').next().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "dispatch",
            "mode",
            "jobs",
            "secs",
            "jobs_per_s",
            "preload",
            "peak_rss_mb",
            "db_bytes_per_job"
        ],
        "{text}"
    );
    assert!(
        line.starts_with("dispatch mode=embedded jobs=300 secs="),
        "{line}"
    );
    assert!(line.contains(" preload=0 "), "{line}");
}

/// `search` on two recorded spaces prints its raw ratios, its cells, best and pooled lines with
/// intervals; `search-summary` over the raw lines alone prints the same lines again.
#[test]
fn the_summary_of_searchs_ratios_repeats_its_figures() {
    let dir = tempfile::tempdir().unwrap();
    let spaces = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/spaces");
    let out = stdout(&run_ok(bench(dir.path()).args([
        "search",
        "--space",
        spaces.join("cuda_gemm_wide-1.T4.json.gz").to_str().unwrap(),
        "--space",
        spaces.join("cuda_gemm_wide-2.T4.json.gz").to_str().unwrap(),
        "--budget",
        "10",
        "--reps",
        "20",
        "--strategy",
        "random",
        "--strategy",
        "genetic",
        "--ratios",
    ])));
    let of = |text: &str, head: &str| -> Vec<String> {
        let mut lines: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with(head))
            .map(String::from)
            .collect();
        lines.sort();
        lines
    };
    assert_eq!(of(&out, "search-ratios ").len(), 4, "{out}");
    let best = of(&out, "search space=");
    assert_eq!(best.len(), 2, "{out}");
    assert!(
        best[0].starts_with("search space=cuda_gemm_wide-1.T4.json.gz budget=10 shoal="),
        "{out}"
    );
    assert!(best[0].contains(" shoal_ci="), "{out}");
    assert_eq!(
        of(&out, "pooled-run budget=10 spaces=2 runs=40 side=shoal ").len(),
        2,
        "{out}"
    );
    // In the order printed: on a tie, the best is the first strategy.
    let raw: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("search-ratios "))
        .collect();
    std::fs::write(dir.path().join("ratios"), raw.join("\n")).unwrap();
    let summary = stdout(&run_ok(
        bench(dir.path()).args(["search-summary", "ratios"]),
    ));
    for head in [
        "search-run ",
        "search space=",
        "pooled-over ",
        "pooled-run ",
        "pooled ",
    ] {
        assert_eq!(of(&summary, head), of(&out, head), "{head}: {summary}");
    }
}

/// A warm start from the recording itself (a perfect prior) finds the optimum in every run,
/// and the line has the words, in the order, that scripts/bench-search prints last.
#[test]
fn a_warm_search_from_a_perfect_prior_finds_the_optimum() {
    let dir = tempfile::tempdir().unwrap();
    // 10 × 10 configurations, time 1 + (A-7)² + (B-3)² ms: the optimum is A=7, B=3.
    let results: Vec<String> = (0..10)
        .flat_map(|a| (0..10).map(move |b| (a, b)))
        .map(|(a, b)| {
            let t = 1 + (a - 7) * (a - 7) + (b - 3) * (b - 3);
            format!(
                r#"{{"configuration":{{"A":{a},"B":{b}}},"invalidity":"correct","times":{{"runtimes":[{t}.0]}},"measurements":[{{"name":"time","value":{t}.0,"unit":"ms"}}],"objectives":["time"]}}"#
            )
        })
        .collect();
    std::fs::write(
        dir.path().join("space.json"),
        format!(
            r#"{{"schema_version":"1.0.0","metadata":{{"timeunit":"milliseconds"}},"results":[{}]}}"#,
            results.join(",")
        ),
    )
    .unwrap();
    let out = run_ok(bench(dir.path()).args([
        "search-warm",
        "--space",
        "space.json",
        "--prior",
        "space.json",
        "--budget",
        "6",
        "--reps",
        "20",
    ]));
    let text = stdout(&out);
    let line = text.lines().last().unwrap_or_default();
    assert!(
        line.starts_with("warm space=space.json budget=6 prior=space.json cold="),
        "{text}"
    );
    assert!(line.contains(" warm=1.0000:1.00 "), "{text}");
}

/// The overhead bench on a small synthetic space prints its line, every proposal counted.
#[test]
fn the_overhead_bench_counts_every_proposal() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_ok(bench(dir.path()).args([
        "search-overhead",
        "--candidates",
        "1000",
        "--budget",
        "50",
    ]));
    let text = stdout(&out);
    assert!(
        text.contains("overhead candidates=1000 budget=50 proposals=50 per_proposal_ms="),
        "{text}"
    );
}
