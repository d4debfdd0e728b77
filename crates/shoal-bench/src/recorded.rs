//! A recorded space in the T4 format, as every search command of `shoal-bench` reads it
//! (`search`, `search-warm`, `search-overhead --from`): the strategies' view of it, each
//! candidate's recorded time, and its parameters' names and values, by which an earlier
//! recording is mapped onto it as a prior.

use std::path::Path;

use shoal_model::search::{Prior, Space};

/// A recorded space with its parameters' names and values: each parameter's values in the replay
/// backend's order (numbers in numeric order), every configuration a candidate, with its recorded
/// time (`None`: failed).
pub struct Recorded {
    pub names: Vec<String>,
    pub values: Vec<Vec<String>>,
    pub space: Space,
    /// Each candidate's recorded time (`None`: failed).
    pub times: Vec<Option<f64>>,
}

impl Recorded {
    pub fn read(path: &Path) -> anyhow::Result<Recorded> {
        let t4 = shoal_backend::replay::t4::read(path)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let replay = shoal_backend::replay::ReplaySpace::new(t4)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let candidates = replay
            .entries()
            .iter()
            .map(|e| {
                e.values
                    .iter()
                    .zip(&replay.values)
                    .map(|(v, vs)| vs.iter().position(|x| x == v).unwrap_or(0) as u16)
                    .collect()
            })
            .collect();
        Ok(Recorded {
            space: Space {
                sizes: replay.values.iter().map(Vec::len).collect(),
                candidates,
            },
            times: replay.entries().iter().map(|e| e.time_ms).collect(),
            names: replay.names.clone(),
            values: replay.values.clone(),
        })
    }

    pub fn optimum(&self) -> f64 {
        self.times
            .iter()
            .flatten()
            .copied()
            .fold(f64::MAX, f64::min)
    }

    /// `earlier`'s outcomes as a prior over this space: its configurations matched by
    /// parameter name and value; one with a parameter or a value this space lacks is left out.
    pub fn prior_from(&self, earlier: &Recorded) -> Prior {
        let params: Vec<(&str, &[String])> = self
            .names
            .iter()
            .zip(&self.values)
            .map(|(n, vs)| (n.as_str(), vs.as_slice()))
            .collect();
        // Where each of the earlier recording's parameters is, by name: looked up once, not
        // once a configuration.
        let at: std::collections::HashMap<&str, usize> = earlier
            .names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i))
            .collect();
        let mapped = earlier
            .space
            .candidates
            .iter()
            .zip(&earlier.times)
            .filter_map(|(c, t)| {
                let value_of = |name: &str| {
                    let a = *at.get(name)?;
                    Some(earlier.values[a][c[a] as usize].as_str())
                };
                Some((Prior::value_indexes(&params, value_of)?, *t))
            });
        Prior::from_values(&self.space, mapped)
    }
}
