//! Labels: the strings that many job and result rows share (step names, build keys, workers,
//! artifacts, failure kinds, statuses, devices), each stored once in `label` and named in
//! the rows by its 4-byte id (schemas/mysql/0011_compact_job.sql says why).
//!
//! A writer turns texts into ids with [`write`] before the statements that name them, in the
//! same transaction: it looks up the texts it does not know, inserts those missing, and
//! returns every id ([`LabelIds`]); the statements bind the ids. Reads join `label` back.
//! (Statements cannot look the ids up themselves with a subquery: MariaDB's bulk execution
//! evaluates an uncorrelated subquery once and reuses its value for every row of the bulk.)
//!
//! Labels are never changed or deleted, so an id seen in a committed label names its text for
//! good. [`KnownLabels`] remembers such ids per store, so that a steady stream of batches
//! naming the same few workers and steps costs no statement at all. It learns only after a
//! commit: a label written by a transaction that rolled back is not a label.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use mysql_async::prelude::Queryable;
use mysql_async::{Transaction, Value};

use super::ops::{padded, Ctx, OpResult};
use super::queries as q;
use super::rows::{int, text};
use crate::StoreError;

/// The most ids remembered: past it the map starts again, so a store that sees many build
/// keys over its life does not grow without bound. A forgotten label costs one lookup.
const REMEMBERED: usize = 100_000;

/// Ids of committed labels by text (see the module's doc).
#[derive(Debug, Default)]
pub(crate) struct KnownLabels {
    ids: Mutex<HashMap<String, u32>>,
}

impl KnownLabels {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        // The map is only ever a cache of facts that never change: one left half-updated by a
        // panic still holds only true ones.
        self.ids
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The known ids among `texts`, and the texts not known, in byte order, once each.
    fn split<'a>(&self, texts: impl IntoIterator<Item = &'a str>) -> (LabelIds, Vec<&'a str>) {
        let known = self.lock();
        let mut found = LabelIds::default();
        let mut unknown = BTreeSet::new();
        for t in texts {
            match known.get(t) {
                Some(&id) => {
                    found.0.insert(t.to_string(), id);
                }
                None => {
                    unknown.insert(t);
                }
            }
        }
        (found, unknown.into_iter().collect())
    }

    /// Remembers `ids`: call only once the transaction that wrote them committed.
    pub(crate) fn remember(&self, ids: LabelIds) {
        if ids.0.is_empty() {
            return;
        }
        let mut known = self.lock();
        if known.len() + ids.0.len() > REMEMBERED {
            known.clear();
        }
        known.extend(ids.0);
    }
}

/// The ids of the labels one write names, by text.
#[derive(Debug, Default)]
pub(crate) struct LabelIds(HashMap<String, u32>);

impl LabelIds {
    /// The id of `text`, as a parameter. A text not asked for in [`write`] is a bug in the
    /// caller, reported rather than written as "none".
    pub(crate) fn id(&self, text: &str) -> crate::Result<Value> {
        match self.0.get(text) {
            Some(&id) => Ok(int(id)),
            None => Err(StoreError::Invalid(format!(
                "no label was written for {text:?} before the row that names it"
            ))),
        }
    }

    /// [`LabelIds::id`], or `none` for no text.
    pub(crate) fn id_or(&self, text: Option<&str>, none: Value) -> crate::Result<Value> {
        text.map_or(Ok(none), |t| self.id(t))
    }
}

/// Makes every text of `texts` a label, inside `tx`, and returns their ids: looks up the ones
/// not known already, and inserts those missing in byte order (so that two transactions lock
/// new labels in the same order), then reads their ids. Give the result to
/// [`KnownLabels::remember`] after the commit.
pub(crate) async fn write<'a>(
    tx: &mut Transaction<'_>,
    ctx: Ctx,
    known: &KnownLabels,
    texts: impl IntoIterator<Item = &'a str>,
) -> OpResult<LabelIds> {
    let (mut ids, unknown) = known.split(texts);
    if unknown.is_empty() {
        return Ok(ids);
    }
    look_up(tx, &unknown, &mut ids).await?;
    let missing: Vec<&str> = unknown
        .into_iter()
        .filter(|t| !ids.0.contains_key(*t))
        .collect();
    if missing.is_empty() {
        return Ok(ids);
    }
    let rows = missing.iter().map(|t| vec![text(t)]).collect();
    ctx.bulk(tx, q::INSERT_LABEL, rows).await?;
    look_up(tx, &missing, &mut ids).await?;
    match missing.iter().find(|t| !ids.0.contains_key(**t)) {
        Some(lost) => Err(StoreError::Invalid(format!(
            "the label {lost:?} was inserted but cannot be read back"
        ))
        .into()),
        None => Ok(ids),
    }
}

/// Adds the ids of those of `texts` that are labels to `ids`.
async fn look_up(tx: &mut Transaction<'_>, texts: &[&str], ids: &mut LabelIds) -> OpResult<()> {
    for chunk in texts.chunks(q::MAX_IN) {
        let params = padded(chunk.iter().map(|t| text(t)).collect());
        let found: Vec<(u32, Vec<u8>)> = tx.exec(q::labels(chunk.len()), params).await?;
        for (id, bytes) in found {
            // A label is the bytes of a text that was valid UTF-8 when written.
            if let Ok(t) = String::from_utf8(bytes) {
                ids.0.insert(t, id);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(pairs: &[(&str, u32)]) -> LabelIds {
        LabelIds(pairs.iter().map(|&(t, id)| (t.to_string(), id)).collect())
    }

    #[test]
    fn only_unknown_texts_are_looked_up_once_each_in_order() {
        let known = KnownLabels::default();
        known.remember(ids(&[("w1", 7)]));
        let (found, unknown) = known.split(["b", "w1", "a", "b"]);
        assert_eq!(unknown, ["a", "b"]);
        assert_eq!(found.id("w1").unwrap(), int(7));
        assert!(found.id("a").is_err(), "never written: an error, not none");
        assert_eq!(found.id_or(None, int(0)).unwrap(), int(0));
    }

    #[test]
    fn the_map_starts_again_past_its_bound() {
        let known = KnownLabels::default();
        let many: Vec<(String, u32)> = (0..REMEMBERED as u32).map(|i| (i.to_string(), i)).collect();
        known.remember(LabelIds(many.into_iter().collect()));
        assert!(known.split(["7"]).1.is_empty());
        known.remember(ids(&[("new", 1)]));
        assert_eq!(known.split(["7", "new"]).1, ["7"], "only `new` is known");
    }
}
