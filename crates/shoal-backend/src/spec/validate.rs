//! From spec text to a checked [`TuningSpec`]: every check that can be made before a job
//! exists, each failing with the file, the line and the field.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use regex::Regex;
use sha2::{Digest, Sha256};
use shoal_model::Params;
use toml::Spanned;

use super::commands::{check_program, placeholder_rule, templates};
use super::error::{Ctx, SpecError};
use super::files::{read_limited, read_limited_text};
use super::raw::{self, RawOutput, RawSpec};
use super::shapes::{self, is_ident, Shapes};
use super::space::{check_space, expand, plan_params, space};
use super::{
    BuildSpec, DeviceClass, Limits, OutputSpec, Rule, RunMode, RunSpec, Statistic, TimeUnit,
    TuningSpec,
};
use crate::expr::Expr;

/// Where a name comes from, for duplicate and placeholder messages.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    Compile,
    Run,
    Shape,
}

impl Origin {
    pub(super) fn describe(self) -> &'static str {
        match self {
            Origin::Compile => "a compile parameter",
            Origin::Run => "a run parameter",
            Origin::Shape => "a shape column",
        }
    }
}

/// The absolute directory of the spec file.
fn spec_dir(path: &Path) -> PathBuf {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::canonicalize(&parent)
        .or_else(|_| std::path::absolute(&parent))
        .unwrap_or(parent)
}

/// The path to show for a file named in the spec: next to the spec as the user named it.
fn shown_path(spec_path: &Path, rel: &str) -> PathBuf {
    match spec_path.parent() {
        Some(p) if !Path::new(rel).is_absolute() => p.join(rel),
        _ => PathBuf::from(rel),
    }
}

fn toml_error(path: &Path, text: &str, e: toml::de::Error, label: &str) -> SpecError {
    let message = e
        .message()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    let (line, column) = match e.span() {
        Some(span) => {
            let (l, c) = super::line_col(text, span.start);
            (Some(l), Some(c))
        }
        None => (None, None),
    };
    SpecError {
        file: path.to_path_buf(),
        line,
        column,
        field: None,
        message: format!("{label}{message}"),
    }
}

pub(super) fn check_name(
    ctx: Ctx,
    name: &str,
    span: Range<usize>,
    field: &str,
    origin: Origin,
    names: &mut HashMap<String, (Origin, Range<usize>)>,
) -> Result<(), SpecError> {
    if !is_ident(name) {
        return Err(ctx.at(
            span,
            field,
            format!("`{name}` is not an identifier ([A-Za-z_][A-Za-z0-9_]*)"),
        ));
    }
    if super::RESERVED.contains(&name) {
        return Err(ctx.at(
            span,
            field,
            format!("`{name}` is a reserved placeholder name"),
        ));
    }
    if let Some((other, _)) = names.get(name) {
        return Err(ctx.at(
            span,
            field,
            format!("`{name}` is already {}", other.describe()),
        ));
    }
    names.insert(name.to_string(), (origin, span));
    Ok(())
}

fn regex(
    ctx: Ctx,
    field: &str,
    value: &Option<Spanned<String>>,
) -> Result<Option<Regex>, SpecError> {
    let Some(value) = value else { return Ok(None) };
    Regex::new(value.get_ref()).map(Some).map_err(|e| {
        let msg = e
            .to_string()
            .lines()
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(" ");
        ctx.at(value.span(), field, format!("invalid regex: {msg}"))
    })
}

/// Parses an expression field and checks its names: known, and integer-valued.
fn expression(
    ctx: Ctx,
    field: &str,
    value: &Spanned<String>,
    value_of: &dyn Fn(&str) -> Option<Vec<String>>,
    known: &str,
) -> Result<Expr, SpecError> {
    let text = value.get_ref();
    let start = ctx.string_content_start(&value.span());
    let expr = Expr::parse(text).map_err(|e| {
        ctx.at_offset(
            start + e.offset,
            field,
            format!("in `{text}`: {}", e.message),
        )
    })?;
    for name in expr.idents() {
        let Some(values) = value_of(&name) else {
            return Err(ctx.at(
                value.span(),
                field,
                format!("unknown parameter `{name}` in `{text}` (known: {known})"),
            ));
        };
        if let Some(bad) = values.iter().find(|v| v.trim().parse::<i64>().is_err()) {
            return Err(ctx.at(
                value.span(),
                field,
                format!("`{name}` has the non-integer value `{bad}`; expressions work on integers"),
            ));
        }
    }
    Ok(expr)
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

pub fn parse(text: &str, path: &Path, limits: &Limits) -> Result<TuningSpec, SpecError> {
    let ctx = Ctx { path, text };
    // Syntax first, so that those errors say so; then the schema (unknown and missing keys,
    // wrong types), whose messages name the key.
    text.parse::<toml::Table>()
        .map_err(|e| toml_error(path, text, e, "TOML syntax: "))?;
    let raw: RawSpec = toml::from_str(text).map_err(|e| toml_error(path, text, e, ""))?;
    let dir = spec_dir(path);
    let mut warnings = Vec::new();

    let name = raw.name.get_ref();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(ctx.at(
            raw.name.span(),
            "name",
            format!("`{name}` may only use letters, digits, `_` and `-`"),
        ));
    }

    // Parameters and shape columns share one namespace. The space is counted before any
    // value list is built or any other file is read.
    let mut names = HashMap::new();
    let compile_plan = plan_params(
        ctx,
        "compile",
        &raw.params.compile,
        Origin::Compile,
        &mut names,
    )?;
    let run_plan = plan_params(ctx, "run", &raw.params.run, Origin::Run, &mut names)?;
    let (compile_count, run_count) = (space(&compile_plan), space(&run_plan));
    check_space(ctx, limits, compile_count, run_count, None)?;
    let compile_params = expand(ctx, compile_plan)?;
    let run_params = expand(ctx, run_plan)?;

    // Sources: read and hash now, so the build identity is fixed at load.
    let mut source_hashes = Vec::new();
    for (i, src) in raw.sources.iter().enumerate() {
        let bytes =
            read_limited(&dir.join(src.get_ref()), limits.max_source_bytes).map_err(|e| {
                ctx.at(
                    src.span(),
                    format!("sources[{i}]"),
                    format!("`{}` {e}", src.get_ref()),
                )
            })?;
        source_hashes.push((src.get_ref().clone(), sha256_hex(&bytes)));
    }

    let (shapes, shapes_csv): (Shapes, Option<PathBuf>) = match (&raw.shapes, &raw.shapes_csv) {
        (Some(_), Some(csv)) => {
            return Err(ctx.at(
                csv.span(),
                "shapes_csv",
                "give either `shapes_csv` or [[shapes]], not both",
            ))
        }
        (None, None) => {
            return Err(ctx.field(
                "shapes",
                "no shapes: give `shapes_csv = \"file.csv\"` or [[shapes]] tables",
            ))
        }
        (Some(inline), None) => (shapes::inline(ctx, inline)?, None),
        (None, Some(csv)) => {
            let file = dir.join(csv.get_ref());
            let shown = shown_path(path, csv.get_ref());
            let csv_text = read_limited_text(&file, limits.max_shapes_bytes).map_err(|e| {
                ctx.at(csv.span(), "shapes_csv", format!("`{}` {e}", csv.get_ref()))
            })?;
            (shapes::csv_text(&csv_text, &shown)?, Some(file))
        }
    };
    check_space(
        ctx,
        limits,
        compile_count,
        run_count,
        Some(shapes.rows.len()),
    )?;
    warnings.extend(shapes.warnings.iter().cloned());
    let shape_span = raw
        .shapes
        .as_ref()
        .map(|s| s.span())
        .or_else(|| raw.shapes_csv.as_ref().map(|s| s.span()))
        .unwrap_or(0..0);
    for column in &shapes.columns {
        check_name(
            ctx,
            column,
            shape_span.clone(),
            "shapes",
            Origin::Shape,
            &mut names,
        )?;
    }

    // Commands.
    let build_argv = raw::command(ctx, "build.command", &raw.build.command)?;
    let build_templates = templates(
        ctx,
        "build.command",
        &raw.build.command,
        &build_argv,
        &placeholder_rule(&names, true),
    )?;
    check_program(
        ctx,
        "build.command",
        &raw.build.command,
        &build_templates[0],
        &dir,
    )?;
    if !build_templates.iter().any(|t| t.vars().any(|v| v == "out")) {
        warnings.push(format!(
            "{}: build.command does not name `{{out}}`; the build must write the artifact to $SHOAL_OUT",
            path.display()
        ));
    }
    let mode = match &raw.run.mode {
        None => RunMode::Process,
        Some(m) => RunMode::parse(m.get_ref()).ok_or_else(|| {
            ctx.at(
                m.span(),
                "run.mode",
                format!("`{}` is not one of process, library", m.get_ref()),
            )
        })?,
    };
    let (run_argv, run_templates) = match (mode, &raw.run.command) {
        (RunMode::Process, None) => {
            return Err(ctx.field(
                "run.command",
                "missing: a process-mode run needs a command (or set `mode = \"library\"`)",
            ))
        }
        (RunMode::Process, Some(command)) => {
            let argv = raw::command(ctx, "run.command", command)?;
            let templates = templates(
                ctx,
                "run.command",
                command,
                &argv,
                &placeholder_rule(&names, false),
            )?;
            check_program(ctx, "run.command", command, &templates[0], &dir)?;
            (argv, templates)
        }
        (RunMode::Library, Some(command)) => {
            return Err(ctx.at(
                command.span(),
                "run.command",
                "a library-mode run has no command: Shoal's runner loads the artifact and calls its entry points (include/shoal_kernel.h)",
            ))
        }
        (RunMode::Library, None) => (Vec::new(), Vec::new()),
    };
    if let (RunMode::Library, Some(output)) = (mode, &raw.output) {
        return Err(ctx.at(
            output.span(),
            "output",
            "a library-mode run reports its times and verdict through shoal_run; [output] applies to process mode only",
        ));
    }
    let device = match &raw.device {
        None => DeviceClass::Cpu,
        Some(d) => DeviceClass::parse(d.get_ref()).ok_or_else(|| {
            ctx.at(
                d.span(),
                "device",
                format!("`{}` is not one of cpu, gpu", d.get_ref()),
            )
        })?,
    };

    let count =
        |v: &Option<Spanned<i64>>, field: &str, default: u32, min: i64| -> Result<u32, SpecError> {
            match v {
                None => Ok(default),
                Some(s) if *s.get_ref() >= min && *s.get_ref() <= 1_000_000 => {
                    Ok(*s.get_ref() as u32)
                }
                Some(s) => Err(ctx.at(
                    s.span(),
                    field,
                    format!("must be between {min} and 1000000, found {}", s.get_ref()),
                )),
            }
        };
    let statistic = match &raw.run.statistic {
        None => Statistic::Median,
        Some(s) => Statistic::parse(s.get_ref()).ok_or_else(|| {
            ctx.at(
                s.span(),
                "run.statistic",
                format!("`{}` is not one of median, min, mean", s.get_ref()),
            )
        })?,
    };
    let build = BuildSpec {
        argv: build_argv,
        timeout: raw::timeout(ctx, "build.timeout_s", raw.build.timeout_s.as_ref(), 120)?,
        templates: build_templates,
    };
    let run = RunSpec {
        mode,
        argv: run_argv,
        timeout: raw::timeout(ctx, "run.timeout_s", raw.run.timeout_s.as_ref(), 60)?,
        warmup: count(&raw.run.warmup, "run.warmup", 0, 0)?,
        repeat: count(&raw.run.repeat, "run.repeat", 1, 1)?,
        statistic,
        templates: run_templates,
    };

    // Output.
    let raw_output = raw.output.as_ref().map(|o| o.get_ref());
    let raw_output = raw_output.unwrap_or(&RawOutput::EMPTY);
    let time = regex(ctx, "output.time", &raw_output.time)?;
    if let (Some(re), Some(src)) = (&time, &raw_output.time) {
        if re.captures_len() < 2 {
            return Err(ctx.at(
                src.span(),
                "output.time",
                "the regex needs a capture group around the number, e.g. `time_us=([0-9.]+)`",
            ));
        }
    }
    let time_unit = match &raw_output.time_unit {
        None => TimeUnit::Us,
        Some(s) => TimeUnit::parse(s.get_ref()).ok_or_else(|| {
            ctx.at(
                s.span(),
                "output.time_unit",
                format!("`{}` is not one of s, ms, us, ns", s.get_ref()),
            )
        })?,
    };
    let output = OutputSpec {
        time,
        time_unit,
        pass: regex(ctx, "output.pass", &raw_output.pass)?,
        fail: regex(ctx, "output.fail", &raw_output.fail)?,
    };

    // Rules and flops.
    let mut known: Vec<&str> = compile_params
        .iter()
        .chain(&run_params)
        .map(|d| d.name.as_str())
        .collect();
    known.extend(shapes.columns.iter().map(String::as_str));
    let known = known.join(", ");
    let value_of = |name: &str| -> Option<Vec<String>> {
        if let Some(d) = compile_params
            .iter()
            .chain(&run_params)
            .find(|d| d.name == name)
        {
            return Some(d.values.clone());
        }
        shapes.columns.iter().any(|c| c == name).then(|| {
            shapes
                .rows
                .iter()
                .filter_map(|r| r.get(name).map(str::to_string))
                .collect()
        })
    };
    let mut rules = Vec::new();
    for (i, r) in raw.rules.iter().enumerate() {
        let expr = expression(ctx, &format!("rules[{i}]"), r, &value_of, &known)?;
        rules.push(Rule {
            text: r.get_ref().clone(),
            expr,
        });
    }
    let flops = match &raw.flops {
        None => None,
        Some(f) => {
            let expr = expression(ctx, "flops", f, &value_of, &known)?;
            if let Some(bad) = expr
                .idents()
                .into_iter()
                .find(|n| !shapes.columns.iter().any(|c| c == n))
            {
                return Err(ctx.at(
                    f.span(),
                    "flops",
                    format!("`{bad}` is not a shape column; flops depend on the shape only"),
                ));
            }
            Some(expr)
        }
    };

    let mut spec = TuningSpec {
        name: name.clone(),
        path: path.to_path_buf(),
        dir,
        source_text: text.to_string(),
        description: raw.description.clone(),
        device,
        build,
        run,
        output,
        compile_params,
        run_params,
        shape_columns: shapes.columns,
        shapes: shapes.rows,
        rules,
        flops,
        source_hashes,
        shapes_csv,
        warnings,
    };
    spec.warnings.extend(empty_shape_warnings(&spec));
    Ok(spec)
}

/// One warning for the shapes the rules leave without a candidate.
fn empty_shape_warnings(spec: &TuningSpec) -> Option<String> {
    if spec.rules.is_empty() {
        return None;
    }
    let empty: Vec<&Params> = spec
        .shapes
        .iter()
        .filter(|s| !spec.has_candidate(s))
        .collect();
    if empty.is_empty() {
        return None;
    }
    let shown: Vec<String> = empty.iter().take(5).map(|s| s.key()).collect();
    let more = if empty.len() > 5 {
        format!(" and {} more", empty.len() - 5)
    } else {
        String::new()
    };
    Some(format!(
        "{}: the rules leave no candidate for {} of {} shapes: {}{more}",
        spec.path.display(),
        empty.len(),
        spec.shapes.len(),
        shown.join("; ")
    ))
}
