//! The ETA on recorded tunings: the estimator's inputs at every tick of real runs of the README's
//! example (`tests/data/*.csv`, recorded with `RUST_LOG=shoal::progress=debug`), replayed
//! through [`estimate_eta`] on the recorded clock. From 10 % of the run's candidates done on, every
//! estimate must be within 2x of the time the run really had left, until the last few
//! seconds (where a tick's 250 ms is itself a large share of what is left).

use shoal_model::progress::{estimate_eta, Pipeline};

/// The last seconds of a run, where the estimate is not held to 2x.
const END_S: f64 = 3.0;

fn recorded(name: &str) -> Vec<Pipeline> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines = text.lines().filter(|l| !l.starts_with('#'));
    assert_eq!(
        lines.next(),
        Some("elapsed_s,total,built,built_at_start,done,done_at_start,timing_busy_s")
    );
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let n = |i: usize| f[i].parse::<u64>().unwrap();
            Pipeline {
                elapsed_s: f[0].parse().unwrap(),
                total: n(1),
                built: n(2),
                built_at_start: n(3),
                done: n(4),
                done_at_start: n(5),
                timing_busy_s: (!f[6].is_empty()).then(|| f[6].parse().unwrap()),
            }
        })
        .collect()
}

/// The share of the work of this run done: of the candidates left at its start (a resumed run
/// starts with some done).
fn progress(t: &Pipeline) -> f64 {
    let todo = t.total - t.done_at_start;
    (t.done - t.done_at_start) as f64 / todo.max(1) as f64
}

/// Every tick from 10 % done to the last [`END_S`]: (progress, estimate, truth). Panics
/// naming the first tick whose estimate is off by more than 2x, or missing.
fn check(name: &str) -> Vec<(f64, f64, f64)> {
    let ticks = recorded(name);
    let end = ticks.last().unwrap();
    assert_eq!(end.done, end.total, "{name}: the recording runs to the end");
    let mut checked = Vec::new();
    for t in &ticks {
        let progress = progress(t);
        let truth = end.elapsed_s - t.elapsed_s;
        if progress < 0.10 || truth < END_S {
            continue;
        }
        let eta = estimate_eta(t)
            .unwrap_or_else(|| panic!("{name}: no estimate at {:.1} s ({t:?})", t.elapsed_s));
        assert!(
            eta <= 2.0 * truth && eta >= truth / 2.0,
            "{name}: at {:.1} s ({:.0} % done) the estimate was {eta:.1} s, the truth {truth:.1} s",
            t.elapsed_s,
            100.0 * progress
        );
        checked.push((progress, eta, truth));
    }
    assert!(
        checked.len() >= 10,
        "{name}: {} ticks checked",
        checked.len()
    );
    checked
}

#[test]
fn the_examples_eta_holds_from_ten_percent_on_an_idle_machine() {
    check("cpu-gemm-idle.csv");
}

#[test]
fn the_examples_eta_holds_beside_another_tuning() {
    check("cpu-gemm-loaded.csv");
}

#[test]
fn the_examples_eta_holds_with_adaptive_repeats() {
    check("cpu-gemm-adaptive-idle.csv");
}

#[test]
fn a_resumed_tunings_eta_holds() {
    check("cpu-gemm-resumed.csv");
}

/// The figures the closing note of the work quotes: the estimate at the first tick past 10, 25
/// and 50 % of each recording (`cargo test -p shoal-model --test eta_recorded -- --nocapture`).
#[test]
fn print_the_estimates_at_ten_twenty_five_and_fifty_percent() {
    for name in [
        "cpu-gemm-idle.csv",
        "cpu-gemm-loaded.csv",
        "cpu-gemm-resumed.csv",
        "cpu-gemm-adaptive-idle.csv",
    ] {
        let ticks = recorded(name);
        let end = ticks.last().unwrap().elapsed_s;
        for at in [0.10, 0.25, 0.50] {
            let t = ticks.iter().find(|t| progress(t) >= at).unwrap();
            println!(
                "{name} {:>3.0} % of the run: at {:5.1} s, ETA {:5.1} s, real {:5.1} s left",
                100.0 * at,
                t.elapsed_s,
                estimate_eta(t).unwrap_or(f64::NAN),
                end - t.elapsed_s
            );
        }
    }
}
