//! How a spec's lists of combinations and candidates are made: one combination at a time, and
//! grown only when memory can hold them ([`try_push`]), so that a space too big for the host is
//! an [`OutOfMemory`] error instead of an abort.

use super::ParamDef;
use shoal_model::Params;

/// A list of candidates that memory could not hold: the allocation failed, and building the
/// list stopped with this instead of aborting the process.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the candidates do not fit in memory: growing a list of {held} {what} failed; narrow the \
     spec's parameters or shapes (or lower --max-candidates, to have it refused up front)"
)]
pub struct OutOfMemory {
    /// What was being listed (`candidates`, `compile sets`).
    pub what: &'static str,
    /// How many the list held when it could not grow.
    pub held: usize,
}

/// `out.push(item)`, where each item also owns about `item_bytes` (its own size included) on
/// the heap, with memory that cannot be had returned as an error instead of aborting. Before
/// the list grows, what the grown list's new items will need is asked of the allocator in one
/// piece and given back untouched (a probe: it costs an `mmap` and a `munmap`, no memory), so
/// that an address-space limit (`ulimit -v`) or the kernel's refusal of an allocation past
/// RAM and swap stops the listing here, not in one of the small allocations that follow, which
/// would abort. Memory used up by others meanwhile can still end the process (the OOM killer);
/// [`super::MAX_CANDIDATES_CEILING`] keeps the lists far from that on a host of ordinary size.
pub(super) fn try_push<T>(
    out: &mut Vec<T>,
    item: T,
    item_bytes: usize,
    what: &'static str,
) -> Result<(), OutOfMemory> {
    if out.len() == out.capacity() {
        let held = out.len();
        let full = || OutOfMemory { what, held };
        // Vec doubles (from 4 items); the probe asks for the items still to come.
        let grown = out.capacity().max(2).saturating_mul(2);
        let bytes = (grown - held).saturating_mul(item_bytes);
        let mut probe = Vec::<u8>::new();
        probe.try_reserve_exact(bytes).map_err(|_| full())?;
        drop(probe);
        out.try_reserve(1).map_err(|_| full())?;
    }
    out.push(item);
    Ok(())
}

/// What glibc's malloc takes for `n` bytes: a 16-byte aligned chunk with an 8-byte header, at
/// least 32 bytes; nothing for nothing.
fn heap_bytes(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        n.saturating_add(8).max(32).next_multiple_of(16)
    }
}

/// About what one set of `defs`' values takes, its `Params` included: a `Vec` of name and value
/// strings, the longest value of each counted.
pub(super) fn params_bytes(defs: &[ParamDef]) -> usize {
    let pair = std::mem::size_of::<(String, String)>();
    defs.iter().fold(
        std::mem::size_of::<Params>() + heap_bytes(defs.len() * pair),
        |n, d| {
            let longest = d.values.iter().map(String::len).max().unwrap_or(0);
            n + heap_bytes(d.name.len()) + heap_bytes(longest)
        },
    )
}

/// Every combination of `defs`' values, in order (the last parameter varies fastest), made one
/// at a time: nothing is allocated but the combination handed out.
pub(super) fn combinations(defs: &[ParamDef]) -> Combinations<'_> {
    let next = (!defs.iter().any(|d| d.values.is_empty())).then(|| vec![0; defs.len()]);
    Combinations { defs, next }
}

/// The iterator of [`combinations`]: an odometer over the value indices.
pub(super) struct Combinations<'a> {
    defs: &'a [ParamDef],
    /// The indices of the next combination; `None` once every one was handed out.
    next: Option<Vec<usize>>,
}

impl Iterator for Combinations<'_> {
    type Item = Params;

    fn next(&mut self) -> Option<Params> {
        let at = self.next.as_mut()?;
        let params = Params(
            self.defs
                .iter()
                .zip(at.iter())
                .map(|(d, &i)| (d.name.clone(), d.values[i].clone()))
                .collect(),
        );
        // Advance the last index, carrying leftwards; past the first, the end.
        let mut k = self.defs.len();
        loop {
            if k == 0 {
                self.next = None;
                break;
            }
            k -= 1;
            at[k] += 1;
            if at[k] < self.defs[k].values.len() {
                break;
            }
            at[k] = 0;
        }
        Some(params)
    }
}
