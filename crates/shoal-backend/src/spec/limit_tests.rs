//! Unit tests of the limits on loading a spec: the candidate space is counted and refused
//! before it is built, and only small regular files are read.

use std::fs::File;
use std::time::{Duration, Instant};

use super::*;

const SPEC: &str = r#"name = "limits"
sources = ["k.c"]
shapes_csv = "shapes.csv"

[build]
command = "cc -o {out} k.c"

[run]
command = "{artifact} {M}"

[params.compile]
BM = [16, 32, 64]
BN = { pow2 = [1, 8] }

[params.run]
S = { range = [1, 5] }
"#;

fn spec_dir(spec: &str, csv: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("k.c"), "int main(){}").unwrap();
    std::fs::write(dir.path().join("shapes.csv"), csv).unwrap();
    std::fs::write(dir.path().join("spec.toml"), spec).unwrap();
    dir
}

fn load_err(dir: &tempfile::TempDir, limits: &Limits) -> String {
    load_with(&dir.path().join("spec.toml"), limits)
        .expect_err("the spec should be rejected")
        .to_string()
}

#[test]
fn the_space_is_counted_and_the_limit_is_configurable() {
    // 3 × 4 compile sets, 5 run sets, 2 shapes: 120 candidates.
    let dir = spec_dir(SPEC, "M\n1\n2\n");
    let at = |max_candidates| Limits {
        max_candidates,
        ..Limits::default()
    };
    let spec = load_with(&dir.path().join("spec.toml"), &at(120)).unwrap();
    assert_eq!(spec.candidates(&spec.shapes[0]).len(), 60);
    let e = load_err(&dir, &at(119));
    assert!(
        e.contains("120 candidates (12 compile sets × 5 run sets × 2 shapes)"),
        "{e}"
    );
    assert!(e.contains("limit of 119"), "{e}");
    assert!(e.contains("--max-candidates N"), "{e}");
    assert!(e.contains("params:"), "the field is named: {e}");
    // One shape's space is checked before the shapes are read.
    let e = load_err(&dir, &at(59));
    assert!(e.contains("60 candidates per shape"), "{e}");
}

#[test]
fn an_astronomical_space_fails_fast_without_expanding_it() {
    // Each range is within the per-parameter limit; their product is 10^30, and past u128 with
    // nine of them. Expanding even one combination list would take more memory than exists.
    for n in [6, 9] {
        let params: String = (0..n)
            .map(|i| format!("P{i} = {{ range = [1, 100000] }}\n"))
            .collect();
        let spec = SPEC
            .replace("BM = [16, 32, 64]\nBN = { pow2 = [1, 8] }\n", &params)
            .replace("S = { range = [1, 5] }\n", "S = [1]\n");
        let dir = spec_dir(&spec, "M\n1\n");
        let started = Instant::now();
        let e = load_err(&dir, &Limits::default());
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "took {:?}",
            started.elapsed()
        );
        if n == 6 {
            assert!(
                e.contains("1000000000000000000000000000000 candidates per shape"),
                "{e}"
            );
        } else {
            assert!(
                e.contains(&format!("more than {} candidates", u128::MAX)),
                "{e}"
            );
        }
        assert!(e.contains("limit of 1000000"), "{e}");
    }
}

#[test]
fn sources_must_be_small_regular_files() {
    let dir = spec_dir(
        &SPEC.replace("[\"k.c\"]", "[\"k.c\", \"/dev/zero\"]"),
        "M\n1\n",
    );
    let e = load_err(&dir, &Limits::default());
    assert!(
        e.contains("sources[1]: `/dev/zero` is a character device, not a regular file"),
        "{e}"
    );
    let dir = spec_dir(&SPEC.replace("[\"k.c\"]", "[\".\"]"), "M\n1\n");
    let e = load_err(&dir, &Limits::default());
    assert!(e.contains("sources[0]: `.` is a directory"), "{e}");

    let dir = spec_dir(SPEC, "M\n1\n");
    let big = File::options()
        .write(true)
        .open(dir.path().join("k.c"))
        .unwrap();
    big.set_len(MAX_SOURCE_BYTES + 1).unwrap(); // sparse: no disk, and never read
    let e = load_err(&dir, &Limits::default());
    assert!(
        e.contains(&format!(
            "sources[0]: `k.c` is {} bytes, over the limit",
            MAX_SOURCE_BYTES + 1
        )),
        "{e}"
    );
}

#[test]
fn the_shapes_csv_must_be_a_small_regular_file() {
    let dir = spec_dir(&SPEC.replace("shapes.csv", "/dev/zero"), "M\n1\n");
    let e = load_err(&dir, &Limits::default());
    assert!(
        e.contains("shapes_csv: `/dev/zero` is a character device"),
        "{e}"
    );
    let dir = spec_dir(SPEC, "M\n1\n");
    File::options()
        .write(true)
        .open(dir.path().join("shapes.csv"))
        .unwrap()
        .set_len(MAX_SHAPES_BYTES + 1)
        .unwrap();
    let e = load_err(&dir, &Limits::default());
    assert!(
        e.contains(&format!(
            "shapes_csv: `shapes.csv` is {} bytes",
            MAX_SHAPES_BYTES + 1
        )),
        "{e}"
    );
    // A smaller limit applies as given.
    let dir = spec_dir(SPEC, "M\n1\n2\n3\n");
    let limits = Limits {
        max_shapes_bytes: 4,
        ..Limits::default()
    };
    assert!(load_err(&dir, &limits).contains("over the limit of 4 bytes"));
}

#[test]
fn the_spec_file_itself_must_be_a_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    let e = load(dir.path()).unwrap_err().to_string();
    assert!(e.contains("the spec is a directory"), "{e}");
    let e = load(Path::new("/dev/zero")).unwrap_err().to_string();
    assert!(
        e.starts_with("/dev/zero: the spec is a character device"),
        "{e}"
    );
}
