//! `repeat = "adaptive"` in a real tuning. The candidates are a script whose times are known and
//! whose noise is a fixed pattern (±4 %, ±2 % in turn, counted per candidate in a file), so the
//! decisions are the same on every run: the clearly slower candidates stop at the minimum of 3
//! runs, the two leaders (100 and 101 µs, inside each other's noise) run to the cap, and the
//! tuned table records the winner as a tie with its runner-up.

mod common;

use std::path::Path;

use shoal_model::Outcome;

const SCRIPT: &str = r#"#!/bin/sh
# time_us = base(X) + pattern[n % 4], n counting this candidate's runs.
X=$1
n=$(cat "count.$X" 2>/dev/null || echo 0)
echo $((n + 1)) > "count.$X"
case $X in 1) base=100 ;; 2) base=101 ;; 3) base=200 ;; 4) base=300 ;; *) base=450 ;; esac
case $((n % 4)) in 0) d=4 ;; 1) d=-4 ;; 2) d=2 ;; *) d=-2 ;; esac
echo "time_us=$((base + d))"
"#;

const SPEC: &str = r#"name = "adaptive"
[[shapes]]
M = 1
[build]
command = "cp {spec_dir}/kernel.sh {out}"
[run]
command = "{artifact} {X}"
repeat = "adaptive"
max_repeat = 12
[output]
time = 'time_us=([0-9]+)'
[params.run]
X = [1, 2, 3, 4, 5]
"#;

fn write(dir: &Path) {
    std::fs::write(dir.join("kernel.sh"), SCRIPT).unwrap();
    std::fs::write(dir.join("spec.toml"), SPEC).unwrap();
}

#[test]
fn slower_candidates_stop_early_and_the_leaders_run_to_a_tie() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d);
    // The script counts its runs in a file beside it, which the sandbox (its spec's directory
    // read-only) would not let it write: this test is about the repetitions, so it runs
    // unconfined.
    common::run_ok(common::shoal(d).args([
        "--sandbox",
        "off",
        "tune",
        "spec.toml",
        "--db",
        "t.db",
        "--out",
        "out",
    ]));
    let mut runs = std::collections::BTreeMap::new();
    for r in common::final_results(&d.join("t.db")) {
        let Some(Outcome::Measured(m)) = &r.outcome else {
            panic!("{:?} was not measured: {:?}", r.run_params, r.last_error);
        };
        let x: u32 = r.run_params.get("X").unwrap().parse().unwrap();
        runs.insert(
            x,
            (
                m.samples_us.len(),
                m.details.get("adaptive").map(str::to_string),
            ),
        );
    }
    for x in 3..=5 {
        assert_eq!(runs[&x].0, 3, "X={x} is clearly slower: {runs:?}");
    }
    // Whichever of the two leaders was timed second ran on against the first, to the cap.
    let leaders = [runs[&1].0, runs[&2].0];
    assert!(leaders.contains(&12), "{runs:?}");
    assert!(runs.values().map(|r| r.0).sum::<usize>() < 5 * 12);
    let table: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("out/tuned.json")).unwrap()).unwrap();
    assert_eq!(table[0]["tie"], true, "{table}");
    let csv = std::fs::read_to_string(d.join("out/tuned.csv")).unwrap();
    assert!(
        csv.lines()
            .next()
            .unwrap()
            .ends_with(",spread_pct,tie,runner_up,runner_up_us"),
        "{csv}"
    );
    // Marked a tie, with the other leader as the runner-up.
    let row = csv.lines().nth(1).unwrap();
    assert!(
        row.contains(",true,X=1,") || row.contains(",true,X=2,"),
        "{csv}"
    );
}

#[test]
fn adaptive_repetitions_are_refused_where_they_cannot_work() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d);
    for (from, to, expect) in [
        ("repeat = \"adaptive\"", "repeat = \"often\"", "run.repeat"),
        ("repeat = \"adaptive\"", "repeat = 3", "run.max_repeat"),
        ("max_repeat = 12", "max_repeat = 1", "run.max_repeat"),
    ] {
        std::fs::write(d.join("spec.toml"), SPEC.replace(from, to)).unwrap();
        let out = common::shoal(d)
            .args(["check", "spec.toml"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(expect),
            "{to}: {stderr}"
        );
    }
}
