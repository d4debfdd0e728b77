//! fin's JSON protocol, as pure functions: build the input file that MITuna hands to
//! `fin -i in.json -o out.json`, and parse the output file fin writes back.
//!
//! fin (ROCm/MIFin) is MIOpen's tuning handle. It cannot run on this machine (it needs ROCm and an
//! AMD GPU), so everything here is checked against recorded fin inputs and outputs (MIFin's own
//! test files, copied into `tests/fin-fixtures`; see `docs/data-provenance.md`) and against the
//! description in `docs/miopen-formats.md` §6.
//!
//! * [`input`]: [`FinJob`] → the list-wrapped input file, byte for byte as MITuna's
//!   `json.dumps(fjob, indent=2)` writes it (insertion-ordered keys, §6.2/§6.7), and
//!   [`config_json`] / [`parse_config`] between a [`ConvConfig`] and fin's `config` object.
//! * [`output`]: [`parse_output`] reads fin's output list (`process_env` first, then one element
//!   per job) into typed results. It accepts the current shape and the older fixture shapes
//!   (`solver_id` instead of `solver_name`, numbers written as strings, no `process_env`),
//!   ignores unknown fields, and every error names the JSON path that caused it.
//! * [`blob`]: kernel objects: base64 of bzip2 of a code object, with the md5 of the
//!   uncompressed bytes. [`decode_blob`] checks what fin sent; [`encode_blob`] makes objects the
//!   way fin and MIOpen do (bzip2 level 9, raw fallback), for test doubles and the kernel db.
//!
//! [`ConvConfig`]: crate::ConvConfig

pub mod blob;
pub mod input;
mod jsonpath;
pub mod output;
mod pyjson;

pub use blob::{decode_blob, encode_blob, KernelObject};
pub use input::{
    config_json, input_json, parse_config, CompiledSolver, FinJob, FindCompiledSolver,
};
pub use output::{
    parse_output, EvalResult, FinJobOutput, FinOutput, FindCompileResult, PerfCompileResult,
    SolverInfo,
};

/// What can go wrong reading fin's JSON or its kernel objects. Every variant says where: a
/// JSON path like `$[1].miopen_perf_eval_result[0].time`, or the kernel file name.
#[derive(Debug, thiserror::Error)]
pub enum FinError {
    /// The text is not JSON at all.
    #[error("fin output is not valid JSON: {0}")]
    Syntax(#[from] serde_json::Error),
    /// A value is missing or has the wrong type.
    #[error("{path}: {message}")]
    Shape { path: String, message: String },
    /// A kernel object's `blob` is not standard base64.
    #[error("kernel object {kernel_file}: blob is not base64: {message}")]
    Base64 {
        kernel_file: String,
        message: String,
    },
    /// A kernel object's blob does not bzip2-decompress.
    #[error("kernel object {kernel_file}: blob does not decompress: {message}")]
    Bzip2 {
        kernel_file: String,
        message: String,
    },
    /// Decompressed length differs from `uncompressed_size`.
    #[error("kernel object {kernel_file}: {actual} bytes after decompression, uncompressed_size says {expected}")]
    Size {
        kernel_file: String,
        expected: u64,
        actual: u64,
    },
    /// md5 of the uncompressed object differs from `md5_sum` (MIOpen: "Possible database corruption").
    #[error("kernel object {kernel_file}: md5 {actual} does not match md5_sum {expected}")]
    Md5 {
        kernel_file: String,
        expected: String,
        actual: String,
    },
    /// fin could not compress the object and sent none (`md5_sum: "Failed to compress kernel"`).
    #[error("kernel object {kernel_file}: fin sent no code object ({md5_sum})")]
    NoObject {
        kernel_file: String,
        md5_sum: String,
    },
}
