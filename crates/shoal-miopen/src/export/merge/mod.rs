//! Merging a session's results into existing databases — MIOpen's shipped ones, or an earlier
//! export or golden version — as `shoal export --base DIR` and `shoal golden update` do, without
//! writing the base.
//!
//! The rule (`docs/miopen-merge.md` has it with its sources): **a merge loses nothing the base
//! holds that the session does not supersede.**
//! - **Find db** ([`merge_find_db`]): a key the session did not tune keeps its line byte for
//!   byte, however many records it has (MIOpen's shipped files have lines of 5–6). On a tuned
//!   key, each record of the base stays as it was written unless the session has a record for
//!   the same solver that the policy prefers (`better`: faster at the precision the file holds;
//!   `newer`: the session's); the session adds its own 4 fastest records (MITuna's
//!   `build_miopen_fdb` cut, which applies to what a session contributes, not to what MIOpen's
//!   reader accepts: one record per solver, any number). A changed line is sorted by
//!   (time, solver), as MITuna writes lines.
//! - **Perf db** ([`merge_perf_db`]): per (key, solver), the session's params replace the base's
//!   under `newer`; under `better` where the session's time is lower (where the times cannot be
//!   compared because a find db lacks one, the session's, newer, params win). The SQLite file
//!   is the base's own file with only the changed rows written ([`write_merged_perf_db`]); the
//!   text file is generated from it as MIOpen's build does (`unpack_db` → `sqlite2txt`), each
//!   line the base's text had unchanged copied byte for byte ([`perf_db_text_from_rows`]).
//! - **Counts** ([`MergeCounts`]) compare what is written: the session's times at the
//!   precision of the find db's text, so folding the same session in twice reports no change.
//!
//! A file that does not follow the grammar is an error naming its line; nothing is written then.

mod find;
mod perf;

use super::GrammarError;

pub use find::{
    find_db_text_of, merge_find_db, parse_find_db, session_find_db, FindDb, FindRecord,
};
pub use perf::{
    diff_perf_db, merge_perf_db, parse_perf_db_text, parse_perf_db_text_lines, perf_db_rows,
    perf_db_text_from_rows, perf_db_text_of, read_perf_db_rows, read_perf_db_sqlite,
    session_perf_db, times_by_perf_key, union_perf_db, write_merged_perf_db, PerfDb, PerfRow,
    Times,
};

/// Which side wins where both have an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// The faster entry, where times are comparable; else the session's.
    Better,
    /// The session's, always.
    Newer,
}

/// What a merge did, per key (find db) or per (key, solver) pair (perf db), judged on what is
/// written: a session entry equal to the base's as the file holds it changes nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MergeCounts {
    /// Only in the base, or in both and written as the base had it.
    pub kept: usize,
    /// Only in the session.
    pub added: usize,
    /// Changed, and faster: the key's fastest time (find db) or the pair's time (perf db) is
    /// lower than the base's.
    pub improved: usize,
    /// Changed, and slower (only under [`Policy::Newer`]).
    pub worse: usize,
    /// Changed with no faster or slower to tell: records below a find-db key's fastest, or perf
    /// params whose times the find dbs do not both hold.
    pub updated: usize,
}

impl MergeCounts {
    /// Whether the merge changed anything.
    pub fn changed(&self) -> bool {
        self.added + self.improved + self.worse + self.updated > 0
    }
}

impl std::fmt::Display for MergeCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "kept {}, added {}, improved {}, worse {}, updated {}",
            self.kept, self.added, self.improved, self.worse, self.updated
        )
    }
}

/// One line of a `KEY=VALUE;VALUE…` file: its number, the line, its key and its items.
struct Line<'t> {
    number: usize,
    text: &'t str,
    key: &'t str,
    items: Vec<&'t str>,
}

/// Splits `KEY=VALUE;VALUE…` lines, naming the line at fault. Every line of these files ends
/// with a newline (MIOpen and MITuna write one after each), so a last line without one is a
/// truncated file, refused rather than merged half.
fn lines_of(text: &str) -> impl Iterator<Item = Result<Line<'_>, GrammarError>> {
    let truncated = (!text.is_empty() && !text.ends_with('\n')).then(|| {
        Err(GrammarError::Truncated {
            line: text.lines().count(),
        })
    });
    truncated.into_iter().chain(
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, line)| {
                let number = i + 1;
                let (key, values) = line
                    .split_once('=')
                    .ok_or(GrammarError::NoEquals { line: number })?;
                if key.is_empty() {
                    return Err(GrammarError::EmptyKey { line: number });
                }
                Ok(Line {
                    number,
                    text: line,
                    key,
                    items: values.split(';').collect(),
                })
            }),
    )
}
