//! The exported databases, byte for byte (text) and row for row (SQLite, schema text included),
//! against golden files derived by hand from the real database lines quoted in
//! `docs/miopen-formats.md` and from fin's recorded outputs — never produced by the
//! writers under test. `tests/golden/README.md` says how each golden file was made.

mod fin_support;

use fin_support::{conv2d, conv3d_vector7, fixture, fixture_json, golden};
use rusqlite::types::ValueRef;
use rusqlite::Connection;
use shoal_miopen::export::{
    find_db_text, find_entries, perf_db_text, perf_entries, write_kdb, write_perf_db_sqlite,
    FindDbEntry, KdbEntry, PerfDbEntry,
};
use shoal_miopen::fin::{parse_output, EvalResult, KernelObject};
use shoal_miopen::keys::perf_db_key;
use shoal_miopen::{ConvConfig, DataType, Direction};
use std::path::Path;
use std::process::Command;

/// §1.4 #8: the B problem of `gfx942130.db` config 1 (fwd C=512, K=1000, 13x13, n=16, fp16).
fn v8() -> ConvConfig {
    conv2d(
        DataType::Fp16,
        Direction::BackwardData,
        16,
        512,
        (13, 13),
        1000,
        (1, 1),
        (0, 0),
        (1, 1),
    )
}

/// §1.4 #4: `convfp16 -n 16 -c 1024 -H 14 -W 14 -k 1024 -y 3 -x 3 -p 1 -q 1 -g 32 -F 1`.
fn v4() -> ConvConfig {
    let mut c = conv2d(
        DataType::Fp16,
        Direction::Forward,
        16,
        1024,
        (14, 14),
        1024,
        (3, 3),
        (1, 1),
        (1, 1),
    );
    c.group_count = 32;
    c
}

/// §1.4 #6: `conv -n 30 -c 1280 -H 4 -W 4 -k 1280 -y 1 -x 1`, all layouts NHWC, `-F 1`.
fn v6() -> ConvConfig {
    let mut c = conv2d(
        DataType::Fp32,
        Direction::Forward,
        30,
        1280,
        (4, 4),
        1280,
        (1, 1),
        (0, 0),
        (1, 1),
    );
    c.in_layout = "NHWC".into();
    c.fil_layout = "NHWC".into();
    c.out_layout = "NHWC".into();
    c
}

/// §1.4 #0: `conv -n 128 -c 256 -H 28 -W 28 -k 512 -y 3 -x 3 -p 1 -q 1 -F 1`.
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

fn fe(config: &ConvConfig, solver: &str, time: &str, ws: u64, algo: &str) -> FindDbEntry {
    FindDbEntry {
        config: config.clone(),
        solver: solver.into(),
        time_ms: time.parse().unwrap(),
        workspace: ws,
        algorithm: format!("miopenConvolution{algo}"),
    }
}

fn pe(config: &ConvConfig, solver: &str, params: &str) -> PerfDbEntry {
    PerfDbEntry {
        config: config.clone(),
        solver: solver.into(),
        params: params.into(),
    }
}

#[test]
fn find_db_reproduces_shipped_gfx942130_lines() {
    let (b, f) = (v8(), v4());
    let nhwc = v6();
    let entries = vec![
        // Given out of order, with a 5th (slowest) entry that the top-4 rule drops and a
        // later duplicate of a solver that the first-record-wins rule ignores.
        fe(
            &nhwc,
            "ConvDirectNaiveConvFwd",
            "6.73167",
            0,
            "FwdAlgoDirect",
        ),
        fe(
            &b,
            "ConvBinWinogradRxSf2x3g1",
            "0.322663",
            0,
            "BwdDataAlgoWinograd",
        ),
        fe(&f, "GemmFwdRest", "0.73341", 3612672, "FwdAlgoGEMM"),
        fe(
            &b,
            "ConvAsmImplicitGemmGTCDynamicBwdXdlopsNHWC",
            "0.051639",
            13714688,
            "BwdDataAlgoImplicitGEMM",
        ),
        fe(
            &nhwc,
            "ConvHipImplicitGemmFwdXdlops",
            "0.0863205",
            0,
            "FwdAlgoImplicitGEMM",
        ),
        fe(
            &f,
            "ConvBinWinogradRxSf2x3",
            "0.044061",
            0,
            "FwdAlgoWinograd",
        ),
        fe(&b, "ConvDirectNaiveConvBwd", "0.9", 0, "BwdDataAlgoDirect"),
        fe(&b, "GemmBwd1x1_stride1", "0.059578", 0, "BwdDataAlgoGEMM"),
        fe(&f, "ConvDirectNaiveConvFwd", "0.693796", 0, "FwdAlgoDirect"),
        fe(
            &nhwc,
            "ConvAsmImplicitGemmGTCDynamicFwdXdlopsNHWC",
            "0.053764",
            0,
            "FwdAlgoImplicitGEMM",
        ),
        fe(
            &b,
            "ConvBinWinogradRxSf3x2",
            "0.139621",
            0,
            "BwdDataAlgoWinograd",
        ),
        fe(
            &f,
            "ConvBinWinogradRxSf3x2",
            "0.058414",
            0,
            "FwdAlgoWinograd",
        ),
        fe(&b, "GemmBwd1x1_stride1", "0.001", 0, "BwdDataAlgoGEMM"),
    ];
    assert_eq!(find_db_text(&entries), golden("gfx942130.HIP.fdb.txt"));
}

#[test]
fn find_db_reproduces_shipped_3d_line() {
    let c = conv3d_vector7();
    let entries = vec![
        fe(&c, "ConvDirectNaiveConvFwd", "19.046", 0, "FwdAlgoDirect"),
        fe(&c, "GemmFwdRest", "0.529279", 6422528, "FwdAlgoGEMM"),
        fe(
            &c,
            "ConvHipImplicitGemmV4R4Fwd",
            "0.437599",
            0,
            "FwdAlgoImplicitGEMM",
        ),
    ];
    assert_eq!(find_db_text(&entries), golden("gfx90a68.HIP.fdb.txt"));
}

/// (config, eval results) of fin's recorded find-eval and perf-eval outputs.
fn fixture_results() -> Vec<(ConvConfig, Vec<EvalResult>)> {
    let mut out = Vec::new();
    for name in ["fin_output_find_eval.json", "fin_output_perf_eval.json"] {
        for job in parse_output(&fixture(name)).unwrap().jobs {
            let config = job.config().unwrap().unwrap();
            let results: Vec<EvalResult> = job
                .find_eval
                .iter()
                .chain(job.perf_eval.iter())
                .flatten()
                .cloned()
                .collect();
            out.push((config, results));
        }
    }
    out
}

#[test]
fn find_db_from_fin_eval_outputs() {
    let entries: Vec<FindDbEntry> = fixture_results()
        .iter()
        .flat_map(|(c, r)| find_entries(c, r))
        .collect();
    assert_eq!(entries.len(), 2);
    assert_eq!(find_db_text(&entries), golden("fin_fixtures.HIP.fdb.txt"));
}

fn reference_perf_entries() -> Vec<PerfDbEntry> {
    let (b, f, d3, d0) = (v8(), v4(), conv3d_vector7(), v0());
    vec![
        // Problems out of order; each problem's pairs in the order of the real line.
        pe(&d0, "ConvAsm3x3U", "9,8,4"),
        pe(&d0, "ConvOclDirectFwd", "32,8,32,32,1,4,8,4,2"),
        pe(&b, "ConvBinWinogradRxSf3x2", "215"),
        pe(&d0, "ConvHipImplicitGemmV4R1Fwd", "16,128,16,2,4,4,4,4,4,4,16,1,16,1,2,128"),
        pe(&d3, "ConvHipImplicitGemmV4R4Fwd", "256,64,64,4,2,2"),
        pe(&d0, "ConvBinWinogradRxSf3x2", "60"),
        pe(
            &b,
            "ConvAsmImplicitGemmGTCDynamicBwdXdlopsNHWC",
            "bwd,nhwc,fp16,0,1,128,128,16,32,32,4,1,1,2,2,1,0,2,1,0,1,1,8,1,1,16,1,16,1,1,8,1,1,16,1,16,152[2]",
        ),
        pe(&f, "ConvBinWinogradRxSf2x3", "5"),
        pe(&d0, "ConvHipImplicitGemmV4R4Fwd", "256,128,64,8,4,2"),
        pe(&d0, "ConvMlirIgemmFwd", "256,128,64,8,4,2"),
        pe(&f, "ConvBinWinogradRxSf3x2", "7"),
        pe(&d0, "ConvCkIgemmFwdV6r1DlopsNchw", "7"),
        // Ignored: a later duplicate, and a non-tunable solver's empty params.
        pe(&d0, "ConvAsm3x3U", "0,0,0"),
        pe(&d0, "GemmFwdRest", ""),
    ]
}

#[test]
fn perf_db_text_reproduces_shipped_lines() {
    assert_eq!(
        perf_db_text(&reference_perf_entries()),
        golden("perf_db_reference.db.txt")
    );
}

fn fixture_perf_entries() -> Vec<PerfDbEntry> {
    fixture_results()
        .iter()
        .flat_map(|(c, r)| perf_entries(c, r))
        .collect()
}

#[test]
fn perf_db_text_from_fin_eval_outputs() {
    assert_eq!(
        perf_db_text(&fixture_perf_entries()),
        golden("fin_fixtures.db.txt")
    );
}

/// A deterministic text dump of an SQLite file: `sqlite_master` in creation order, then each
/// table by id; text quoted as SQL literals, integers bare, blobs as `blob(len,md5)`.
fn dump(path: &Path, tables: &[&str]) -> String {
    let conn = Connection::open(path).unwrap();
    let lit = |v: ValueRef<'_>| -> String {
        match v {
            ValueRef::Null => "NULL".into(),
            ValueRef::Integer(i) => i.to_string(),
            ValueRef::Real(r) => r.to_string(),
            ValueRef::Text(t) => format!("'{}'", String::from_utf8_lossy(t).replace('\'', "''")),
            ValueRef::Blob(b) => format!("blob({},{})", b.len(), md5_hex(b)),
        }
    };
    let mut out = vec!["## sqlite_master".to_string()];
    let mut sections = vec![(
        "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY rowid".to_string(),
        None,
    )];
    for t in tables {
        sections.push((format!("SELECT * FROM {t} ORDER BY id"), Some(*t)));
    }
    for (sql, header) in sections {
        if let Some(h) = header {
            out.push(format!("## {h}"));
        }
        let mut stmt = conn.prepare(&sql).unwrap();
        let n = stmt.column_count();
        let mut rows = stmt.query([]).unwrap();
        while let Some(row) = rows.next().unwrap() {
            let cols: Vec<String> = (0..n).map(|i| lit(row.get_ref(i).unwrap())).collect();
            out.push(cols.join("|"));
        }
    }
    out.join("\n") + "\n"
}

fn md5_hex(b: &[u8]) -> String {
    shoal_miopen::fin::blob::md5_hex(b)
}

const PY_DUMP: &str = r#"
import hashlib, sqlite3, sys
con = sqlite3.connect(sys.argv[1])
def lit(v):
    if v is None: return 'NULL'
    if isinstance(v, int): return str(v)
    if isinstance(v, float): return repr(v)
    if isinstance(v, bytes): return 'blob(%d,%s)' % (len(v), hashlib.md5(v).hexdigest())
    return "'" + v.replace("'", "''") + "'"
out = ['## sqlite_master']
out += ['|'.join(map(lit, r)) for r in con.execute('SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY rowid')]
for t in sys.argv[2:]:
    out.append('## ' + t)
    out += ['|'.join(map(lit, r)) for r in con.execute('SELECT * FROM %s ORDER BY id' % t)]
sys.stdout.write('\n'.join(out) + '\n')
"#;

/// The same dump made by Python's `sqlite3` module: the file opens there too. Skipped (with a
/// note) where no python3 is installed.
fn python_dump(path: &Path, tables: &[&str]) -> Option<String> {
    let out = Command::new("python3")
        .arg("-c")
        .arg(PY_DUMP)
        .arg(path)
        .args(tables)
        .output();
    match out {
        Ok(o) if o.status.success() => Some(String::from_utf8(o.stdout).unwrap()),
        Ok(o) => panic!(
            "python3 could not read {}: {}",
            path.display(),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => {
            eprintln!("python3 not runnable ({e}); skipping the Python sqlite3 check");
            None
        }
    }
}

fn check_sqlite(path: &Path, tables: &[&str], golden_name: &str) {
    let want = golden(golden_name);
    assert_eq!(dump(path, tables), want, "{golden_name} (rusqlite)");
    if let Some(py) = python_dump(path, tables) {
        assert_eq!(py, want, "{golden_name} (python3 sqlite3)");
    }
}

#[test]
fn perf_db_sqlite_reproduces_shipped_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ref.db");
    // Written twice: the second export replaces the first file.
    write_perf_db_sqlite(&path, &fixture_perf_entries()).unwrap();
    let counts = write_perf_db_sqlite(&path, &reference_perf_entries()).unwrap();
    assert_eq!((counts.configs, counts.perf_rows), (4, 12));
    check_sqlite(&path, &["config", "perf_db"], "perf_db_reference.db.dump");
}

#[test]
fn perf_db_sqlite_from_fin_eval_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fixtures.db");
    write_perf_db_sqlite(&path, &fixture_perf_entries()).unwrap();
    check_sqlite(&path, &["config", "perf_db"], "fin_fixtures.db.dump");
}

/// MIOpen finds the rows with its own lookup query, every value bound as text
/// (`sqlite_db.hpp`), using the 24 values of the text key.
#[test]
fn miopen_lookup_query_finds_exported_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ref.db");
    write_perf_db_sqlite(&path, &reference_perf_entries()).unwrap();
    let conn = Connection::open(&path).unwrap();
    let cols = [
        "layout",
        "data_type",
        "direction",
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
    ];
    let wher: Vec<String> = cols.iter().map(|c| format!("({c} = ? )")).collect();
    let sql = format!(
        "SELECT solver, params FROM perf_db INNER JOIN config ON perf_db.config = config.id WHERE ( {} );",
        wher.join(" AND ")
    );
    let key = perf_db_key(&v8());
    let f: Vec<&str> = key.split('x').collect();
    // Key order: 21 ints then layout, data_type, direction; query order: the 3 strings first.
    let mut bound: Vec<String> = vec![f[21].into(), f[22].into(), f[23].into()];
    bound.extend(f[..21].iter().map(|s| s.to_string()));
    let mut stmt = conn.prepare(&sql).unwrap();
    let rows: Vec<(String, String)> = stmt
        .query_map(rusqlite::params_from_iter(bound.iter()), |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0], ("ConvBinWinogradRxSf3x2".into(), "215".into()));
}

fn fixture_kernels() -> (KernelObject, Vec<KernelObject>) {
    let eval_in = fixture_json("fin_input_find_eval.json");
    let find_kernel: KernelObject = serde_json::from_value(
        eval_in[0]["miopen_find_compile_result"][0]["kernel_objects"][0].clone(),
    )
    .unwrap();
    let pc = parse_output(&fixture("fin_output_perf_compile.json")).unwrap();
    let perf = pc.jobs[0].perf_compile.as_ref().unwrap()[0]
        .kernel_objects
        .clone();
    (find_kernel, perf)
}

#[test]
fn kdb_from_fin_kernel_objects() {
    let (find_kernel, perf) = fixture_kernels();
    let bundle = b"__CLANG_OFFLOAD_BUNDLE__".repeat(200);
    let entries = vec![
        KdbEntry::from_kernel_object(&find_kernel, "gfx906:sram-ecc+:xnack-").unwrap(),
        KdbEntry::from_kernel_object(&perf[0], "gfx906").unwrap(),
        KdbEntry::from_kernel_object(&perf[1], "gfx906").unwrap(),
        KdbEntry::from_kernel_object(&find_kernel, "gfx906").unwrap(), // duplicate: skipped
        KdbEntry {
            kernel_file: "mlir_gen_igemm_conv2d_v4r4_fwd.mlir".into(),
            comp_options: " --x2 1 --operation conv2d".into(),
            arch: "gfx906".into(),
            blob: b"\x7fELF-mlir".to_vec(), // too small to compress: stored raw, size 0
        },
        KdbEntry {
            kernel_file: "naive_conv.cpp.o".into(),
            comp_options: " -DMIOPEN_USE_FP32=1 -mcpu=gfx906".into(),
            arch: "gfx906".into(),
            blob: bundle,
        },
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gfx906_60.kdb");
    assert_eq!(write_kdb(&path, &entries).unwrap(), 5);
    check_sqlite(&path, &["kern_db"], "fin_fixtures.kdb.dump");
}
