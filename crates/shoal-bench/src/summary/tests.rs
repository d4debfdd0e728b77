//! Tests of the summariser: the raw lines read back, the quantile and bootstrap rules, the
//! stratified pooling, and the best, pooled and verdict lines.

use super::*;

fn runs(side: Side, space: &str, strategy: &str, ratios: Vec<f64>) -> Runs {
    Runs {
        side,
        space: space.into(),
        budget: "1%".into(),
        evaluations: 37,
        strategy: strategy.into(),
        in_flight: (side == Side::Shoal).then_some(4),
        prior: None,
        secs: 0.25,
        ratios,
    }
}

fn lines(cells: &[Runs]) -> Vec<String> {
    let mut out = Vec::new();
    summarise(cells, &mut out).unwrap();
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn fnv1a64_is_the_standard_hash() {
    assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
}

#[test]
fn a_raw_line_reads_back_as_it_was_written() {
    let mut r = runs(
        Side::Shoal,
        "a.T4.json.gz",
        "forest",
        vec![1.0, 1.0232, f64::INFINITY],
    );
    r.secs = 1.5;
    let line = r.ratios_line();
    assert_eq!(
        line,
        "search-ratios space=a.T4.json.gz budget=1% evaluations=37 strategy=forest in_flight=4 secs=1.500 ratios=1,1.0232,inf"
    );
    assert_eq!(Runs::parse(&line).unwrap().unwrap(), r);
    // KernelTuner's, as Python writes its floats; a prior; other lines are not ours.
    let kt = "kerneltuner-ratios space=b budget=2% evaluations=9 strategy=pso secs=0.1 ratios=1.0,1.25,inf";
    let parsed = Runs::parse(kt).unwrap().unwrap();
    assert_eq!(
        (parsed.side, parsed.in_flight, parsed.ratios),
        (Side::KernelTuner, None, vec![1.0, 1.25, f64::INFINITY])
    );
    let warm = Runs::parse(&line.replace(" secs", " prior=p.json secs"))
        .unwrap()
        .unwrap();
    assert_eq!(warm.prior.as_deref(), Some("p.json"));
    assert!(Runs::parse("search space=a budget=1% shoal=forest:1:1").is_none());
    assert!(
        Runs::parse("search-ratios space=a budget=1% evaluations=3 strategy=x ratios=1,z")
            .unwrap()
            .is_err()
    );
}

#[test]
fn figures_take_the_quantiles_as_before_with_intervals_around_them() {
    // The median of 10 runs is the 6th; p10 the 2nd, p90 the 9th.
    let ratios: Vec<f64> = (1..=10).rev().map(|i| 1.0 + f64::from(i) / 128.0).collect();
    let s = runs(Side::Shoal, "a", "forest", ratios).stats();
    assert_eq!((s.median, s.p10, s.p90), (1.046875, 1.015625, 1.0703125));
    assert_eq!(s.within, 0.2);
    assert!(
        s.median_ci.0 <= s.median && s.median <= s.median_ci.1,
        "{s:?}"
    );
    assert!(
        s.within_ci.0 <= s.within && s.within <= s.within_ci.1,
        "{s:?}"
    );
    assert!(
        s.median_ci.0 < s.median_ci.1 && s.within_ci.0 < s.within_ci.1,
        "{s:?}"
    );
    // The same runs give the same intervals: the bootstrap's seed is fixed.
    let again = runs(Side::Shoal, "a", "forest", s_ratios()).stats();
    assert_eq!(again, runs(Side::Shoal, "a", "forest", s_ratios()).stats());
    // Runs all alike have no spread.
    let flat = runs(Side::Shoal, "a", "forest", vec![1.5; 30]).stats();
    assert_eq!((flat.median_ci, flat.within_ci), ((1.5, 1.5), (0.0, 0.0)));
}

fn s_ratios() -> Vec<f64> {
    (0..100).map(|i| 1.0 + f64::from(i % 7) / 50.0).collect()
}

#[test]
fn a_pooled_bootstrap_resamples_within_each_space() {
    // 50 runs at 1.0 on one space and 50 at 2.0 on another: every stratified resample keeps
    // 50 of each, so the pooled median (the 51st of 100) and share never move.
    let cells = [
        runs(Side::Shoal, "a", "forest", vec![1.0; 50]),
        runs(Side::Shoal, "b", "forest", vec![2.0; 50]),
    ];
    let (over, pooled) = pool(&cells, "1%").unwrap();
    assert_eq!(over, ["a", "b"]);
    let s = pooled[0].stats;
    assert_eq!((s.median, s.within, pooled[0].runs), (2.0, 0.5, 100));
    assert_eq!((s.median_ci, s.within_ci), ((2.0, 2.0), (0.5, 0.5)));
    // One space: nothing pooled.
    assert!(pool(&cells[..1], "1%").is_none());
}

#[test]
fn the_summary_gives_cells_pools_bests_and_verdicts() {
    // 100 runs spread evenly over base + 0.0002 .. base + 0.0992.
    let spread = |base: f64| {
        (0..100)
            .map(|i| base + 0.0002 + f64::from(i) / 1000.0)
            .collect::<Vec<_>>()
    };
    let mut warm = runs(Side::Shoal, "a", "forest", vec![1.0; 100]);
    warm.prior = Some("p.json".into());
    let cells = [
        runs(Side::Shoal, "a", "random", spread(1.05)),
        runs(Side::Shoal, "a", "forest", spread(1.0)),
        runs(Side::KernelTuner, "a", "pso", spread(1.04)),
        runs(Side::KernelTuner, "a", "mls", spread(1.005)),
        runs(Side::Shoal, "b", "random", spread(1.05)),
        runs(Side::Shoal, "b", "forest", spread(1.0)),
        runs(Side::KernelTuner, "b", "pso", spread(1.0)),
        // Not on space a: no pooled line of its own.
        runs(Side::KernelTuner, "b", "only_b", spread(1.0)),
        warm,
    ];
    let out = lines(&cells);
    let with = |head: &str| out.iter().filter(|l| l.starts_with(head)).count();
    assert_eq!(with("search-run "), 5, "{out:#?}");
    assert_eq!(with("kerneltuner-run "), 4, "{out:#?}");
    assert_eq!(with("pooled-over budget=1% spaces=a,b "), 1, "{out:#?}");
    let pooled_runs: Vec<&String> = out
        .iter()
        .filter(|l| l.starts_with("pooled-run "))
        .collect();
    assert_eq!(pooled_runs.len(), 3, "{out:#?}");
    assert!(pooled_runs[0]
        .starts_with("pooled-run budget=1% spaces=2 runs=200 side=shoal strategy=random median="));
    let search_a = out
        .iter()
        .find(|l| l.starts_with("search space=a "))
        .unwrap();
    let words: Vec<&str> = search_a.split_whitespace().collect();
    // The warm cell (all 1.0) is not the best: only cold cells compete.
    assert_eq!(
        words[..4],
        ["search", "space=a", "budget=1%", "shoal=forest:1.0502:0.20"]
    );
    assert!(words[4].starts_with("shoal_ci=") && words[4].split(':').count() == 4);
    assert_eq!(words[5], "kerneltuner=mls:1.0552:0.15");
    assert!(words[6].starts_with("kerneltuner_ci="), "{search_a}");
    let verdict_a = out
        .iter()
        .find(|l| l.starts_with("verdict space=a "))
        .unwrap();
    assert!(
        verdict_a
            .ends_with(" median=better:within share=better:within at_least_as_good=median,share"),
        "{verdict_a}"
    );
    let verdict_b = out
        .iter()
        .find(|l| l.starts_with("verdict space=b "))
        .unwrap();
    assert!(
        verdict_b
            .ends_with(" median=level:within share=level:within at_least_as_good=median,share"),
        "{verdict_b}"
    );
    assert!(out
        .iter()
        .any(|l| l.starts_with("pooled budget=1% spaces=2 shoal=forest:")));
    assert!(out
        .iter()
        .any(|l| l.starts_with("verdict-pooled budget=1% spaces=2 median=")));
    // The pooled and final lines come after every cell's.
    let last_run = out.iter().rposition(|l| l.contains("-run space=")).unwrap();
    assert!(
        last_run
            < out
                .iter()
                .position(|l| l.starts_with("pooled-over"))
                .unwrap()
    );
}

#[test]
fn a_verdict_says_when_the_difference_is_beyond_the_intervals() {
    let far = |base: f64| {
        (0..100)
            .map(|i| base + f64::from(i % 5) / 1000.0)
            .collect::<Vec<_>>()
    };
    let shoal = runs(Side::Shoal, "a", "forest", far(1.0)).stats();
    let kt = runs(Side::KernelTuner, "a", "pso", far(1.5)).stats();
    assert_eq!(
        verdict(&shoal, &kt),
        "median=better:beyond share=better:beyond at_least_as_good=median,share"
    );
    assert_eq!(
        verdict(&kt, &shoal),
        "median=worse:beyond share=worse:beyond at_least_as_good=neither"
    );
    // Without KernelTuner's cells, the best line has no kerneltuner fields.
    let alone = lines(&[runs(Side::Shoal, "a", "forest", far(1.0))]);
    assert_eq!(alone.len(), 2, "{alone:#?}");
    assert!(alone[1].starts_with("search space=a budget=1% shoal=forest:1.0020:1.00 shoal_ci="));
    assert!(!alone[1].contains("kerneltuner"));
}
