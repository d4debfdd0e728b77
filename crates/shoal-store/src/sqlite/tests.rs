//! Tests that need the SQLite internals: the query plans of the hot queries.
//!
//! Why a plan test: "every query on a hot path is backed by an index" is easy to break by
//! editing a WHERE clause or a migration, and the breakage is invisible on a test-sized database.
//! `EXPLAIN QUERY PLAN` shows it at once as a `SCAN` of the table.

use super::{migrate, queries, SqliteStore};

/// The plan lines of `sql` on a migrated, empty database.
fn plan(conn: &rusqlite::Connection, sql: &str) -> Vec<String> {
    let mut st = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
        .unwrap_or_else(|e| panic!("preparing `{sql}`: {e}"));
    // Parameters stay unbound (NULL): the plan does not depend on their values.
    let mut rows = st.raw_query();
    let mut lines = Vec::new();
    while let Some(row) = rows.next().unwrap() {
        lines.push(row.get::<_, String>(3).unwrap());
    }
    lines
}

/// A line that reads a whole table: `SCAN job`, `SCAN j`. Even a `SCAN … USING COVERING INDEX`
/// walks every row of the index, which no hot query should need, so only SEARCH passes.
fn is_full_scan(line: &str) -> bool {
    line.starts_with("SCAN ") && !line.starts_with("SCAN CONSTANT ROW")
}

#[test]
fn hot_queries_use_indexes() {
    let store = SqliteStore::open_in_memory().unwrap();
    let mut conn = store.conn.lock().unwrap();
    migrate(&mut conn).unwrap();
    let mut failures = Vec::new();
    for (name, sql) in queries::HOT {
        let lines = plan(&conn, sql);
        assert!(!lines.is_empty(), "{name}: empty plan");
        if lines.iter().any(|l| is_full_scan(l)) {
            failures.push(format!("{name}:\n    {}", lines.join("\n    ")));
        }
    }
    assert!(
        failures.is_empty(),
        "hot queries scan a table:\n{}",
        failures.join("\n")
    );
}

#[test]
fn scan_detector_catches_an_unindexed_query() {
    let store = SqliteStore::open_in_memory().unwrap();
    let mut conn = store.conn.lock().unwrap();
    migrate(&mut conn).unwrap();
    // `worker` has no index: this must be reported, or the test above proves nothing.
    let lines = plan(&conn, "SELECT id FROM job WHERE worker = ?1");
    assert!(lines.iter().any(|l| is_full_scan(l)), "{lines:?}");
}

#[test]
fn pragmas_are_in_force() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("s.db")).unwrap();
    let conn = store.conn.lock().unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let sync: i64 = conn
        .query_row("PRAGMA synchronous", [], |r| r.get(0))
        .unwrap();
    assert_eq!(sync, 1, "NORMAL");
    let fk: i64 = conn
        .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
        .unwrap();
    assert_eq!(fk, 1);
    let busy: i64 = conn
        .query_row("PRAGMA busy_timeout", [], |r| r.get(0))
        .unwrap();
    assert_eq!(busy, 5000);
}
