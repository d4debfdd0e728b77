//! A merge into MIOpen's databases loses nothing the base holds (docs/miopen-merge.md): a find
//! session and a perf session, tuned end to end through the stand-in `fin` (a test double built
//! from recorded fin fixtures; the real fin needs ROCm and an AMD GPU), are merged onto a copy
//! of shipped databases with `export --base` and with `golden update`, and every output is
//! checked by [`lost`], a checker that reads the files with its own code, not the merge's.
//!
//! The base: the shipped find-db lines and reference perf-db rows of
//! `crates/shoal-miopen/tests/golden/`, under this session's database name, plus constructed
//! lines on the session's own keys (marked below) that hold six records each, some faster and
//! some slower than the session's, and solvers the session never ran — the shapes that lost
//! records before.

mod common;

use common::{miopen_shoal as shoal, stdout_of as stdout};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const FIND: &str = "gfx90a6e.HIP.fdb.txt";
const PERF: &str = "gfx90a6e.db";
const PERF_TEXT: &str = "gfx90a6e.db.txt";

fn golden(name: &str) -> String {
    std::fs::read_to_string(
        common::repo_root()
            .join("crates/shoal-miopen/tests/golden")
            .join(name),
    )
    .unwrap()
}

/// Records of a find db per (key, solver): the record's text (the first per solver, as MIOpen
/// reads a line); and each key's line.
fn find_records(text: &str) -> (BTreeMap<(String, String), String>, BTreeMap<String, String>) {
    let mut records = BTreeMap::new();
    let mut lines = BTreeMap::new();
    for line in text.lines() {
        let (key, items) = line.split_once('=').expect("KEY=RECORDS");
        lines.insert(key.to_string(), line.to_string());
        for item in items.split(';') {
            let solver = item.split_once(':').expect("SOLVER:VALUES").0;
            records
                .entry((key.to_string(), solver.to_string()))
                .or_insert_with(|| item.to_string());
        }
    }
    (records, lines)
}

/// Pairs of a text perf db per (key, solver).
fn text_pairs(text: &str) -> BTreeMap<(String, String), String> {
    let mut pairs = BTreeMap::new();
    for line in text.lines() {
        let (key, items) = line.split_once('=').expect("KEY=PAIRS");
        for item in items.split(';') {
            let (solver, params) = item.split_once(':').expect("SOLVER:PARAMS");
            pairs
                .entry((key.to_string(), solver.to_string()))
                .or_insert_with(|| params.to_string());
        }
    }
    pairs
}

const CONFIG_COLUMNS: [&str; 24] = [
    "spatial_dim",
    "in_channels",
    "in_h",
    "in_w",
    "in_d",
    "fil_h",
    "fil_w",
    "fil_d",
    "out_channels",
    "batchsize",
    "pad_h",
    "pad_w",
    "pad_d",
    "conv_stride_h",
    "conv_stride_w",
    "conv_stride_d",
    "dilation_h",
    "dilation_w",
    "dilation_d",
    "bias",
    "group_count",
    "layout",
    "data_type",
    "direction",
];

/// Rows of a SQLite perf db per (x-joined key, solver), and the row count.
fn sqlite_pairs(path: &Path) -> (BTreeMap<(String, String), String>, usize) {
    let conn = rusqlite::Connection::open(path).unwrap();
    let columns: Vec<String> = CONFIG_COLUMNS.iter().map(|c| format!("c.{c}")).collect();
    let sql = format!(
        "SELECT {}, p.solver, p.params FROM perf_db p JOIN config c ON c.id = p.config",
        columns.join(", ")
    );
    let mut st = conn.prepare(&sql).unwrap();
    let mut pairs = BTreeMap::new();
    let mut n = 0;
    let mut rows = st.query([]).unwrap();
    while let Some(r) = rows.next().unwrap() {
        let key: Vec<String> = (0..24)
            .map(|i| match r.get_ref(i).unwrap() {
                rusqlite::types::ValueRef::Integer(v) => v.to_string(),
                v => v.as_str().unwrap().to_string(),
            })
            .collect();
        let solver: String = r.get(24).unwrap();
        pairs.insert((key.join("x"), solver), r.get::<_, String>(25).unwrap());
        n += 1;
    }
    (pairs, n)
}

/// A SQLite perf db with the shipped schema (`sqlite3 gfx942130.db .schema`), of `rows`.
fn write_sqlite(path: &Path, rows: &[((String, String), String)]) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(
        "CREATE TABLE `config` (`id` INTEGER PRIMARY KEY ASC,`layout` TEXT NOT NULL,`data_type` TEXT NOT NULL,`direction` TEXT NOT NULL,`spatial_dim` INT NOT NULL,`in_channels` INT NOT NULL,`in_h` INT NOT NULL,`in_w` INT NOT NULL,`in_d` INT NOT NULL,`fil_h` INT NOT NULL,`fil_w` INT NOT NULL,`fil_d` INT NOT NULL,`out_channels` INT NOT NULL, `batchsize` INT NOT NULL,`pad_h` INT NOT NULL,`pad_w` INT NOT NULL,`pad_d` INT NOT NULL,`conv_stride_h` INT NOT NULL,`conv_stride_w` INT NOT NULL,`conv_stride_d` INT NOT NULL,`dilation_h` INT NOT NULL,`dilation_w` INT NOT NULL,`dilation_d` INT NOT NULL,`bias` INT NOT NULL,`group_count` INT NOT NULL);
         CREATE TABLE `perf_db` (`id` INTEGER PRIMARY KEY ASC,`solver` TEXT NOT NULL,`config` INTEGER NOT NULL, `params` TEXT NOT NULL);
         CREATE UNIQUE INDEX `idx_config` ON config( layout,data_type,direction,spatial_dim,in_channels,in_h,in_w,in_d,fil_h,fil_w,fil_d,out_channels,batchsize,pad_h,pad_w,pad_d,conv_stride_h,conv_stride_w,conv_stride_d,dilation_h,dilation_w,dilation_d,bias,group_count );
         CREATE UNIQUE INDEX `idx_perf_db` ON perf_db(solver, config);",
    )
    .unwrap();
    for ((key, solver), params) in rows {
        let fields: Vec<&str> = key.split('x').collect();
        assert_eq!(fields.len(), 24, "{key}");
        let values: Vec<rusqlite::types::Value> = fields
            .iter()
            .enumerate()
            .map(|(i, f)| match i < 21 {
                true => rusqlite::types::Value::Integer(f.parse().unwrap()),
                false => rusqlite::types::Value::Text(f.to_string()),
            })
            .collect();
        let marks = vec!["?"; 24].join(",");
        conn.execute(
            &format!(
                "INSERT OR IGNORE INTO config ({}) VALUES ({marks})",
                CONFIG_COLUMNS.join(",")
            ),
            rusqlite::params_from_iter(values.iter()),
        )
        .unwrap();
        let matching: Vec<String> = CONFIG_COLUMNS.iter().map(|c| format!("{c} = ?")).collect();
        let id: i64 = conn
            .query_row(
                &format!("SELECT id FROM config WHERE {}", matching.join(" AND ")),
                rusqlite::params_from_iter(values.iter()),
                |r| r.get(0),
            )
            .unwrap();
        conn.execute(
            "INSERT INTO perf_db (solver, config, params) VALUES (?1, ?2, ?3)",
            rusqlite::params![solver, id, params],
        )
        .unwrap();
    }
}

/// Entries per (key, solver) of one or more sessions.
type Superseding = BTreeMap<(String, String), Vec<String>>;

/// Every entry of `base` that `merged` does not hold as the base wrote it, unless a session
/// holds that (key, solver) and `merged` holds that session's entry: what the merge lost.
fn lost(
    base: &BTreeMap<(String, String), String>,
    merged: &BTreeMap<(String, String), String>,
    sessions: &Superseding,
) -> Vec<String> {
    base.iter()
        .filter(|(at, entry)| {
            let now = merged.get(*at);
            let superseded = sessions
                .get(*at)
                .is_some_and(|theirs| now.is_some_and(|n| theirs.contains(n)));
            now != Some(*entry) && !superseded
        })
        .map(|((key, solver), entry)| format!("{key} {solver}: {entry}"))
        .collect()
}

/// Checks one merged output directory against the base and the sessions' own exports: no find
/// record or perf pair lost, untouched find lines byte for byte, `.db.txt` = `.db` row for row.
fn check_preserved(base: &Path, merged: &Path, sessions: &[&Path]) {
    let read = |p: PathBuf| std::fs::read_to_string(p).unwrap_or_default();
    let mut session_find = Superseding::new();
    let mut session_perf = Superseding::new();
    for s in sessions {
        for (at, r) in find_records(&read(s.join(FIND))).0 {
            session_find.entry(at).or_default().push(r);
        }
        for (at, p) in text_pairs(&read(s.join(PERF_TEXT))) {
            session_perf.entry(at).or_default().push(p);
        }
    }
    let (base_find, base_lines) = find_records(&read(base.join(FIND)));
    let (merged_find, merged_lines) = find_records(&read(merged.join(FIND)));
    let gone = lost(&base_find, &merged_find, &session_find);
    assert!(
        gone.is_empty(),
        "{}: find records lost: {gone:#?}",
        merged.display()
    );
    let tuned: std::collections::HashSet<&String> = session_find.keys().map(|(k, _)| k).collect();
    for (key, line) in &base_lines {
        if !tuned.contains(key) {
            assert_eq!(merged_lines.get(key), Some(line), "untouched line of {key}");
        }
    }
    let (merged_rows, n) = sqlite_pairs(&merged.join(PERF));
    let base_rows = if base.join(PERF).exists() {
        sqlite_pairs(&base.join(PERF)).0
    } else {
        text_pairs(&read(base.join(PERF_TEXT)))
    };
    let gone = lost(&base_rows, &merged_rows, &session_perf);
    assert!(
        gone.is_empty(),
        "{}: perf pairs lost: {gone:#?}",
        merged.display()
    );
    let text = text_pairs(&read(merged.join(PERF_TEXT)));
    assert_eq!(
        text.len(),
        n,
        "{}: .db.txt pairs against .db rows",
        merged.display()
    );
    assert_eq!(
        text,
        merged_rows,
        "{}: .db.txt and .db agree",
        merged.display()
    );
}

fn files_in(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().is_file())
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect();
    v.sort();
    v
}

/// Tunes the first twelve resnet50 configs twice: session 1 with the perf steps, session 2 with
/// the find steps; exports each alone.
fn tune_two_sessions(d: &Path) -> (PathBuf, PathBuf) {
    let resnet = common::repo_root().join("crates/shoal-miopen/tests/driver_configs/resnet50.txt");
    let lines: Vec<String> = std::fs::read_to_string(resnet)
        .unwrap()
        .lines()
        .take(12)
        .map(String::from)
        .collect();
    let configs = d.join("configs.txt");
    std::fs::write(&configs, lines.join("\n") + "\n").unwrap();
    stdout(
        shoal(d)
            .args(["import-configs", "-t", "r12", "-f"])
            .arg(&configs),
    );
    stdout(shoal(d).args(["solvers", "update"]));
    for (id, label, steps) in [
        ("1", "perf", "miopen_perf_compile,miopen_perf_eval"),
        ("2", "find", "miopen_find_compile,miopen_find_eval"),
    ] {
        let session = stdout(shoal(d).args([
            "session",
            "init",
            "--arch",
            "gfx90a",
            "--num-cu",
            "110",
            "--rocm-version",
            "6.2.0",
            "--miopen-version",
            "3.2.0",
            "-l",
            label,
        ]));
        assert_eq!(session.trim(), id);
        stdout(shoal(d).args(["applicability", "update", "--session", id, "-t", "r12"]));
        stdout(shoal(d).args([
            "jobs",
            "load",
            "--session",
            id,
            "-t",
            "r12",
            "--fin-steps",
            steps,
            "-l",
            label,
        ]));
        common::run_ok(shoal(d).args(["run", "--session", id, "-j", "2"]));
    }
    let (perf, find) = (d.join("alone-perf"), d.join("alone-find"));
    stdout(shoal(d).args(["export", "--session", "1", "-o"]).arg(&perf));
    stdout(shoal(d).args(["export", "--session", "2", "-o"]).arg(&find));
    (perf, find)
}

/// The base: shipped lines plus constructed six-record lines on the session's keys.
fn shipped_base(d: &Path, perf: &Path, find: &Path) -> PathBuf {
    let base = d.join("shipped");
    std::fs::create_dir(&base).unwrap();
    let mut text = golden("gfx942130.HIP.fdb.txt") + &golden("gfx90a68.HIP.fdb.txt");
    // Constructed (not shipped): an untouched key with six records, times as no writer of
    // Shoal's would print them, so any rewrite shows.
    text.push_str(
        "9-9-9-1x1-9-9-9-9-0x0-1x1-1x1-0-NCHW-FP32-F=A1:0.0500,0,miopenConvolutionFwdAlgoDirect;\
         A2:0.06,0,miopenConvolutionFwdAlgoDirect;A3:0.07,0,miopenConvolutionFwdAlgoDirect;\
         A4:0.08,0,miopenConvolutionFwdAlgoDirect;A5:0.09,0,miopenConvolutionFwdAlgoDirect;\
         A6:1e-05,0,miopenConvolutionFwdAlgoDirect\n",
    );
    // Constructed on the sessions' own keys: per key, each of the session's solvers once much
    // faster than the session (kept under `better`) and once much slower (superseded), plus
    // four solvers the session never ran.
    let mut session_lines: BTreeMap<String, String> = BTreeMap::new();
    for dir in [perf, find] {
        session_lines.extend(find_records(&std::fs::read_to_string(dir.join(FIND)).unwrap()).1);
    }
    for (i, (key, line)) in session_lines.iter().enumerate().filter(|(i, _)| i % 2 == 0) {
        let items: Vec<&str> = line.split_once('=').unwrap().1.split(';').collect();
        let mut records: Vec<String> = items
            .iter()
            .enumerate()
            .map(|(j, item)| {
                let (solver, values) = item.split_once(':').unwrap();
                let fields: Vec<&str> = values.split(',').collect();
                let t: f64 = fields[0].parse().unwrap();
                let t = if (i + j) % 2 == 0 {
                    t / 10.0
                } else {
                    t * 100.0
                };
                format!("{solver}:{t:.6},{},{}", fields[1], fields[2])
            })
            .collect();
        let algo = items[0].rsplit(',').next().unwrap();
        for s in ["NotRunA", "NotRunB", "NotRunC", "NotRunD"] {
            records.push(format!("{s}:{}.5,0,{algo}", i + 3));
        }
        text.push_str(&format!("{key}={}\n", records.join(";")));
    }
    std::fs::write(base.join(FIND), &text).unwrap();
    // The perf db as MIOpen ships it: SQLite only. The reference rows, plus on half the
    // session's keys other params for its solvers and a solver it never tuned.
    let mut rows: Vec<((String, String), String)> = text_pairs(&golden("perf_db_reference.db.txt"))
        .into_iter()
        .collect();
    let session_pairs = text_pairs(&std::fs::read_to_string(perf.join(PERF_TEXT)).unwrap());
    for (i, ((key, solver), _)) in session_pairs.iter().enumerate().filter(|(i, _)| i % 2 == 0) {
        rows.push(((key.clone(), solver.clone()), format!("constructed,{i}")));
        rows.push(((key.clone(), "NotTunedHere".into()), format!("kept,{i}")));
    }
    rows.sort();
    rows.dedup_by(|a, b| a.0 == b.0);
    write_sqlite(&base.join(PERF), &rows);
    // The kernel db under its shipped name, `<arch>.kdb`.
    std::fs::copy(perf.join("gfx90a6e.kdb"), base.join("gfx90a.kdb")).unwrap();
    base
}

#[test]
fn merges_lose_nothing_shipped() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (perf, find) = tune_two_sessions(d);
    let base = shipped_base(d, &perf, &find);
    let before = files_in(&base);

    // export --base: the perf session, then the find session onto that.
    let one = d.join("merged-1");
    let said = stdout(
        shoal(d)
            .args(["export", "--session", "1", "--base"])
            .arg(&base)
            .arg("-o")
            .arg(&one),
    );
    assert!(said.contains("merging into"), "{said}");
    assert!(
        one.join("gfx90a.kdb").exists(),
        "the shipped kdb name is kept: {said}"
    );
    assert!(!one.join("gfx90a6e.kdb").exists(), "{said}");
    check_preserved(&base, &one, &[&perf]);
    let two = d.join("merged-2");
    let said = stdout(
        shoal(d)
            .args(["export", "--session", "2", "--base"])
            .arg(&one)
            .arg("-o")
            .arg(&two),
    );
    check_preserved(&one, &two, &[&find]);
    check_preserved(&base, &two, &[&perf, &find]);
    assert!(
        said.contains("improved") && said.contains("worse"),
        "{said}"
    );
    assert_eq!(files_in(&base), before, "the base is only read");

    // The same session again: no change reported, the files the same.
    let again = d.join("merged-again");
    let said = stdout(
        shoal(d)
            .args(["export", "--session", "2", "--base"])
            .arg(&two)
            .arg("-o")
            .arg(&again),
    );
    for line in said.lines().filter(|l| l.contains("kept")) {
        assert!(
            line.contains("added 0, improved 0, worse 0, updated 0"),
            "a second merge changed something: {line}"
        );
    }
    for name in [FIND, PERF_TEXT] {
        assert_eq!(
            std::fs::read(again.join(name)).unwrap(),
            std::fs::read(two.join(name)).unwrap(),
            "{name}"
        );
    }
    assert_eq!(
        sqlite_pairs(&again.join(PERF)),
        sqlite_pairs(&two.join(PERF))
    );

    // golden update: the same, through versions; v2 built on v1 leaves v1 as it was.
    stdout(shoal(d).args(["import-db", "--golden-v", "1"]).arg(&base));
    let golden_dir = d.join("shoal.db.golden");
    stdout(shoal(d).args(["golden", "update", "--session", "1", "--golden-v", "1"]));
    check_preserved(&base, &golden_dir.join("v1"), &[&perf]);
    let v1 = files_in(&golden_dir.join("v1"));
    let said = stdout(shoal(d).args([
        "golden",
        "update",
        "--session",
        "2",
        "--golden-v",
        "2",
        "--base-golden-v",
        "1",
    ]));
    assert!(said.contains("built from version 1"), "{said}");
    assert_eq!(
        files_in(&golden_dir.join("v1")),
        v1,
        "the base version is only read"
    );
    check_preserved(&golden_dir.join("v1"), &golden_dir.join("v2"), &[&find]);
    check_preserved(&base, &golden_dir.join("v2"), &[&perf, &find]);
    // Onto an existing version, --base-golden-v is refused.
    let refused = shoal(d)
        .args(["golden", "update", "--session", "2", "--golden-v", "2"])
        .args(["--base-golden-v", "1"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("exists already"));

    // A find-only version: a perf session writes no perf db into it.
    let find_only = d.join("find-only");
    std::fs::create_dir(&find_only).unwrap();
    std::fs::copy(base.join(FIND), find_only.join(FIND)).unwrap();
    stdout(
        shoal(d)
            .args(["import-db", "--golden-v", "3"])
            .arg(&find_only),
    );
    let said = stdout(shoal(d).args(["golden", "update", "--session", "1", "--golden-v", "3"]));
    let names: Vec<String> = files_in(&golden_dir.join("v3"))
        .into_iter()
        .map(|f| f.0)
        .collect();
    assert_eq!(names, [FIND], "{said}");
    assert!(said.contains("not written"), "{said}");

    // --base with --user-db: a base of system databases is refused, naming the problem.
    let refused = shoal(d)
        .args([
            "export",
            "--session",
            "1",
            "--user-db",
            "--miopen-version",
            "3.2.0-abc",
        ])
        .arg("--base")
        .arg(&base)
        .arg("-o")
        .arg(d.join("user-merged"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{err}");
    assert!(
        err.contains("system databases") && err.contains(FIND),
        "{err}"
    );
    assert!(!d.join("user-merged").exists());
    // …and one of user databases is merged into.
    let user = d.join("user");
    stdout(
        shoal(d)
            .args([
                "export",
                "--session",
                "2",
                "--user-db",
                "--miopen-version",
                "3.2.0",
            ])
            .arg("-o")
            .arg(&user),
    );
    assert!(
        user.join("gfx90a6e.HIP.3_2_0.ufdb.txt").exists(),
        "BUILD_DEV names"
    );
    let said = stdout(
        shoal(d)
            .args([
                "export",
                "--session",
                "1",
                "--user-db",
                "--miopen-version",
                "3.2.0",
            ])
            .arg("--base")
            .arg(&user)
            .arg("-o")
            .arg(d.join("user-merged")),
    );
    assert!(
        said.contains("merging into") && said.contains("BUILD_DEV"),
        "{said}"
    );

    // The kernel db holds each key's fastest entry's kernels; --full-kdb every entry's.
    let kernels = |p: &Path| -> i64 {
        rusqlite::Connection::open(p)
            .unwrap()
            .query_row("SELECT COUNT(*) FROM kern_db", [], |r| r.get(0))
            .unwrap()
    };
    let full = d.join("full-kdb");
    stdout(
        shoal(d)
            .args(["export", "--session", "1", "--kern-db", "--full-kdb", "-o"])
            .arg(&full),
    );
    let (fastest, every) = (
        kernels(&perf.join("gfx90a6e.kdb")),
        kernels(&full.join("gfx90a6e.kdb")),
    );
    assert!(
        0 < fastest && fastest < every,
        "fastest-entry {fastest}, full {every}"
    );
}
