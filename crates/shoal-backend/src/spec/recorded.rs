//! A spec of the replay backend (`backend = "replay"`): a name, a recorded space and a search,
//! nothing to build or run. The space decides everything else: its parameters become the
//! compile parameters (so each recorded configuration is one candidate with its own "build",
//! as a compile failure is recorded per configuration), the candidates are exactly the recorded
//! configurations, and there is one shape, named after the file.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use shoal_model::Params;

use super::error::{Ctx, SpecError};
use super::files::read_limited;
use super::raw::{check_value, RawSpec};
use super::validate::{check_name, Origin};
use super::{
    steps, BuildSpec, Limits, OutputSpec, ParamDef, RunMode, RunSpec, Statistic, TuningSpec,
};
use crate::replay::{t4, ReplaySpace, ReplayTime};

/// The one shape column of a replay spec; its value is the recorded file's name.
pub const SHAPE_COLUMN: &str = "recorded";

/// Checks a replay spec and reads its space. `name` was checked by the caller.
pub(super) fn parse(
    ctx: Ctx,
    raw: &RawSpec,
    name: &str,
    dir: &Path,
    limits: &Limits,
) -> Result<TuningSpec, SpecError> {
    refuse_exec_fields(ctx, raw)?;
    let space_field = raw.space.as_ref().ok_or_else(|| {
        ctx.field(
            "space",
            "a replay spec names its recorded space: `space = \"file.json.gz\"` (T4 format)",
        )
    })?;
    let file = space_field.get_ref();
    let at = |msg: String| ctx.at(space_field.span(), "space", msg);
    let bytes = read_limited(&dir.join(file), limits.max_source_bytes)
        .map_err(|e| at(format!("`{file}` {e}")))?;
    let recorded = t4::parse(&bytes).map_err(|e| at(format!("`{file}`: {e}")))?;
    let replay = ReplaySpace::new(recorded).map_err(|e| at(format!("`{file}`: {e}")))?;

    let mut names = HashMap::new();
    let mut compile_params = Vec::new();
    for (param, values) in replay.names.iter().zip(&replay.values) {
        let field = format!("space: parameter {param}");
        check_name(
            ctx,
            param,
            space_field.span(),
            &field,
            Origin::Compile,
            &mut names,
        )?;
        for v in values {
            check_value(v).map_err(|m| ctx.at(space_field.span(), &field, m))?;
        }
        compile_params.push(ParamDef {
            name: param.clone(),
            values: values.clone(),
        });
    }
    check_name(
        ctx,
        SHAPE_COLUMN,
        space_field.span(),
        "space",
        Origin::Shape,
        &mut names,
    )?;
    let count = compile_params
        .iter()
        .try_fold(1u128, |n, p| n.checked_mul(p.values.len() as u128));
    super::space::check_space(ctx, limits, count, Some(1), Some(1))?;
    let shown_name = Path::new(file)
        .file_name()
        .map_or_else(|| file.clone(), |n| n.to_string_lossy().into_owned());
    check_value(&shown_name).map_err(|m| at(format!("the file's name: {m}")))?;
    let mut shape = Params::new();
    shape.push(SHAPE_COLUMN, shown_name);

    let (build_timeout, run_timeout) = replay.time_limits(ReplayTime::Instant);
    Ok(TuningSpec {
        name: name.to_string(),
        path: ctx.path.to_path_buf(),
        dir: dir.to_path_buf(),
        source_text: ctx.text.to_string(),
        description: raw.description.clone(),
        device: steps::device(ctx, raw)?,
        build: BuildSpec {
            argv: Vec::new(),
            timeout: build_timeout,
            templates: Vec::new(),
        },
        run: RunSpec {
            mode: RunMode::Process,
            argv: Vec::new(),
            timeout: run_timeout.max(Duration::from_secs(1)),
            warmup: 0,
            repeat: 1,
            adaptive: None,
            statistic: Statistic::Median,
            templates: Vec::new(),
        },
        output: OutputSpec {
            time: None,
            time_unit: super::TimeUnit::Ms,
            pass: None,
            fail: None,
        },
        search: steps::search(ctx, raw, dir)?,
        compile_params,
        run_params: Vec::new(),
        shape_columns: vec![SHAPE_COLUMN.to_string()],
        shapes: vec![shape],
        rules: Vec::new(),
        flops: None,
        // The recording is the build's only input: another file is another session.
        source_hashes: vec![(
            file.clone(),
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes)),
        )],
        shapes_csv: None,
        warnings: Vec::new(),
        replay: Some(Arc::new(replay)),
        replay_time: ReplayTime::Instant,
        leaders: Default::default(),
    })
}

/// A replay spec builds and runs nothing and takes its candidates from the recording, so a field
/// of the exec backend there is a mistake worth naming.
fn refuse_exec_fields(ctx: Ctx, raw: &RawSpec) -> Result<(), SpecError> {
    let refuse = |field: &str, span: std::ops::Range<usize>| {
        Err(ctx.at(
            span,
            field,
            format!(
                "a replay spec takes its parameters, candidates and times from `space`; \
                 remove `{field}`"
            ),
        ))
    };
    if let Some(b) = &raw.build {
        return refuse("build", b.span());
    }
    if let Some(r) = &raw.run {
        return refuse("run", r.span());
    }
    if let Some(o) = &raw.output {
        return refuse("output", o.span());
    }
    if let Some(s) = raw.sources.first() {
        return refuse("sources", s.span());
    }
    if let Some(r) = raw.rules.first() {
        return refuse("rules", r.span());
    }
    if let Some(f) = &raw.flops {
        return refuse("flops", f.span());
    }
    if let Some(s) = &raw.shapes {
        return refuse("shapes", s.span());
    }
    if let Some(s) = &raw.shapes_csv {
        return refuse("shapes_csv", s.span());
    }
    if let Some((k, _)) = raw.params.compile.iter().chain(&raw.params.run).next() {
        return refuse("params", k.span());
    }
    Ok(())
}
