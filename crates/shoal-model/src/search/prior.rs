//! Earlier results as a prior: a warm start.
//!
//! A team retunes the same kernels after every library change and on every new GPU, and the
//! last tuning (another shape, another device, an earlier version) is the best guess there is of
//! where this one's fast candidates lie. A [`Prior`] carries what such a tuning measured, mapped
//! onto this space's candidates; the edges build it (from a T4 file or from a session in the
//! store) and a strategy uses it as a *prior, not as the answer*:
//!
//! - the forest starts its initial design with the prior's best few instead of random draws,
//!   and gives its trees each candidate's earlier standing as one more feature ([`Prior::bins`]),
//!   which they split on only where it explains what is measured now. A prior that misleads
//!   costs at most those few draws, which were random anyway;
//! - the random and genetic strategies ignore it.
//!
//! Only the order of the earlier times matters (quantiles), not their scale: another device's
//! microseconds mean nothing here, its ranking might.

use std::fmt;
use std::path::PathBuf;

use super::Space;

/// Where a spec's `[search] prior` (or `shoal tune --prior`) finds the earlier results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PriorSource {
    /// `session:<id>`: a session of the same store, the same spec on another device or version,
    /// or another set of shapes. Each shape starts from that session's results for the same
    /// shape when it has them, else from its shapes' standings averaged.
    Session(u64),
    /// A recorded space in the T4 format (`shoal export --format t4`), a path relative to the
    /// spec's folder or absolute. Its parameters are matched by name and value.
    File(PathBuf),
}

/// Why a `prior` is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PriorSourceError {
    #[error("an empty prior: `session:<id>` or the path of a T4 file")]
    Empty,
    #[error("`{text}`: a session is `session:<id>`, its id a number")]
    BadSession { text: String },
}

impl PriorSource {
    /// `session:<id>`, else a path.
    pub fn parse(text: &str) -> Result<PriorSource, PriorSourceError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(PriorSourceError::Empty);
        }
        match text.strip_prefix("session:") {
            Some(id) => id
                .trim()
                .parse()
                .map(PriorSource::Session)
                .map_err(|_| PriorSourceError::BadSession { text: text.into() }),
            None => Ok(PriorSource::File(PathBuf::from(text))),
        }
    }
}

impl fmt::Display for PriorSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PriorSource::Session(id) => write!(f, "session:{id}"),
            PriorSource::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// What an earlier tuning measured, as this space's candidates (see the module's
/// documentation).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Prior {
    /// Candidates (positions in [`Space::candidates`]) measured before, each once, and what
    /// they measured then (`None`: failed).
    earlier: Vec<(usize, Option<f64>)>,
}

/// Upper edges of the quantile bins of earlier times: finer at the top, where a search looks.
const EDGES: [f64; 8] = [0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75];
/// The bin of a candidate that failed before, after the slowest quantile.
const FAILED: u16 = EDGES.len() as u16 + 1;
/// The bin of a candidate not measured before.
const UNKNOWN: u16 = FAILED + 1;

impl Prior {
    /// From candidates' positions and their earlier outcomes; a candidate given twice keeps its
    /// first, and a time that is not a positive number counts as a failure.
    pub fn new(earlier: impl IntoIterator<Item = (usize, Option<f64>)>) -> Prior {
        let mut seen = std::collections::HashSet::new();
        let earlier = earlier
            .into_iter()
            .filter(|(c, _)| seen.insert(*c))
            .map(|(c, t)| (c, t.filter(|t| t.is_finite() && *t > 0.0)))
            .collect();
        Prior { earlier }
    }

    /// From earlier outcomes given by value indexes (one per parameter of `space`, as its
    /// candidates are): those that are no candidate of `space` are left out.
    pub fn from_values(
        space: &Space,
        earlier: impl IntoIterator<Item = (Vec<u16>, Option<f64>)>,
    ) -> Prior {
        let index = space.index();
        Prior::new(
            earlier
                .into_iter()
                .filter_map(|(v, t)| index.get(&v).map(|c| (c, t))),
        )
    }

    /// An earlier configuration, named by parameter and value (`value_of` gives a parameter's
    /// value by its name), as the value indexes of a space whose parameters are `params` (each
    /// its name and its values, in the space's order); `None` when it lacks one of them or takes
    /// a value the space does not list. The one place where an earlier tuning's configurations
    /// (a T4 file's, a session's) are matched to this space's, for [`Prior::from_values`].
    pub fn value_indexes<'v, S: AsRef<str>>(
        params: &[(&str, &[S])],
        value_of: impl Fn(&str) -> Option<&'v str>,
    ) -> Option<Vec<u16>> {
        params
            .iter()
            .map(|(name, values)| {
                let value = value_of(name)?;
                values
                    .iter()
                    .position(|v| v.as_ref() == value)
                    .map(|i| i as u16)
            })
            .collect()
    }

    /// How many of this space's candidates were measured before.
    pub fn len(&self) -> usize {
        self.earlier.len()
    }

    pub fn is_empty(&self) -> bool {
        self.earlier.is_empty()
    }

    /// How many bins [`Prior::bins`] uses.
    pub(super) const BINS: usize = UNKNOWN as usize + 1;

    /// Each of `size` candidates' earlier standing: the quantile bin of its earlier time (0 for
    /// the fastest 1 %, then 2, 5, 10, 20, 35, 50, 75 and 100 %), then failed, then not
    /// measured before.
    pub(super) fn bins(&self, size: usize) -> Vec<u16> {
        let mut bins = vec![UNKNOWN; size];
        let mut timed: Vec<(usize, f64)> = self
            .earlier
            .iter()
            .filter_map(|(c, t)| t.map(|t| (*c, t)))
            .filter(|(c, _)| *c < size)
            .collect();
        timed.sort_by(|a, b| a.1.total_cmp(&b.1));
        let n = timed.len() as f64;
        for (rank, (c, _)) in timed.iter().enumerate() {
            let q = rank as f64 / n;
            bins[*c] = EDGES.iter().position(|e| q < *e).unwrap_or(EDGES.len()) as u16;
        }
        for (c, t) in &self.earlier {
            if t.is_none() && *c < size {
                bins[*c] = FAILED;
            }
        }
        bins
    }

    /// The `k` candidates that were fastest before, the fastest first.
    pub(super) fn best(&self, k: usize) -> Vec<usize> {
        let mut timed: Vec<(usize, f64)> = self
            .earlier
            .iter()
            .filter_map(|(c, t)| t.map(|t| (*c, t)))
            .collect();
        timed.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        timed.into_iter().take(k).map(|(c, _)| c).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_follow_the_earlier_order_not_its_scale() {
        // 200 candidates timed before, 0 the fastest; 200 failed; 201 never measured.
        let earlier = (0..200)
            .map(|c| (c, Some(1_000.0 + c as f64)))
            .chain([(200, None)]);
        let bins = Prior::new(earlier).bins(202);
        assert_eq!(&bins[..2], &[0, 0], "the fastest 1 %");
        assert_eq!(bins[2], 1);
        assert_eq!(bins[199], EDGES.len() as u16, "the slowest quarter");
        assert_eq!((bins[200], bins[201]), (FAILED, UNKNOWN));
        // The same order at another scale gives the same bins.
        let scaled = Prior::new((0..200).map(|c| (c, Some(0.001 * (1.0 + c as f64)))));
        assert_eq!(&scaled.bins(202)[..200], &bins[..200]);
    }

    #[test]
    fn a_source_is_a_session_or_a_file() {
        assert_eq!(
            PriorSource::parse("session:12"),
            Ok(PriorSource::Session(12))
        );
        assert_eq!(
            PriorSource::parse(" h100/gemm-1.T4.json.gz "),
            Ok(PriorSource::File("h100/gemm-1.T4.json.gz".into()))
        );
        assert!(PriorSource::parse("session:twelve").is_err());
        assert_eq!(PriorSource::parse("  "), Err(PriorSourceError::Empty));
        assert_eq!(PriorSource::Session(3).to_string(), "session:3");
    }

    #[test]
    fn an_earlier_configuration_is_matched_by_name_and_value() {
        let (bk, tm) = (["16", "32"], ["4", "8"]);
        let params: [(&str, &[&str]); 2] = [("BK", &bk), ("TM", &tm)];
        // Named in another order, with a parameter this space does not have.
        let earlier = [("TM", "8"), ("GROUP", "4"), ("BK", "16")];
        let value_of = |name: &str| earlier.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        assert_eq!(Prior::value_indexes(&params, value_of), Some(vec![0, 1]));
        let missing = [("BK", "16")];
        let value_of = |name: &str| missing.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        assert_eq!(
            Prior::value_indexes(&params, value_of),
            None,
            "TM is missing"
        );
        let unlisted = [("BK", "64"), ("TM", "4")];
        let value_of = |name: &str| unlisted.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        assert_eq!(
            Prior::value_indexes(&params, value_of),
            None,
            "BK 64 is no value here"
        );
    }

    #[test]
    fn values_that_are_no_candidate_are_left_out() {
        let space = Space {
            sizes: vec![3, 3],
            candidates: vec![vec![0, 0], vec![1, 2], vec![2, 1]],
        };
        let prior = Prior::from_values(
            &space,
            [
                (vec![2, 1], Some(3.0)),
                (vec![2, 2], Some(1.0)),
                (vec![1, 2], None),
                (vec![0, 0], Some(-1.0)),
            ],
        );
        assert_eq!(prior.len(), 3);
        assert_eq!(prior.best(5), vec![2], "only what was timed, by position");
    }
}
