//! From spec text to a checked [`TuningSpec`]: every check that can be made before a job
//! exists, each failing with the file, the line and the field.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use shoal_model::Params;
use toml::Spanned;

use super::error::{Ctx, SpecError};
use super::files::{read_limited, read_limited_text};
use super::raw::RawSpec;
use super::sections::SpecBackend;
use super::shapes::{self, is_ident, Shapes};
use super::space::{check_space, expand, plan_params, space};
use super::steps;
use super::{Limits, ParamDef, Rule, TuningSpec};
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
    let offset = e.span().map(|s| s.start);
    // An array or inline table left open is noticed only where the parser gives up, lines
    // later: point at the line that opened it, and show everything in between.
    let opener = offset.and_then(|o| unclosed_bracket(text, o));
    let (line, column, message) = match (offset, opener) {
        (Some(o), Some(open)) => {
            let (l, c) = super::line_col(text, open);
            let (at, _) = super::line_col(text, o);
            let what = if text[open..].starts_with('{') {
                "inline table"
            } else {
                "array"
            };
            let message = format!(
                "{message} (the {what} opened here is not closed; the parser stopped at line {at})"
            );
            (Some(l), Some(c), message + &snippet(text, l, at, l, c))
        }
        (Some(o), None) => {
            let (l, c) = super::line_col(text, o);
            let shown = snippet_before(text, l, c);
            (Some(l), Some(c), message + &shown)
        }
        _ => (None, None, message),
    };
    SpecError {
        file: path.to_path_buf(),
        line,
        column,
        field: None,
        message: format!("{label}{message}"),
    }
}

/// The offset of the last `[` or `{` still open at `offset`, outside strings, comments and
/// table headers: where an array or inline table that the parser found unterminated began.
fn unclosed_bracket(text: &str, offset: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let end = offset.min(bytes.len());
    let mut open: Vec<usize> = Vec::new();
    let mut i = 0;
    let mut line_start = true;
    while i < end {
        let c = bytes[i];
        match c {
            b'\n' => {
                line_start = true;
                i += 1;
                continue;
            }
            b' ' | b'\t' | b'\r' => {
                i += 1;
                continue;
            }
            b'#' => {
                while i < end && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'"' | b'\'' => i = after_string(bytes, i, end),
            b'[' if line_start && open.is_empty() => {
                // A table header, `[run]` or `[[shapes]]`: to the end of its line.
                while i < end && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'[' | b'{' => {
                open.push(i);
                i += 1;
            }
            b']' | b'}' => {
                open.pop();
                i += 1;
            }
            _ => i += 1,
        }
        line_start = false;
    }
    open.last().copied()
}

/// Where the string starting with the quote at `start` ends (just past its closing quote, or
/// at the end of its line when a one-line string is not closed).
fn after_string(bytes: &[u8], start: usize, end: usize) -> usize {
    let q = bytes[start];
    let triple = bytes[start..].starts_with(&[q, q, q]);
    let mut i = start + if triple { 3 } else { 1 };
    while i < end {
        if q == b'"' && bytes[i] == b'\\' {
            i += 2;
            continue;
        }
        if !triple && bytes[i] == b'\n' {
            return i;
        }
        if triple && bytes[i..].starts_with(&[q, q, q]) {
            return i + 3;
        }
        if !triple && bytes[i] == q {
            return i + 1;
        }
        i += 1;
    }
    end
}

/// The error's line and the two before it.
fn snippet_before(text: &str, line: usize, column: usize) -> String {
    snippet(text, line.saturating_sub(2).max(1), line, line, column)
}

/// Lines `first` to `last` of `text`, numbered (the last 8 when there are more, and line
/// `first`), with a caret under `column` of line `at`.
fn snippet(text: &str, first: usize, last: usize, at: usize, column: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    if first == 0 || first > lines.len().max(1) {
        return String::new();
    }
    let last = last.clamp(first, lines.len().max(first));
    let width = last.to_string().len();
    let line = |n: usize| {
        let mut s = format!(
            "\n  {n:>width$} | {}",
            lines.get(n - 1).copied().unwrap_or("")
        );
        if n == at {
            s.push_str(&format!(
                "\n  {:>width$} | {}^",
                "",
                " ".repeat(column.saturating_sub(1))
            ));
        }
        s
    };
    let from = first.max(last.saturating_sub(7));
    let mut out = String::new();
    if from > first {
        out.push_str(&line(first));
        out.push_str(&format!("\n  {:>width$} | …", ""));
    }
    for n in from..=last {
        out.push_str(&line(n));
    }
    out
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

/// Parses and checks a spec's text. The checks run in the order of the file's concerns (name,
/// parameters, sources, shapes, commands, device, limits, output, rules), and the first that
/// fails is the error.
pub fn parse(text: &str, path: &Path, limits: &Limits) -> Result<TuningSpec, SpecError> {
    let ctx = Ctx { path, text };
    let raw = parse_toml(path, text)?;
    let dir = spec_dir(path);
    let mut warnings = Vec::new();
    let name = check_spec_name(ctx, &raw.name)?;
    let backend = SpecBackend::from_key(ctx, raw.backend.as_ref(), &mut warnings)?;
    if backend == SpecBackend::Replay {
        return super::recorded::parse(ctx, &raw, name, &dir, limits);
    }
    if let Some(space) = &raw.space {
        return Err(ctx.at(
            space.span(),
            "space",
            "`space` is the replay backend's recorded space: add `backend = \"replay\"`",
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

    let source_hashes = hash_sources(ctx, &raw, &dir, limits)?;
    let (shapes, shapes_csv) = load_shapes(ctx, &raw, &dir, limits)?;
    check_space(
        ctx,
        limits,
        compile_count,
        run_count,
        Some(shapes.rows.len()),
    )?;
    warnings.extend(shapes.warnings.iter().cloned());
    name_shape_columns(ctx, &raw, &shapes, &mut names)?;

    let build_command = steps::build_command(ctx, &raw, &names, &dir, &mut warnings)?;
    let run_command = steps::run_command(ctx, &raw, &names, &dir)?;
    let device = steps::device(ctx, &raw)?;
    let (build, run) = steps::step_specs(ctx, &raw, build_command, run_command)?;
    let output = steps::output(ctx, &raw)?;
    let search = steps::search(ctx, &raw, &dir)?;

    let params = Known {
        compile: &compile_params,
        run: &run_params,
        shapes: &shapes,
    };
    let rules = rules(ctx, &raw, &params)?;
    let flops = flops(ctx, &raw, &params)?;

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
        search,
        compile_params,
        run_params,
        shape_columns: shapes.columns,
        shapes: shapes.rows,
        rules,
        flops,
        source_hashes,
        shapes_csv,
        warnings,
        replay: None,
        replay_time: Default::default(),
        leaders: Default::default(),
    };
    spec.warnings.extend(empty_shape_warnings(&spec));
    Ok(spec)
}

/// The spec as TOML. Syntax first, so that those errors say so; then the schema (unknown and
/// missing keys, wrong types), whose messages name the key.
fn parse_toml(path: &Path, text: &str) -> Result<RawSpec, SpecError> {
    text.parse::<toml::Table>()
        .map_err(|e| toml_error(path, text, e, "TOML syntax: "))?;
    toml::from_str(text).map_err(|e| toml_error(path, text, e, ""))
}

/// The spec's name, which becomes part of file and directory names (`shoal-out/<name>`), so
/// only letters, digits, `_` and `-`.
fn check_spec_name<'r>(ctx: Ctx, name: &'r Spanned<String>) -> Result<&'r String, SpecError> {
    let value = name.get_ref();
    if value.is_empty()
        || !value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(ctx.at(
            name.span(),
            "name",
            format!("`{value}` may only use letters, digits, `_` and `-`"),
        ));
    }
    Ok(value)
}

/// The spec's sources, read and hashed now so that the build identity is fixed at load.
fn hash_sources(
    ctx: Ctx,
    raw: &RawSpec,
    dir: &Path,
    limits: &Limits,
) -> Result<Vec<(String, String)>, SpecError> {
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
    Ok(source_hashes)
}

/// The shapes, from exactly one of `[[shapes]]` and `shapes_csv` (with the CSV file's path,
/// kept so that a resumed tuning can tell the file changed).
fn load_shapes(
    ctx: Ctx,
    raw: &RawSpec,
    dir: &Path,
    limits: &Limits,
) -> Result<(Shapes, Option<PathBuf>), SpecError> {
    match (&raw.shapes, &raw.shapes_csv) {
        (Some(_), Some(csv)) => Err(ctx.at(
            csv.span(),
            "shapes_csv",
            "give either `shapes_csv` or [[shapes]], not both",
        )),
        (None, None) => Err(ctx.field(
            "shapes",
            "no shapes: give `shapes_csv = \"file.csv\"` or [[shapes]] tables",
        )),
        (Some(inline), None) => Ok((shapes::inline(ctx, inline)?, None)),
        (None, Some(csv)) => {
            let file = dir.join(csv.get_ref());
            let shown = shown_path(ctx.path, csv.get_ref());
            let csv_text = read_limited_text(&file, limits.max_shapes_bytes).map_err(|e| {
                ctx.at(csv.span(), "shapes_csv", format!("`{}` {e}", csv.get_ref()))
            })?;
            Ok((shapes::csv_text(&csv_text, &shown)?, Some(file)))
        }
    }
}

/// Adds the shape columns to the names the parameters took: a column may not reuse a
/// parameter's name, since both are placeholders of the same commands.
fn name_shape_columns(
    ctx: Ctx,
    raw: &RawSpec,
    shapes: &Shapes,
    names: &mut HashMap<String, (Origin, Range<usize>)>,
) -> Result<(), SpecError> {
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
            names,
        )?;
    }
    Ok(())
}

/// The names an expression may use (parameters and shape columns) and their values.
struct Known<'a> {
    compile: &'a [ParamDef],
    run: &'a [ParamDef],
    shapes: &'a Shapes,
}

impl Known<'_> {
    /// Every name, in the order of the spec, for "unknown parameter" messages.
    fn listed(&self) -> String {
        let mut known: Vec<&str> = self
            .compile
            .iter()
            .chain(self.run)
            .map(|d| d.name.as_str())
            .collect();
        known.extend(self.shapes.columns.iter().map(String::as_str));
        known.join(", ")
    }

    /// The values a name takes: a parameter's list, or a shape column's value in every row.
    fn values_of(&self, name: &str) -> Option<Vec<String>> {
        if let Some(d) = self.compile.iter().chain(self.run).find(|d| d.name == name) {
            return Some(d.values.clone());
        }
        self.shapes.columns.iter().any(|c| c == name).then(|| {
            self.shapes
                .rows
                .iter()
                .filter_map(|r| r.get(name).map(str::to_string))
                .collect()
        })
    }
}

/// The constraint rules, each parsed and its names checked.
fn rules(ctx: Ctx, raw: &RawSpec, params: &Known) -> Result<Vec<Rule>, SpecError> {
    let known = params.listed();
    let value_of = |name: &str| params.values_of(name);
    let mut rules = Vec::new();
    for (i, r) in raw.rules.iter().enumerate() {
        let expr = expression(ctx, &format!("rules[{i}]"), r, &value_of, &known)?;
        rules.push(Rule {
            text: r.get_ref().clone(),
            expr,
        });
    }
    Ok(rules)
}

/// The FLOP count of a shape, if given: an expression of shape columns only, since it must be
/// the same for every candidate of a shape to compare their rates.
fn flops(ctx: Ctx, raw: &RawSpec, params: &Known) -> Result<Option<Expr>, SpecError> {
    let Some(f) = &raw.flops else {
        return Ok(None);
    };
    let known = params.listed();
    let value_of = |name: &str| params.values_of(name);
    let expr = expression(ctx, "flops", f, &value_of, &known)?;
    if let Some(bad) = expr
        .idents()
        .into_iter()
        .find(|n| !params.shapes.columns.iter().any(|c| c == n))
    {
        return Err(ctx.at(
            f.span(),
            "flops",
            format!("`{bad}` is not a shape column; flops depend on the shape only"),
        ));
    }
    Ok(Some(expr))
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
