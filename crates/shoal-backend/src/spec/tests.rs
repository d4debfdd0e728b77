//! Unit tests of spec loading: messages that name file, line and field; candidates; build keys.
use std::path::{Path, PathBuf};
use std::time::Duration;

use shoal_model::Params;
use tempfile::TempDir;

use super::*;

/// Line numbers in the comments are the ones the error tests point at.
const BASE: &str = r#"name = "cpu-gemm"
description = "tiled gemm"
sources = ["gemm.c"]
rules = [
  "BM * BN <= 4096",
  "K % BK == 0",
]
flops = "2 * M * N * K"
shapes_csv = "shapes.csv"

[build]
command = "cc -O2 -DBM={BM} -DBN={BN} -DBK={BK} -o {out} {spec_dir}/gemm.c"
timeout_s = 30

[run]
command = "{artifact} {M} {N} {K} {SPLIT}"
timeout_s = 2.5
warmup = 1
repeat = 3
statistic = "min"

[output]
time = 'time_ms=([0-9.]+)'
time_unit = "ms"
pass = 'PASS'

[params.compile]
BM = [32, 64]
BN = { pow2 = [32, 128] }
BK = { range = [16, 48], step = 16 }

[params.run]
SPLIT = [1, 2]
"#;

const CSV: &str = "M, N, K\n64, 64, 64\n\n128, 128, 96\n";

fn dir_with(files: &[(&str, &str)]) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

fn load_with(spec: &str, extra: &[(&str, &str)]) -> (TempDir, Result<TuningSpec, SpecError>) {
    let mut files = vec![("gemm.c", "int main(){}"), ("shapes.csv", CSV)];
    files.extend_from_slice(extra);
    files.push(("spec.toml", spec));
    let dir = dir_with(&files);
    let r = load(&dir.path().join("spec.toml"));
    (dir, r)
}

fn err_of(spec: &str) -> String {
    let (dir, r) = load_with(spec, &[]);
    let e = r.expect_err("the spec should be rejected");
    let text = e.to_string();
    // Show messages relative to the temp dir.
    let prefix = format!("{}/", dir.path().display());
    text.replacen(&prefix, "", 1)
}

fn params(pairs: &[(&str, &str)]) -> Params {
    let mut p = Params::new();
    for (n, v) in pairs {
        p.push(*n, *v);
    }
    p
}

#[test]
fn full_spec_loads() {
    let (dir, spec) = load_with(BASE, &[]);
    let spec = spec.unwrap();
    assert_eq!(spec.name, "cpu-gemm");
    assert_eq!(spec.description.as_deref(), Some("tiled gemm"));
    assert_eq!(spec.dir, std::fs::canonicalize(dir.path()).unwrap());
    // File order, not alphabetical order.
    let names: Vec<&str> = spec
        .compile_params
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(names, ["BM", "BN", "BK"]);
    assert_eq!(spec.compile_params[1].values, ["32", "64", "128"]);
    assert_eq!(spec.compile_params[2].values, ["16", "32", "48"]);
    assert_eq!(spec.run_params[0].values, ["1", "2"]);
    assert_eq!(spec.shape_columns, ["M", "N", "K"]);
    assert_eq!(spec.shapes.len(), 2);
    assert_eq!(spec.shapes[1].key(), "M=128,N=128,K=96");
    assert_eq!(spec.build.timeout, Duration::from_secs(30));
    assert_eq!(spec.run.timeout, Duration::from_millis(2500));
    assert_eq!((spec.run.warmup, spec.run.repeat), (1, 3));
    assert_eq!(spec.run.statistic, Statistic::Min);
    assert_eq!(spec.output.time_unit, TimeUnit::Ms);
    assert!(spec.output.pass.is_some() && spec.output.fail.is_none());
    assert_eq!(spec.rules.len(), 2);
    assert!(spec.warnings.is_empty(), "{:?}", spec.warnings);
    assert_eq!(spec.flops(&spec.shapes[0]), Some(2.0 * 64.0 * 64.0 * 64.0));
    assert_eq!(spec.source_hashes.len(), 1);
    assert!(spec.identity().starts_with(BASE));
    assert!(spec.identity().contains(&spec.source_hashes[0].1));
}

/// `backend = "exec"` is the default written out. `command`, its old name, still loads as the
/// same spec (the same shapes, candidates and builds), with one warning that names the line;
/// any other name is an error that lists the names.
#[test]
fn the_exec_backend_keeps_reading_its_old_name_with_a_warning() {
    let with = |name: &str| {
        BASE.replacen(
            "description",
            &format!("backend = \"{name}\"\ndescription"),
            1,
        )
    };
    let (_d, plain) = load_with(BASE, &[]);
    let plain = plain.unwrap();
    let (_d, exec) = load_with(&with("exec"), &[]);
    assert!(exec.unwrap().warnings.is_empty());
    let (dir, old) = load_with(&with("command"), &[]);
    let old = old.unwrap();
    assert!(old.replay.is_none());
    let warnings: Vec<String> = old
        .warnings
        .iter()
        .map(|w| w.replacen(&format!("{}/", dir.path().display()), "", 1))
        .collect();
    assert_eq!(
        warnings,
        ["spec.toml:2: backend: `command` is the old name of `exec`: write `backend = \"exec\"`"]
    );
    assert_eq!(old.shapes, plain.shapes);
    let candidates = |s: &TuningSpec| s.candidates(&s.shapes[0]).unwrap();
    assert_eq!(candidates(&old), candidates(&plain));
    let compile = params(&[("BM", "32"), ("BN", "64"), ("BK", "16")]);
    assert_eq!(old.build_key(&compile), plain.build_key(&compile));
    assert_eq!(
        err_of(&with("cmd")),
        "spec.toml:2: backend: `cmd` is not one of exec, replay"
    );
}

#[test]
fn candidates_follow_the_rules() {
    let (_dir, spec) = load_with(BASE, &[]);
    let spec = spec.unwrap();
    // Shape 0: K=64, BK in {16, 32} divides it, 48 does not. BM*BN <= 4096: (32,32),(32,64)
    // (32,128),(64,32),(64,64). 5 tiles * 2 BK * 2 SPLIT = 20.
    let c0 = spec.candidates(&spec.shapes[0]).unwrap();
    assert_eq!(c0.len(), 20);
    assert_eq!(c0[0].0.key(), "BM=32,BN=32,BK=16");
    assert_eq!(c0[0].1.key(), "SPLIT=1");
    assert_eq!(c0[1].1.key(), "SPLIT=2");
    assert!(c0.iter().all(|(c, _)| c.get("BK") != Some("48")));
    // Shape 1: K=96, BK in {16, 32, 48} all divide it.
    assert_eq!(spec.candidates(&spec.shapes[1]).unwrap().len(), 30);
    // Distinct compile sets over all shapes: 5 tiles * 3 BK.
    let sets = spec.compile_sets().unwrap();
    assert_eq!(sets.len(), 15);
    assert!(sets.iter().all(|s| s.get("SPLIT").is_none()));
}

#[test]
fn argv_substitution() {
    let (_dir, spec) = load_with(BASE, &[]);
    let spec = spec.unwrap();
    let compile = params(&[("BM", "32"), ("BN", "64"), ("BK", "16")]);
    let argv = spec.build_argv(&compile, Path::new("/tmp/x/out"));
    let dir = spec.dir.display().to_string();
    assert_eq!(
        argv,
        [
            "cc",
            "-O2",
            "-DBM=32",
            "-DBN=64",
            "-DBK=16",
            "-o",
            "/tmp/x/out",
            &format!("{dir}/gemm.c")
        ]
    );
    let run = params(&[("SPLIT", "2")]);
    let argv = spec.run_argv(&compile, &run, &spec.shapes[0], Path::new("/a/b"));
    assert_eq!(argv, ["/a/b", "64", "64", "64", "2"]);
}

#[test]
fn build_key_tracks_sources_and_compile_params_only() {
    let (dir, spec) = load_with(BASE, &[]);
    let spec = spec.unwrap();
    let c1 = params(&[("BM", "32"), ("BN", "64"), ("BK", "16")]);
    let c2 = params(&[("BM", "64"), ("BN", "64"), ("BK", "16")]);
    let k1 = spec.build_key(&c1);
    assert_eq!(k1.len(), 64);
    assert_eq!(k1, spec.build_key(&c1.clone()));
    assert_ne!(k1, spec.build_key(&c2));

    // A run parameter changes the run argv but not the artifact.
    let r1 = spec.run_argv(
        &c1,
        &params(&[("SPLIT", "1")]),
        &spec.shapes[0],
        Path::new("a"),
    );
    let r2 = spec.run_argv(
        &c1,
        &params(&[("SPLIT", "2")]),
        &spec.shapes[0],
        Path::new("a"),
    );
    assert_ne!(r1, r2);
    let run_changed = BASE.replace("SPLIT = [1, 2]", "SPLIT = [1, 2, 4]");
    std::fs::write(dir.path().join("spec.toml"), &run_changed).unwrap();
    let respec = load(&dir.path().join("spec.toml")).unwrap();
    assert_eq!(respec.build_key(&c1), k1);
    assert_ne!(respec.identity(), spec.identity());

    // Editing the kernel source changes every key and the identity.
    std::fs::write(dir.path().join("gemm.c"), "int main(){return 0;}").unwrap();
    let edited = load(&dir.path().join("spec.toml")).unwrap();
    assert_ne!(edited.build_key(&c1), k1);
    assert_ne!(edited.identity(), respec.identity());
}

#[test]
fn syntax_error_names_line_and_column() {
    let bad = BASE.replace("timeout_s = 30", "timeout_s = = 30");
    let e = err_of(&bad);
    assert!(e.starts_with("spec.toml:13:13: TOML syntax: "), "{e}");
    // The line is shown, with the two before it and a caret under the column.
    assert!(
        e.contains("\n  13 | timeout_s = = 30\n     |             ^"),
        "{e}"
    );
    assert!(e.contains("\n  11 | "), "{e}");
}

#[test]
fn an_unclosed_array_shows_the_lines_that_opened_it() {
    let bad = BASE.replace("timeout_s = 30", "timeout_s = [30,");
    let e = err_of(&bad);
    // At the line that opened the array (13), not where the parser stopped (16).
    assert!(e.starts_with("spec.toml:13:13: TOML syntax: "), "{e}");
    assert!(
        e.contains("the array opened here is not closed; the parser stopped at line 16"),
        "{e}"
    );
    assert!(
        e.contains("\n  13 | timeout_s = [30,\n     |             ^"),
        "{e}"
    );
    assert!(e.contains("\n  16 | command = "), "{e}");
}

#[test]
fn unknown_field_is_named() {
    let bad = BASE.replace("repeat = 3", "repeats = 3");
    let e = err_of(&bad);
    assert!(
        e.starts_with("spec.toml:19:1: unknown field `repeats`"),
        "{e}"
    );
    let e = err_of(&BASE.replace("warmup = 1", "warmup = \"x\""));
    assert!(e.starts_with("spec.toml:18:10: invalid type"), "{e}");
    let e = err_of(&BASE.replace("name = \"cpu-gemm\"\n", ""));
    assert!(e.contains("missing field `name`"), "{e}");
}

#[test]
fn rule_with_unknown_parameter() {
    let bad = BASE.replace("\"K % BK == 0\"", "\"BX * BN <= 64\"");
    let e = err_of(&bad);
    assert_eq!(
        e,
        "spec.toml:6: rules[1]: unknown parameter `BX` in `BX * BN <= 64` (known: BM, BN, BK, SPLIT, M, N, K)"
    );
}

#[test]
fn rule_that_does_not_parse() {
    let bad = BASE.replace("\"K % BK == 0\"", "\"K % BK = 0\"");
    let e = err_of(&bad);
    assert!(
        e.starts_with("spec.toml:6:11: rules[1]: in `K % BK = 0`:"),
        "{e}"
    );
}

#[test]
fn missing_build_program() {
    let bad = BASE.replace("command = \"cc -O2", "command = \"ccx -O2");
    assert_eq!(
        err_of(&bad),
        "spec.toml:12: build.command: program `ccx` not found (looked on PATH)"
    );
    let bad = BASE.replace(
        "command = \"cc -O2",
        "command = \"{spec_dir}/nobuild.sh -O2",
    );
    let e = err_of(&bad);
    assert!(
        e.starts_with("spec.toml:12: build.command: program `"),
        "{e}"
    );
    assert!(e.contains("nobuild.sh"), "{e}");
    let bad = BASE.replace("{artifact} {M}", "./runner {M}");
    assert!(err_of(&bad).starts_with("spec.toml:16: run.command: program `./runner` not found"));
}

#[test]
fn placeholders_are_checked() {
    let e = err_of(&BASE.replace("-DBK={BK}", "-DBK={BQ}"));
    assert_eq!(e, "spec.toml:12: build.command: unknown placeholder `{BQ}`");
    let e = err_of(&BASE.replace("-DBK={BK}", "-DBK={M}"));
    assert!(e.contains("`{M}` is a shape column"), "{e}");
    let e = err_of(&BASE.replace("{artifact} {M}", "{out} {M}"));
    assert!(
        e.starts_with("spec.toml:16: run.command: `{out}` belongs to the build"),
        "{e}"
    );
    let e = err_of(&BASE.replace("-DBK={BK}", "-DBK={BK"));
    assert!(e.contains("stray `{`"), "{e}");
}

#[test]
fn parameter_errors() {
    let e = err_of(&BASE.replace("SPLIT = [1, 2]", "BM = [1, 2]"));
    assert_eq!(
        e,
        "spec.toml:33: params.run.BM: `BM` is already a compile parameter"
    );
    let e = err_of(&BASE.replace("SPLIT = [1, 2]", "M = [1, 2]"));
    assert!(
        e.starts_with("spec.toml:") && e.contains("`M` is already a run parameter"),
        "{e}"
    );
    let e = err_of(&BASE.replace("SPLIT = [1, 2]", "SPLIT = []"));
    assert_eq!(e, "spec.toml:33: params.run.SPLIT: no values");
    let e = err_of(&BASE.replace("SPLIT = [1, 2]", "SPLIT = [1, 1]"));
    assert!(e.contains("appears twice"), "{e}");
    let e = err_of(&BASE.replace("SPLIT = [1, 2]", "out = [1, 2]"));
    assert!(e.contains("reserved"), "{e}");
    let e = err_of(&BASE.replace("SPLIT = [1, 2]", "SPLIT = [1.5]"));
    assert!(e.contains("integers or strings"), "{e}");
    let e = err_of(&BASE.replace("step = 16", "step = 0"));
    assert!(
        e.starts_with("spec.toml:30: params.compile.BK: `step`"),
        "{e}"
    );
    let e = err_of(&BASE.replace("pow2 = [32, 128]", "pow2 = [32, 100]"));
    assert!(e.contains("powers of two"), "{e}");
    let e = err_of(&BASE.replace("range = [16, 48]", "range = [0, 999999999]"));
    assert!(e.contains("at most"), "{e}");
    let e = err_of(&BASE.replace("SPLIT = [1, 2]", "SPLIT = [\"a,b\"]"));
    assert!(e.contains("may not contain `,`"), "{e}");
    // A string value may not feed an integer rule.
    let spec = BASE.replace("BM = [32, 64]", "BM = [\"x\", 64]");
    assert!(err_of(&spec).contains("non-integer value `x`"));
}

#[test]
fn run_and_output_errors() {
    let e = err_of(&BASE.replace("\"min\"", "\"p90\""));
    assert_eq!(
        e,
        "spec.toml:20: run.statistic: `p90` is not one of median, min, mean"
    );
    let e = err_of(&BASE.replace("time_unit = \"ms\"", "time_unit = \"h\""));
    assert!(e.starts_with("spec.toml:24: output.time_unit:"), "{e}");
    let e = err_of(&BASE.replace("'time_ms=([0-9.]+)'", "'time_ms=[0-9.]+'"));
    assert!(
        e.starts_with("spec.toml:23: output.time: the regex needs a capture group"),
        "{e}"
    );
    let e = err_of(&BASE.replace("pass = 'PASS'", "pass = 'PA(SS'"));
    assert!(
        e.starts_with("spec.toml:25: output.pass: invalid regex"),
        "{e}"
    );
    let e = err_of(&BASE.replace("repeat = 3", "repeat = 0"));
    assert!(e.starts_with("spec.toml:19: run.repeat:"), "{e}");
    let e = err_of(&BASE.replace("timeout_s = 2.5", "timeout_s = -1"));
    assert!(e.starts_with("spec.toml:17: run.timeout_s:"), "{e}");
    let e = err_of(&BASE.replace("\"cpu-gemm\"", "\"cpu gemm\""));
    assert!(e.starts_with("spec.toml:1: name:"), "{e}");
    let e = err_of(&BASE.replace("flops = \"2 * M * N * K\"", "flops = \"2 * M * BM\""));
    assert!(
        e.starts_with("spec.toml:8: flops: `BM` is not a shape column"),
        "{e}"
    );
    let e = err_of(&BASE.replace(
        "sources = [\"gemm.c\"]",
        "sources = [\"gemm.c\", \"nope.c\"]",
    ));
    assert!(
        e.starts_with("spec.toml:3: sources[1]: `nope.c` cannot be read"),
        "{e}"
    );
}

#[test]
fn shape_errors() {
    let e = err_of(&BASE.replace("shapes_csv = \"shapes.csv\"\n", ""));
    assert!(e.starts_with("spec.toml: shapes: no shapes"), "{e}");
    let e = err_of(&BASE.replace("shapes.csv", "missing.csv"));
    assert!(
        e.starts_with("spec.toml:9: shapes_csv: `missing.csv` cannot be read"),
        "{e}"
    );
    let (dir, r) = load_with(
        &BASE.replace("shapes.csv", "bad.csv"),
        &[("bad.csv", "M,N,K\n1,2,3\n4,5\n")],
    );
    let e = r.unwrap_err();
    assert_eq!(e.file, dir.path().join("bad.csv"));
    assert_eq!(e.line, Some(3));
    assert!(e
        .to_string()
        .ends_with("bad.csv:3: expected 3 values, found 2"));
}

#[test]
fn inline_shapes_keep_file_order() {
    let text = BASE.replace("shapes_csv = \"shapes.csv\"\n", "")
        + "\n[[shapes]]\nM = 64\nN = 64\nK = 64\n\n[[shapes]]\nK = 96\nM = 128\nN = 32\n";
    let (_dir, spec) = load_with(&text, &[]);
    let spec = spec.unwrap();
    assert_eq!(spec.shape_columns, ["M", "N", "K"]);
    assert_eq!(spec.shapes[1].key(), "M=128,N=32,K=96");
    assert!(spec.shapes_csv.is_none());

    let bad = text.replace("K = 96\n", "Q = 96\n");
    let e = err_of(&bad);
    assert!(
        e.starts_with("spec.toml:39: shapes[1]: keys M, N, Q differ"),
        "{e}"
    );
    let both = text.clone() + "";
    let both = both.replacen("flops =", "shapes_csv = \"shapes.csv\"\nflops =", 1);
    assert!(err_of(&both).contains("not both"));
}

#[test]
fn rules_leaving_no_candidate_warn() {
    let text = BASE.replace("\"K % BK == 0\",", "\"K % BK == 0\",\n  \"M > 100\",");
    let (_dir, spec) = load_with(&text, &[]);
    let spec = spec.unwrap();
    assert_eq!(spec.warnings.len(), 1, "{:?}", spec.warnings);
    assert!(spec.warnings[0].contains("1 of 2 shapes: M=64,N=64,K=64"));
    assert!(spec.candidates(&spec.shapes[0]).unwrap().is_empty());
    assert_eq!(spec.compile_sets().unwrap().len(), 15);
}

#[test]
fn array_commands_keep_spaces_in_arguments() {
    let text = BASE.replace(
        "command = \"{artifact} {M} {N} {K} {SPLIT}\"",
        "command = [\"{artifact}\", \"--shape\", \"{M} x {N}\", \"{{literal}}\", \"{SPLIT}\", \"{K}\"]",
    );
    let (_dir, spec) = load_with(&text, &[]);
    let spec = spec.unwrap();
    let argv = spec.run_argv(
        &Params::new(),
        &params(&[("SPLIT", "1")]),
        &spec.shapes[0],
        &PathBuf::from("/x"),
    );
    assert_eq!(argv, ["/x", "--shape", "64 x 64", "{literal}", "1", "64"]);
}

#[test]
fn parse_without_files_needs_no_sources() {
    let text = "name = \"t\"\n[build]\ncommand = \"cc -o {out} x.c\"\n[run]\ncommand = \"{artifact}\"\n[[shapes]]\nN = 1\n";
    let spec = parse(text, Path::new("/nonexistent/dir/spec.toml")).unwrap();
    assert_eq!(
        spec.candidates(&spec.shapes[0]).unwrap(),
        vec![(Params::new(), Params::new())]
    );
    assert_eq!(spec.compile_sets().unwrap(), vec![Params::new()]);
    assert_eq!(spec.run.repeat, 1);
    assert_eq!(spec.run.statistic, Statistic::Median);
    assert_eq!(spec.build.timeout, Duration::from_secs(120));
    assert_eq!(spec.flops(&spec.shapes[0]), None);
}

#[test]
fn statistics() {
    let s = [3.0, 1.0, 2.0, 10.0];
    assert_eq!(Statistic::Median.apply(&s), 2.5);
    assert_eq!(Statistic::Median.apply(&s[..3]), 2.0);
    assert_eq!(Statistic::Min.apply(&s), 1.0);
    assert_eq!(Statistic::Mean.apply(&s), 4.0);
    assert_eq!(TimeUnit::Ms.to_us(1.5), 1500.0);
    assert_eq!(TimeUnit::Ns.to_us(1500.0), 1.5);
}

/// BASE in library mode: no run command, no [output].
fn library_spec() -> String {
    BASE.replace(
        "command = \"{artifact} {M} {N} {K} {SPLIT}\"",
        "mode = \"library\"",
    )
    .replace(
        "[output]\ntime = 'time_ms=([0-9.]+)'\ntime_unit = \"ms\"\npass = 'PASS'\n",
        "",
    )
}

#[test]
fn library_mode_and_device() {
    let (_dir, spec) = load_with(&library_spec(), &[]);
    let spec = spec.unwrap();
    assert_eq!(spec.run.mode, RunMode::Library);
    assert!(spec.run.argv.is_empty());
    assert_eq!(spec.device, DeviceClass::Cpu, "the default");
    assert_eq!(spec.run.repeat, 3);

    let (_dir, gpu) = load_with(&format!("device = \"gpu\"\n{}", library_spec()), &[]);
    assert_eq!(gpu.unwrap().device, DeviceClass::Gpu);
    let (_dir, process) = load_with(BASE, &[]);
    assert_eq!(process.unwrap().run.mode, RunMode::Process);
}

#[test]
fn library_mode_errors() {
    // A command in library mode: nothing would run it.
    let e = err_of(&BASE.replace("[run]\n", "[run]\nmode = \"library\"\n"));
    assert!(
        e.starts_with("spec.toml:17: run.command: a library-mode run has no command"),
        "{e}"
    );
    // [output] in library mode: times come from shoal_run.
    let with_output = format!("{}\n[output]\npass = 'PASS'\n", library_spec());
    let e = err_of(&with_output);
    assert!(e.contains("output: a library-mode run reports"), "{e}");
    // Process mode needs its command.
    let e = err_of(&library_spec().replace("mode = \"library\"\n", ""));
    assert!(e.contains("run.command: missing"), "{e}");
    let e = err_of(&library_spec().replace("\"library\"", "\"thread\""));
    assert!(
        e.starts_with("spec.toml:16: run.mode: `thread` is not one of process, library"),
        "{e}"
    );
    let e = err_of(&format!("device = \"tpu\"\n{}", library_spec()));
    assert!(
        e.starts_with("spec.toml:1: device: `tpu` is not one of cpu, gpu"),
        "{e}"
    );
}

#[test]
fn a_search_may_say_how_many_of_a_shapes_candidates_are_out_at_once() {
    let text = format!("{BASE}\n[search]\nstrategy = \"forest\"\nbudget = 40\n");
    let (_dir, spec) = load_with(&text, &[]);
    let search = spec.unwrap().search.expect("a search");
    assert_eq!(search.in_flight, None, "the strategy's own when not given");
    let (_dir, spec) = load_with(&format!("{text}in_flight = 3\n"), &[]);
    assert_eq!(spec.unwrap().search.expect("a search").in_flight, Some(3));
    let e = err_of(&format!("{text}in_flight = -2\n"));
    assert!(e.contains("search.in_flight"), "{e}");
}
