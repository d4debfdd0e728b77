//! The developers' bench, `shoal-bench` (a test of that package): it lists the commands that
//! the release `shoal` does not carry (dispatch, fleet, search, hostile) with their flags, and
//! `dispatch` prints its one line of figures in the format that scripts/bench-dispatch and
//! BENCHMARKS.md read.

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
        ["dispatch", "fleet", "search", "hostile", "help"],
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
            ][..],
        ),
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
