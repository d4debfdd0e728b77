//! `shoal export` for a MIOpen session: the find db, the perf db (SQLite and text) and the kernel
//! db, named and laid out as MIOpen reads them, from the session's evaluated jobs, with this
//! command's options (a tag, user dbs, a base to merge into): `shoal_miopen::export`, which the
//! exporter role shares for `export --cluster`. Here: printing what it wrote.

use std::path::Path;
use std::process::ExitCode;

pub use shoal_miopen::export::Which;
use shoal_model::Session;
use shoal_store::Store;

pub async fn export(
    store: &dyn Store,
    session: &Session,
    out: &Path,
    which: Which,
    force: bool,
) -> anyhow::Result<ExitCode> {
    let lines = shoal_miopen::export::export_selected(
        store,
        session,
        out,
        &which,
        force,
        shoal_backend::miopen::artifact_kernels,
    )
    .await?;
    for line in lines {
        println!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}
