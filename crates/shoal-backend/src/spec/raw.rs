//! The spec file as `toml` deserializes it, with spans on everything an error may point at,
//! and the conversions from loosely typed TOML values (commands, timeouts, parameter values).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use toml::{Spanned, Value};

use super::error::{Ctx, SpecError};

/// A table whose keys keep their spans, so that the order of the file can be recovered
/// (`toml` sorts table keys) and errors can point at each key.
pub type SpannedTable = BTreeMap<Spanned<String>, Spanned<Value>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSpec {
    pub name: Spanned<String>,
    pub description: Option<String>,
    #[serde(default)]
    pub sources: Vec<Spanned<String>>,
    #[serde(default)]
    pub rules: Vec<Spanned<String>>,
    pub flops: Option<Spanned<String>>,
    pub device: Option<Spanned<String>>,
    pub shapes_csv: Option<Spanned<String>>,
    pub shapes: Option<Spanned<Vec<Spanned<SpannedTable>>>>,
    /// `exec` (the default; `command`, its old name, is still read) or `replay`.
    pub backend: Option<Spanned<String>>,
    /// The replay backend's recorded space.
    pub space: Option<Spanned<String>>,
    pub build: Option<Spanned<RawBuild>>,
    #[serde(default)]
    pub run: Option<Spanned<RawRun>>,
    pub output: Option<Spanned<RawOutput>>,
    pub search: Option<Spanned<RawSearch>>,
    #[serde(default)]
    pub params: RawParams,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSearch {
    pub strategy: Spanned<String>,
    pub budget: Option<Spanned<Value>>,
    pub seed: Option<Spanned<i64>>,
    pub in_flight: Option<Spanned<i64>>,
    pub prior: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBuild {
    pub command: Spanned<Value>,
    pub timeout_s: Option<Spanned<Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRun {
    pub mode: Option<Spanned<String>>,
    pub command: Option<Spanned<Value>>,
    pub timeout_s: Option<Spanned<Value>>,
    pub warmup: Option<Spanned<i64>>,
    /// A count, or `"adaptive"`.
    pub repeat: Option<Spanned<Value>>,
    /// With `repeat = "adaptive"`: the most timed runs a candidate gets.
    pub max_repeat: Option<Spanned<i64>>,
    pub statistic: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOutput {
    pub time: Option<Spanned<String>>,
    pub time_unit: Option<Spanned<String>>,
    pub pass: Option<Spanned<String>>,
    pub fail: Option<Spanned<String>>,
}

impl RawOutput {
    /// No `[output]` section.
    pub const EMPTY: RawOutput = RawOutput {
        time: None,
        time_unit: None,
        pass: None,
        fail: None,
    };
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawParams {
    #[serde(default)]
    pub compile: SpannedTable,
    #[serde(default)]
    pub run: SpannedTable,
}

/// The entries of a spanned table in the order they appear in the file.
pub fn in_file_order(table: &SpannedTable) -> Vec<(&Spanned<String>, &Spanned<Value>)> {
    let mut entries: Vec<_> = table.iter().collect();
    entries.sort_by_key(|(k, _)| k.span().start);
    entries
}

/// A command: a string split on whitespace, or an array of strings.
pub fn command(ctx: Ctx, field: &str, value: &Spanned<Value>) -> Result<Vec<String>, SpecError> {
    let argv: Vec<String> = match value.get_ref() {
        Value::String(s) => s.split_whitespace().map(str::to_string).collect(),
        Value::Array(items) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(ctx.at(
                    value.span(),
                    field,
                    format!("every element must be a string, found {}", other.type_str()),
                )),
            })
            .collect::<Result<_, _>>()?,
        other => {
            return Err(ctx.at(
                value.span(),
                field,
                format!(
                    "expected a string or an array of strings, found {}",
                    other.type_str()
                ),
            ))
        }
    };
    if argv.is_empty() || argv[0].is_empty() {
        return Err(ctx.at(value.span(), field, "the command is empty"));
    }
    Ok(argv)
}

/// A timeout in seconds (integer or float), or the default.
pub fn timeout(
    ctx: Ctx,
    field: &str,
    value: Option<&Spanned<Value>>,
    default_s: u64,
) -> Result<Duration, SpecError> {
    let Some(value) = value else {
        return Ok(Duration::from_secs(default_s));
    };
    let secs = match value.get_ref() {
        Value::Integer(i) => *i as f64,
        Value::Float(f) => *f,
        other => {
            return Err(ctx.at(
                value.span(),
                field,
                format!("expected a number of seconds, found {}", other.type_str()),
            ))
        }
    };
    const WEEK: f64 = 7.0 * 24.0 * 3600.0;
    if !(secs > 0.0 && secs <= WEEK) {
        return Err(ctx.at(
            value.span(),
            field,
            format!("must be more than 0 and at most {WEEK} seconds, found {secs}"),
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The most values one parameter may take.
pub const MAX_VALUES: i64 = 100_000;

/// The values of one parameter as written, checked but not expanded: a range or a `pow2` is
/// kept as its bounds, so that the candidate space can be counted (and refused) before any
/// value list is built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValueSet {
    /// A list (or one scalar), already in memory as TOML.
    List(Vec<String>),
    /// `count` values `first, first + step, …`.
    Range { first: i64, step: i64, count: u64 },
    /// `count` powers of two from `first` (itself a power of two).
    Pow2 { first: i64, count: u64 },
}

impl ValueSet {
    /// How many values the set has.
    pub fn count(&self) -> u64 {
        match self {
            ValueSet::List(values) => values.len() as u64,
            ValueSet::Range { count, .. } | ValueSet::Pow2 { count, .. } => *count,
        }
    }

    /// The values as text, in order.
    pub fn expand(self) -> Vec<String> {
        match self {
            ValueSet::List(values) => values,
            ValueSet::Range { first, step, count } => (0..count as i64)
                .map(|i| (first + i * step).to_string())
                .collect(),
            ValueSet::Pow2 { first, count } => (0..count as u32)
                .map(|i| (first << i).to_string())
                .collect(),
        }
    }
}

/// Why a parameter's values, or one value, are refused. Displays without the place: the caller
/// adds it.
#[derive(Debug, thiserror::Error)]
pub enum ValueError {
    /// `range` or `pow2` (`key`) is not two integers.
    #[error("`{key}` must be two integers `[first, last]`")]
    NotAPair { key: &'static str },
    #[error(
        "unknown key `{key}`; a parameter is a list, `{{ range = [first, last], step = s }}` or \
         `{{ pow2 = [first, last] }}`"
    )]
    UnknownKey { key: String },
    #[error("`step` must be a positive integer")]
    BadStep,
    #[error("empty range: {first} is above {last}")]
    EmptyRange { first: i64, last: i64 },
    #[error("{count} values; at most {max} are allowed", max = MAX_VALUES)]
    TooMany { count: i128 },
    #[error("`step` does not apply to `pow2`")]
    StepWithPow2,
    #[error("`pow2` bounds must be powers of two, found [{first}, {last}]")]
    NotPowersOfTwo { first: i64, last: i64 },
    #[error("give either `range` or `pow2`, not both")]
    RangeAndPow2,
    #[error("expected `range = [first, last]` or `pow2 = [first, last]`")]
    NoRange,
    /// A value of TOML type `found`.
    #[error("values must be integers or strings, found {found}")]
    NotScalar { found: &'static str },
    #[error("empty value")]
    Empty,
    #[error("value `{value}` may not contain `,` or control characters")]
    BadCharacter { value: String },
}

/// The values of one parameter: a list, a scalar, `{ range = [lo, hi], step = s }` or
/// `{ pow2 = [lo, hi] }`, checked and counted but not expanded (see [`ValueSet`]).
pub fn value_set(value: &Value) -> Result<ValueSet, ValueError> {
    match value {
        Value::Array(items) => items
            .iter()
            .map(scalar)
            .collect::<Result<_, _>>()
            .map(ValueSet::List),
        Value::Table(t) => {
            let pair = |key: &'static str| -> Result<Option<(i64, i64)>, ValueError> {
                let Some(v) = t.get(key) else { return Ok(None) };
                match v.as_array().map(|a| a.as_slice()) {
                    Some([Value::Integer(lo), Value::Integer(hi)]) => Ok(Some((*lo, *hi))),
                    _ => Err(ValueError::NotAPair { key }),
                }
            };
            for key in t.keys() {
                if !matches!(key.as_str(), "range" | "step" | "pow2") {
                    return Err(ValueError::UnknownKey { key: key.clone() });
                }
            }
            match (pair("range")?, pair("pow2")?) {
                (Some((lo, hi)), None) => {
                    let step = match t.get("step") {
                        None => 1,
                        Some(Value::Integer(s)) if *s > 0 => *s,
                        Some(_) => return Err(ValueError::BadStep),
                    };
                    if lo > hi {
                        return Err(ValueError::EmptyRange {
                            first: lo,
                            last: hi,
                        });
                    }
                    let count = (hi as i128 - lo as i128) / step as i128 + 1;
                    if count > MAX_VALUES as i128 {
                        return Err(ValueError::TooMany { count });
                    }
                    Ok(ValueSet::Range {
                        first: lo,
                        step,
                        count: count as u64,
                    })
                }
                (None, Some((lo, hi))) => {
                    if t.contains_key("step") {
                        return Err(ValueError::StepWithPow2);
                    }
                    let pow2 = |v: i64| v > 0 && (v & (v - 1)) == 0;
                    if !pow2(lo) || !pow2(hi) {
                        return Err(ValueError::NotPowersOfTwo {
                            first: lo,
                            last: hi,
                        });
                    }
                    if lo > hi {
                        return Err(ValueError::EmptyRange {
                            first: lo,
                            last: hi,
                        });
                    }
                    let count = u64::from(hi.trailing_zeros() - lo.trailing_zeros()) + 1;
                    Ok(ValueSet::Pow2 { first: lo, count })
                }
                (Some(_), Some(_)) => Err(ValueError::RangeAndPow2),
                (None, None) => Err(ValueError::NoRange),
            }
        }
        other => Ok(ValueSet::List(vec![scalar(other)?])),
    }
}

/// One value as text: integers and strings only.
pub fn scalar(value: &Value) -> Result<String, ValueError> {
    match value {
        Value::Integer(i) => Ok(i.to_string()),
        Value::String(s) => Ok(s.clone()),
        other => Err(ValueError::NotScalar {
            found: other.type_str(),
        }),
    }
}

/// Checks a value can live in a [`Params`](shoal_model::Params) key and an argv element.
pub fn check_value(value: &str) -> Result<(), ValueError> {
    if value.is_empty() {
        return Err(ValueError::Empty);
    }
    if value.contains(',') || value.chars().any(char::is_control) {
        return Err(ValueError::BadCharacter {
            value: value.to_string(),
        });
    }
    Ok(())
}
