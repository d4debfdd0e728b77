//! Where each candidate of a space is, by its value indexes: what a strategy that builds a
//! candidate (a child of two parents, a neighbour of the best, an earlier tuning's
//! configuration) looks up to find its position in [`Space::candidates`](super::Space).

use std::collections::HashMap;

/// Candidates' positions by their value indexes. Keyed by the indexes read as one number in
/// the mixed radix of the parameters' sizes (each parameter a digit): no allocation per
/// candidate, so a space of 10⁶ is indexed in tens of milliseconds. A space whose sizes
/// multiply past 2⁶⁴ is keyed by the indexes themselves.
pub(crate) struct Index {
    sizes: Vec<usize>,
    by: By,
}

enum By {
    Code(HashMap<u64, usize>),
    Values(HashMap<Vec<u16>, usize>),
}

impl Index {
    /// The index of `candidates` (in order: the first is position 0), each one value index per
    /// parameter of `sizes`.
    pub(crate) fn new<'a>(sizes: &[usize], candidates: impl Iterator<Item = &'a [u16]>) -> Index {
        let fits = sizes
            .iter()
            .try_fold(1u64, |acc, s| acc.checked_mul(*s as u64))
            .is_some();
        let by = if fits {
            By::Code(
                candidates
                    .enumerate()
                    .filter_map(|(i, c)| Some((code(c, sizes)?, i)))
                    .collect(),
            )
        } else {
            By::Values(
                candidates
                    .enumerate()
                    .map(|(i, c)| (c.to_vec(), i))
                    .collect(),
            )
        };
        Index {
            sizes: sizes.to_vec(),
            by,
        }
    }

    /// The position of the candidate whose value indexes are `values`, if it is one.
    pub(crate) fn get(&self, values: &[u16]) -> Option<usize> {
        match &self.by {
            By::Code(map) => code(values, &self.sizes).and_then(|k| map.get(&k).copied()),
            By::Values(map) => map.get(values).copied(),
        }
    }
}

/// `values` as one number in the mixed radix of `sizes`; `None` past 2⁶⁴ or for a value out
/// of its parameter's range.
fn code(values: &[u16], sizes: &[usize]) -> Option<u64> {
    if values.len() != sizes.len() {
        return None;
    }
    values.iter().zip(sizes).try_fold(0u64, |acc, (v, s)| {
        if usize::from(*v) >= *s {
            return None;
        }
        acc.checked_mul(*s as u64)?.checked_add(u64::from(*v))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_keyings_find_every_candidate_and_nothing_else() {
        let candidates: Vec<Vec<u16>> = vec![vec![0, 2], vec![1, 0], vec![3, 1]];
        let small = Index::new(&[4, 3], candidates.iter().map(Vec::as_slice));
        // Sizes whose product overflows u64: keyed by the values themselves.
        let huge = Index::new(&[usize::MAX, 3], candidates.iter().map(Vec::as_slice));
        assert!(matches!(small.by, By::Code(_)));
        assert!(matches!(huge.by, By::Values(_)));
        for index in [&small, &huge] {
            for (i, c) in candidates.iter().enumerate() {
                assert_eq!(index.get(c), Some(i));
            }
            assert_eq!(index.get(&[0, 0]), None);
            assert_eq!(index.get(&[0]), None);
        }
        // A value past its parameter's range is no candidate (not another one's code).
        assert_eq!(small.get(&[0, 5]), None);
    }
}
