//! `shoal miopen key` agrees with MIOpen on every verified test vector of
//! `docs/miopen-formats.md` §1.4, and `shoal import-configs` imports every recorded
//! MIOpenDriver config file.

mod common;

use std::io::Write;
use std::process::Stdio;

/// (driver line, find-db key, perf-db key): §1.4 test vectors 0–7 (8 is given as a problem,
/// not a driver line; its B key is checked from the equivalent driver line).
const VECTORS: &[(&str, &str, &str)] = &[
    (
        "conv -n 128 -c 256 -H 28 -W 28 -k 512 -y 3 -x 3 -p 1 -q 1 -u 1 -v 1 -l 1 -j 1 -g 1 -F 1",
        "256-28-28-3x3-512-28-28-128-1x1-1x1-1x1-0-NCHW-FP32-F",
        "2x256x28x28x1x3x3x1x512x128x1x1x0x1x1x0x1x1x0x0x1xNCHWxFP32xF",
    ),
    (
        "conv -n 128 -c 1024 -H 14 -W 14 -k 256 -y 1 -x 1 -p 0 -q 0 -u 1 -v 1 -l 1 -j 1 -g 1 -F 1",
        "1024-14-14-1x1-256-14-14-128-0x0-1x1-1x1-0-NCHW-FP32-F",
        "2x1024x14x14x1x1x1x1x256x128x0x0x0x1x1x0x1x1x0x0x1xNCHWxFP32xF",
    ),
    (
        "conv -n 128 -c 1024 -H 14 -W 14 -k 2048 -y 1 -x 1 -p 0 -q 0 -u 2 -v 2 -l 1 -j 1 -g 1 -F 2",
        "2048-7-7-1x1-1024-14-14-128-0x0-2x2-1x1-0-NCHW-FP32-B",
        "2x2048x7x7x1x1x1x1x1024x128x0x0x0x2x2x0x1x1x0x0x1xNCHWxFP32xB",
    ),
    (
        "convbfp16 -n 32 -c 128 -H 28 -W 28 -k 128 -y 3 -x 3 -p 1 -q 1 -u 1 -v 1 -F 1",
        "128-28-28-3x3-128-28-28-32-1x1-1x1-1x1-0-NCHW-BF16-F",
        "2x128x28x28x1x3x3x1x128x32x1x1x0x1x1x0x1x1x0x0x1xNCHWxBF16xF",
    ),
    (
        "convfp16 -n 16 -c 1024 -H 14 -W 14 -k 1024 -y 3 -x 3 -p 1 -q 1 -u 1 -v 1 -g 32 -F 1",
        "1024-14-14-3x3-1024-14-14-16-1x1-1x1-1x1-0-NCHW-FP16-F_g32",
        "2x1024x14x14x1x3x3x1x1024x16x1x1x0x1x1x0x1x1x0x0x32xNCHWxFP16xF",
    ),
    (
        "conv -n 16 -c 1024 -H 14 -W 14 -k 1024 -y 3 -x 3 -p 1 -q 1 -u 2 -v 2 -F 1",
        "1024-14-14-3x3-1024-7-7-16-1x1-2x2-1x1-0-NCHW-FP32-F",
        "2x1024x14x14x1x3x3x1x1024x16x1x1x0x2x2x0x1x1x0x0x1xNCHWxFP32xF",
    ),
    (
        "conv -n 30 -c 1280 -H 4 -W 4 -k 1280 -y 1 -x 1 --in_layout NHWC --fil_layout NHWC --out_layout NHWC -F 1",
        "1280-4-4-1x1-1280-4-4-30-0x0-1x1-1x1-0-NHWC-NHWC-NHWC-FP32-F",
        "2x1280x4x4x1x1x1x1x1280x30x0x0x0x1x1x0x1x1x0x0x1xNHWCxFP32xF",
    ),
    (
        "conv --spatial_dim 3 -n 4 -c 256 --in_d 16 -H 56 -W 56 -k 512 --fil_d 1 -y 1 -x 1 --conv_stride_d 2 -u 2 -v 2 -F 1",
        "256-16-56-56-1x1x1-512-8-28-28-4-0x0x0-2x2x2-1x1x1-0-NCDHW-FP32-F",
        "3x256x56x56x16x1x1x1x512x4x0x0x0x2x2x2x1x1x1x0x1xNCDHWxFP32xF",
    ),
    (
        // Vector 8: the B problem of a forward C=512, K=1000, 13x13, n=16 fp16 convolution.
        "convfp16 -n 16 -c 512 -H 13 -W 13 -k 1000 -y 1 -x 1 -p 0 -q 0 -u 1 -v 1 -F 2",
        "1000-13-13-1x1-512-13-13-16-0x0-1x1-1x1-0-NCHW-FP16-B",
        "2x1000x13x13x1x1x1x1x512x16x0x0x0x1x1x0x1x1x0x0x1xNCHWxFP16xB",
    ),
];

#[test]
fn every_reference_test_vector_comes_out_of_shoal_miopen_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = common::shoal(dir.path())
        .args(["miopen", "key", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        for (line, _, _) in VECTORS {
            writeln!(stdin, "./bin/MIOpenDriver {line}").unwrap();
        }
        writeln!(
            stdin,
            "./bin/MIOpenDriver bnorm -n 32 -c 1024 -H 14 -W 14 -m 1 --forw 0"
        )
        .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.len(),
        VECTORS.len() + 1,
        "one output line per input line:\n{text}"
    );
    for ((line, find, perf), got) in VECTORS.iter().zip(&lines) {
        assert_eq!(*got, format!("{find}\t{perf}"), "for `{line}`");
    }
    assert!(
        lines[VECTORS.len()].starts_with(&format!("error: <stdin>:{}:", VECTORS.len() + 1)),
        "{}",
        lines[VECTORS.len()]
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "a line that is not a convolution fails the run"
    );
}

#[test]
fn every_recorded_config_file_imports() {
    let dir = tempfile::tempdir().unwrap();
    let configs = common::repo_root().join("crates/shoal-miopen/tests/driver_configs");
    let mut files: Vec<_> = std::fs::read_dir(&configs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 7);
    for f in files {
        let tag = f.file_stem().unwrap().to_str().unwrap().to_string();
        let out = common::run_ok(
            common::shoal(dir.path())
                .args(["import-configs", "-t", &tag, "-f"])
                .arg(&f),
        );
        let summary = String::from_utf8(out.stdout).unwrap();
        assert!(summary.contains("rejected 0"), "{summary}");
        assert!(!summary.contains("configs imported 0,"), "{summary}");
    }
}

#[test]
fn bad_lines_are_listed_and_the_rest_imported_unless_strict() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.txt");
    std::fs::write(
        &file,
        "./bin/MIOpenDriver conv -n 128 -c 1024 -H 14 -W 14 -k 256 -y 1 -x 1 -F 1\n\
         ./bin/MIOpenDriver conv -n 128 -c 1024 -H 14 -W 14 -k 256 -y 1 -x 1 -Q 3 -F 1\n\
         ./bin/MIOpenDriver conv -n 64 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1 -F 1\n\
         ./bin/MIOpenDriver conv -n 64 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1 -Z 2 -F 1\n",
    )
    .unwrap();
    let configs = || -> i64 {
        let conn = rusqlite::Connection::open(dir.path().join("shoal.db")).unwrap();
        conn.query_row("SELECT COUNT(*) FROM config", [], |r| r.get(0))
            .unwrap()
    };
    // --strict: the first bad line, named by file and line, and nothing written.
    let out = common::shoal(dir.path())
        .args(["import-configs", "-t", "bad", "--strict", "-f"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bad.txt:2:") && stderr.contains("-Q"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("bad.txt:4:"),
        "stops at the first: {stderr}"
    );
    assert_eq!(
        configs(),
        0,
        "nothing is written in --strict mode when a line is bad"
    );
    // By default: the two good lines go in, each bad line is listed with its number.
    let out = common::run_ok(
        common::shoal(dir.path())
            .args(["import-configs", "-t", "bad", "-f"])
            .arg(&file),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bad.txt:2:") && stderr.contains("bad.txt:4:"),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("configs imported 2") && stdout.contains("rejected 2"),
        "{stdout}"
    );
    assert_eq!(configs(), 2);
}
