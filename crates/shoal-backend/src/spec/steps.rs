//! The steps of a spec, checked: the build and run commands, where runs happen (`device`), the
//! run counts and limits, and how a run's output is read (`[output]`). Split from
//! `validate.rs`, which calls these in the order a spec's errors are reported in.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

use regex::Regex;
use shoal_model::repeats::AdaptiveRepeat;
use shoal_model::search::{Budget, PriorSource, SearchSpec};
use toml::Spanned;

use super::commands::{check_program, placeholder_rule, templates};
use super::error::{Ctx, SpecError};
use super::raw::{self, RawBuild, RawOutput, RawRun, RawSpec};
use super::template::Template;
use super::validate::Origin;
use super::{BuildSpec, DeviceClass, OutputSpec, RunMode, RunSpec, Statistic, TimeUnit};

/// The names of the spec (parameters and shape columns) and where each comes from, which decide
/// the placeholders each command may use.
pub(super) type Names = HashMap<String, (Origin, Range<usize>)>;

/// A command's argv as written and its parsed templates.
pub(super) type Command = (Vec<String>, Vec<Template>);

/// The `[build]` section, which the exec backend requires.
fn required_build<'r>(ctx: Ctx, raw: &'r RawSpec) -> Result<&'r RawBuild, SpecError> {
    raw.build.as_ref().map(|b| b.get_ref()).ok_or_else(|| {
        ctx.field(
            "build",
            "no [build] section: give its `command` (or `backend = \"replay\"` with a `space`)",
        )
    })
}

/// The `[run]` section, which the exec backend requires.
fn required_run<'r>(ctx: Ctx, raw: &'r RawSpec) -> Result<&'r RawRun, SpecError> {
    raw.run.as_ref().map(|r| r.get_ref()).ok_or_else(|| {
        ctx.field(
            "run",
            "no [run] section: give its `command` or `mode = \"library\"`",
        )
    })
}

/// The build command: its argv, placeholders (compile parameters and the build's own) and
/// program. A command that never names `{out}` is allowed, since the build may write to
/// `$SHOAL_OUT`, but is warned about, as it is usually a mistake.
pub(super) fn build_command(
    ctx: Ctx,
    raw: &RawSpec,
    names: &Names,
    dir: &Path,
    warnings: &mut Vec<String>,
) -> Result<Command, SpecError> {
    let build = required_build(ctx, raw)?;
    let build_argv = raw::command(ctx, "build.command", &build.command)?;
    let build_templates = templates(
        ctx,
        "build.command",
        &build.command,
        &build_argv,
        &placeholder_rule(names, true),
    )?;
    check_program(
        ctx,
        "build.command",
        &build.command,
        &build_templates[0],
        dir,
    )?;
    if !build_templates.iter().any(|t| t.vars().any(|v| v == "out")) {
        warnings.push(format!(
            "{}: build.command does not name `{{out}}`; the build must write the artifact to $SHOAL_OUT",
            ctx.path.display()
        ));
    }
    Ok((build_argv, build_templates))
}

/// The run mode and, in process mode, the run command. Library mode has neither a command nor
/// an `[output]` section: the runner calls the artifact's entry points and they report the
/// times and the verdict, so either would be a misunderstanding worth an error.
pub(super) fn run_command(
    ctx: Ctx,
    raw: &RawSpec,
    names: &Names,
    dir: &Path,
) -> Result<(RunMode, Command), SpecError> {
    let run = required_run(ctx, raw)?;
    let mode = match &run.mode {
        None => RunMode::Process,
        Some(m) => RunMode::parse(m.get_ref()).ok_or_else(|| {
            ctx.at(
                m.span(),
                "run.mode",
                format!("`{}` is not one of process, library", m.get_ref()),
            )
        })?,
    };
    let command = match (mode, &run.command) {
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
                &placeholder_rule(names, false),
            )?;
            check_program(ctx, "run.command", command, &templates[0], dir)?;
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
    Ok((mode, command))
}

/// Where the candidates run: the CPU unless the spec says `gpu`.
pub(super) fn device(ctx: Ctx, raw: &RawSpec) -> Result<DeviceClass, SpecError> {
    match &raw.device {
        None => Ok(DeviceClass::Cpu),
        Some(d) => DeviceClass::parse(d.get_ref()).ok_or_else(|| {
            ctx.at(
                d.span(),
                "device",
                format!("`{}` is not one of cpu, gpu", d.get_ref()),
            )
        }),
    }
}

/// `repeat` and `max_repeat`: a fixed count of timed runs, or `"adaptive"` with its cap (the
/// count the time limits allow for). Adaptive repetitions need a run per process: in library
/// mode the runner times `repeat` runs in one call.
fn repeats(
    ctx: Ctx,
    run: &RawRun,
    mode: RunMode,
) -> Result<(u32, Option<AdaptiveRepeat>), SpecError> {
    let bounded = |v: &Spanned<i64>, field: &str, min: i64| -> Result<u32, SpecError> {
        let n = *v.get_ref();
        if (min..=1_000_000).contains(&n) {
            Ok(n as u32)
        } else {
            Err(ctx.at(
                v.span(),
                field,
                format!("must be between {min} and 1000000, found {n}"),
            ))
        }
    };
    let Some(repeat) = &run.repeat else {
        if let Some(m) = &run.max_repeat {
            return Err(ctx.at(m.span(), "run.max_repeat", "needs `repeat = \"adaptive\"`"));
        }
        return Ok((1, None));
    };
    match repeat.get_ref() {
        toml::Value::Integer(n) => {
            if let Some(m) = &run.max_repeat {
                return Err(ctx.at(m.span(), "run.max_repeat", "needs `repeat = \"adaptive\"`"));
            }
            bounded(&Spanned::new(repeat.span(), *n), "run.repeat", 1).map(|n| (n, None))
        }
        toml::Value::String(s) if s == "adaptive" => {
            if mode == RunMode::Library {
                return Err(ctx.at(
                    repeat.span(),
                    "run.repeat",
                    "adaptive repetitions decide run by run, and a library-mode runner times \
                     `repeat` runs in one call: give a count",
                ));
            }
            let mut adaptive = AdaptiveRepeat::DEFAULT;
            if let Some(m) = &run.max_repeat {
                adaptive.max_runs = bounded(m, "run.max_repeat", i64::from(adaptive.min_runs))?;
            }
            Ok((adaptive.max_runs, Some(adaptive)))
        }
        other => Err(ctx.at(
            repeat.span(),
            "run.repeat",
            format!("a count such as 5, or \"adaptive\", not {other}"),
        )),
    }
}

/// The two steps from their checked commands, with their timeouts, the run counts and the
/// statistic. A count is bounded so that a typo cannot make one candidate run for days.
pub(super) fn step_specs(
    ctx: Ctx,
    raw: &RawSpec,
    (build_argv, build_templates): Command,
    (mode, (run_argv, run_templates)): (RunMode, Command),
) -> Result<(BuildSpec, RunSpec), SpecError> {
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
    let (raw_build, raw_run) = (required_build(ctx, raw)?, required_run(ctx, raw)?);
    let statistic = match &raw_run.statistic {
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
        timeout: raw::timeout(ctx, "build.timeout_s", raw_build.timeout_s.as_ref(), 120)?,
        templates: build_templates,
    };
    let (repeat, adaptive) = repeats(ctx, raw_run, mode)?;
    let run = RunSpec {
        mode,
        argv: run_argv,
        timeout: raw::timeout(ctx, "run.timeout_s", raw_run.timeout_s.as_ref(), 60)?,
        warmup: count(&raw_run.warmup, "run.warmup", 0, 0)?,
        repeat,
        adaptive,
        statistic,
        templates: run_templates,
    };
    Ok((build, run))
}

/// How a process-mode run's output is read: the time (a regex with a capture group around the
/// number, and its unit) and the pass and fail patterns. All optional; an absent `[output]`
/// reads as an empty one.
pub(super) fn output(ctx: Ctx, raw: &RawSpec) -> Result<OutputSpec, SpecError> {
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
    Ok(OutputSpec {
        time,
        time_unit,
        pass: regex(ctx, "output.pass", &raw_output.pass)?,
        fail: regex(ctx, "output.fail", &raw_output.fail)?,
    })
}

/// Compiles an optional regex field; the error is the regex crate's, on one line.
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

/// `[search]`: `None` for exhaustive (every candidate is a job from the start), else the
/// strategy, its budget per shape (a count, or a share such as `"5%"`), its seed (1 when not
/// given) and how many of one shape's candidates may be out at once (`in_flight`; as many as
/// the strategy can use when not given).
pub(super) fn search(ctx: Ctx, raw: &RawSpec, dir: &Path) -> Result<Option<SearchSpec>, SpecError> {
    let Some(section) = &raw.search else {
        return Ok(None);
    };
    let raw_search = section.get_ref();
    let strategy = &raw_search.strategy;
    let budget = match &raw_search.budget {
        None => None,
        Some(b) => {
            let text = match b.get_ref() {
                toml::Value::Integer(n) => n.to_string(),
                toml::Value::String(s) => s.clone(),
                other => {
                    return Err(ctx.at(
                        b.span(),
                        "search.budget",
                        format!(
                            "a count such as 200 or a share such as \"5%\", not {}",
                            other.type_str()
                        ),
                    ))
                }
            };
            Some(Budget::parse(&text).map_err(|e| ctx.at(b.span(), "search.budget", e))?)
        }
    };
    if strategy.get_ref() == "exhaustive" {
        if let Some(b) = &raw_search.budget {
            return Err(ctx.at(
                b.span(),
                "search.budget",
                "an exhaustive search evaluates every candidate: drop the budget or choose a strategy",
            ));
        }
        return Ok(None);
    }
    let Some(budget) = budget else {
        return Err(ctx.at(
            section.span(),
            "search.budget",
            format!(
                "strategy `{}` needs a budget per shape: a count such as 200 or a share such as \"5%\"",
                strategy.get_ref()
            ),
        ));
    };
    let seed = match &raw_search.seed {
        None => 1,
        Some(s) => u64::try_from(*s.get_ref())
            .map_err(|_| ctx.at(s.span(), "search.seed", "a seed of 0 or more"))?,
    };
    let mut spec = SearchSpec::new(strategy.get_ref(), budget, seed)
        .map_err(|e| ctx.at(strategy.span(), "search.strategy", e))?;
    if let Some(n) = &raw_search.in_flight {
        match usize::try_from(*n.get_ref()) {
            Ok(n) if n >= 1 => spec = spec.with_in_flight(n),
            _ => {
                return Err(ctx.at(
                    n.span(),
                    "search.in_flight",
                    "candidates of one shape out at once: 1 or more",
                ))
            }
        }
    }
    if let Some(p) = &raw_search.prior {
        let source =
            PriorSource::parse(p.get_ref()).map_err(|e| ctx.at(p.span(), "search.prior", e))?;
        // A file that is not there is said now, not when the Scheduler first drives a shape.
        if let PriorSource::File(path) = &source {
            let at = dir.join(path);
            if !at.is_file() {
                return Err(ctx.at(
                    p.span(),
                    "search.prior",
                    format!(
                        "{}: no such file (a T4 file, relative to the spec's folder, or session:<id>)",
                        at.display()
                    ),
                ));
            }
        }
        spec = spec.with_prior(source);
    }
    Ok(Some(spec))
}
