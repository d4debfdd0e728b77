//! Checking that parameters from a message are a candidate of the spec.
//!
//! A worker builds and runs what a bus message names. The spec's commands are fixed at load,
//! but their placeholders are filled from the message's parameters, so a forged or corrupted
//! message could smuggle text into a compiler's `-D` flag (`-DBM=(system("id")*0)`) or a run's
//! argv. Before anything is built or run, the parameters must be exactly a candidate that
//! loading the spec would have produced: the spec's names, each value from its list, a shape
//! of the spec, and a combination the rules keep.

use shoal_model::Params;

use super::{ParamDef, TuningSpec};

/// A value as shown in an error: quoted, escaped, and cut short, since it came from a message.
pub fn shown(value: &str) -> String {
    const MAX: usize = 80;
    if value.chars().count() <= MAX {
        format!("{value:?}")
    } else {
        let cut: String = value.chars().take(MAX).collect();
        format!("{cut:?}…")
    }
}

/// Why parameters from a message are no candidate of the spec. `kind` is which parameters:
/// `compile`, `run` or `shape`. Values are shown quoted and cut short ([`shown`]), since they
/// came from a message.
#[derive(Debug, thiserror::Error)]
pub enum CandidateError {
    /// A name the spec does not have; `known` are the spec's.
    #[error(
        "{kind} parameter {} is not one of the spec's ({})",
        shown(.name),
        .known.join(", ")
    )]
    UnknownName {
        kind: &'static str,
        name: String,
        known: Vec<String>,
    },
    #[error("{kind} parameter `{name}` is given twice")]
    Twice { kind: &'static str, name: String },
    #[error("{kind} parameter `{name}` is missing")]
    Missing { kind: &'static str, name: String },
    #[error("{kind} parameter {name}={} is not one of the spec's values for it", shown(.value))]
    NotInSpace {
        kind: &'static str,
        name: String,
        value: String,
    },
    /// `shape` is the shape's [`Params::key`].
    #[error("shape {} is not one of the spec's shapes", shown(.shape))]
    UnknownShape { shape: String },
    /// The rules keep no such combination; each is a [`Params::key`], `run` absent for a build.
    #[error(
        "the spec's rules exclude compile parameters {}{} on shape {}",
        shown(.compile),
        with_run(.run),
        shown(.shape)
    )]
    Excluded {
        compile: String,
        run: Option<String>,
        shape: String,
    },
}

/// ` with run parameters "…"`, or nothing for a build.
fn with_run(run: &Option<String>) -> String {
    run.as_ref()
        .map(|r| format!(" with run parameters {}", shown(r)))
        .unwrap_or_default()
}

/// Checks that `given` holds each of `names` exactly once and nothing else.
fn same_names(kind: &'static str, names: &[&str], given: &Params) -> Result<(), CandidateError> {
    for (i, (name, _)) in given.0.iter().enumerate() {
        if !names.contains(&name.as_str()) {
            return Err(CandidateError::UnknownName {
                kind,
                name: name.clone(),
                known: names.iter().map(|n| n.to_string()).collect(),
            });
        }
        if given.0[..i].iter().any(|(n, _)| n == name) {
            return Err(CandidateError::Twice {
                kind,
                name: name.clone(),
            });
        }
    }
    if let Some(missing) = names.iter().find(|n| given.get(n).is_none()) {
        return Err(CandidateError::Missing {
            kind,
            name: missing.to_string(),
        });
    }
    Ok(())
}

/// Checks that `given` sets each parameter of `defs` to one of its values.
fn in_space(kind: &'static str, defs: &[ParamDef], given: &Params) -> Result<(), CandidateError> {
    let names: Vec<&str> = defs.iter().map(|d| d.name.as_str()).collect();
    same_names(kind, &names, given)?;
    for def in defs {
        let value = given.get(&def.name).expect("names checked above");
        if !def.values.iter().any(|v| v == value) {
            return Err(CandidateError::NotInSpace {
                kind,
                name: def.name.clone(),
                value: value.to_string(),
            });
        }
    }
    Ok(())
}

impl TuningSpec {
    /// Checks that (`shape`, `compile`, `run`) is a candidate this spec produces: `compile` and
    /// `run` name exactly the spec's parameters with values from their lists, `shape` is one of
    /// the spec's shapes, and the rules keep the combination. With `run` absent (a build), some
    /// run-time set must be kept with `compile` on `shape`. The error names the parameter and
    /// the value at fault.
    pub fn check_candidate(
        &self,
        shape: &Params,
        compile: &Params,
        run: Option<&Params>,
    ) -> Result<(), CandidateError> {
        in_space("compile", &self.compile_params, compile)?;
        if let Some(run) = run {
            in_space("run", &self.run_params, run)?;
        }
        let columns: Vec<&str> = self.shape_columns.iter().map(String::as_str).collect();
        same_names("shape", &columns, shape)?;
        let known = self
            .shapes
            .iter()
            .any(|s| s.iter().all(|(n, v)| shape.get(n) == Some(v)));
        if !known {
            return Err(CandidateError::UnknownShape { shape: shape.key() });
        }
        let kept = match run {
            Some(run) => self.allows(shape, compile, run),
            None => self.has_run(shape, compile),
        };
        if !kept {
            return Err(CandidateError::Excluded {
                compile: compile.key(),
                run: run.map(Params::key),
                shape: shape.key(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const SPEC: &str = r#"name = "t"
rules = ["BM * BN <= 2048", "SPLIT <= K / 64"]
[build]
command = "cc -DBM={BM} -DBN={BN} -o {out} x.c"
[run]
command = "{artifact} {M} {K} {SPLIT}"
[params.compile]
BM = [16, 32, 64]
BN = { pow2 = [16, 64] }
[params.run]
SPLIT = [1, 2]
[[shapes]]
M = 128
K = 64
[[shapes]]
M = 256
K = 128
"#;

    fn spec() -> TuningSpec {
        super::super::parse(SPEC, Path::new("/nonexistent/spec.toml")).unwrap()
    }

    fn p(pairs: &[(&str, &str)]) -> Params {
        let mut out = Params::new();
        for (n, v) in pairs {
            out.push(*n, *v);
        }
        out
    }

    #[test]
    fn every_loaded_candidate_passes() {
        let spec = spec();
        let mut n = 0;
        for shape in &spec.shapes {
            for (compile, run) in spec.candidates(shape).unwrap() {
                spec.check_candidate(shape, &compile, Some(&run)).unwrap();
                spec.check_candidate(shape, &compile, None).unwrap();
                n += 1;
            }
        }
        assert!(n > 4, "{n}");
    }

    #[test]
    fn an_injected_value_is_refused_with_its_name() {
        let spec = spec();
        let shape = p(&[("M", "128"), ("K", "64")]);
        let e = spec
            .check_candidate(
                &shape,
                &p(&[("BM", "(system(\"id\")*0)"), ("BN", "16")]),
                None,
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("BM=") && e.contains("system"), "{e}");
    }

    #[test]
    fn names_values_and_shapes_must_be_the_spec_s() {
        let spec = spec();
        let shape = p(&[("M", "128"), ("K", "64")]);
        let run = p(&[("SPLIT", "1")]);
        let check = |c: &[(&str, &str)], r: &Params, s: &Params| {
            spec.check_candidate(s, &p(c), Some(r))
                .unwrap_err()
                .to_string()
        };
        let e = check(&[("BM", "48"), ("BN", "16")], &run, &shape);
        assert!(
            e.contains("BM=\"48\" is not one of the spec's values"),
            "{e}"
        );
        let e = check(&[("BM", "16")], &run, &shape);
        assert!(e.contains("`BN` is missing"), "{e}");
        let e = check(&[("BM", "16"), ("BN", "16"), ("CC", "gcc")], &run, &shape);
        assert!(e.contains("\"CC\" is not one of the spec's"), "{e}");
        let e = check(&[("BM", "16"), ("BN", "16"), ("BM", "x;y")], &run, &shape);
        assert!(e.contains("`BM` is given twice"), "{e}");
        let e = check(&[("BM", "16"), ("BN", "16")], &p(&[("SPLIT", "3")]), &shape);
        assert!(e.contains("run parameter SPLIT=\"3\""), "{e}");
        let e = check(
            &[("BM", "16"), ("BN", "16")],
            &run,
            &p(&[("M", "128"), ("K", "65")]),
        );
        assert!(e.contains("is not one of the spec's shapes"), "{e}");
        let e = check(&[("BM", "16"), ("BN", "16")], &run, &p(&[("M", "128")]));
        assert!(e.contains("shape parameter `K` is missing"), "{e}");
    }

    #[test]
    fn a_combination_the_rules_exclude_is_refused() {
        let spec = spec();
        let shape = p(&[("M", "128"), ("K", "64")]);
        // 64 × 64 > 2048.
        let big = p(&[("BM", "64"), ("BN", "64")]);
        let e = spec
            .check_candidate(&shape, &big, Some(&p(&[("SPLIT", "1")])))
            .unwrap_err();
        assert!(matches!(e, CandidateError::Excluded { .. }), "{e:?}");
        assert!(e.to_string().contains("rules exclude"), "{e}");
        assert!(spec.check_candidate(&shape, &big, None).is_err());
        // SPLIT = 2 needs K >= 128: excluded on the first shape, kept on the second.
        let ok = p(&[("BM", "16"), ("BN", "16")]);
        let split2 = p(&[("SPLIT", "2")]);
        assert!(spec.check_candidate(&shape, &ok, Some(&split2)).is_err());
        let shape2 = p(&[("M", "256"), ("K", "128")]);
        spec.check_candidate(&shape2, &ok, Some(&split2)).unwrap();
    }
}
