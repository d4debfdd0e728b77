//! `shoal compare --retime`: each shape's old and new winner built again and timed in
//! alternation on this machine, so that a verdict rests on what the two do under the same load
//! rather than on spreads recorded while each was tuned (which on a shared machine reach
//! hundreds of percent). The statistics and the verdict are `shoal_export::paired`'s; this
//! builds, runs and reports.
//!
//! Each side is built from its own spec: a session's from the spec it was tuned with (refused
//! when its sources have changed since, since that would time today's code under the old
//! name), a table file's from `--spec`. Builds and runs go through the same sandbox as
//! `shoal tune`'s.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};
use shoal_actors::backends::SessionBackends;
use shoal_backend::exec::{self, ArtifactCache};
use shoal_backend::spec::{RunMode, TuningSpec};
use shoal_export::compare::ShapeChange;
use shoal_export::paired::{self, PairedTimes};
use shoal_model::{Outcome, Params, SessionId};

/// Timed runs a side gets in each round, at least: the round's time is the fastest of them.
const RUNS_PER_ROUND: usize = 6;

/// Which of the two tunings a side is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Old,
    New,
}

impl Side {
    fn as_str(self) -> &'static str {
        match self {
            Side::Old => "old",
            Side::New => "new",
        }
    }
}

/// The spec a side's winners are built and run from. `name` is how the side was named on the
/// command line: a session number of `db`, whose own spec is used, or a table file, for which
/// `spec_arg` (`--spec`) is needed.
pub async fn spec_of(
    name: &str,
    db: &Path,
    spec_arg: Option<&Path>,
) -> anyhow::Result<Arc<TuningSpec>> {
    let spec = match name.parse::<i64>() {
        Ok(session) => {
            let store = crate::store_open::open_existing(db).await?;
            let info = crate::store_open::session_or_newest(&*store, Some(session)).await?;
            let backends = SessionBackends::new(crate::host::fin_path(None));
            let spec = backends
                .spec(&*store, SessionId(session))
                .await
                .with_context(|| format!("--retime: the spec of session {session}"))?;
            if shoal_commands::spec::spec_version(&spec) != info.info.library_version {
                bail!(
                    "--retime: the sources of session {session}'s spec ({}) have changed since \
                     it was tuned; re-timing would build today's code under the old session's \
                     name. Restore them, or compare its exported table with --spec",
                    spec.path.display()
                );
            }
            spec
        }
        Err(_) => {
            let Some(path) = spec_arg else {
                bail!(
                    "--retime: `{name}` is a table file, which does not say how to build its \
                     winners; name the spec to build them with: --spec SPEC"
                )
            };
            Arc::new(shoal_backend::spec::load(path).map_err(|e| anyhow::anyhow!("{e}"))?)
        }
    };
    if spec.replay.is_some() {
        bail!(
            "--retime: {} replays a recorded space; its times are recorded, not measured, so \
             there is nothing to re-time",
            spec.path.display()
        );
    }
    if spec.run.mode != RunMode::Process {
        bail!(
            "--retime: {} runs in library mode; re-timing runs process-mode specs only (library \
             mode times on a device's runner, which `compare` does not start)",
            spec.path.display()
        );
    }
    Ok(spec)
}

/// A winner's parameters split into the spec's compile-time and run-time sets, or why they do
/// not fit the spec.
fn split(spec: &TuningSpec, best: &Params) -> anyhow::Result<(Params, Params)> {
    let pick = |defs: &[shoal_backend::spec::ParamDef]| -> anyhow::Result<Params> {
        let mut out = Params::new();
        for d in defs {
            let value = best.get(&d.name).with_context(|| {
                format!(
                    "the winner `{}` has no value for {}'s parameter {}",
                    best.key(),
                    spec.path.display(),
                    d.name
                )
            })?;
            out.push(d.name.clone(), value);
        }
        Ok(out)
    };
    let (compile, run) = (pick(&spec.compile_params)?, pick(&spec.run_params)?);
    let known = spec.compile_params.len() + spec.run_params.len();
    if best.names().count() != known {
        bail!(
            "the winner `{}` has parameters that {} does not declare",
            best.key(),
            spec.path.display()
        );
    }
    Ok((compile, run))
}

/// One winner ready to run: its spec, artifact and parameters.
struct Ready<'a> {
    spec: &'a TuningSpec,
    artifact: PathBuf,
    compile: Params,
    run: Params,
}

/// The artifacts built so far, by build key, in one directory.
struct Built {
    cache: ArtifactCache,
    by_key: HashMap<String, PathBuf>,
}

/// Splits `best` into `spec`'s parameter sets and builds it, once per build key: the shapes
/// whose winners share compile-time parameters, and an old and a new winner built from the
/// same sources, share one build.
async fn prepare<'a>(
    spec: &'a TuningSpec,
    best: &Params,
    built: &mut Built,
    work: &Path,
) -> anyhow::Result<Ready<'a>> {
    let (compile, run) = split(spec, best)?;
    let key = spec.build_key(&compile);
    let artifact = match built.by_key.get(&key) {
        Some(path) => path.clone(),
        None => {
            let artifact = exec::build(spec, &compile, work)
                .await
                .map_err(|(kind, detail)| {
                    anyhow::anyhow!(
                        "building `{}` failed ({}): {detail}",
                        compile.key(),
                        kind.as_str()
                    )
                })?;
            let path = built
                .cache
                .install(&artifact.hash, &artifact.packed)
                .with_context(|| {
                    format!("installing an artifact in {}", built.cache.dir().display())
                })?;
            built.by_key.insert(key, path.clone());
            path
        }
    };
    Ok(Ready {
        spec,
        artifact,
        compile,
        run,
    })
}

/// Times one winner once: the spec's warm-up and timed runs, of which the fastest counts.
/// Not the spec's statistic: load on the machine only ever adds time, so the fastest run is
/// the one least disturbed, and the rounds' ratios are the tighter for it ([`RUNS_PER_ROUND`]).
async fn time_once(ready: &Ready<'_>, shape: &Params, cpu: Option<usize>) -> Result<f64, String> {
    match exec::evaluate(
        ready.spec,
        &ready.artifact,
        shape,
        &ready.compile,
        &ready.run,
        cpu,
        None,
    )
    .await
    {
        Outcome::Measured(m) => Ok(m
            .samples_us
            .iter()
            .copied()
            .filter(|t| t.is_finite())
            .reduce(f64::min)
            .unwrap_or(m.time_us)),
        Outcome::Failed { kind, detail } => Err(format!("{}: {detail}", kind.as_str())),
    }
}

/// Re-times every shape whose old and new tables both have a winner, and judges it from the
/// rounds (`shoal_export::paired::judge_retimed`); other shapes keep their verdicts. At most
/// `max_rounds` rounds a shape, fewer once the verdict is clear. A winner that no longer builds
/// or runs is an error that names the shape and the side.
pub async fn retime(
    changes: Vec<ShapeChange>,
    old_spec: &TuningSpec,
    new_spec: &TuningSpec,
    max_rounds: usize,
    floor_pct: f64,
) -> anyhow::Result<Vec<ShapeChange>> {
    let work = tempfile::Builder::new()
        .prefix("shoal-retime-")
        .tempdir()
        .context("a temporary directory for the builds")?;
    let mut built = Built {
        cache: ArtifactCache::new(work.path().join("artifacts"))
            .context("a directory for the artifacts")?,
        by_key: HashMap::new(),
    };
    // Timings are pinned to the core `shoal tune` times on, both winners to the same one.
    let cpu = Some(shoal_actors::topology::timing_core());
    let total = changes
        .iter()
        .filter(|c| winner(c, Side::Old).is_some() && winner(c, Side::New).is_some())
        .count();
    let looks = paired::Looks::new(max_rounds);
    let mut out = Vec::with_capacity(changes.len());
    let mut done = 0;
    for change in changes {
        let (Some(old_best), Some(new_best)) =
            (winner(&change, Side::Old), winner(&change, Side::New))
        else {
            out.push(change);
            continue;
        };
        done += 1;
        let shape = change.row().shape.clone();
        let at = |side: Side| format!("shape {} ({} winner)", shape.key(), side.as_str());
        let old = prepare(old_spec, &old_best, &mut built, work.path())
            .await
            .with_context(|| at(Side::Old))?;
        let new = prepare(new_spec, &new_best, &mut built, work.path())
            .await
            .with_context(|| at(Side::New))?;
        let mut times = PairedTimes::default();
        // Each round takes the fastest of at least RUNS_PER_ROUND timed runs a side, the
        // spec's runs repeated as often as that takes, the two sides' turns interleaved.
        let turns = |spec: &TuningSpec| RUNS_PER_ROUND.div_ceil(spec.run.repeat.max(1) as usize);
        let turns = turns(old_spec).max(turns(new_spec));
        for round in 0..looks.max_rounds() {
            if !times.undecided(floor_pct, looks) {
                break;
            }
            // Old, new, then new, old: a drift within a round falls on each side in turn.
            let order = if round % 2 == 0 {
                [Side::Old, Side::New]
            } else {
                [Side::New, Side::Old]
            };
            let (mut old_best, mut new_best) = (f64::INFINITY, f64::INFINITY);
            for _ in 0..turns {
                for side in order {
                    let ready = if side == Side::Old { &old } else { &new };
                    let t = time_once(ready, &shape, cpu)
                        .await
                        .map_err(|e| anyhow::anyhow!("{}: a run failed: {e}", at(side)))?;
                    match side {
                        Side::Old => old_best = old_best.min(t),
                        Side::New => new_best = new_best.min(t),
                    }
                }
            }
            times.old_us.push(old_best);
            times.new_us.push(new_best);
        }
        let judged = paired::judge_retimed(change, Some(&times), floor_pct, looks);
        if let Some(r) = &judged.retimed {
            eprintln!(
                "retime [{done}/{total}] {}: {} rounds, new/old {:.3} ({:.2} % interval {:.3}..{:.3}): {}",
                shape.key(),
                r.rounds,
                r.ratio,
                100.0 * r.confidence,
                r.ratio_low,
                r.ratio_high,
                judged.verdict.as_str()
            );
            let _ = std::io::stderr().flush();
        }
        out.push(judged);
    }
    Ok(out)
}

/// A side's winning parameters, when its table has a timed winner for the shape.
fn winner(change: &ShapeChange, side: Side) -> Option<Params> {
    let row = match side {
        Side::Old => change.old.as_ref(),
        Side::New => change.new.as_ref(),
    }?;
    row.time_us?;
    row.best.clone()
}
