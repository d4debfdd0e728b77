//! The earlier results a session's searches start from (`[search] prior`, `shoal tune
//! --prior`): read when the session's searches are (re)built, then mapped onto each shape's
//! space by parameter name and value ([`Earlier::prior_for`]). What the search makes of them is
//! `shoal_model::search::Prior`'s concern.
//!
//! A prior that cannot be read (a session with no results, a file gone or corrupt) is logged
//! and the search starts cold: a warm start is an optimisation, never a reason for a session
//! not to run.

use std::collections::HashMap;

use shoal_backend::spec::TuningSpec;
use shoal_model::search::{Prior, PriorSource, Space};
use shoal_model::{record::candidate_key, FinalResult, Params, SessionId};

use super::search::outcome_of;
use super::Inner;
use crate::ActorError;

/// Earlier results, as read.
pub(super) enum Earlier {
    /// A session's final results, grouped and ranked once when read (a session of many shapes
    /// is mapped onto each of them).
    Session {
        rows: Vec<FinalResult>,
        /// Per shape (its parameters' key), its rows that ended, with their outcome.
        by_shape: HashMap<String, Vec<(usize, Option<f64>)>>,
        /// Each candidate once, with its standing over the shapes ([`standings`]).
        standings: Vec<(usize, Option<f64>)>,
    },
    /// A recorded space: its parameters' names, and each configuration's values (in the
    /// names' order) and time (`None`: failed).
    Recorded {
        names: Vec<String>,
        entries: Vec<(Vec<String>, Option<f64>)>,
    },
}

impl Inner {
    /// The earlier results `source` names, for a search of `spec`; `None` (logged) when they
    /// cannot be had. Only a store that fails is an error.
    pub(super) async fn earlier(
        &self,
        spec: &TuningSpec,
        source: &PriorSource,
    ) -> Result<Option<Earlier>, ActorError> {
        match source {
            PriorSource::Session(id) => {
                let rows = self.store.final_results(SessionId(*id as i64)).await?;
                if rows.iter().all(|r| outcome_of(r).is_none()) {
                    tracing::warn!(prior = %source, "the prior session has no results: a cold start");
                    return Ok(None);
                }
                Ok(Some(Earlier::session(rows)))
            }
            PriorSource::File(path) => {
                let path = spec.dir.join(path);
                let read = tokio::task::spawn_blocking(move || {
                    let read = shoal_backend::replay::t4::read(&path);
                    (path, read)
                })
                .await;
                match read {
                    Ok((_, Ok(recorded))) => Ok(Some(Earlier::Recorded {
                        entries: recorded
                            .entries
                            .into_iter()
                            .map(|e| (e.values, e.time_ms))
                            .collect(),
                        names: recorded.names,
                    })),
                    Ok((path, Err(e))) => {
                        tracing::warn!(prior = %path.display(), error = %e,
                            "the prior cannot be read: a cold start");
                        Ok(None)
                    }
                    Err(e) => {
                        tracing::warn!(prior = %source, error = %e,
                            "reading the prior failed: a cold start");
                        Ok(None)
                    }
                }
            }
        }
    }
}

impl Earlier {
    fn session(rows: Vec<FinalResult>) -> Earlier {
        let mut by_shape: HashMap<String, Vec<(usize, Option<f64>)>> = HashMap::new();
        for (i, r) in rows.iter().enumerate() {
            if let Some(outcome) = outcome_of(r) {
                by_shape
                    .entry(r.config_params.key())
                    .or_default()
                    .push((i, outcome));
            }
        }
        let standings = standings(&rows, &by_shape);
        Earlier::Session {
            rows,
            by_shape,
            standings,
        }
    }

    /// What the earlier results say of the candidates of `space`, the space of `shape` under
    /// `spec`: a recorded space's configurations as they are; a session's results for the same
    /// shape when it has them, else each candidate's standing among its shape's results (a
    /// quantile) averaged over the shapes that measured it.
    pub(super) fn prior_for(&self, spec: &TuningSpec, space: &Space, shape: &Params) -> Prior {
        let params: Vec<(&str, &[String])> = spec
            .compile_params
            .iter()
            .chain(&spec.run_params)
            .map(|d| (d.name.as_str(), d.values.as_slice()))
            .collect();
        match self {
            Earlier::Recorded { names, entries } => {
                let at: HashMap<&str, usize> = names
                    .iter()
                    .enumerate()
                    .map(|(i, n)| (n.as_str(), i))
                    .collect();
                Prior::from_values(
                    space,
                    entries.iter().filter_map(|(values, time)| {
                        let value_of = |n: &str| at.get(n).map(|i| values[*i].as_str());
                        Some((Prior::value_indexes(&params, value_of)?, *time))
                    }),
                )
            }
            Earlier::Session {
                rows,
                by_shape,
                standings,
            } => {
                let of_row = |r: &FinalResult| {
                    Prior::value_indexes(&params, |n| {
                        r.compile_params.get(n).or_else(|| r.run_params.get(n))
                    })
                };
                let earlier = by_shape.get(&shape.key()).unwrap_or(standings);
                Prior::from_values(
                    space,
                    earlier
                        .iter()
                        .filter_map(|(i, t)| Some((of_row(&rows[*i])?, *t))),
                )
            }
        }
    }
}

/// Each measured candidate of `rows` once (a row of it), with its quantile among its shape's
/// valid times averaged over the shapes that timed it (plus one, so that it reads as a positive
/// time), or `None` when every shape that tried it saw it fail.
fn standings(
    rows: &[FinalResult],
    by_shape: &HashMap<String, Vec<(usize, Option<f64>)>>,
) -> Vec<(usize, Option<f64>)> {
    // candidate key -> (a row of it, sum of quantiles, shapes that timed it)
    let mut by_candidate: HashMap<String, (usize, f64, usize)> = HashMap::new();
    let mut shapes: Vec<_> = by_shape.iter().collect();
    shapes.sort_by(|a, b| a.0.cmp(b.0));
    for (_, measured) in shapes {
        let mut times: Vec<f64> = measured.iter().filter_map(|(_, t)| *t).collect();
        times.sort_by(f64::total_cmp);
        let n = times.len().max(1) as f64;
        for (i, t) in measured {
            let r = &rows[*i];
            let entry = by_candidate
                .entry(candidate_key(&r.compile_params, &r.run_params))
                .or_insert((*i, 0.0, 0));
            if let Some(t) = t {
                let rank = times.partition_point(|x| x < t) as f64;
                entry.1 += rank / n;
                entry.2 += 1;
            }
        }
    }
    let mut out: Vec<_> = by_candidate
        .into_values()
        .map(|(i, sum, timed)| (i, (timed > 0).then(|| 1.0 + sum / timed as f64)))
        .collect();
    out.sort_unstable_by_key(|(i, _)| *i);
    out
}

#[cfg(test)]
mod tests {
    use shoal_model::{ConfigId, JobId, JobState, Measurement, Outcome, Step};

    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Params {
        Params(
            pairs
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        )
    }

    /// A final result of candidate `A = a` on shape `N = n`: timed in `time_us`, or failed.
    fn row(job: u64, n: &str, a: &str, time_us: Option<f64>) -> FinalResult {
        FinalResult {
            job: JobId(job as i64),
            config: ConfigId(n.parse().unwrap()),
            config_params: params(&[("N", n)]),
            solver: String::new(),
            compile_params: params(&[("A", a)]),
            run_params: Params::new(),
            state: if time_us.is_some() {
                JobState::Evaluated
            } else {
                JobState::Errored
            },
            outcome: time_us.map(|t| {
                Outcome::Measured(Measurement {
                    time_us: t,
                    samples_us: vec![t],
                    workspace: 0,
                    details: Params::new(),
                })
            }),
            failure: None,
            last_error: None,
            worker: None,
            device: None,
            eval_step: Step::ExecRun,
        }
    }

    /// A session prior for a shape the earlier session did not tune: each candidate's quantile
    /// among its shape's times, averaged over the shapes that timed it; a candidate that only
    /// failed stays a failure; for a shape the session did tune, that shape's own results.
    #[test]
    fn a_shape_the_prior_session_lacks_gets_standings_averaged_over_its_shapes() {
        let rows = vec![
            row(1, "1", "1", Some(10.0)),
            row(2, "1", "2", Some(20.0)),
            row(3, "1", "3", Some(30.0)),
            row(4, "1", "4", None),
            row(5, "2", "1", Some(40.0)),
            row(6, "2", "2", Some(10.0)),
            row(7, "2", "3", Some(20.0)),
        ];
        let earlier = Earlier::session(rows);
        let Earlier::Session { standings, .. } = &earlier else {
            unreachable!()
        };
        // Quantiles: shape 1 gives A=1, 2, 3 0, 1/3, 2/3; shape 2 gives them 2/3, 0, 1/3.
        let expect = [
            (0, Some(1.0 + (0.0 + 2.0 / 3.0) / 2.0)),
            (1, Some(1.0 + (1.0 / 3.0 + 0.0) / 2.0)),
            (2, Some(1.0 + (2.0 / 3.0 + 1.0 / 3.0) / 2.0)),
            (3, None),
        ];
        assert_eq!(standings.len(), expect.len(), "{standings:?}");
        for ((i, got), (j, want)) in standings.iter().zip(expect) {
            assert_eq!(*i, j);
            match (got, want) {
                (Some(g), Some(w)) => assert!((g - w).abs() < 1e-12, "A={}: {g} != {w}", i + 1),
                (g, w) => assert_eq!(*g, w),
            }
        }

        let spec = shoal_backend::spec::parse(
            "name = \"t\"\n[build]\ncommand = \"cc -o {out} x.c\"\n[run]\ncommand = \"{artifact}\"\n\
             [[shapes]]\nN = 3\n[params.compile]\nA = [1, 2, 3, 4, 5]\n",
            std::path::Path::new("/nonexistent/spec.toml"),
        )
        .unwrap();
        let space = Space {
            sizes: vec![5],
            candidates: (0..5).map(|a| vec![a]).collect(),
        };
        // Shape 3 was not tuned: all four candidates the session tried, from their standings.
        assert_eq!(
            earlier
                .prior_for(&spec, &space, &params(&[("N", "3")]))
                .len(),
            4
        );
        // Shape 2 was: its own three.
        assert_eq!(
            earlier
                .prior_for(&spec, &space, &params(&[("N", "2")]))
                .len(),
            3
        );
    }
}
