//! The tuning spec of the exec backend: what a user writes to tune any kernel that can be
//! built and timed from a command line.
//!
//! A spec is a TOML file. It names a build command and a run command with parameter
//! placeholders, the compile-time parameters (each distinct set is built once and the artifact
//! is shared by every shape), the run-time parameters (varied without rebuilding), constraint
//! rules, the shapes to tune, and how to read the time and a correctness verdict from the
//! run's output. [`load`] reads and checks it completely before any job exists: a syntax
//! error, a rule naming an unknown parameter or a build program that is not installed is a
//! [`SpecError`] naming the file, the line and the field.
//!
//! # File format
//!
//! ```toml
//! name = "cpu-gemm"                 # required; letters, digits, `_` and `-`
//! description = "Tiled GEMM in C"   # optional
//! sources = ["gemm.c"]              # optional; files relative to the spec's directory. Their
//!                                   # content is part of the build identity: editing one
//!                                   # rebuilds every artifact and makes a new session.
//! rules = ["BM * BN <= 16384", "K % BK == 0"]   # optional; see below
//! flops = "2 * M * N * K"           # optional: FLOPs of one run, for GFLOP/s
//! device = "cpu"                    # cpu (default) | gpu: where `shoal tune` times candidates
//! backend = "exec"                  # exec (default): built and run by execing the [build] and
//!                                   # [run] commands | replay (see below). `command`, exec's
//!                                   # old name, is still read, with a warning.
//!
//! shapes_csv = "shapes.csv"         # the shapes: a CSV whose header row names the columns
//!                                   # (aiter style: spaces around values ignored, empty
//!                                   # rows skipped) …
//! # … or inline, as an array of tables with the same keys in every table:
//! # [[shapes]]
//! # M = 256
//! # N = 256
//! # K = 256
//!
//! [build]
//! command = "cc -O3 -DBM={BM} -o {out} {spec_dir}/gemm.c"  # split on whitespace (no shell),
//!                                   # or an array of strings: ["cc", "-o", "{out}", "a b.c"]
//! timeout_s = 60                    # default 120; a float is allowed
//!
//! [run]
//! mode = "process"                  # process (default) | library, see below
//! command = "{artifact} {M} {N} {K}"  # process mode only
//! timeout_s = 10                    # per run; default 60
//! warmup = 1                        # untimed runs first; default 0
//! repeat = 3                        # timed runs; default 1; or "adaptive" (process mode):
//!                                   # 3 runs each, a clearly slower candidate (fastest run 5 %
//!                                   # beyond its shape's best so far) stops there, a close one
//!                                   # runs on until apart from the best by more than its noise
//! max_repeat = 15                   # with "adaptive": the most runs a candidate gets
//! statistic = "median"              # median | min | mean; default median
//!
//! [output]                          # optional section
//! time = 'time_us=([0-9.eE+-]+)'    # regex with one capture group, searched in stdout (the
//!                                   # last match counts); if absent, the wall time of the run
//! time_unit = "us"                  # s | ms | us | ns; default us
//! pass = 'verdict=PASS'             # optional: when given it must match, or wrong answer
//! fail = 'verdict=FAIL'             # optional: when it matches, wrong answer
//!
//! [params.compile]                  # order in the file is the order of enumeration
//! BM = [16, 32, 64]                 # a list of integers or strings (or one scalar)
//! BK = { range = [8, 64], step = 8 }  # inclusive; step defaults to 1
//! UNROLL = { pow2 = [1, 8] }        # 1, 2, 4, 8
//!
//! [params.run]                      # optional; same forms
//! SPLIT_K = [1, 2]
//! ```
//!
//! **Replaying a recorded space.** `backend = "replay"` with `space = "file.json.gz"` (a T4 file,
//! gzip-compressed or not, relative to the spec) needs no command at all:
//!
//! ```toml
//! name = "conv-a100"
//! backend = "replay"
//! space = "convolution_A100_T4.json.gz"
//! [search]                          # optional, as for any spec
//! strategy = "forest"
//! budget = "5%"
//! in_flight = 8                     # optional: of one shape's candidates out at once, at most
//! prior = "h100/conv-1.T4.json.gz"  # optional: start from earlier results (a T4 file, relative
//!                                   # to the spec's folder, or "session:<id>" of the same store)
//! ```
//!
//! The file's parameters are the compile parameters, its configurations the only candidates,
//! and there is one shape, `recorded = <file name>`. Each candidate is answered with its
//! recorded time (or failure) by [`crate::replay`]. `[build]`, `[run]`, `[output]`, `sources`,
//! `rules`, `flops`, shapes and `[params]` are refused in such a spec.
//!
//! **Library mode.** With `mode = "library"` the build writes a shared object exporting the
//! entry points of `include/shoal_kernel.h` (`shoal_prepare`, `shoal_run`, `shoal_release`,
//! `shoal_abi_version`), and there is no run command and no `[output]`: the device's runner
//! ([`crate::library`]) loads each candidate, prepares each shape once, and `shoal_run` times
//! `warmup` + `repeat` runs itself and returns a verdict. `timeout_s` then bounds one
//! candidate on one shape, all its runs together. A GPU kernel wants this mode: the device
//! context and the inputs are set up once per shape instead of once per candidate.
//!
//! **Names.** Parameter names and shape columns are identifiers (`[A-Za-z_][A-Za-z0-9_]*`),
//! unique across compile parameters, run parameters and shape columns; `out`, `artifact`,
//! `spec_dir`, `repeat` and `warmup` are reserved. Values may not contain `,`.
//!
//! **Placeholders.** `{NAME}` inside a command element is replaced by a value; `{{` and `}}`
//! are literal braces. The build command may use compile parameters, `{out}` (the path the
//! artifact must be written to), `{spec_dir}` (the spec's absolute directory), `{repeat}` and
//! `{warmup}`. The run command may use all of those except `{out}`, plus run parameters, shape
//! columns and `{artifact}` (the path of the executable artifact). An unknown placeholder is
//! an error at load. Builds and runs start in the spec's directory; the build also gets the
//! artifact path as `$SHOAL_OUT` and a run gets it as `$SHOAL_ARTIFACT`.
//!
//! **Programs.** The first element of each command, after `{spec_dir}` is substituted, must
//! exist when the spec is loaded: a path if it contains `/` (relative to the spec's
//! directory), otherwise a program on `PATH`. (A first element made from a parameter is not
//! checked.)
//!
//! **Rules and flops** are integer expressions ([`crate::expr`]: `+ - * / %`, comparisons,
//! `&& || !`, parentheses, C precedence) over compile parameters, run parameters and shape
//! columns, whose values must then be integers. A candidate is kept when every rule holds; a
//! rule that divides by zero or overflows does not hold. A shape for which the rules leave no
//! candidate is reported in [`TuningSpec::warnings`].
//!
//! **Limits.** A spec is untrusted input, so loading it is bounded ([`Limits`]): the spec file
//! and each shapes CSV at most 16 MiB, each source at most 64 MiB, all of them regular files;
//! and the candidate space (the product of every parameter's value count, times the shapes) is
//! counted before any of it is built and refused above `max_candidates` (default 1,000,000;
//! `shoal tune`/`shoal check --max-candidates N` raise it), and above
//! [`MAX_CANDIDATES_CEILING`] whatever the limit: a list that big is past any host's memory.
//! Below it a list that memory cannot hold is an error ([`OutOfMemory`]), not an abort: every
//! list of candidates is grown with `try_reserve`, and combinations are made one at a time.

mod check;
mod commands;
mod error;
mod files;
mod listing;
mod raw;
mod recorded;
mod sections;
mod shapes;
mod space;
mod steps;
mod template;
mod validate;

#[cfg(test)]
mod limit_tests;
#[cfg(test)]
mod replay_tests;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use shoal_model::search::SearchSpec;
use shoal_model::Params;

use crate::expr::Expr;
use crate::replay::{ReplaySpace, ReplayTime};
pub use check::{shown, CandidateError};
pub use commands::{find_program, ProgramError};
pub use error::{line_col, SpecError};
pub use files::{MAX_SHAPES_BYTES, MAX_SOURCE_BYTES, MAX_SPEC_BYTES};
pub use listing::OutOfMemory;
use listing::{combinations, params_bytes, try_push};
pub use recorded::SHAPE_COLUMN as REPLAY_SHAPE_COLUMN;
pub use sections::{BuildSpec, DeviceClass, OutputSpec, RunMode, RunSpec, Statistic, TimeUnit};
pub use template::{Piece, Template};

/// Placeholder names that are not parameters.
pub const RESERVED: [&str; 5] = ["out", "artifact", "spec_dir", "repeat", "warmup"];

/// A loaded, checked tuning spec.
#[derive(Clone, Debug)]
pub struct TuningSpec {
    pub name: String,
    /// The spec file as the user named it (used in messages).
    pub path: PathBuf,
    /// The absolute directory of the spec: relative files and `{spec_dir}` resolve here.
    pub dir: PathBuf,
    /// The spec file's text, as read.
    pub source_text: String,
    pub description: Option<String>,
    /// Where candidates are timed.
    pub device: DeviceClass,
    pub build: BuildSpec,
    pub run: RunSpec,
    pub output: OutputSpec,
    /// `[search]`: `None` evaluates every candidate; else each shape's search chooses which,
    /// under its budget (the Scheduler runs it; see `shoal_model::search`).
    pub search: Option<SearchSpec>,
    pub compile_params: Vec<ParamDef>,
    pub run_params: Vec<ParamDef>,
    pub shape_columns: Vec<String>,
    pub shapes: Vec<Params>,
    pub rules: Vec<Rule>,
    pub flops: Option<Expr>,
    /// The `sources` entries (as written) with the hex sha256 of their content at load.
    pub source_hashes: Vec<(String, String)>,
    /// The shapes CSV, if the shapes came from one (resolved against `dir`).
    pub shapes_csv: Option<PathBuf>,
    /// Things worth telling the user that do not stop the load.
    pub warnings: Vec<String>,
    /// The replay backend's recorded space (`backend = "replay"`): it answers every candidate,
    /// and its configurations are the only candidates. `None`: the exec backend.
    pub replay: Option<Arc<ReplaySpace>>,
    /// How long a replayed answer takes: the worker's choice (`--replay-time`), not part of the
    /// spec's identity.
    pub replay_time: ReplayTime,
    /// Each shape's best time measured by this process, for `repeat = "adaptive"`: state of
    /// the process, shared by every evaluator holding this spec, not part of its identity.
    pub leaders: Arc<crate::leaders::Leaders>,
}

/// One tunable parameter and its values, as text, in the spec's order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamDef {
    pub name: String,
    pub values: Vec<String>,
}

/// A constraint rule: its text and its parsed expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub text: String,
    pub expr: Expr,
}

/// The default of [`Limits::max_candidates`].
pub const DEFAULT_MAX_CANDIDATES: u64 = 1_000_000;

/// The most candidates a spec may produce whatever [`Limits::max_candidates`] says, and the
/// largest `--max-candidates` accepted. Each candidate takes about half a KiB while a spec is
/// checked or loaded (measured: `shoal check` on 10^6 candidates of four parameters peaks at
/// 540 MB), so 10^8 is some 50 GB: no host holds much more, and a limit above it would only
/// turn a clear refusal into a failed allocation.
pub const MAX_CANDIDATES_CEILING: u64 = 100_000_000;

/// How much work and memory loading a spec may take. A spec may come from anyone, and
/// `{ range = [1, 100000] }` in a few parameters is a space no machine can enumerate: the
/// space is counted first, and the files are read only if they are regular and small enough.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The most candidates (compile sets × run sets × shapes, before the rules) a spec may
    /// produce.
    pub max_candidates: u64,
    /// The largest file each `sources` entry may be.
    pub max_source_bytes: u64,
    /// The largest the `shapes_csv` file may be.
    pub max_shapes_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_candidates: DEFAULT_MAX_CANDIDATES,
            max_source_bytes: MAX_SOURCE_BYTES,
            max_shapes_bytes: MAX_SHAPES_BYTES,
        }
    }
}

/// Reads the spec file at `path` (and the CSV and sources it names) and checks it, under the
/// default [`Limits`].
pub fn load(path: &Path) -> Result<TuningSpec, SpecError> {
    load_with(path, &Limits::default())
}

/// [`load`] under the given limits.
pub fn load_with(path: &Path, limits: &Limits) -> Result<TuningSpec, SpecError> {
    let text = files::read_limited_text(path, MAX_SPEC_BYTES)
        .map_err(|e| SpecError::file(path, format!("the spec {e}")))?;
    parse_with(&text, path, limits)
}

/// Parses and checks spec text under the default [`Limits`]; `path` is used in messages and
/// to resolve relative files.
pub fn parse(text: &str, path: &Path) -> Result<TuningSpec, SpecError> {
    parse_with(text, path, &Limits::default())
}

/// [`parse`] under the given limits.
pub fn parse_with(text: &str, path: &Path, limits: &Limits) -> Result<TuningSpec, SpecError> {
    validate::parse(text, path, limits)
}

impl TuningSpec {
    /// Whether every rule holds for these values (and, replaying, they were recorded).
    pub fn allows(&self, shape: &Params, compile: &Params, run: &Params) -> bool {
        if let Some(replay) = &self.replay {
            return replay.contains(compile);
        }
        let lookup = |n: &str| {
            compile
                .get_i64(n)
                .or_else(|| run.get_i64(n))
                .or_else(|| shape.get_i64(n))
        };
        self.rules.iter().all(|r| r.expr.holds(&lookup))
    }

    /// The (compile, run) parameter sets to try on `shape`: the cartesian product in spec
    /// order, filtered by the rules.
    ///
    /// The lists are grown through [`try_push`]: one that memory cannot hold is an
    /// [`OutOfMemory`] error, not an abort.
    pub fn candidates(&self, shape: &Params) -> Result<Vec<(Params, Params)>, OutOfMemory> {
        let pair_bytes = params_bytes(&self.compile_params) + params_bytes(&self.run_params);
        let runs = self.run_sets()?;
        let mut out = Vec::new();
        for compile in combinations(&self.compile_params) {
            for run in &runs {
                if self.allows(shape, &compile, run) {
                    let pair = (compile.clone(), run.clone());
                    try_push(&mut out, pair, pair_bytes, "candidates")?;
                }
            }
        }
        Ok(out)
    }

    /// How many (compile, run) combinations the parameters make per shape before the rules cut
    /// them (saturating): what `shoal check` shows the rules' cut against.
    pub fn combinations(&self) -> usize {
        self.compile_params
            .iter()
            .chain(&self.run_params)
            .fold(1usize, |n, def| n.saturating_mul(def.values.len()))
    }

    /// Every run set, in order.
    fn run_sets(&self) -> Result<Vec<Params>, OutOfMemory> {
        let bytes = params_bytes(&self.run_params);
        let mut runs = Vec::new();
        for run in combinations(&self.run_params) {
            try_push(&mut runs, run, bytes, "run sets")?;
        }
        Ok(runs)
    }

    /// Whether the rules leave at least one candidate for `shape`. The run sets are listed once
    /// where memory allows, else made again for each compile set: nothing else is kept.
    pub fn has_candidate(&self, shape: &Params) -> bool {
        match self.run_sets() {
            Ok(runs) => combinations(&self.compile_params)
                .any(|compile| runs.iter().any(|run| self.allows(shape, &compile, run))),
            Err(_) => combinations(&self.compile_params).any(|c| self.has_run(shape, &c)),
        }
    }

    /// Whether some run set goes with `compile` on `shape`.
    fn has_run(&self, shape: &Params, compile: &Params) -> bool {
        combinations(&self.run_params).any(|run| self.allows(shape, compile, &run))
    }

    /// The distinct compile sets that are valid for at least one shape, in enumeration order.
    pub fn compile_sets(&self) -> Result<Vec<Params>, OutOfMemory> {
        let bytes = params_bytes(&self.compile_params);
        let runs = self.run_sets()?;
        let mut out = Vec::new();
        for compile in combinations(&self.compile_params) {
            let valid = |shape| runs.iter().any(|run| self.allows(shape, &compile, run));
            if self.shapes.iter().any(valid) {
                try_push(&mut out, compile, bytes, "compile sets")?;
            }
        }
        Ok(out)
    }

    /// The content address of the artifact built from `compile`: hex sha256 over the build
    /// argv template, the build timeout, the content of every source and `compile.key()`.
    pub fn build_key(&self, compile: &Params) -> String {
        let mut h = Sha256::new();
        h.update(b"shoal-build-v1\0");
        for arg in &self.build.argv {
            h.update(arg.as_bytes());
            h.update(b"\0");
        }
        h.update(format!("timeout_ms={}\0", self.build.timeout.as_millis()).as_bytes());
        for (name, hash) in &self.source_hashes {
            h.update(format!("source {name} {hash}\0").as_bytes());
        }
        h.update(compile.key().as_bytes());
        hex::encode(h.finalize())
    }

    /// The canonical text that identifies this spec for a session: the spec file's text and
    /// the sha256 of every source, so that editing the kernel makes a new session.
    pub fn identity(&self) -> String {
        let mut s = self.source_text.clone();
        s.push('\n');
        for (name, hash) in &self.source_hashes {
            s.push_str(&format!("source {name} sha256:{hash}\n"));
        }
        s
    }

    /// FLOPs of one run on `shape` (with the parameters of the shape only), if the spec has
    /// a `flops` expression and it evaluates.
    pub fn flops(&self, shape: &Params) -> Option<f64> {
        let expr = self.flops.as_ref()?;
        expr.eval(&|n| shape.get_i64(n)).ok().map(|v| v as f64)
    }

    fn common(&self, name: &str) -> Option<String> {
        match name {
            "spec_dir" => Some(self.dir.display().to_string()),
            "repeat" => Some(self.run.repeat.to_string()),
            "warmup" => Some(self.run.warmup.to_string()),
            _ => None,
        }
    }

    /// The build argv for `compile`, writing the artifact to `out`.
    pub fn build_argv(&self, compile: &Params, out: &Path) -> Vec<String> {
        let lookup = |n: &str| match n {
            "out" => Some(out.display().to_string()),
            _ => self
                .common(n)
                .or_else(|| compile.get(n).map(str::to_string)),
        };
        self.build
            .templates
            .iter()
            .map(|t| t.render(&lookup))
            .collect()
    }

    /// The run argv for one candidate on one shape, running `artifact`.
    pub fn run_argv(
        &self,
        compile: &Params,
        run: &Params,
        shape: &Params,
        artifact: &Path,
    ) -> Vec<String> {
        let lookup = |n: &str| match n {
            "artifact" => Some(artifact.display().to_string()),
            _ => self.common(n).or_else(|| {
                compile
                    .get(n)
                    .or_else(|| run.get(n))
                    .or_else(|| shape.get(n))
                    .map(str::to_string)
            }),
        };
        self.run
            .templates
            .iter()
            .map(|t| t.render(&lookup))
            .collect()
    }

    /// The spec file's absolute path (what a worker on this host should be given).
    pub fn absolute_path(&self) -> PathBuf {
        match self.path.file_name() {
            Some(name) => self.dir.join(name),
            None => self.path.clone(),
        }
    }

    /// Every parameter and shape column name.
    pub fn known_names(&self) -> Vec<&str> {
        let mut seen = HashSet::new();
        self.compile_params
            .iter()
            .chain(&self.run_params)
            .map(|d| d.name.as_str())
            .chain(self.shape_columns.iter().map(String::as_str))
            .filter(|n| seen.insert(*n))
            .collect()
    }
}
