//! The candidate space of a spec: its parameters checked and counted before any value list
//! is built, and refused above [`Limits::max_candidates`] (and above
//! [`MAX_CANDIDATES_CEILING`] whatever that limit is), so that a spec of a few lines cannot make
//! the loader enumerate more combinations than memory or time allows.

use std::collections::HashMap;
use std::ops::Range;

use super::error::{Ctx, SpecError};
use super::raw::{self, check_value, in_file_order, SpannedTable, ValueSet};
use super::validate::{check_name, Origin};
use super::{Limits, ParamDef, MAX_CANDIDATES_CEILING};

/// One parameter as written: its name checked, its values checked but not expanded yet.
pub(super) struct Planned {
    name: String,
    field: String,
    span: Range<usize>,
    values: ValueSet,
}

pub(super) fn plan_params(
    ctx: Ctx,
    section: &str,
    table: &SpannedTable,
    origin: Origin,
    names: &mut HashMap<String, (Origin, Range<usize>)>,
) -> Result<Vec<Planned>, SpecError> {
    let mut planned = Vec::new();
    for (key, value) in in_file_order(table) {
        let name = key.get_ref();
        let field = format!("params.{section}.{name}");
        check_name(ctx, name, key.span(), &field, origin, names)?;
        let values =
            raw::value_set(value.get_ref()).map_err(|m| ctx.at(value.span(), &field, m))?;
        if values.count() == 0 {
            return Err(ctx.at(value.span(), &field, "no values"));
        }
        planned.push(Planned {
            name: name.clone(),
            field,
            span: value.span(),
            values,
        });
    }
    Ok(planned)
}

/// The product of the parameters' value counts: how many sets they make. `None` past `u128`.
pub(super) fn space(planned: &[Planned]) -> Option<u128> {
    planned
        .iter()
        .try_fold(1u128, |n, p| n.checked_mul(u128::from(p.values.count())))
}

/// A count for a message, which may be past `u128`.
fn shown(n: Option<u128>) -> String {
    n.map_or_else(|| format!("more than {}", u128::MAX), |n| n.to_string())
}

/// Refuses a candidate space above the limit, before any of it is built. `shapes` is `None`
/// before the shapes are read (the space of one shape is checked then, so that a huge space
/// fails before the CSV is read either).
pub(super) fn check_space(
    ctx: Ctx,
    limits: &Limits,
    compile: Option<u128>,
    run: Option<u128>,
    shapes: Option<usize>,
) -> Result<(), SpecError> {
    let per_shape = compile.zip(run).and_then(|(c, r)| c.checked_mul(r));
    let total = match shapes {
        None => per_shape,
        Some(s) => per_shape.and_then(|n| n.checked_mul(s as u128)),
    };
    let limit = limits.max_candidates.min(MAX_CANDIDATES_CEILING);
    if matches!(total, Some(n) if n <= u128::from(limit)) {
        return Ok(());
    }
    let how = match shapes {
        None => format!(
            "{} candidates per shape ({} compile sets × {} run sets)",
            shown(total),
            shown(compile),
            shown(run)
        ),
        Some(s) => format!(
            "{} candidates ({} compile sets × {} run sets × {s} shapes)",
            shown(total),
            shown(compile),
            shown(run)
        ),
    };
    let message = if limits.max_candidates >= MAX_CANDIDATES_CEILING {
        format!(
            "the spec would produce {how} before its rules apply, more than the {limit} any \
             limit allows (`--max-candidates` cannot go above it: a list that long is past the \
             memory of any host); narrow the parameters or the shapes"
        )
    } else {
        format!(
            "the spec would produce {how} before its rules apply, more than the limit of \
             {limit}; narrow the parameters, or raise the limit with `--max-candidates N` \
             (shoal tune, shoal check; at most {MAX_CANDIDATES_CEILING})"
        )
    };
    Err(ctx.field("params", message))
}

/// Expands checked parameters into their values (after [`check_space`] bounded them).
pub(super) fn expand(ctx: Ctx, planned: Vec<Planned>) -> Result<Vec<ParamDef>, SpecError> {
    let mut defs = Vec::new();
    for p in planned {
        let values = p.values.expand();
        let mut seen = std::collections::HashSet::new();
        for v in &values {
            check_value(v).map_err(|m| ctx.at(p.span.clone(), &p.field, m))?;
            if !seen.insert(v) {
                return Err(ctx.at(
                    p.span.clone(),
                    &p.field,
                    format!("value `{v}` appears twice"),
                ));
            }
        }
        defs.push(ParamDef {
            name: p.name,
            values,
        });
    }
    Ok(defs)
}
