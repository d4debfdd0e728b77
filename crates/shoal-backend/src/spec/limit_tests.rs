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
    assert_eq!(spec.candidates(&spec.shapes[0]).unwrap().len(), 60);
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

#[test]
fn no_limit_lets_a_space_past_memory_be_built() {
    // 1000^4 = 10^12 candidates on one shape: `--max-candidates 2000000000000` used to let the
    // loader start on it and abort on a failed allocation. Now it is refused at once, under any
    // limit, naming the flag and the ceiling.
    let params = |names: [&str; 2]| -> String {
        names
            .iter()
            .map(|n| format!("{n} = {{ range = [1, 1000] }}\n"))
            .collect()
    };
    let spec = SPEC
        .replace(
            "BM = [16, 32, 64]\nBN = { pow2 = [1, 8] }\n",
            &params(["A", "B"]),
        )
        .replace("S = { range = [1, 5] }\n", &params(["C", "D"]));
    let dir = spec_dir(&spec, "M\n1\n");
    for max_candidates in [2_000_000_000_000, u64::MAX] {
        let started = Instant::now();
        let e = load_err(
            &dir,
            &Limits {
                max_candidates,
                ..Limits::default()
            },
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "took {:?}",
            started.elapsed()
        );
        assert!(e.contains("1000000000000 candidates per shape"), "{e}");
        assert!(
            e.contains(&format!("more than the {MAX_CANDIDATES_CEILING}")),
            "{e}"
        );
        assert!(e.contains("`--max-candidates` cannot go above it"), "{e}");
    }
    // Under the ceiling, the limit is the user's as before.
    let e = load_err(&dir, &Limits::default());
    assert!(e.contains("limit of 1000000"), "{e}");
    assert!(e.contains("--max-candidates N"), "{e}");
}

#[test]
fn combinations_are_made_one_at_a_time_in_spec_order() {
    // Far more combinations than a test could hold, yet asking whether one exists and taking
    // the first few allocates nothing but those.
    let def = |name: &str, n: usize| ParamDef {
        name: name.into(),
        values: (0..n).map(|i| i.to_string()).collect(),
    };
    let defs: Vec<ParamDef> = (0..8).map(|i| def(&format!("P{i}"), 1000)).collect();
    let first: Vec<String> = combinations(&defs).take(3).map(|p| p.key()).collect();
    assert_eq!(first.len(), 3);
    assert!(first[1].ends_with("P7=1"), "{first:?}");
    let small = [def("A", 2), def("B", 3)];
    let all: Vec<String> = combinations(&small).map(|p| p.key()).collect();
    assert_eq!(all.len(), 6);
    assert!(all[0].contains("A=0") && all[0].contains("B=0"), "{all:?}");
    assert!(all[5].contains("A=1") && all[5].contains("B=2"), "{all:?}");
    assert_eq!(combinations(&[]).count(), 1, "no parameter: one empty set");
    assert_eq!(combinations(&[def("A", 0)]).count(), 0);
}

#[test]
fn a_list_memory_cannot_hold_is_an_error() {
    // Items that each claim more than half the address space: the probe before the list's
    // first growth is refused, and nothing is allocated.
    let mut out: Vec<u8> = Vec::new();
    let e = try_push(&mut out, 1, usize::MAX / 2, "candidates").unwrap_err();
    assert_eq!(
        e,
        OutOfMemory {
            what: "candidates",
            held: 0
        }
    );
    assert!(e.to_string().contains("do not fit in memory"), "{e}");
    assert_eq!(out.capacity(), 0);
    // Items of a sane size go in.
    for i in 0..100 {
        try_push(&mut out, i, 64, "candidates").unwrap();
    }
    assert_eq!(out.len(), 100);
}
