//! fin's protocol against MIFin's recorded inputs and outputs (`tests/fin-fixtures`, copied from
//! MIFin's `src/tests/`; see `docs/data-provenance.md`): every output parses (current and older
//! shapes), every recorded kernel object decodes with a matching md5 and re-encodes to the very
//! same blob, the configs echoed by fin give back fin's own `db_key`, and the input files MITuna
//! wrote are rebuilt from [`FinJob`]s.

mod fin_support;

use fin_support::{conv2d, conv3d_vector7, fixture, fixture_json, golden};
use serde_json::Value;
use shoal_miopen::fin::{
    config_json, decode_blob, encode_blob, input_json, parse_config, parse_output, FinJob,
    FindCompiledSolver, KernelObject,
};
use shoal_miopen::keys::{find_db_key, network_config};
use shoal_miopen::{ConvMode, DataType, Direction, PadMode};

const OUTPUTS: [&str; 7] = [
    "fin_output.json",
    "fin_output_applicability.json",
    "fin_output_find_compile-1.json",
    "fin_output_find_compile-2.json",
    "fin_output_find_eval.json",
    "fin_output_perf_compile.json",
    "fin_output_perf_eval.json",
];

#[test]
fn every_recorded_kernel_object_decodes_and_reencodes_byte_for_byte() {
    let mut objects: Vec<KernelObject> = Vec::new();
    for name in [
        "fin_output_perf_compile.json",
        "fin_output_find_compile-1.json",
        "fin_output_find_compile-2.json",
    ] {
        let out = parse_output(&fixture(name)).unwrap();
        for job in &out.jobs {
            for r in job.perf_compile.iter().flatten() {
                objects.extend(r.kernel_objects.iter().cloned());
            }
            for r in job.find_compile.iter().flatten() {
                objects.extend(r.kernel_objects.iter().cloned());
            }
        }
    }
    // The find-eval input carries the kernel of its find-compile step.
    let eval_in = fixture_json("fin_input_find_eval.json");
    let k = &eval_in[0]["miopen_find_compile_result"][0]["kernel_objects"][0];
    objects.push(serde_json::from_value(k.clone()).unwrap());
    assert_eq!(objects.len(), 33 + 1 + 1);

    for obj in &objects {
        let raw = decode_blob(obj).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(raw.len() as u64, obj.uncompressed_size);
        // HIP/OpenCL kernels are clang offload bundles, assembly kernels plain ELF.
        assert!(
            raw.starts_with(b"__CL") || raw.starts_with(b"\x7fELF"),
            "{}: neither an offload bundle nor ELF",
            obj.kernel_file
        );
        // bzip2 level 9 in pure Rust reproduces fin's (libbzip2's) blob exactly.
        let again = encode_blob(&raw, &obj.kernel_file, &obj.comp_options);
        assert_eq!(&again, obj, "{}", obj.kernel_file);
    }
    assert_eq!(objects[0].md5_sum, "f8ffbb181ddb59614f385a4d73403e5c");
}

#[test]
fn all_recorded_outputs_parse() {
    for name in OUTPUTS {
        let out = parse_output(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!out.jobs.is_empty(), "{name}");
        assert!(!out.test_double, "{name}");
    }
}

#[test]
fn current_shape_outputs() {
    let app = parse_output(&fixture("fin_output_applicability.json")).unwrap();
    let job = &app.jobs[0];
    assert_eq!(job.index, 1);
    assert_eq!(job.arch.as_deref(), Some("gfx908"));
    assert_eq!(job.config_tuna_id, Some(125733));
    assert_eq!(job.direction, Some(2));
    let solvers = job.applicable_solvers.as_ref().unwrap();
    assert_eq!(solvers.len(), 11);
    assert_eq!(solvers[0], "ConvAsm1x1U");
    assert_eq!(solvers[10], "ConvAsmImplicitGemmGTCDynamicBwdXdlopsNHWC");

    let fc = parse_output(&fixture("fin_output_find_compile-1.json")).unwrap();
    assert_eq!(
        fc.env_var("MIOPEN_USER_DB_PATH"),
        Some("/tmp/miopenpdb/thread-0/config/miopen")
    );
    let r = &fc.jobs[0].find_compile.as_ref().unwrap()[0];
    assert_eq!(r.solver_name, "GemmFwd1x1_0_1");
    assert!(r.find_compiled);
    assert_eq!(r.tunable, Some(false));
    assert_eq!(r.params.as_deref(), Some(""));
    assert_eq!(r.workspace, Some(0));
    assert_eq!(r.reason.as_deref(), Some("Success"));
    assert!(r.kernel_objects.is_empty());

    let fc2 = parse_output(&fixture("fin_output_find_compile-2.json")).unwrap();
    let r = &fc2.jobs[0].find_compile.as_ref().unwrap()[0];
    assert_eq!(r.params.as_deref(), Some("32,2,16,2,1,1,1,8,2,2"));
    assert_eq!(r.kernel_objects[0].kernel_file, "conv1x1u_stride2.s");
    assert_eq!(r.kernel_objects[0].uncompressed_size, 138496);

    let fe = parse_output(&fixture("fin_output_find_eval.json")).unwrap();
    assert_eq!(fe.env_var("HIP_VISIBLE_DEVICES"), Some("0"));
    let job = &fe.jobs[0];
    assert_eq!(
        job.db_key.as_deref(),
        Some("2048-7-7-1x1-1024-14-14-128-0x0-2x2-1x1-0-NCHW-FP32-B")
    );
    let r = &job.find_eval.as_ref().unwrap()[0];
    assert_eq!(r.solver_name, "ConvAsm1x1UV2");
    assert!(r.evaluated);
    assert_eq!(r.time, Some(2.8596839904785156));
    assert_eq!(r.params.as_deref(), Some("32,1,16,2,1,1,2,4,4,1"));
    assert_eq!(
        r.algorithm.as_deref(),
        Some("miopenConvolutionBwdDataAlgoDirect")
    );
}

#[test]
fn older_shapes_parse() {
    // solver_id instead of solver_name, no tunable/reason.
    let pc = parse_output(&fixture("fin_output_perf_compile.json")).unwrap();
    let r = &pc.jobs[0].perf_compile.as_ref().unwrap()[0];
    assert_eq!(r.solver_name, "ConvHipImplicitGemmV4R1Fwd");
    assert!(r.perf_compiled);
    assert_eq!(r.tunable, None);
    assert_eq!(r.kernel_objects.len(), 33);
    assert_eq!(pc.jobs[0].config_tuna_id, None);

    let pe = parse_output(&fixture("fin_output_perf_eval.json")).unwrap();
    let r = &pe.jobs[0].perf_eval.as_ref().unwrap()[0];
    assert_eq!(
        r.params.as_deref(),
        Some("16,64,8,2,2,2,4,4,4,4,8,2,16,1,4,64")
    );
    assert_eq!(r.time, Some(1.862347960472107));
    assert_eq!(r.data_type, Some(5));
    assert_eq!(r.direction, Some(0));
    assert_eq!(r.layout.as_deref(), Some("NCHW"));

    // No process_env element; all_solvers as [[id, name]]; miopen_find_result with strings.
    let old = parse_output(&fixture("fin_output.json")).unwrap();
    assert_eq!(old.process_env, None);
    assert_eq!(old.jobs.len(), 2);
    assert_eq!(old.jobs[0].index, 0);
    assert_eq!(old.jobs[0].applicable_solvers.as_ref().unwrap().len(), 17);
    let f = &old.jobs[0].legacy_find.as_ref().unwrap()[0];
    assert_eq!(f.solver_name, "ConvBinWinogradRxSf2x3");
    assert_eq!(f.time, Some(1.65132));
    assert_eq!(f.workspace, Some(0));
    let all = old.jobs[1].all_solvers.as_ref().unwrap();
    assert_eq!(all.len(), 69);
    assert_eq!((all[0].id, all[0].name.as_str()), (1, "ConvAsm3x3U"));
}

/// fin's `db_key` and `network_config` are functions of the echoed config: the keys module
/// reproduces them from the config this module parses (the network config gained the
/// alpha/beta field `Default` after these recordings).
#[test]
fn echoed_configs_give_fins_own_keys() {
    for name in OUTPUTS.iter().skip(2) {
        let out = parse_output(&fixture(name)).unwrap();
        for job in &out.jobs {
            let config = job.config().unwrap().unwrap();
            assert_eq!(Some(find_db_key(&config)), job.db_key, "{name}");
            let nc = job.network_config.clone().unwrap();
            assert_eq!(network_config(&config), format!("{nc}xDefault"), "{name}");
        }
    }
}

fn job_from_fixture(v: &Value) -> FinJob {
    let config = parse_config(&v["config"], v["direction"].as_i64()).unwrap();
    let find = v.get("miopen_find_compile_result").map(|l| {
        l.as_array()
            .unwrap()
            .iter()
            .map(|e| FindCompiledSolver {
                algorithm: e["algorithm"].as_str().unwrap().into(),
                find_compiled: e["find_compiled"].as_bool().unwrap(),
                solver_name: e["solver_name"].as_str().unwrap().into(),
                workspace: e["workspace"].as_u64().unwrap(),
                kernel_objects: serde_json::from_value(e["kernel_objects"].clone()).unwrap(),
            })
            .collect()
    });
    FinJob {
        steps: serde_json::from_value(v["steps"].clone()).unwrap(),
        arch: v["arch"]
            .as_str()
            .unwrap()
            .split(':')
            .next()
            .unwrap()
            .into(),
        num_cu: v["num_cu"].as_u64().unwrap() as u32,
        config_id: v["config_tuna_id"].as_i64().unwrap(),
        config,
        solvers: serde_json::from_value(v["solvers"].clone()).unwrap(),
        dynamic_only: v["dynamic_only"].as_bool().unwrap(),
        perf_compile_result: None,
        find_compile_result: find,
    }
}

/// The current-shape inputs (written by MITuna) come back from a [`FinJob`]: the same JSON
/// value except MITuna's canonical `driver` line, which now also lists `--in_layout` and
/// `--fil_layout` (fin ignores it); and byte for byte, the text Python's
/// `json.dumps(…, indent=2)` makes of them (golden files, see `tests/golden/README.md`).
#[test]
fn mituna_inputs_are_rebuilt() {
    for (name, golden_name) in [
        (
            "fin_input_find_compile-1.json",
            Some("fin_input_find_compile-1.mituna.json"),
        ),
        ("fin_input_find_compile-2.json", None),
        (
            "fin_input_find_eval.json",
            Some("fin_input_find_eval.mituna.json"),
        ),
    ] {
        let mut recorded = fixture_json(name);
        let job = job_from_fixture(&recorded[0]);
        let text = input_json(std::slice::from_ref(&job));
        let mut ours: Value = serde_json::from_str(&text).unwrap();
        let theirs = recorded[0]["config"]["driver"]
            .as_str()
            .unwrap()
            .to_string();
        let now = ours[0]["config"]["driver"].as_str().unwrap().to_string();
        assert_eq!(
            now,
            theirs.replace(
                " --out_layout NCHW --in_d",
                " --out_layout NCHW --in_layout NCHW --fil_layout NCHW --in_d"
            )
        );
        ours[0]["config"]["driver"] = Value::Null;
        recorded[0]["config"]["driver"] = Value::Null;
        assert_eq!(ours, recorded, "{name}");
        if let Some(g) = golden_name {
            assert_eq!(text, golden(g), "{name}");
        }
    }
}

#[test]
fn perf_eval_input_shape() {
    let raw = b"__CLANG_OFFLOAD_BUNDLE__ fake".repeat(40);
    let job = FinJob {
        steps: vec![
            "alloc_buf".into(),
            "fill_buf".into(),
            "miopen_perf_eval".into(),
        ],
        arch: "gfx90a".into(),
        num_cu: 110,
        config_id: 42,
        config: conv2d(
            DataType::Fp32,
            Direction::Forward,
            128,
            1024,
            (14, 14),
            256,
            (1, 1),
            (0, 0),
            (1, 1),
        ),
        solvers: vec!["ConvAsm1x1U".into()],
        dynamic_only: false,
        perf_compile_result: Some(vec![shoal_miopen::fin::CompiledSolver {
            solver_name: "ConvAsm1x1U".into(),
            perf_compiled: true,
            kernel_objects: vec![encode_blob(&raw, "conv1x1u.s", " -Wa,-defsym,x=1")],
        }]),
        find_compile_result: None,
    };
    let text = input_json(&[job]);
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v[0]["arch"], "gfx90a:sram-ecc+:xnack-");
    assert_eq!(v[0]["direction"], 1);
    assert_eq!(v[0]["config"]["direction"], "F");
    assert_eq!(v[0]["config"]["conv_stride_d"], 0);
    let e = &v[0]["miopen_perf_compile_result"][0];
    assert_eq!(e["solver_name"], "ConvAsm1x1U");
    assert_eq!(e["perf_compiled"], true);
    assert_eq!(e["kernel_objects"][0]["kernel_file"], "conv1x1u.s");
    // Key order is MITuna's.
    let order: Vec<usize> = [
        "\"steps\"",
        "\"arch\"",
        "\"num_cu\"",
        "\"config_tuna_id\"",
        "\"dynamic_only\"",
        "\"config\"",
        "\"solvers\"",
        "\"miopen_perf_compile_result\"",
    ]
    .iter()
    .map(|k| text.find(k).unwrap())
    .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{text}");
    assert!(!text.ends_with('\n'));
}

#[test]
fn config_json_round_trips() {
    let mut grouped = conv2d(
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
    grouped.group_count = 32;
    let mut nhwc = conv2d(
        DataType::Bf16,
        Direction::BackwardWeights,
        30,
        1280,
        (4, 4),
        1280,
        (1, 1),
        (0, 0),
        (1, 1),
    );
    nhwc.in_layout = "NHWC".into();
    nhwc.fil_layout = "NHWC".into();
    nhwc.out_layout = "NHWC".into();
    let mut trans = conv2d(
        DataType::Fp32,
        Direction::BackwardData,
        8,
        64,
        (7, 9),
        32,
        (3, 3),
        (1, 1),
        (2, 2),
    );
    trans.mode = ConvMode::Trans;
    trans.pad_mode = PadMode::Same;
    trans.trans_output_pad_h = 1;
    let mut ndhwc = conv3d_vector7();
    ndhwc.in_layout = "NDHWC".into();
    ndhwc.fil_layout = "NDHWC".into();
    ndhwc.out_layout = "NDHWC".into();
    ndhwc.pad_d = 1;
    ndhwc.dilation_d = 2;
    for c in [grouped, nhwc, trans, conv3d_vector7(), ndhwc] {
        let v = config_json(&c);
        assert_eq!(parse_config(&v, None).unwrap(), c, "{v}");
        assert_eq!(v["cmd"], c.data_type.driver_command());
        assert_eq!(v["wei_layout"], c.fil_layout.as_str());
    }
    // The key set is the one MITuna sends (minus the row's `id` and `valid`).
    let recorded = fixture_json("fin_input_find_eval.json");
    let mut want: Vec<&String> = recorded[0]["config"].as_object().unwrap().keys().collect();
    want.retain(|k| *k != "id" && *k != "valid");
    let c = parse_config(&recorded[0]["config"], None).unwrap();
    let ours = config_json(&c);
    let got: Vec<&String> = ours.as_object().unwrap().keys().collect();
    assert_eq!(got, want);
}

#[test]
fn malformed_outputs_name_the_path() {
    let text = r#"[{"process_env": []},
        {"miopen_find_compile_result": [{"solver_name": "X", "find_compiled": true,
          "kernel_objects": [{"blob": "", "comp_options": "", "kernel_file": "k.s", "uncompressed_size": 0}]}]}]"#;
    let err = parse_output(text).unwrap_err().to_string();
    assert_eq!(
        err,
        "$[1].miopen_find_compile_result[0].kernel_objects[0]: missing key `md5_sum`"
    );
    let text = r#"[{"process_env": []}, {"applicable_solvers": ["A", 3]}]"#;
    let err = parse_output(text).unwrap_err().to_string();
    assert_eq!(
        err,
        "$[1].applicable_solvers[1]: expected a string, found a number"
    );
    let config = serde_json::json!({"cmd": "conv", "batchsize": 1});
    let err = parse_config(&config, None).unwrap_err().to_string();
    assert!(err.contains("direction"), "{err}");
    let config = serde_json::json!({"cmd": "bnorm", "direction": "F"});
    assert!(parse_config(&config, None).is_err());
}
