//! Made-up but plausible answers for configs that no recording covers. None of this is MIOpen's
//! logic; it only has to look like fin's output and be deterministic.
//!
//! * Applicability: a handful of rules read from the solver names of MIOpen's registry
//!   (`shoal_miopen::solvers`, `docs/miopen-formats.md` §7): a solver named for a direction
//!   (`Fwd`/`Forward`, `Bwd`, `WrW`/`Wrw`) applies only there; `1x1` solvers only to 1x1
//!   filters (and `_stride1`/`_stride2`/`_0_1`/`_0_2` ones to that stride and pad); `3x3`
//!   solvers and every Winograd only to 3x3, stride 1, dilation 1 and 2-D; `Xdlops` solvers
//!   only on gfx908/90a/94x; legacy assembly/OpenCL/Winograd solvers only for NCHW, FP32/FP16,
//!   groups of 1; plain MLIR solvers only where there are no xdlops; 3-D only for the few
//!   families that MIOpen runs in 3-D. The naive solvers
//!   always apply in their direction, so every config has at least one.
//! * Time: a hash of (find-db key, solver) mapped to 0.02–3 ms (naive ×20), rounded to `f32`
//!   as fin's timer is; perf-eval is the "tuned" time, find-eval 10 % slower. The fastest
//!   solver of a config is therefore stable across runs and machines.
//! * Kernels: 1–3 code objects per solver (none for rocBLAS GEMM), bytes derived from the same
//!   hash, encoded with `encode_blob` so md5 and bzip2 are real.
//! * `params`: a perf-config string shaped like the solver's real ones (§2.1); `""` for
//!   non-tunable solvers. `workspace`: non-zero for GEMM and a few implicit-GEMM solvers.

use shoal_miopen::fin::{encode_blob, KernelObject};
use shoal_miopen::keys::find_db_key;
use shoal_miopen::solvers::{Algo, SolverInfo};
use shoal_miopen::{ConvConfig, ConvMode, DataType, Direction};

/// FNV-1a 64 over the parts, separated by `|`: stable across platforms and Rust versions.
pub fn hash(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            h ^= u64::from(b'|');
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        for b in p.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The direction MIOpen tunes: a transposed convolution swaps forward and backward-data.
pub fn problem_direction(c: &ConvConfig) -> Direction {
    match (c.mode, c.direction) {
        (ConvMode::Trans, Direction::Forward) => Direction::BackwardData,
        (ConvMode::Trans, Direction::BackwardData) => Direction::Forward,
        (_, d) => d,
    }
}

/// `conv::Direction` as fin prints it in eval results (Forward 0, BackwardData 1, BackwardWeights 2).
pub fn direction_int(d: Direction) -> i64 {
    match d {
        Direction::Forward => 0,
        Direction::BackwardData => 1,
        Direction::BackwardWeights => 2,
    }
}

/// `miopenDataType_t` as fin prints it in eval results.
pub fn data_type_int(d: DataType) -> i64 {
    match d {
        DataType::Fp16 => 0,
        DataType::Fp32 => 1,
        DataType::Int32 => 2,
        DataType::Int8 => 3,
        DataType::Bf16 => 5,
        DataType::Fp8 => 7,
        DataType::Bf8 => 8,
    }
}

/// The layout of MIOpen's `in` tensor (x for forward, dy otherwise).
pub fn problem_layout(c: &ConvConfig) -> &str {
    if problem_direction(c) == Direction::Forward && c.mode == ConvMode::Conv {
        &c.in_layout
    } else {
        &c.out_layout
    }
}

fn directions_of(name: &str) -> &'static [Direction] {
    use Direction::*;
    if name.contains("WrW") || name.contains("Wrw") {
        &[BackwardWeights]
    } else if name.contains("Bwd") || name.ends_with("b1") {
        &[BackwardData]
    } else if name.contains("Fwd") || name.contains("Forward") || name.ends_with("f1") {
        &[Forward]
    } else {
        &[Forward, BackwardData]
    }
}

fn xdlops_arch(arch: &str) -> bool {
    matches!(arch, "gfx908" | "gfx90a" | "gfx940" | "gfx941" | "gfx942")
}

/// Whether the stand-in calls `solver` applicable to `c` on `arch` (bare, e.g. `gfx90a`).
pub fn applicable(s: &SolverInfo, c: &ConvConfig, arch: &str) -> bool {
    let name = s.name;
    let dir = problem_direction(c);
    if !directions_of(name).contains(&dir) {
        return false;
    }
    if name.starts_with("ConvDirectNaiveConv") {
        return true;
    }
    if !fits_arch_and_type(name, c, arch) {
        return false;
    }
    if let Some(verdict) = dimension_verdict(name, c) {
        return verdict;
    }
    fits_layout_and_groups(s, c) && fits_geometry(s, c)
}

/// The GPU and the data type: xdlops and dlops solvers need their architectures, the plain MLIR
/// solvers give way to the xdlops ones where those run, and int8 problems take int8 solvers
/// (or the few generic ones) and nothing else does.
fn fits_arch_and_type(name: &str, c: &ConvConfig, arch: &str) -> bool {
    let xdlops = name.contains("Xdlops") || name.contains("xdlops");
    let int8 = c.data_type == DataType::Int8;
    if xdlops && !xdlops_arch(arch) {
        return false;
    }
    if name.contains("Dlops") && !xdlops && arch != "gfx1030" {
        return false;
    }
    // The plain MLIR solvers are for GPUs without xdlops; the xdlops ones take over there.
    if name.starts_with("ConvMlirIgemm") && !xdlops && xdlops_arch(arch) {
        return false;
    }
    if name.contains("F16F8F16") && c.data_type != DataType::Fp16 {
        return false;
    }
    let int8_solver = name.contains("int8");
    if int8 && !(int8_solver || name.starts_with("ConvMlirIgemm") || name.contains("Rest")) {
        return false;
    }
    if !int8 && int8_solver {
        return false;
    }
    true
}

/// 3-D problems are decided here, by the short list of solvers that take them; a 3-D solver
/// takes nothing else. `None`: a 2-D problem and solver, decided by the other checks.
fn dimension_verdict(name: &str, c: &ConvConfig) -> Option<bool> {
    if c.spatial_dim == 3 {
        return Some(
            name.contains("3D")
                || name == "GemmFwdRest"
                || name == "GemmBwdRest"
                || name == "GemmWrwUniversal"
                || name == "ConvHipImplicitGemmV4R4Fwd"
                || name.starts_with("ConvMlirIgemm"),
        );
    }
    if name.contains("3D") {
        return Some(false);
    }
    None
}

/// Layouts and groups: the legacy solvers (assembly, OpenCL, Winograd, FFT) take only
/// channels-first fp32/fp16 tensors and, but for two Winograd ones, no groups; among the rest,
/// only the grouped families take groups.
fn fits_layout_and_groups(s: &SolverInfo, c: &ConvConfig) -> bool {
    let name = s.name;
    let channels_last = c.in_layout.ends_with('C');
    let legacy = (name.starts_with("ConvAsm") && !name.contains("ImplicitGemm"))
        || name.starts_with("ConvOcl")
        || s.algo == Algo::Winograd
        || s.algo == Algo::Fft;
    let grouped_ok = matches!(name, "ConvBinWinogradRxSf2x3" | "ConvBinWinogradRxSf3x2");
    if legacy
        && (channels_last
            || (c.group_count != 1 && !grouped_ok)
            || !matches!(c.data_type, DataType::Fp32 | DataType::Fp16))
    {
        return false;
    }
    let grouped_family = name.contains("Group")
        || name.contains("Rest")
        || name.contains("Universal")
        || name.starts_with("ConvMlirIgemm");
    if c.group_count != 1 && !legacy && !grouped_family {
        return false;
    }
    true
}

/// The filter, stride, pad and dilation a solver is written for: Winograd and `3x3` solvers
/// take 3×3 filters, `1x1` ones 1×1 (some with a fixed stride or no pad), a few assembly and
/// OpenCL kernels exactly one shape, FFT unit strides and dilations in fp32.
fn fits_geometry(s: &SolverInfo, c: &ConvConfig) -> bool {
    let name = s.name;
    let one_by_one = c.fil_h == 1 && c.fil_w == 1 && (c.spatial_dim == 2 || c.fil_d == 1);
    let three_by_three = c.spatial_dim == 2 && c.fil_h == 3 && c.fil_w == 3;
    let stride = (c.conv_stride_h, c.conv_stride_w);
    let unit_stride = stride == (1, 1);
    let unit_dilation = c.dilation_h == 1 && c.dilation_w == 1;
    let zero_pad = c.pad_h == 0 && c.pad_w == 0;
    if s.algo == Algo::Winograd && !(three_by_three && unit_stride && unit_dilation) {
        return false;
    }
    if name.contains("1x1") {
        if !one_by_one {
            return false;
        }
        if (name.ends_with("_stride1") || name.contains("_0_1")) && !unit_stride {
            return false;
        }
        if (name.ends_with("_stride2") || name.contains("_0_2")) && stride != (2, 2) {
            return false;
        }
        if name.contains("_0_") && !zero_pad {
            return false;
        }
    }
    if name.contains("3x3") && !(three_by_three && unit_dilation) {
        return false;
    }
    if name.starts_with("ConvAsm5x10") {
        return (c.fil_h, c.fil_w) == (5, 10) && stride == (2, 2);
    }
    if name.starts_with("ConvAsm7x7c3h224w224k64") {
        return (
            c.fil_h,
            c.fil_w,
            c.in_channels,
            c.in_h,
            c.in_w,
            c.out_channels,
        ) == (7, 7, 3, 224, 224, 64)
            && stride == (2, 2)
            && (c.pad_h, c.pad_w) == (3, 3);
    }
    if name == "ConvOclDirectFwd11x11" {
        return (c.fil_h, c.fil_w) == (11, 11);
    }
    if s.algo == Algo::Fft {
        return unit_stride && unit_dilation && c.data_type == DataType::Fp32;
    }
    true
}

/// Time in ms, as fin's `float` timer gives it. `tuned`: the perf-eval time (after the search).
pub fn time_ms(key: &str, solver: &str, tuned: bool) -> f64 {
    let h = hash(&[key, solver, "time"]);
    let mut t = 0.02 + (h % 1_000_000) as f64 / 1_000_000.0 * 2.98;
    if solver.starts_with("ConvDirectNaiveConv") {
        t *= 20.0;
    }
    if !tuned {
        t *= 1.1;
    }
    f64::from(t as f32)
}

fn pick(h: u64, i: usize, choices: &[u32]) -> u32 {
    choices[((h >> ((i * 5) % 60)) as usize + i) % choices.len()]
}

fn ints(h: u64, n: usize, choices: &[u32]) -> String {
    (0..n)
        .map(|i| pick(h, i, choices).to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// A perf-config string shaped like the solver's real ones (`""` for non-tunable solvers).
pub fn params(s: &SolverInfo, c: &ConvConfig) -> String {
    if !s.tunable {
        return String::new();
    }
    let key = find_db_key(c);
    let h = hash(&[&key, s.name, "params"]);
    let p2 = [1, 2, 4, 8, 16, 32, 64, 128];
    let name = s.name;
    match name {
        "ConvAsm1x1U" => ints(h, 8, &[1, 2, 4]),
        "ConvAsm1x1UV2" | "ConvAsmBwdWrW1x1" => ints(h, 10, &[1, 2, 4, 8, 16, 32]),
        "ConvAsm3x3U" => ints(h, 3, &[0, 1, 2, 4, 8]),
        "ConvAsmBwdWrW3x3" => ints(h, 6, &[0, 1, 2, 4, 8, 16]),
        "ConvOclDirectFwd" | "ConvOclDirectFwd1x1" => ints(h, 9, &p2),
        "ConvCkIgemmFwdV6r1DlopsNchw" => (h % 12).to_string(),
        _ if name.starts_with("ConvBinWinogradRxSf") => (1 + h % 240).to_string(),
        _ if name.starts_with("ConvOclBwdWrW2") => ints(h, 5, &[1, 2, 4, 5, 8, 10]),
        _ if name.contains("V4R1") => ints(h, 16, &p2),
        _ if name.contains("GTCDynamic") => {
            let dir = match problem_direction(c) {
                Direction::Forward => "fwd",
                Direction::BackwardData => "bwd",
                Direction::BackwardWeights => "wrw",
            };
            let layout = problem_layout(c).to_ascii_lowercase();
            let dt = c.data_type.key_name().to_ascii_lowercase();
            format!("{dir},{layout},{dt},{}", ints(h, 20, &p2))
        }
        _ if name.starts_with("ConvHipImplicitGemm") && name.contains("Xdlops") => {
            let op = match problem_direction(c) {
                Direction::Forward => "Fwd",
                Direction::BackwardData => "Bwd",
                Direction::BackwardWeights => "Wrw",
            };
            let v: Vec<String> = (0..10).map(|i| pick(h, i, &p2).to_string()).collect();
            format!(
                "DeviceConv2d{op}Xdl_Standin<{}, {}, {}, {}, Default, {}>",
                v[0],
                v[1],
                v[2],
                v[3],
                v[4..].join(", ")
            )
        }
        _ => ints(h, 6, &p2),
    }
}

/// Workspace in bytes: GEMM im2col buffers and the NHWC implicit-GEMM transposes, else 0.
pub fn workspace(s: &SolverInfo, c: &ConvConfig) -> u64 {
    let elem: u64 = match c.data_type {
        DataType::Fp32 | DataType::Int32 => 4,
        DataType::Int8 | DataType::Fp8 | DataType::Bf8 => 1,
        _ => 2,
    };
    let (ci, hw) = (
        u64::from(c.in_channels),
        u64::from(c.in_h) * u64::from(c.in_w),
    );
    let fil = u64::from(c.fil_h) * u64::from(c.fil_w) * u64::from(c.fil_d.max(1));
    if s.name.ends_with("Rest") || s.name == "GemmWrwUniversal" {
        ci * fil * hw * elem
    } else if s.name.contains("GTCDynamic") && s.name.ends_with("NHWC") {
        u64::from(c.batchsize) * ci * hw * elem
    } else if s.algo == Algo::Fft {
        2 * u64::from(c.batchsize) * ci * hw * elem
    } else {
        0
    }
}

fn extension(name: &str) -> &'static str {
    if name.starts_with("ConvMlir") {
        "mlir"
    } else if name.starts_with("ConvOcl") {
        "cl"
    } else if name.starts_with("ConvAsm")
        || name.starts_with("ConvBinWino")
        || name.starts_with("ConvWinograd3x3")
        || name.starts_with("ConvMPBidirect")
    {
        "s"
    } else {
        "cpp"
    }
}

/// 1–3 fake code objects of `solver` for `c` (none for rocBLAS GEMM). `all_configs`: the
/// perf-compile answer for a tunable solver (kernels of several perf configs), otherwise the
/// one solution's kernel(s).
pub fn kernels(s: &SolverInfo, c: &ConvConfig, arch: &str, all_configs: bool) -> Vec<KernelObject> {
    if s.algo == Algo::Gemm {
        return Vec::new();
    }
    let key = find_db_key(c);
    let h = hash(&[&key, s.name, arch, "kernels"]);
    let count = if all_configs && s.tunable {
        1 + (h % 3) as usize
    } else {
        1
    };
    let stem: String = s
        .name
        .chars()
        .map(|ch| {
            if ch.is_ascii_alphanumeric() {
                ch.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    let ext = extension(s.name);
    (0..count)
        .map(|i| {
            let file = if count == 1 {
                format!("{stem}.{ext}")
            } else {
                format!("{stem}_{i}.{ext}")
            };
            let options = if ext == "mlir" {
                format!(
                    " --operation conv2d -t {} --fil_layout {} --in_layout {} --x2 {i}",
                    c.data_type.key_name().to_ascii_lowercase(),
                    c.fil_layout,
                    c.in_layout
                )
            } else {
                format!(
                    " -DMIOPEN_STANDIN_KERNEL={i} -DN={} -DC={} -DK={} -DH={} -DW={} -DY={} -DX={} -DG={}",
                    c.batchsize,
                    c.in_channels,
                    c.out_channels,
                    c.in_h,
                    c.in_w,
                    c.fil_h,
                    c.fil_w,
                    c.group_count
                )
            };
            let code = fake_code_object(hash(&[&key, s.name, arch, &file, &options]));
            encode_blob(&code, &file, &options)
        })
        .collect()
}

/// A deterministic "code object": a clang offload bundle header, some structured (compressible)
/// text and some pseudo-random bytes, 2–6 KiB in all.
fn fake_code_object(seed: u64) -> Vec<u8> {
    let mut out = b"__CLANG_OFFLOAD_BUNDLE__\x02\x00\x00\x00\x00\x00\x00\x00".to_vec();
    out.extend_from_slice(b"hipv4-amdgcn-amd-amdhsa--standin\0TEST DOUBLE: not a real kernel\0");
    let mut x = seed | 1;
    let size = 2048 + (seed % 4096) as usize;
    while out.len() < size {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if x.is_multiple_of(4) {
            out.extend_from_slice(&x.to_le_bytes());
        } else {
            out.extend_from_slice(b"s_waitcnt vmcnt(0)\nv_fma_f32 v1, v2, v3, v1\n");
        }
    }
    out.truncate(size);
    out
}
