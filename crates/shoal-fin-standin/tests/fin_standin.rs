//! The stand-in `fin` binary, run as a process exactly as Shoal's MIOpen backend runs fin, on
//! the real recorded inputs and on inputs built with `shoal_miopen::fin::input_json`; its
//! outputs read back with `shoal_miopen::fin::parse_output`.

use serde_json::Value;
use shoal_miopen::export::{
    find_db_text, find_entries, perf_db_text, perf_entries, write_kdb, KdbEntry,
};
use shoal_miopen::fin::{
    decode_blob, input_json, parse_output, CompiledSolver, FinJob, FinOutput, FindCompiledSolver,
};
use shoal_miopen::{ConvConfig, ConvMode, DataType, Direction, PadMode};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const FIN: &str = env!("CARGO_BIN_EXE_fin");

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// A `fin` command with none of the caller's stand-in fault variables.
fn fin_cmd(input: &Path, output: &Path) -> Command {
    let mut cmd = Command::new(FIN);
    cmd.arg("-i").arg(input).arg("-o").arg(output);
    for (k, _) in std::env::vars() {
        if k.starts_with("SHOAL_FIN_STANDIN_") {
            cmd.env_remove(k);
        }
    }
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    cmd
}

/// Runs fin on `input` with extra environment; returns the exit status and the output text.
fn run_fin(input: &str, env: &[(&str, &str)]) -> (ExitStatus, Option<String>) {
    let dir = tempfile::tempdir().unwrap();
    let (inp, out) = (dir.path().join("in.json"), dir.path().join("out.json"));
    std::fs::write(&inp, input).unwrap();
    let mut cmd = fin_cmd(&inp, &out);
    cmd.envs(env.iter().copied());
    let status = cmd.status().unwrap();
    (status, std::fs::read_to_string(&out).ok())
}

fn run_ok(input: &str, env: &[(&str, &str)]) -> FinOutput {
    let (status, text) = run_fin(input, env);
    assert!(status.success(), "fin exited with {status}");
    let out = parse_output(&text.expect("output written")).unwrap();
    assert!(out.test_double);
    out
}

/// `MIOpenDriver` 2-D NCHW convolution with square input, filter, pad and stride.
#[allow(clippy::too_many_arguments)]
fn conv(
    dt: DataType,
    dir: Direction,
    n: u32,
    c: u32,
    hw: u32,
    k: u32,
    fil: u32,
    pad: u32,
    stride: u32,
) -> ConvConfig {
    ConvConfig {
        data_type: dt,
        direction: dir,
        spatial_dim: 2,
        batchsize: n,
        in_channels: c,
        in_d: 1,
        in_h: hw,
        in_w: hw,
        out_channels: k,
        fil_d: 1,
        fil_h: fil,
        fil_w: fil,
        pad_d: 0,
        pad_h: pad,
        pad_w: pad,
        conv_stride_d: 1,
        conv_stride_h: stride,
        conv_stride_w: stride,
        dilation_d: 1,
        dilation_h: 1,
        dilation_w: 1,
        trans_output_pad_d: 0,
        trans_output_pad_h: 0,
        trans_output_pad_w: 0,
        group_count: 1,
        mode: ConvMode::Conv,
        pad_mode: PadMode::Default,
        in_layout: "NCHW".into(),
        fil_layout: "NCHW".into(),
        out_layout: "NCHW".into(),
    }
}

fn job(steps: &[&str], arch: &str, num_cu: u32, id: i64, config: &ConvConfig) -> FinJob {
    FinJob {
        steps: steps.iter().map(|s| s.to_string()).collect(),
        arch: arch.into(),
        num_cu,
        config_id: id,
        config: config.clone(),
        solvers: vec![],
        dynamic_only: false,
        perf_compile_result: None,
        find_compile_result: None,
    }
}

fn applicable(config: &ConvConfig, arch: &str) -> Vec<String> {
    let out = run_ok(
        &input_json(&[job(&["applicability"], arch, 110, 1, config)]),
        &[],
    );
    out.jobs[0].applicable_solvers.clone().unwrap()
}

#[test]
fn says_it_is_a_test_double() {
    let out = Command::new(FIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("TEST DOUBLE"), "{help}");
    let out = Command::new(FIN).args(["-i", "x.json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("Invalid arguments"));
}

/// The recorded current-shape inputs get the recorded answers back (plus the test-double
/// markers), and the stand-in logs the per-worker MIOpen directories and GPU it was given.
#[test]
fn replays_recorded_inputs() {
    for (name, key) in [
        ("applicability", "applicable_solvers"),
        ("find_compile-1", "miopen_find_compile_result"),
        ("find_compile-2", "miopen_find_compile_result"),
        ("find_eval", "miopen_find_eval_result"),
    ] {
        let input =
            std::fs::read_to_string(fixtures().join(format!("fin_input_{name}.json"))).unwrap();
        let env = [
            (
                "MIOPEN_USER_DB_PATH",
                "/tmp/miopenpdb/thread-3/config/miopen",
            ),
            ("MIOPEN_CUSTOM_CACHE_DIR", "/tmp/miopenpdb/thread-3/cache"),
            ("HIP_VISIBLE_DEVICES", "3"),
        ];
        let (status, text) = run_fin(&input, &env);
        assert!(status.success());
        let text = text.unwrap();
        let out = parse_output(&text).unwrap();
        assert!(out.test_double);
        assert_eq!(out.env_var("HIP_VISIBLE_DEVICES"), Some("3"));
        assert_eq!(
            out.env_var("MIOPEN_CUSTOM_CACHE_DIR"),
            Some("/tmp/miopenpdb/thread-3/cache")
        );
        let ours: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            ours[0]["standin_env"]["MIOPEN_USER_DB_PATH"],
            "/tmp/miopenpdb/thread-3/config/miopen"
        );
        let recorded: Value = serde_json::from_str(
            &std::fs::read_to_string(fixtures().join(format!("fin_output_{name}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(ours[1][key], recorded[1][key], "{name}");
        assert_eq!(
            ours[1]["input"],
            serde_json::from_str::<Value>(&input).unwrap()[0]
        );
        assert!(ours[1]["test_double_source"]
            .as_str()
            .unwrap()
            .starts_with("recorded"));
        // Output format: nlohmann's 4-space indent and final newline.
        assert!(text.starts_with("[\n    {\n"), "{name}");
        assert!(text.ends_with("]\n"));
    }
}

#[test]
fn applicability_rules() {
    let f3 = conv(DataType::Fp32, Direction::Forward, 32, 64, 56, 64, 3, 1, 1);
    let s = applicable(&f3, "gfx90a");
    for want in [
        "ConvAsm3x3U",
        "ConvBinWinogradRxSf2x3",
        "ConvDirectNaiveConvFwd",
        "GemmFwdRest",
        "ConvMlirIgemmFwdXdlops",
    ] {
        assert!(s.iter().any(|x| x == want), "{want} missing: {s:?}");
    }
    for not in [
        "ConvAsm1x1U",
        "GemmFwd1x1_0_1",
        "ConvDirectNaiveConvBwd",
        "ConvAsmBwdWrW3x3",
        "ConvMlirIgemmFwd",
    ] {
        assert!(!s.iter().any(|x| x == not), "{not} applies: {s:?}");
    }
    // No Winograd at stride 2, no xdlops on gfx906, 1x1 solvers for 1x1 filters.
    let b1 = conv(
        DataType::Fp32,
        Direction::BackwardData,
        64,
        256,
        28,
        512,
        1,
        0,
        2,
    );
    let s = applicable(&b1, "gfx906");
    assert!(s.iter().any(|x| x == "ConvAsm1x1U"));
    assert!(s.iter().any(|x| x == "GemmBwd1x1_stride2"));
    assert!(!s.iter().any(|x| x == "GemmBwd1x1_stride1"));
    assert!(!s.iter().any(|x| x.contains("Winograd")), "{s:?}");
    assert!(!s.iter().any(|x| x.contains("Xdlops")), "{s:?}");
    // Weight gradients: only W solvers.
    let w = conv(
        DataType::Fp16,
        Direction::BackwardWeights,
        16,
        128,
        14,
        128,
        3,
        1,
        1,
    );
    let s = applicable(&w, "gfx908");
    assert!(
        s.iter().all(|x| x.contains("WrW") || x.contains("Wrw")),
        "{s:?}"
    );
    assert!(s.iter().any(|x| x == "ConvDirectNaiveConvWrw"));
    // 3-D and NHWC keep legacy solvers out.
    let mut d3 = f3.clone();
    d3.spatial_dim = 3;
    d3.in_d = 8;
    d3.fil_d = 3;
    d3.pad_d = 1;
    for l in [&mut d3.in_layout, &mut d3.fil_layout, &mut d3.out_layout] {
        *l = "NCDHW".into();
    }
    let s = applicable(&d3, "gfx90a");
    assert!(
        s.iter().any(|x| x == "ConvHipImplicitGemm3DGroupFwdXdlops"),
        "{s:?}"
    );
    assert!(!s.iter().any(|x| x == "ConvAsm3x3U"));
    let mut nhwc = f3.clone();
    for l in [
        &mut nhwc.in_layout,
        &mut nhwc.fil_layout,
        &mut nhwc.out_layout,
    ] {
        *l = "NHWC".into();
    }
    let s = applicable(&nhwc, "gfx90a");
    assert!(s
        .iter()
        .any(|x| x == "ConvAsmImplicitGemmGTCDynamicFwdXdlopsNHWC"));
    assert!(!s.iter().any(|x| x.starts_with("ConvBinWinograd")), "{s:?}");
}

/// Applicability → perf compile → perf eval → find compile → find eval → the three
/// databases, all through the binary; answers are deterministic.
#[test]
fn tuning_pipeline_through_the_binary() {
    let configs = [
        conv(DataType::Fp32, Direction::Forward, 32, 64, 56, 64, 3, 1, 1),
        conv(
            DataType::Fp16,
            Direction::BackwardData,
            16,
            256,
            14,
            1024,
            1,
            0,
            1,
        ),
    ];
    let mut find = Vec::new();
    let mut perf = Vec::new();
    let mut kdb = Vec::new();
    for (i, c) in configs.iter().enumerate() {
        let id = i as i64 + 1;
        let solvers = applicable(c, "gfx90a");
        // One job per solver, as MITuna sends them, all in one input file.
        let compile_jobs: Vec<FinJob> = solvers
            .iter()
            .map(|s| FinJob {
                solvers: vec![s.clone()],
                ..job(&["miopen_perf_compile"], "gfx90a", 110, id, c)
            })
            .collect();
        let compiled = run_ok(&input_json(&compile_jobs), &[]);
        assert_eq!(compiled.jobs.len(), solvers.len());
        let mut eval_jobs = Vec::new();
        for (j, s) in compiled.jobs.iter().zip(&solvers) {
            let r = &j.perf_compile.as_ref().unwrap()[0];
            assert_eq!(&r.solver_name, s);
            assert!(r.perf_compiled, "{s}: {:?}", r.reason);
            assert!(r.kernel_objects.len() <= 3);
            for k in &r.kernel_objects {
                decode_blob(k).unwrap();
            }
            eval_jobs.push(FinJob {
                solvers: vec![s.clone()],
                perf_compile_result: Some(vec![CompiledSolver {
                    solver_name: r.solver_name.clone(),
                    perf_compiled: r.perf_compiled,
                    kernel_objects: r.kernel_objects.clone(),
                }]),
                ..job(
                    &["alloc_buf", "fill_buf", "miopen_perf_eval"],
                    "gfx90a",
                    110,
                    id,
                    c,
                )
            });
        }
        let text = input_json(&eval_jobs);
        let evaluated = run_ok(&text, &[]);
        assert_eq!(evaluated.jobs, run_ok(&text, &[]).jobs, "deterministic");
        for j in &evaluated.jobs {
            let r = &j.perf_eval.as_ref().unwrap()[0];
            assert!(r.evaluated, "{}: {:?}", r.solver_name, r.reason);
            assert!(r.time.unwrap() > 0.0);
            let tunable = shoal_miopen::solvers::by_name(&r.solver_name)
                .unwrap()
                .tunable;
            assert_eq!(r.params.as_deref().unwrap().is_empty(), !tunable);
            assert_eq!(r.data_type, Some(if i == 0 { 1 } else { 0 }));
            perf.extend(perf_entries(c, std::slice::from_ref(r)));
            find.extend(find_entries(c, std::slice::from_ref(r)));
        }
        // Find compile + eval of the perf winner.
        let best = find
            .iter()
            .filter(|e| &e.config == c)
            .min_by(|a, b| a.time_ms.total_cmp(&b.time_ms))
            .unwrap()
            .solver
            .clone();
        let fc = run_ok(
            &input_json(&[FinJob {
                solvers: vec![best.clone()],
                ..job(&["miopen_find_compile"], "gfx90a", 110, id, c)
            }]),
            &[],
        );
        let r = fc.jobs[0].find_compile.as_ref().unwrap()[0].clone();
        assert!(r.find_compiled);
        let fe = run_ok(
            &input_json(&[FinJob {
                solvers: vec![best.clone()],
                find_compile_result: Some(vec![FindCompiledSolver {
                    algorithm: r.algorithm.clone().unwrap(),
                    find_compiled: true,
                    solver_name: r.solver_name.clone(),
                    workspace: r.workspace.unwrap(),
                    kernel_objects: r.kernel_objects.clone(),
                }]),
                ..job(&["alloc_buf", "miopen_find_eval"], "gfx90a", 110, id, c)
            }]),
            &[],
        );
        let e = &fe.jobs[0].find_eval.as_ref().unwrap()[0];
        assert!(e.evaluated);
        assert_eq!(fe.jobs[0].db_key, Some(shoal_miopen::keys::find_db_key(c)));
        for k in &r.kernel_objects {
            kdb.push(KdbEntry::from_kernel_object(k, "gfx90a").unwrap());
        }
    }
    let fdb = find_db_text(&find);
    assert_eq!(fdb.lines().count(), 2);
    assert!(fdb.lines().all(|l| l.split(';').count() <= 4));
    assert_eq!(perf_db_text(&perf).lines().count(), 2);
    let dir = tempfile::tempdir().unwrap();
    let n = write_kdb(&dir.path().join("gfx90a6e.kdb"), &kdb).unwrap();
    assert_eq!(n, kdb.len());
}

fn eval_input(solver: &str) -> String {
    let c = conv(DataType::Fp32, Direction::Forward, 8, 32, 28, 32, 1, 0, 1);
    let compiled = run_ok(
        &input_json(&[FinJob {
            solvers: vec![solver.into()],
            ..job(&["miopen_perf_compile"], "gfx908", 120, 7, &c)
        }]),
        &[],
    );
    let r = &compiled.jobs[0].perf_compile.as_ref().unwrap()[0];
    assert!(r.perf_compiled);
    input_json(&[FinJob {
        solvers: vec![solver.into()],
        perf_compile_result: Some(vec![CompiledSolver {
            solver_name: solver.into(),
            perf_compiled: true,
            kernel_objects: r.kernel_objects.clone(),
        }]),
        ..job(
            &["alloc_buf", "fill_buf", "miopen_perf_eval"],
            "gfx908",
            120,
            7,
            &c,
        )
    }])
}

#[cfg(unix)]
#[test]
fn injected_crash_aborts_without_output() {
    use std::os::unix::process::ExitStatusExt;
    let input = eval_input("ConvAsm1x1U");
    let (status, out) = run_fin(&input, &[("SHOAL_FIN_STANDIN_CRASH_SOLVER", "ConvAsm1x1U")]);
    assert_eq!(status.signal(), Some(6), "{status}");
    assert!(out.is_none());
    // Other solvers are unaffected.
    let (status, _) = run_fin(
        &input,
        &[("SHOAL_FIN_STANDIN_CRASH_SOLVER", "ConvAsm1x1UV2")],
    );
    assert!(status.success());
}

#[test]
fn injected_hang_never_finishes() {
    let input = eval_input("ConvAsm1x1U");
    let dir = tempfile::tempdir().unwrap();
    let (inp, out) = (dir.path().join("in.json"), dir.path().join("out.json"));
    std::fs::write(&inp, input).unwrap();
    let mut child = fin_cmd(&inp, &out)
        .env("SHOAL_FIN_STANDIN_HANG_SOLVER", "*")
        .spawn()
        .unwrap();
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(1500) {
        assert!(child.try_wait().unwrap().is_none(), "fin exited");
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!out.exists());
}

#[test]
fn injected_failures_garbling_and_exit_codes() {
    let input = eval_input("ConvAsm1x1U");
    let out = run_ok(&input, &[("SHOAL_FIN_STANDIN_FAIL_SOLVER", "ConvAsm1x1U")]);
    let r = &out.jobs[0].perf_eval.as_ref().unwrap()[0];
    assert!(!r.evaluated);
    assert!(r
        .reason
        .as_deref()
        .unwrap()
        .starts_with("Invoker exception"));

    let (status, text) = run_fin(&input, &[("SHOAL_FIN_STANDIN_GARBLE_OUTPUT", "1")]);
    assert!(status.success());
    assert!(parse_output(&text.unwrap()).is_err());

    let (status, text) = run_fin(&input, &[("SHOAL_FIN_STANDIN_EXIT_CODE", "3")]);
    assert_eq!(status.code(), Some(3));
    assert!(parse_output(&text.unwrap()).is_ok());

    let start = Instant::now();
    run_ok(&input, &[("SHOAL_FIN_STANDIN_DELAY_MS", "300")]);
    assert!(start.elapsed() >= Duration::from_millis(300));
}

#[test]
fn compile_and_eval_refusals_carry_fins_reasons() {
    let c = conv(DataType::Fp32, Direction::Forward, 8, 32, 28, 32, 3, 1, 1);
    let out = run_ok(
        &input_json(&[FinJob {
            solvers: vec![
                "ConvAsm1x1U".into(),      // 1x1 only
                "NoSuchSolver".into(),     // unknown
                "ConvOclDirectFwd".into(), // applies, not dynamic
                "ConvBinWinogradRxSf2x3".into(),
            ],
            dynamic_only: true,
            ..job(&["miopen_perf_compile"], "gfx906", 60, 9, &c)
        }]),
        &[],
    );
    let r = out.jobs[0].perf_compile.as_ref().unwrap();
    let reasons: Vec<(&str, bool)> = r
        .iter()
        .map(|x| (x.reason.as_deref().unwrap(), x.perf_compiled))
        .collect();
    assert_eq!(
        reasons,
        [
            ("Not Applicable", false),
            ("Empty Solver", false),
            ("Not Dynamic", false),
            ("Success", true)
        ]
    );
    // A kernel whose md5 does not match is refused at eval, as MIOpen refuses it.
    let mut kernels = r[3].kernel_objects.clone();
    kernels[0].md5_sum = "0".repeat(32);
    let out = run_ok(
        &input_json(&[FinJob {
            perf_compile_result: Some(vec![CompiledSolver {
                solver_name: "ConvBinWinogradRxSf2x3".into(),
                perf_compiled: true,
                kernel_objects: kernels,
            }]),
            ..job(&["alloc_buf", "miopen_perf_eval"], "gfx906", 60, 9, &c)
        }]),
        &[],
    );
    let e = &out.jobs[0].perf_eval.as_ref().unwrap()[0];
    assert!(!e.evaluated);
    assert!(
        e.reason.as_deref().unwrap().contains("md5"),
        "{:?}",
        e.reason
    );
}

#[test]
fn get_solvers_and_bad_jobs() {
    let out = run_ok(r#"[{"steps": ["get_solvers"]}]"#, &[]);
    let all = out.jobs[0].all_solvers.as_ref().unwrap();
    assert_eq!(all.len(), 104);
    let a = all.iter().find(|s| s.name == "ConvAsm1x1U").unwrap();
    assert_eq!((a.id, a.tunable, a.dynamic), (2, Some(true), Some(false)));

    let (status, out) = run_fin(
        r#"[{"steps": ["applicability"], "config": {"cmd": "conv"}}]"#,
        &[],
    );
    assert_eq!(status.code(), Some(1));
    assert!(out.is_none());
    let (status, _) = run_fin("not json", &[]);
    assert_eq!(status.code(), Some(1));
}
