//! Versions of MIOpen's databases, end to end with the real binary and the stand-in `fin`: a
//! session tuned on five resnet50 configs; a directory of "shipped" databases (MIOpen's own
//! lines from the golden fixtures, under the session's base name, and lines constructed for two
//! of the session's keys with known times) imported into the store, queried with SQL, listed,
//! and compared with the session; two golden versions compared with each other.

mod common;

use common::{miopen_shoal as shoal, standin_fin, stdout_of as stdout};

use std::collections::BTreeMap;
use std::path::Path;

use shoal_miopen::export::format_time;
use shoal_miopen::export::merge;
use shoal_miopen::keys::{parse_find_db_key, perf_db_key};

/// Session 1: five resnet50 configs perf-tuned on a gfx90a with 110 CUs, exported to `out`.
fn tuned_session(d: &Path) {
    let resnet = common::repo_root().join("crates/shoal-miopen/tests/driver_configs/resnet50.txt");
    let five: Vec<String> = std::fs::read_to_string(resnet)
        .unwrap()
        .lines()
        .take(5)
        .map(String::from)
        .collect();
    std::fs::write(d.join("five.txt"), five.join("\n") + "\n").unwrap();
    stdout(shoal(d).args(["import-configs", "-t", "five", "-f", "five.txt"]));
    stdout(shoal(d).args(["solvers", "update"]));
    stdout(common::session_init(d, "shoal.db").env("SHOAL_FIN", standin_fin()));
    let steps = "miopen_perf_compile,miopen_perf_eval";
    stdout(shoal(d).args(["applicability", "update", "--session", "1", "-t", "five"]));
    stdout(shoal(d).args([
        "jobs",
        "load",
        "--session",
        "1",
        "-t",
        "five",
        "--fin-steps",
        steps,
    ]));
    common::run_ok(shoal(d).args(["run", "--session", "1", "-j", "2"]));
    stdout(shoal(d).args(["export", "--session", "1", "-o", "out"]));
}

/// A find db's lines as (key, [(solver, time text, workspace, algorithm)]), fastest first.
fn find_lines(text: &str) -> Vec<(String, Vec<[String; 4]>)> {
    text.lines()
        .map(|l| {
            let (key, records) = l.split_once('=').unwrap();
            let records = records
                .split(';')
                .map(|r| {
                    let (solver, rest) = r.split_once(':').unwrap();
                    let f: Vec<&str> = rest.split(',').collect();
                    [solver, f[0], f[1], f[2]].map(String::from)
                })
                .collect();
            (key.to_string(), records)
        })
        .collect()
}

fn time(text: &str) -> f32 {
    text.parse().unwrap()
}

/// The CSV of a report, by (config, solver): the other columns by name.
fn csv_rows(path: &Path) -> BTreeMap<(String, String), BTreeMap<String, String>> {
    let mut r = csv::Reader::from_path(path).unwrap();
    let header: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
    r.records()
        .map(|rec| {
            let rec = rec.unwrap();
            let cols: BTreeMap<String, String> = header
                .iter()
                .cloned()
                .zip(rec.iter().map(String::from))
                .collect();
            ((cols["config"].clone(), cols["solver"].clone()), cols)
        })
        .collect()
}

#[test]
fn shipped_databases_are_imported_queried_and_compared_with_a_session() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    tuned_session(d);
    let session_find =
        find_lines(&std::fs::read_to_string(d.join("out/gfx90a6e.HIP.fdb.txt")).unwrap());
    let session_perf =
        merge::parse_perf_db_text(&std::fs::read_to_string(d.join("out/gfx90a6e.db.txt")).unwrap())
            .unwrap();
    assert_eq!(session_find.len(), 5, "one find-db line per config");

    // The shipped directory, under the session's base name so that keys can meet: MIOpen's own
    // lines (golden fixtures: three gfx942 keys the session does not have, four perf keys),
    // and lines constructed here for the session's first two keys — its fastest solver of the
    // first twice as slow as the session measured it, of the second twice as fast, plus a
    // solver only this version has — and a line whose key is no convolution's.
    let golden = common::repo_root().join("crates/shoal-miopen/tests/golden");
    let shipped_find = std::fs::read_to_string(golden.join("gfx942130.HIP.fdb.txt")).unwrap();
    let shipped_perf = std::fs::read_to_string(golden.join("perf_db_reference.db.txt")).unwrap();
    let (k1, r1) = (&session_find[0].0, &session_find[0].1[0]);
    let (k2, r2) = (&session_find[1].0, &session_find[1].1[0]);
    let (s1, t1, s2, t2) = (&r1[0], time(&r1[1]), &r2[0], time(&r2[1]));
    let old_t1 = format_time(t1 * 2.0);
    let old_t2 = format_time(t2 / 2.0);
    let constructed_find = format!(
        "{k1}={s1}:{old_t1},{},{}\n\
         {k2}={s2}:{old_t2},{},{};ConvImportOnly:9.5,0,{}\n\
         not-a-conv-key=X:1,0,miopenConvolutionFwdAlgoDirect\n",
        r1[2], r1[3], r2[2], r2[3], r2[3]
    );
    let pk1 = perf_db_key(&parse_find_db_key(k1).unwrap());
    let shipped = d.join("shipped");
    std::fs::create_dir(&shipped).unwrap();
    std::fs::write(
        shipped.join("gfx90a6e.HIP.fdb.txt"),
        format!("{shipped_find}{constructed_find}"),
    )
    .unwrap();
    std::fs::write(
        shipped.join("gfx90a6e.db.txt"),
        format!("{shipped_perf}{pk1}={s1}:constructed,1\n"),
    )
    .unwrap();

    let out = common::run_ok(
        shoal(d)
            .args(["import-db", "--store", "-l", "shipped"])
            .arg(&shipped),
    );
    let said = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    // 3 + 2 keys, 11 + 3 records; 12 + 1 perf pairs; the two session configs were there, the
    // three shipped find keys and two shipped perf-only keys are new.
    assert!(
        said.contains("import 1: gfx90a6e (gfx90a, 110 CUs)")
            && said.contains("find keys 5, find records 14, perf pairs 13, configs created 5, present 2, rejected 1"),
        "{said}"
    );
    assert!(
        err.contains("gfx90a6e.HIP.fdb.txt:6: not a find-db key"),
        "the bad key is named by file and line: {err}"
    );

    // The rows, in SQL: every record tied to a config, and the constructed ones to the
    // session's own jobs of the same solver.
    let db = rusqlite::Connection::open(d.join("shoal.db")).unwrap();
    let count = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(
        count("SELECT COUNT(*) FROM db_record WHERE import_id = 1 AND kind = 'find'"),
        14
    );
    assert_eq!(
        count(
            "SELECT COUNT(*) FROM db_record r JOIN config c ON c.id = r.config_id \
             WHERE r.import_id = 1"
        ),
        27
    );
    let mut st = db
        .prepare(
            "SELECT r.solver, r.time_ms FROM db_record r \
             JOIN job j ON j.config_id = r.config_id AND j.session_id = 1 \
             JOIN solver s ON s.id = j.solver_id AND s.name = r.solver \
             WHERE r.import_id = 1 AND r.kind = 'find' ORDER BY r.seq",
        )
        .unwrap();
    let joined: Vec<(String, f64)> = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        joined,
        [
            (s1.clone(), f64::from(time(&old_t1))),
            (s2.clone(), f64::from(time(&old_t2)))
        ]
    );

    let listed = stdout(shoal(d).args(["miopen", "imports"]));
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("1 ") && l.contains("shipped") && l.contains("gfx90a  110")),
        "{listed}"
    );
    let listed: serde_json::Value =
        serde_json::from_str(&stdout(shoal(d).args(["miopen", "imports", "--json"]))).unwrap();
    assert_eq!(
        (
            &listed[0]["find_records"],
            &listed[0]["perf_records"],
            &listed[0]["configs"]
        ),
        (&14.into(), &13.into(), &7.into()),
        "{listed}"
    );

    // The import against the session.
    let report = stdout(shoal(d).args([
        "miopen",
        "report",
        "import:1",
        "session:1",
        "--csv",
        "r.csv",
    ]));
    let rows = csv_rows(&d.join("r.csv"));
    let row = |k: &str, s: &str| rows[&(k.to_string(), s.to_string())].clone();
    let faster = row(k1, s1);
    assert_eq!(
        [
            &faster["status"],
            &faster["old_ms"],
            &faster["new_ms"],
            &faster["change_pct"]
        ],
        ["faster", &old_t1, &format_time(t1), "-50.00"]
    );
    assert_eq!(faster["old_params"], "constructed,1");
    assert_eq!(
        [
            &faster["old_fastest"],
            &faster["new_fastest"],
            &faster["new_fastest_ms"]
        ],
        [s1.as_str(), s1, &format_time(t1)]
    );
    assert_eq!(faster["new_params"], session_perf[&pk1][s1.as_str()]);
    let slower = row(k2, s2);
    assert_eq!(
        [
            &slower["status"],
            &slower["old_ms"],
            &slower["new_ms"],
            &slower["change_pct"]
        ],
        ["slower", &old_t2, &format_time(t2), "100.00"]
    );
    let gone = row(k2, "ConvImportOnly");
    assert_eq!(
        [&gone["status"], &gone["old_ms"], &gone["new_ms"]],
        ["only_old", "9.5", ""]
    );
    let shipped_only = row(
        "1000-13-13-1x1-512-13-13-16-0x0-1x1-1x1-0-NCHW-FP16-B",
        "ConvBinWinogradRxSf3x2",
    );
    assert_eq!(
        [
            &shipped_only["status"],
            &shipped_only["old_ms"],
            &shipped_only["old_params"]
        ],
        ["only_old", "0.139621", "215"]
    );
    // The session has 59 find entries: two compared, the rest only new.
    assert!(
        report.ends_with("report configs=8 faster=1 slower=1 same=0 only_old=12 only_new=57\n"),
        "{report}"
    );
    // Both configs' fastest changed; the slowdown comes first.
    let (at1, at2) = (
        report.find(k1.as_str()).unwrap(),
        report.find(k2.as_str()).unwrap(),
    );
    assert!(
        at2 < at1 && report.contains("+100.0%") && report.contains("-50.0%"),
        "{report}"
    );

    two_golden_versions_compare_as_files(d, &shipped);
    import_db_needs_a_target_and_takes_both(d, &shipped);
    sqlite_and_text_perf_dbs_are_read_as_one(d, &pk1, s1, &session_perf[&pk1][s1.as_str()]);
}

/// A directory with both `X.db` and `X.db.txt`: their union, the `.db` winning where they
/// disagree, and how many disagreed said. (The session's SQLite perf db, and a text line
/// constructed here that disagrees with it on one pair.)
fn sqlite_and_text_perf_dbs_are_read_as_one(d: &Path, pk1: &str, s1: &str, params: &str) {
    let both = d.join("both");
    std::fs::create_dir(&both).unwrap();
    std::fs::copy(d.join("out/gfx90a6e.db"), both.join("gfx90a6e.db")).unwrap();
    std::fs::write(
        both.join("gfx90a6e.db.txt"),
        format!("{pk1}={s1}:constructed,1;ConvTextOnly:3\n"),
    )
    .unwrap();
    let said = stdout(
        shoal(d)
            .args(["import-db", "--store", "-l", "both"])
            .arg(&both),
    );
    assert!(
        said.contains("import 3: gfx90a6e")
            && said.contains(
                "perf pairs gfx90a6e.db and gfx90a6e.db.txt disagree on: 1 (the .db's kept)"
            )
            && said.contains("perf pairs 60,"),
        "59 pairs of the .db and the text's one more: {said}"
    );
    // The session's strided backward keys describe several configs each.
    assert!(said.contains("perf pairs stored with no config"), "{said}");
    let db = rusqlite::Connection::open(d.join("shoal.db")).unwrap();
    let kept: String = db
        .query_row(
            "SELECT params FROM db_record WHERE import_id = 3 AND db_key = ?1 AND solver = ?2",
            [pk1, s1],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(kept, params);
}

/// `report golden:1 golden:2`: the shipped directory as version 1, the session's export as
/// version 2 (its find db keeps the four fastest of each config). Files are compared as they
/// are: the line with no convolution's key is one more config, only in the old version.
fn two_golden_versions_compare_as_files(d: &Path, shipped: &Path) {
    stdout(shoal(d).args(["import-db", "--golden-v", "1"]).arg(shipped));
    stdout(shoal(d).args(["import-db", "--golden-v", "2", "out"]));
    let report = stdout(shoal(d).args(["miopen", "report", "golden:1", "golden:2"]));
    assert!(
        report.starts_with("old: golden version 1 (gfx90a, 110 CUs); new: golden version 2"),
        "{report}"
    );
    assert!(
        report.ends_with("report configs=9 faster=1 slower=1 same=0 only_old=13 only_new=18\n"),
        "{report}"
    );
    // A directory with two devices' databases names both and asks which.
    let two = d.join("two");
    std::fs::create_dir(&two).unwrap();
    for name in ["gfx90a6e.HIP.fdb.txt", "gfx90a6e.db.txt"] {
        std::fs::copy(shipped.join(name), two.join(name)).unwrap();
    }
    let golden = common::repo_root().join("crates/shoal-miopen/tests/golden");
    std::fs::copy(
        golden.join("gfx942130.HIP.fdb.txt"),
        two.join("gfx942130.HIP.fdb.txt"),
    )
    .unwrap();
    let refused = shoal(d)
        .args(["miopen", "report", "two", "golden:2"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        err.contains("gfx90a6e, gfx942130") && err.contains("--arch and --num-cu"),
        "{err}"
    );
    // Named, its gfx90a databases (the shipped ones) against golden version 1, their copy.
    let picked = stdout(shoal(d).args([
        "miopen", "report", "two", "golden:1", "--arch", "gfx90a", "--num-cu", "110",
    ]));
    assert!(
        picked.ends_with("report configs=6 faster=0 slower=0 same=15 only_old=0 only_new=0\n"),
        "{picked}"
    );
}

/// `import-db` wants --store, --golden-v or both.
fn import_db_needs_a_target_and_takes_both(d: &Path, shipped: &Path) {
    let neither = shoal(d).arg("import-db").arg(shipped).output().unwrap();
    assert!(!neither.status.success());
    let err = String::from_utf8_lossy(&neither.stderr);
    assert!(
        err.contains("--store") && err.contains("--golden-v"),
        "{err}"
    );
    let both = stdout(
        shoal(d)
            .args(["import-db", "--store", "-l", "again", "--golden-v", "3"])
            .arg(shipped),
    );
    assert!(
        both.contains("golden version 3") && both.contains("import 2: gfx90a6e"),
        "{both}"
    );
    assert!(both.contains("configs created 0, present 7"), "{both}");
}

/// `import-db --store --cluster` writes the cluster's database (here with the administrator's
/// user, as `shoal db migrate` uses), `miopen imports --cluster` lists what is there, and
/// `miopen report --cluster` reads an import from it.
#[test]
fn imports_reach_the_cluster_database() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cluster = common::cluster::Cluster::new("mimport", d);
    let in_cluster = |args: &[&str]| {
        let mut cmd = common::shoal(d);
        cluster.env(&mut cmd).args(args);
        cmd
    };
    stdout(&mut in_cluster(&["db", "migrate"]));
    let shipped = d.join("shipped");
    std::fs::create_dir(&shipped).unwrap();
    let golden = common::repo_root().join("crates/shoal-miopen/tests/golden");
    std::fs::copy(
        golden.join("gfx942130.HIP.fdb.txt"),
        shipped.join("gfx942130.HIP.fdb.txt"),
    )
    .unwrap();
    let said =
        stdout(in_cluster(&["import-db", "--store", "--cluster", "-l", "shipped"]).arg(&shipped));
    assert!(
        said.contains("import 1") && said.contains("find records 11"),
        "{said}"
    );
    // Nothing went to a --db file.
    assert!(!d.join("shoal.db").exists());
    let listed: serde_json::Value = serde_json::from_str(&stdout(&mut in_cluster(&[
        "miopen",
        "imports",
        "--cluster",
        "--json",
    ])))
    .unwrap();
    assert_eq!(listed[0]["label"], "shipped", "{listed}");
    let report = stdout(in_cluster(&["miopen", "report", "--cluster", "import:1"]).arg(&shipped));
    assert!(
        report.contains("report configs=3") && report.contains("same=11"),
        "{report}"
    );
}
