//! fin's input file, as MITuna writes it (`tuna/miopen/worker/fin_utils.py fin_job`,
//! `compose_config_obj`; `fin_eval.py fin_pdb_input`/`fin_fdb_input`; written with
//! `json.dumps([job], indent=2)`), and the `config` object both ways.
//!
//! Key order follows MITuna's dicts: top level `steps, arch, num_cu, config_tuna_id, direction,
//! dynamic_only, config[, solvers][, miopen_perf_compile_result | miopen_find_compile_result]`;
//! `config` is the `conv_config` row (`id, valid, batchsize, … , direction, out_layout, driver`)
//! followed by the input tensor (`in_layout` and its dims), the weight tensor (`wei_layout` and
//! its dims) and `cmd`. fin reads keys by name, so the order only matters for byte equality with
//! MITuna.
//!
//! 2-D configs carry MITuna's 2-D defaults for the depth fields (`in_d = fil_d = 1`,
//! `pad_d = conv_stride_d = dilation_d = trans_output_pad_d = 0`, as in the recorded inputs);
//! fin ignores them for `spatial_dim = 2`.

use super::blob::KernelObject;
use super::jsonpath::At;
use super::pyjson::PyJson;
use super::FinError;
use crate::problem::{ConvConfig, ConvMode, DataType, Direction, PadMode};
use serde_json::Value;

/// One job of a fin input file (one config, one or more steps), as MITuna composes it.
#[derive(Clone, Debug, PartialEq)]
pub struct FinJob {
    /// e.g. `["miopen_perf_compile"]`, or `["alloc_buf", "fill_buf", "miopen_perf_eval"]`.
    pub steps: Vec<String>,
    /// Bare architecture (`gfx90a`); written as the target id of [`crate::naming::arch_target_id`].
    pub arch: String,
    pub num_cu: u32,
    /// MITuna's config id, written as `config_tuna_id` and as `config.id`.
    pub config_id: i64,
    pub config: ConvConfig,
    /// Restrict compile/eval to these solvers; omitted from the file when empty (= all solvers).
    pub solvers: Vec<String>,
    pub dynamic_only: bool,
    /// Input of `miopen_perf_eval`: the kernels of `miopen_perf_compile`, per solver.
    pub perf_compile_result: Option<Vec<CompiledSolver>>,
    /// Input of `miopen_find_eval`: the kernels of `miopen_find_compile`, per solver.
    pub find_compile_result: Option<Vec<FindCompiledSolver>>,
}

/// One entry of `miopen_perf_compile_result` in an eval input (`fin_pdb_input`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompiledSolver {
    pub solver_name: String,
    pub perf_compiled: bool,
    pub kernel_objects: Vec<KernelObject>,
}

/// One entry of `miopen_find_compile_result` in an eval input (`fin_fdb_input`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FindCompiledSolver {
    pub algorithm: String,
    pub find_compiled: bool,
    pub solver_name: String,
    pub workspace: u64,
    pub kernel_objects: Vec<KernelObject>,
}

/// The `config` object for the current fin (everything `compose_config_obj` emits except the
/// database row's `id` and `valid`, which [`input_json`] adds from [`FinJob::config_id`]).
pub fn config_json(c: &ConvConfig) -> Value {
    config_obj(c, None).to_value()
}

/// The whole input file: a JSON list with one object per job, byte for byte as MITuna's
/// `json.dumps(jobs, indent=2)` writes it (2-space indent, insertion order, no final newline).
pub fn input_json(jobs: &[FinJob]) -> String {
    PyJson::Arr(jobs.iter().map(job_obj).collect()).dumps_indent2()
}

fn job_obj(job: &FinJob) -> PyJson {
    let mut o = PyJson::obj();
    o.push(
        "steps",
        PyJson::Arr(job.steps.iter().map(|s| s.as_str().into()).collect()),
    );
    o.push("arch", crate::naming::arch_target_id(&job.arch));
    o.push("num_cu", job.num_cu);
    o.push("config_tuna_id", job.config_id);
    o.push("direction", i64::from(job.config.direction.driver_bit()));
    o.push("dynamic_only", job.dynamic_only);
    o.push("config", config_obj(&job.config, Some(job.config_id)));
    if !job.solvers.is_empty() {
        o.push(
            "solvers",
            PyJson::Arr(job.solvers.iter().map(|s| s.as_str().into()).collect()),
        );
    }
    if let Some(perf) = &job.perf_compile_result {
        let items = perf
            .iter()
            .map(|s| {
                let mut e = PyJson::obj();
                e.push("solver_name", s.solver_name.as_str());
                e.push("perf_compiled", s.perf_compiled);
                e.push("kernel_objects", kernels(&s.kernel_objects));
                e
            })
            .collect();
        o.push("miopen_perf_compile_result", PyJson::Arr(items));
    }
    if let Some(find) = &job.find_compile_result {
        let items = find
            .iter()
            .map(|s| {
                let mut e = PyJson::obj();
                e.push("algorithm", s.algorithm.as_str());
                e.push("find_compiled", s.find_compiled);
                e.push("solver_name", s.solver_name.as_str());
                e.push("workspace", s.workspace);
                e.push("kernel_objects", kernels(&s.kernel_objects));
                e
            })
            .collect();
        o.push("miopen_find_compile_result", PyJson::Arr(items));
    }
    o
}

fn kernels(objs: &[KernelObject]) -> PyJson {
    PyJson::Arr(
        objs.iter()
            .map(|k| {
                let mut e = PyJson::obj();
                e.push("blob", k.blob.as_str());
                e.push("comp_options", k.comp_options.as_str());
                e.push("kernel_file", k.kernel_file.as_str());
                e.push("md5_sum", k.md5_sum.as_str());
                e.push("uncompressed_size", k.uncompressed_size);
                e
            })
            .collect(),
    )
}

fn mode_str(m: ConvMode) -> &'static str {
    match m {
        ConvMode::Conv => "conv",
        ConvMode::Trans => "trans",
    }
}

fn pad_mode_str(m: PadMode) -> &'static str {
    match m {
        PadMode::Default => "default",
        PadMode::Same => "same",
        PadMode::Valid => "valid",
    }
}

/// The depth fields as MITuna stores them: the real values for 3-D, its 2-D defaults otherwise.
struct Depth {
    in_d: u32,
    fil_d: u32,
    pad_d: u32,
    stride_d: u32,
    dilation_d: u32,
    trans_pad_d: u32,
}

fn depth(c: &ConvConfig) -> Depth {
    if c.spatial_dim == 3 {
        Depth {
            in_d: c.in_d,
            fil_d: c.fil_d,
            pad_d: c.pad_d,
            stride_d: c.conv_stride_d,
            dilation_d: c.dilation_d,
            trans_pad_d: c.trans_output_pad_d,
        }
    } else {
        Depth {
            in_d: 1,
            fil_d: 1,
            pad_d: 0,
            stride_d: 0,
            dilation_d: 0,
            trans_pad_d: 0,
        }
    }
}

/// MITuna's canonical driver line (`DriverConvolution.__str__`): the `conv_config` columns in
/// attribute order, the three layouts, the tensor dims, then `--forw`. fin ignores it; it is
/// written only so the input matches MITuna's byte for byte (`driver::driver_line` is
/// Shoal's own canonical line, the config key).
pub fn mituna_driver_field(c: &ConvConfig) -> String {
    let d = depth(c);
    let fields: [(&str, String); 28] = [
        ("batchsize", c.batchsize.to_string()),
        ("spatial_dim", c.spatial_dim.to_string()),
        ("pad_h", c.pad_h.to_string()),
        ("pad_w", c.pad_w.to_string()),
        ("pad_d", d.pad_d.to_string()),
        ("conv_stride_h", c.conv_stride_h.to_string()),
        ("conv_stride_w", c.conv_stride_w.to_string()),
        ("conv_stride_d", d.stride_d.to_string()),
        ("dilation_h", c.dilation_h.to_string()),
        ("dilation_w", c.dilation_w.to_string()),
        ("dilation_d", d.dilation_d.to_string()),
        ("group_count", c.group_count.to_string()),
        ("mode", mode_str(c.mode).to_string()),
        ("pad_mode", pad_mode_str(c.pad_mode).to_string()),
        ("trans_output_pad_h", c.trans_output_pad_h.to_string()),
        ("trans_output_pad_w", c.trans_output_pad_w.to_string()),
        ("trans_output_pad_d", d.trans_pad_d.to_string()),
        ("out_layout", c.out_layout.clone()),
        ("in_layout", c.in_layout.clone()),
        ("fil_layout", c.fil_layout.clone()),
        ("in_d", d.in_d.to_string()),
        ("in_h", c.in_h.to_string()),
        ("in_w", c.in_w.to_string()),
        ("fil_d", d.fil_d.to_string()),
        ("fil_h", c.fil_h.to_string()),
        ("fil_w", c.fil_w.to_string()),
        ("in_channels", c.in_channels.to_string()),
        ("out_channels", c.out_channels.to_string()),
    ];
    let mut s = format!("./bin/MIOpenDriver {}", c.data_type.driver_command());
    for (k, v) in fields {
        s.push_str(&format!(" --{k} {v}"));
    }
    s.push_str(&format!(" --forw {}", c.direction.driver_bit()));
    s
}

fn config_obj(c: &ConvConfig, id: Option<i64>) -> PyJson {
    let d = depth(c);
    let mut o = PyJson::obj();
    if let Some(id) = id {
        o.push("id", id);
        o.push("valid", 1i64);
    }
    o.push("batchsize", c.batchsize);
    o.push("spatial_dim", u32::from(c.spatial_dim));
    o.push("pad_h", c.pad_h);
    o.push("pad_w", c.pad_w);
    o.push("pad_d", d.pad_d);
    o.push("conv_stride_h", c.conv_stride_h);
    o.push("conv_stride_w", c.conv_stride_w);
    o.push("conv_stride_d", d.stride_d);
    o.push("dilation_h", c.dilation_h);
    o.push("dilation_w", c.dilation_w);
    o.push("dilation_d", d.dilation_d);
    o.push("group_count", c.group_count);
    o.push("mode", mode_str(c.mode));
    o.push("pad_mode", pad_mode_str(c.pad_mode));
    o.push("trans_output_pad_h", c.trans_output_pad_h);
    o.push("trans_output_pad_w", c.trans_output_pad_w);
    o.push("trans_output_pad_d", d.trans_pad_d);
    o.push("direction", c.direction.letter().to_string());
    o.push("out_layout", c.out_layout.as_str());
    o.push("driver", mituna_driver_field(c));
    // Input tensor (MITuna `get_tensor('in_layout', …)`): dims in tensor-column order, which
    // puts the channels last for channels-last layouts.
    o.push("in_layout", c.in_layout.as_str());
    if c.in_layout.ends_with('C') {
        o.push("in_d", d.in_d);
        o.push("in_h", c.in_h);
        o.push("in_w", c.in_w);
        o.push("in_channels", c.in_channels);
    } else {
        o.push("in_channels", c.in_channels);
        o.push("in_d", d.in_d);
        o.push("in_h", c.in_h);
        o.push("in_w", c.in_w);
    }
    // Weight tensor: `in_channels` is already present, so it keeps its place.
    o.push("wei_layout", c.fil_layout.as_str());
    o.push("out_channels", c.out_channels);
    o.push("fil_d", d.fil_d);
    o.push("fil_h", c.fil_h);
    o.push("fil_w", c.fil_w);
    o.push("cmd", c.data_type.driver_command());
    o
}

/// Reads fin's `config` object (current or older shape) into a [`ConvConfig`].
///
/// `job_direction` is the job's top-level `direction` (1, 2, 4), used when the config has no
/// `direction` letter (the older MIFin fixtures). Missing layouts default to `NCHW`/`NCDHW`;
/// missing pads, strides, dilations, groups and modes take MIOpenDriver's defaults. 2-D configs
/// are normalised to [`ConvConfig`]'s 2-D depth values.
pub fn parse_config(config: &Value, job_direction: Option<i64>) -> Result<ConvConfig, FinError> {
    parse_config_at(&At::root(config), job_direction)
}

pub(crate) fn parse_config_at(
    at: &At<'_>,
    job_direction: Option<i64>,
) -> Result<ConvConfig, FinError> {
    let cmd = at.req_str("cmd")?;
    let data_type = DataType::from_driver_command(&cmd)
        .ok_or_else(|| at.err(format!("unknown convolution cmd {cmd:?}")))?;
    let direction = config_direction(at, job_direction)?;
    let spatial_dim = spatial_dim(at)?;
    let three_d = spatial_dim == 3;
    let req = |k: &str| -> Result<u32, FinError> {
        let a = at.req(k)?;
        u32::try_from(a.u64()?).map_err(|_| a.err("value out of range"))
    };
    let opt = |k: &str, default: u32| -> Result<u32, FinError> {
        match at.get(k)? {
            Some(a) => u32::try_from(a.u64()?).map_err(|_| a.err("value out of range")),
            None => Ok(default),
        }
    };
    // Depth fields only mean something in 3-D; 2-D configs get ConvConfig's 2-D values.
    let depth_or = |k: &str, default: u32, two_d: u32| -> Result<u32, FinError> {
        if three_d {
            opt(k, default)
        } else {
            Ok(two_d)
        }
    };
    let mode = mode(at)?;
    let pad_mode = pad_mode(at)?;
    let default_layout = if three_d { "NCDHW" } else { "NCHW" };
    let layout = |keys: &[&str]| -> Result<String, FinError> {
        for k in keys {
            if let Some(s) = at.opt_str(k)? {
                return Ok(s.to_ascii_uppercase());
            }
        }
        Ok(default_layout.to_string())
    };
    Ok(ConvConfig {
        data_type,
        direction,
        spatial_dim: spatial_dim as u8,
        batchsize: req("batchsize")?,
        in_channels: req("in_channels")?,
        in_d: depth_or("in_d", 1, 1)?,
        in_h: req("in_h")?,
        in_w: req("in_w")?,
        out_channels: req("out_channels")?,
        fil_d: depth_or("fil_d", 1, 1)?,
        fil_h: req("fil_h")?,
        fil_w: req("fil_w")?,
        pad_d: depth_or("pad_d", 0, 0)?,
        pad_h: opt("pad_h", 0)?,
        pad_w: opt("pad_w", 0)?,
        conv_stride_d: depth_or("conv_stride_d", 1, 1)?,
        conv_stride_h: opt("conv_stride_h", 1)?,
        conv_stride_w: opt("conv_stride_w", 1)?,
        dilation_d: depth_or("dilation_d", 1, 1)?,
        dilation_h: opt("dilation_h", 1)?,
        dilation_w: opt("dilation_w", 1)?,
        trans_output_pad_d: depth_or("trans_output_pad_d", 0, 0)?,
        trans_output_pad_h: opt("trans_output_pad_h", 0)?,
        trans_output_pad_w: opt("trans_output_pad_w", 0)?,
        group_count: opt("group_count", 1)?.max(1),
        mode,
        pad_mode,
        in_layout: layout(&["in_layout"])?,
        fil_layout: layout(&["wei_layout", "fil_layout"])?,
        out_layout: layout(&["out_layout"])?,
    })
}

/// The config's `direction` letter or, in the older MIFin fixtures that have none, the job's
/// top-level direction (1, 2, 4).
fn config_direction(at: &At<'_>, job_direction: Option<i64>) -> Result<Direction, FinError> {
    let direction =
        match at.get("direction")? {
            Some(d) => {
                let s = d.str()?;
                let mut chars = s.chars();
                match (chars.next().and_then(Direction::from_letter), chars.next()) {
                    (Some(dir), None) => dir,
                    _ => return Err(d.err(format!("expected \"F\", \"B\" or \"W\", found {s:?}"))),
                }
            }
            None => match job_direction {
                Some(1) => Direction::Forward,
                Some(2) => Direction::BackwardData,
                Some(4) => Direction::BackwardWeights,
                _ => return Err(at.err(
                    "missing key `direction` (and the job has no top-level direction 1, 2 or 4)",
                )),
            },
        };
    Ok(direction)
}

/// `spatial_dim`: 2 (the default) or 3.
fn spatial_dim(at: &At<'_>) -> Result<u64, FinError> {
    let spatial_dim = at.opt_u64("spatial_dim")?.unwrap_or(2);
    if spatial_dim != 2 && spatial_dim != 3 {
        return Err(at.err(format!("unsupported spatial_dim {spatial_dim}")));
    }
    Ok(spatial_dim)
}

/// `mode`: conv (the default) or trans.
fn mode(at: &At<'_>) -> Result<ConvMode, FinError> {
    let mode = match at.opt_str("mode")?.as_deref() {
        None | Some("conv") => ConvMode::Conv,
        Some("trans") => ConvMode::Trans,
        Some(other) => {
            return Err(at
                .req("mode")?
                .err(format!("expected \"conv\" or \"trans\", found {other:?}")))
        }
    };
    Ok(mode)
}

/// `pad_mode`: same or valid; anything else, or none, is the default.
fn pad_mode(at: &At<'_>) -> Result<PadMode, FinError> {
    let pad_mode = match at.opt_str("pad_mode")?.as_deref() {
        Some("same") => PadMode::Same,
        Some("valid") => PadMode::Valid,
        _ => PadMode::Default,
    };
    Ok(pad_mode)
}
