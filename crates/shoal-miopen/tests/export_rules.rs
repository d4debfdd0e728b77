//! How fin's evaluations become database entries, by MITuna's rules: which results make a
//! find-db or perf-db entry, the files' names, and the four fastest kept per key with the
//! kernel db following them. (The bytes of the files: `export_golden.rs`.)

mod fin_support;

use fin_support::{conv2d, golden};
use shoal_miopen::export::{file_names, find_entries, perf_entries};
use shoal_miopen::fin::EvalResult;
use shoal_miopen::{ConvConfig, DataType, Direction};

/// A 3x3 forward fp32 convolution, C=128, K=512, 28x28, n=256.
fn v0() -> ConvConfig {
    conv2d(
        DataType::Fp32,
        Direction::Forward,
        128,
        256,
        (28, 28),
        512,
        (3, 3),
        (1, 1),
        (1, 1),
    )
}

#[test]
fn eval_results_become_entries_by_mituna_rules() {
    let c = v0();
    let r =
        |name: &str, evaluated: bool, time: Option<f64>, tunable: Option<bool>, params: &str| {
            EvalResult {
                solver_name: name.into(),
                algorithm: Some("miopenConvolutionFwdAlgoDirect".into()),
                evaluated,
                reason: None,
                tunable,
                params: Some(params.into()),
                workspace: Some(64),
                time,
                layout: None,
                data_type: None,
                direction: None,
                bias: None,
                kernel_objects: vec![],
            }
        };
    let results = vec![
        r("A", true, Some(1.0), Some(true), "1,2"),
        r("B", false, Some(1.0), Some(true), "1,2"), // not evaluated
        r("C", true, Some(-1.0), Some(true), "1,2"), // time not measured
        r("D", true, Some(2.0), Some(false), "1,2"), // not tunable: find db only
        r("E", true, None, None, "3"),               // no time: neither
        r("F", true, Some(3.0), Some(true), ""),     // no params: find db only
    ];
    let f: Vec<String> = find_entries(&c, &results)
        .into_iter()
        .map(|e| e.solver)
        .collect();
    assert_eq!(f, ["A", "D", "F"]);
    let p: Vec<String> = perf_entries(&c, &results)
        .into_iter()
        .map(|e| e.solver)
        .collect();
    assert_eq!(p, ["A"]);
}

#[test]
fn file_names_follow_miopen_db_basename() {
    let n = file_names("gfx90a", 104);
    assert_eq!(n.find_db, "gfx90a68.HIP.fdb.txt");
    assert_eq!(n.perf_db_sqlite, "gfx90a68.db");
    assert_eq!(n.perf_db_text, "gfx90a68.db.txt");
    assert_eq!(n.kern_db, "gfx90a68.kdb");
    assert_eq!(file_names("gfx906", 60).find_db, "gfx906_60.HIP.fdb.txt");
    assert_eq!(file_names("gfx942", 304).perf_db_sqlite, "gfx942130.db");
    assert_eq!(file_names("gfx908", 120).kern_db, "gfx90878.kdb");
    assert_eq!(file_names("gfx1030", 36).perf_db_text, "gfx1030_36.db.txt");
}

/// The find db keeps the 4 fastest solvers per key; the kernel db follows what was kept (those,
/// and any entry of the perf db), not every kernel compiled.
#[test]
fn the_find_db_keeps_the_four_fastest_per_key_and_the_kdb_follows_it() {
    let c = v0();
    let e = |solver: &str, time_ms: f32| shoal_miopen::export::FindDbEntry {
        config: c.clone(),
        solver: solver.into(),
        time_ms,
        workspace: 0,
        algorithm: "miopenConvolutionFwdAlgoDirect".into(),
    };
    let finds = vec![
        e("S6", 6.0),
        e("S2", 2.0),
        e("S5", 5.0),
        e("S1", 1.0),
        e("S4", 4.0),
        e("S3", 3.0),
        e("S1", 0.5), // a second record of S1: the first is kept
    ];
    let kept = shoal_miopen::export::find_db_kept(&finds);
    assert_eq!(kept.len(), 1, "one key");
    let solvers: Vec<&str> = kept
        .values()
        .next()
        .unwrap()
        .iter()
        .map(|&i| finds[i].solver.as_str())
        .collect();
    assert_eq!(solvers, ["S1", "S2", "S3", "S4"]);
    let text = shoal_miopen::export::find_db_text(&finds);
    assert_eq!(text.matches(':').count(), 4, "{text}");
    assert!(!text.contains("S5") && !text.contains("S6"), "{text}");
}

/// The user databases MIOpen reads from MIOPEN_USER_DB_PATH are named for its version, tweak
/// included (docs/miopen-formats.md §2.2, §3.1, §4.3).
#[test]
fn user_db_names_follow_miopen() {
    let n = shoal_miopen::export::user_db_names("gfx942", 304, "3.3.0-2a1e2f3").unwrap();
    assert_eq!(n.find_db, "gfx942130.HIP.3_3_0_2a1e2f3.ufdb.txt");
    assert_eq!(n.perf_db_text, "gfx942130.HIP.3_3_0_2a1e2f3.udb.txt");
    assert_eq!(n.perf_db_sqlite, "gfx942130_1.1.0.udb");
    assert_eq!(n.kern_db, "gfx942130.ukdb");
    let dotted = shoal_miopen::export::user_db_names("gfx90a", 110, "3.2.0.abc").unwrap();
    assert_eq!(dotted.find_db, "gfx90a6e.HIP.3_2_0_abc.ufdb.txt");
    // A BUILD_DEV build's suffix has no tweak (`HIP.<M>_<m>_<p>`).
    let dev = shoal_miopen::export::user_db_names_of("gfx942", 304, "3.3.0").unwrap();
    assert!(dev.build_dev);
    assert_eq!(dev.names.find_db, "gfx942130.HIP.3_3_0.ufdb.txt");
    assert_eq!(dev.names.perf_db_text, "gfx942130.HIP.3_3_0.udb.txt");
    assert!(
        !shoal_miopen::export::user_db_names_of("gfx942", 304, "3.3.0-2a1e2f3")
            .unwrap()
            .build_dev
    );
    for bad in ["3.3", "2a1e2f3", "3.x.0-abc", "3.3.0-", ""] {
        let e = shoal_miopen::export::user_db_names("gfx942", 304, bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("tweak"), "{bad}: {e}");
    }
}

/// Shipped find-db lines and a reference text perf db read back byte for byte, so a merge into
/// MIOpen's own files changes nothing it does not merge.
#[test]
fn shipped_databases_read_back_byte_for_byte() {
    use shoal_miopen::export::merge;
    for name in ["gfx942130.HIP.fdb.txt", "gfx90a68.HIP.fdb.txt"] {
        let text = golden(name);
        let db = merge::parse_find_db(&text).unwrap();
        assert_eq!(merge::find_db_text_of(&db), text, "{name}");
    }
    let text = golden("perf_db_reference.db.txt");
    let db = merge::parse_perf_db_text(&text).unwrap();
    assert_eq!(merge::perf_db_text_of(&db), text);
}
