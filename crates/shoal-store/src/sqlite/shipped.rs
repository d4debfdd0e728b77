//! The SQLite store's statements for files shipped with a spec (`crate::shipped` holds the SQL
//! and the rule for when stored parts are a file).

use rusqlite::{params, Connection};

use super::ops::Ctx;
use crate::Result;

pub(super) fn put_part(
    c: &Connection,
    sha256: &str,
    size: u64,
    part: u32,
    bytes: &[u8],
) -> Result<()> {
    c.prepare_cached(crate::shipped::INSERT_SQLITE)
        .and_then(|mut st| st.execute(params![sha256, part, size as i64, bytes]))
        .ctx("storing a part of a shipped file")?;
    Ok(())
}

pub(super) fn parts_stored(c: &Connection, sha256: &str) -> Result<u32> {
    c.prepare_cached(crate::shipped::COUNT)
        .and_then(|mut st| st.query_row(params![sha256], |r| r.get::<_, u32>(0)))
        .ctx("counting a shipped file's parts")
}

pub(super) fn file(c: &Connection, sha256: &str) -> Result<Option<Vec<u8>>> {
    let parts = c
        .prepare_cached(crate::shipped::SELECT)
        .and_then(|mut st| {
            st.query_map(params![sha256], |r| {
                Ok((r.get::<_, u32>(0)?, r.get::<_, i64>(1)? as u64, r.get(2)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()
        })
        .ctx("reading a shipped file")?;
    Ok(crate::shipped::join(parts))
}

pub(super) fn forget(c: &Connection, sha256: &str) -> Result<()> {
    c.prepare_cached(crate::shipped::DELETE)
        .and_then(|mut st| st.execute(params![sha256]))
        .ctx("forgetting a shipped file")?;
    Ok(())
}
