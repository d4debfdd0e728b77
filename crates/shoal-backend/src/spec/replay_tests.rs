//! Replay specs (`backend = "replay"`): the recorded space becomes the parameters, the one shape
//! and the only candidates, and every field that would build or run something is refused with
//! its name.

use std::path::Path;

use super::*;

/// A 3 × 2 space in which (3, "y") was never recorded.
const SPACE: &str = r#"{"results": [
    {"configuration": {"BM": 16, "V": "x"}, "invalidity": "correct", "times": {"runtimes": [3.0]}},
    {"configuration": {"BM": 16, "V": "y"}, "invalidity": "runtime", "times": {}},
    {"configuration": {"BM": 4, "V": "x"}, "invalidity": "correct", "times": {"runtimes": [1.0]}},
    {"configuration": {"BM": 4, "V": "y"}, "invalidity": "correct", "times": {"runtimes": [2.0]}},
    {"configuration": {"BM": 8, "V": "x"}, "invalidity": "compile", "times": {}}
]}"#;

const SPEC: &str = "name = \"r\"\nbackend = \"replay\"\nspace = \"space.json\"\n";

fn load_in(dir: &Path, spec: &str) -> Result<TuningSpec, SpecError> {
    std::fs::write(dir.join("space.json"), SPACE).unwrap();
    std::fs::write(dir.join("spec.toml"), spec).unwrap();
    load(&dir.join("spec.toml"))
}

fn params(pairs: &[(&str, &str)]) -> Params {
    let mut p = Params::new();
    for (n, v) in pairs {
        p.push(*n, *v);
    }
    p
}

#[test]
fn the_recorded_configurations_are_the_candidates() {
    let dir = tempfile::tempdir().unwrap();
    let spec = load_in(dir.path(), SPEC).unwrap();
    assert_eq!(spec.shape_columns, [REPLAY_SHAPE_COLUMN]);
    assert_eq!(spec.shapes, [params(&[("recorded", "space.json")])]);
    assert_eq!(
        spec.compile_params[0].values,
        ["4", "8", "16"],
        "numeric order"
    );
    let shape = &spec.shapes[0];
    let candidates: Vec<String> = spec
        .candidates(shape)
        .unwrap()
        .into_iter()
        .map(|(c, _)| c.key())
        .collect();
    assert_eq!(candidates.len(), 5, "{candidates:?}");
    assert!(!candidates.contains(&params(&[("BM", "8"), ("V", "y")]).key()));
    let e = spec
        .check_candidate(shape, &params(&[("BM", "8"), ("V", "y")]), None)
        .unwrap_err();
    assert!(e.to_string().contains("exclude"), "{e}");
    // Another recording is another build identity.
    let key = spec.build_key(&params(&[("BM", "4"), ("V", "x")]));
    std::fs::write(
        dir.path().join("space.json"),
        SPACE.replace("[1.0]", "[1.5]"),
    )
    .unwrap();
    let other = load(&dir.path().join("spec.toml")).unwrap();
    assert_ne!(other.build_key(&params(&[("BM", "4"), ("V", "x")])), key);
}

#[test]
fn fields_that_build_or_run_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    for (extra, field) in [
        ("[build]\ncommand = \"cc\"\n", "build"),
        ("[run]\nrepeat = 3\n", "run"),
        ("rules = [\"BM > 4\"]\n", "rules"),
        ("[[shapes]]\nM = 1\n", "shapes"),
        ("[params.compile]\nX = [1]\n", "params"),
    ] {
        let text = if extra.starts_with('[') {
            format!("{SPEC}{extra}")
        } else {
            format!("{extra}{SPEC}")
        };
        let e = load_in(dir.path(), &text).unwrap_err().to_string();
        assert!(e.contains(field) && e.contains("remove"), "{field}: {e}");
    }
}

#[test]
fn a_missing_or_bad_space_names_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let e = load_in(dir.path(), "name = \"r\"\nbackend = \"replay\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("space") && e.contains("T4"), "{e}");
    let e = load_in(dir.path(), &SPEC.replace("space.json", "nope.json"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("space") && e.contains("nope.json"), "{e}");
    std::fs::write(dir.path().join("bad.json"), "{\"results\": 3}").unwrap();
    std::fs::write(
        dir.path().join("spec.toml"),
        SPEC.replace("space.json", "bad.json"),
    )
    .unwrap();
    let e = load(&dir.path().join("spec.toml")).unwrap_err().to_string();
    assert!(e.contains("bad.json") && e.contains("results"), "{e}");
    let e = load_in(dir.path(), &SPEC.replace("replay", "magic"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("backend") && e.contains("magic"), "{e}");
}

#[test]
fn an_exec_spec_with_a_space_or_without_build_says_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let e = load_in(dir.path(), &SPEC.replace("backend = \"replay\"\n", ""))
        .unwrap_err()
        .to_string();
    assert!(e.contains("backend = \"replay\""), "{e}");
    let e = load_in(
        dir.path(),
        "name = \"c\"\n[run]\ncommand = \"x\"\n[[shapes]]\nM = 1\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("build") && e.contains("no [build] section"),
        "{e}"
    );
}
