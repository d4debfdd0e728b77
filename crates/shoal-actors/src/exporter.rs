//! The Exporter: builds a session's output files on request — the tuned table as CSV and JSON —
//! and returns the rows so the caller can print them. On the control topic (the exporter role)
//! it writes a MIOpen session's databases instead (`shoal_miopen::export`).

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use actix::prelude::*;
use shoal_export::{TableContext, TunedRow};
use shoal_model::{Params, SessionId};
use shoal_store::Store;

use crate::backends::SessionBackends;
use crate::serving::{Local, Served, Service};
use crate::shutdown::{DrainGuard, Signal};
use crate::ActorError;
use shoal_model::message::Control;

pub struct Exporter {
    store: Arc<dyn Store>,
    backends: SessionBackends,
}

impl Exporter {
    pub fn new(store: Arc<dyn Store>, backends: SessionBackends) -> Self {
        Exporter { store, backends }
    }
}

impl Actor for Exporter {
    type Context = Context<Self>;
}

/// Export a session's tuned table into `out_dir`.
#[derive(Message)]
#[rtype(result = "Result<ExportSummary, ActorError>")]
pub struct Export {
    pub session: SessionId,
    pub out_dir: PathBuf,
    /// Replace the files already there (`shoal tune` replaces its own table).
    pub force: bool,
}

/// What was written, and the table for the terminal.
#[derive(Debug)]
pub struct ExportSummary {
    pub rows: Vec<TunedRow>,
    pub csv: PathBuf,
    pub json: PathBuf,
    pub table: String,
}

impl Handler<Export> for Exporter {
    type Result = ResponseFuture<Result<ExportSummary, ActorError>>;

    fn handle(&mut self, msg: Export, _ctx: &mut Self::Context) -> Self::Result {
        let store = self.store.clone();
        let backends = self.backends.clone();
        Box::pin(
            async move { export(&*store, &backends, msg.session, &msg.out_dir, msg.force).await },
        )
    }
}

/// The export itself, usable without an actor (the `shoal export` command).
pub async fn export(
    store: &dyn Store,
    backends: &SessionBackends,
    session: SessionId,
    out_dir: &std::path::Path,
    force: bool,
) -> Result<ExportSummary, ActorError> {
    let info = store
        .session(session)
        .await?
        .ok_or(ActorError::UnknownSession(session))?;
    let spec = exec_spec(store, backends, &info).await?;
    let results = store.final_results(session).await?;
    let flops = |shape: &Params| spec.as_ref().and_then(|s| s.flops(shape));
    let columns = shape_columns(&info, spec.as_deref(), &results);
    let ctx = table_context(&info, &columns, &flops);
    let rows = shoal_export::tuned_rows(&ctx, &results);
    let (csv, json) = shoal_export::write_files(&ctx, &rows, out_dir, force)?;
    let table = shoal_export::render_table(&ctx, &rows);
    Ok(ExportSummary {
        rows,
        csv,
        json,
        table,
    })
}

/// A session's tuned table, for comparing it with another (`shoal compare`): the rows of
/// [`export`], with the spec's shape columns and FLOP counts where the session has a spec, and
/// the problem's own parameters as its columns otherwise (a MIOpen session).
pub async fn tuned_table(
    store: &dyn Store,
    backends: &SessionBackends,
    session: SessionId,
) -> Result<Vec<TunedRow>, ActorError> {
    let info = store
        .session(session)
        .await?
        .ok_or(ActorError::UnknownSession(session))?;
    let results = store.final_results(session).await?;
    tuned_rows_of(store, backends, &info, &results).await
}

/// [`tuned_table`] of results already read (the dashboard reads them for its chart too).
pub async fn tuned_rows_of(
    store: &dyn Store,
    backends: &SessionBackends,
    info: &shoal_model::Session,
    results: &[shoal_model::FinalResult],
) -> Result<Vec<TunedRow>, ActorError> {
    let spec = exec_spec(store, backends, info).await?;
    let flops = |shape: &Params| spec.as_ref().and_then(|s| s.flops(shape));
    let columns = shape_columns(info, spec.as_deref(), results);
    Ok(shoal_export::tuned_rows(
        &table_context(info, &columns, &flops),
        results,
    ))
}

/// The tuned rows of a session, and the bytes of the `tuned.csv` and `tuned.json` that
/// `shoal export` would write for them (the dashboard offers them as downloads).
pub async fn tuned_files_of(
    store: &dyn Store,
    backends: &SessionBackends,
    info: &shoal_model::Session,
    results: &[shoal_model::FinalResult],
) -> Result<(Vec<TunedRow>, Vec<u8>, Vec<u8>), ActorError> {
    let spec = exec_spec(store, backends, info).await?;
    let flops = |shape: &Params| spec.as_ref().and_then(|s| s.flops(shape));
    let columns = shape_columns(info, spec.as_deref(), results);
    let ctx = table_context(info, &columns, &flops);
    let rows = shoal_export::tuned_rows(&ctx, results);
    let (mut csv, mut json) = (Vec::new(), Vec::new());
    shoal_export::write_csv(&ctx, &rows, &mut csv)
        .and_then(|()| shoal_export::write_json(&rows, &mut json))
        .map_err(|source| ActorError::Io {
            what: "writing the tuned table for",
            path: PathBuf::from(format!("session {}", info.id)),
            source,
        })?;
    Ok((rows, csv, json))
}

/// The spec of an exec-backend session (its shape columns and FLOPs formula); `None` for
/// the other backends, and for a session whose spec can no longer be read where it was tuned
/// (its directory moved or deleted): its table is then written from the store alone, with the
/// problem's own parameters as its columns and without GFLOP/s, and a warning says why.
async fn exec_spec(
    store: &dyn Store,
    backends: &SessionBackends,
    info: &shoal_model::Session,
) -> Result<Option<std::sync::Arc<shoal_backend::spec::TuningSpec>>, ActorError> {
    if info.info.backend != shoal_model::Backend::Exec {
        return Ok(None);
    }
    match backends.spec(store, info.id).await {
        Ok(spec) => Ok(Some(spec)),
        Err(why @ (ActorError::Spec { .. } | ActorError::Tree { .. })) => {
            tracing::warn!(
                session = info.id.0,
                "the spec cannot be read where the session was tuned ({why}); its table is \
                 written from the store alone, without GFLOP/s"
            );
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The shape columns of a session's table: its spec's; for an exec-backend session whose
/// spec cannot be read, the names of its problems' parameters in first-seen order; none for the
/// other backends (their tables name the problem otherwise).
fn shape_columns(
    info: &shoal_model::Session,
    spec: Option<&shoal_backend::spec::TuningSpec>,
    results: &[shoal_model::FinalResult],
) -> Vec<String> {
    if let Some(spec) = spec {
        return spec.shape_columns.clone();
    }
    let mut columns: Vec<String> = Vec::new();
    if info.info.backend == shoal_model::Backend::Exec {
        for r in results {
            for name in r.config_params.names() {
                if !columns.iter().any(|c| c == name) {
                    columns.push(name.to_string());
                }
            }
        }
    }
    columns
}

fn table_context<'a>(
    info: &'a shoal_model::Session,
    shape_columns: &'a [String],
    flops: &'a dyn Fn(&Params) -> Option<f64>,
) -> TableContext<'a> {
    TableContext {
        arch: &info.info.arch,
        num_cu: info.info.num_cu,
        shape_columns,
        flops,
    }
}

/// Why an export request's directory is refused (the requested name, escaped).
#[derive(Debug, thiserror::Error)]
pub enum ExportDirRefused {
    #[error("export directory `{0}` must be 1 to 255 bytes")]
    Length(String),
    #[error(
        "export directory `{0}` must be a relative path inside the exporter's export directory \
         (no `/` at the start, no `..`)"
    )]
    Outside(String),
}

/// Where an export request's directory lands: under the exporter's own `root`, never elsewhere.
/// The request names a relative path of plain components (`nightly/gfx90a`); an absolute path,
/// `..`, or anything else that could leave `root` is refused with the reason.
pub fn export_dir_under(
    root: &std::path::Path,
    requested: &str,
) -> Result<PathBuf, ExportDirRefused> {
    use std::path::Component;
    let rel = std::path::Path::new(requested);
    if requested.is_empty() || requested.len() > 255 {
        return Err(ExportDirRefused::Length(
            requested.escape_debug().to_string(),
        ));
    }
    if !rel
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(ExportDirRefused::Outside(
            requested.escape_debug().to_string(),
        ));
    }
    Ok(root.join(rel))
}

/// The exporter role of a worker, as an actor ([`Served`]): export requests arrive on the
/// control topic with the routing key `<host>.exporter` or `any.exporter`, and the tables are
/// written on this host, under `export_root` only (a message names a directory inside it, see
/// [`export_dir_under`]). A request refused or failing is logged; only the store failing fails
/// the actor.
pub struct ControlExporter {
    pub store: Arc<dyn Store>,
    pub bus: Arc<dyn shoal_bus::Bus>,
    pub backends: SessionBackends,
    pub host: String,
    pub export_root: PathBuf,
}

impl ControlExporter {
    /// Starts it under actix's `Supervisor`.
    pub fn start(self, stop: Signal, guard: DrainGuard) {
        Served::start(self, stop, guard);
    }

    /// Carries out one control order addressed to the exporter.
    async fn order(&self, c: Control) -> Result<(), ActorError> {
        let (store, backends, export_root) = (&*self.store, &self.backends, &self.export_root);
        if let Control::ExportMiopen {
            session,
            out_dir,
            options,
        } = c
        {
            match export_miopen(store, export_root, session, &out_dir, options).await {
                Ok(lines) => tracing::info!(%session, ?lines, "exported"),
                Err(e) => tracing::error!(%session, error = %e, "export refused or failed"),
            }
            return Ok(());
        }
        if let Control::Export { session, out_dir } = c {
            let out_dir = match export_dir_under(export_root, &out_dir) {
                Ok(dir) => dir,
                Err(e) => {
                    tracing::error!(%session, error = %e, "export request refused");
                    return Ok(());
                }
            };
            // An operator re-exports under the same name to refresh it (the files are replaced
            // whole, never half-written); the control message has no flag to ask. A MIOpen
            // session's outputs are MIOpen's databases.
            let miopen = match store.session(session).await? {
                Some(s) if s.info.backend == shoal_model::Backend::Miopen => Some(s),
                _ => None,
            };
            if let Some(s) = miopen {
                let all = shoal_miopen::export::Which::default();
                let kernels = shoal_backend::miopen::artifact_kernels;
                match shoal_miopen::export::export_selected(
                    store, &s, &out_dir, &all, true, kernels,
                )
                .await
                {
                    Ok(files) => tracing::info!(%session, ?files, "exported"),
                    Err(e) => tracing::error!(%session, error = %e, "export failed"),
                }
                return Ok(());
            }
            match export(store, backends, session, &out_dir, true).await {
                Ok(summary) => tracing::info!(%session, csv = %summary.csv.display(), "exported"),
                Err(e) => tracing::error!(%session, error = %e, "export failed"),
            }
        }
        Ok(())
    }
}

impl Service for ControlExporter {
    type Request = Control;
    type State = ();

    fn name(&self) -> String {
        "exporter".into()
    }

    fn fresh_state(&self) -> Result<(), ActorError> {
        Ok(())
    }

    fn feed(
        self: Rc<Self>,
        to: Addr<Served<Self>>,
        stop: Signal,
    ) -> Local<'static, Result<(), ActorError>> {
        let (bus, host) = (self.bus.clone(), self.host.clone());
        Box::pin(crate::control::feed(
            to,
            bus,
            host,
            shoal_model::message::Actor::Exporter,
            stop,
        ))
    }

    fn serve<'a>(
        &'a self,
        _: &'a mut (),
        c: Control,
        _: &'a Signal,
    ) -> Local<'a, Result<(), ActorError>> {
        Box::pin(self.order(c))
    }
}

/// A MIOpen session's export with options, on an operator's order: the output and the base
/// directory both inside `export_root`, the files replaced whole.
async fn export_miopen(
    store: &dyn Store,
    export_root: &Path,
    session: shoal_model::SessionId,
    out_dir: &str,
    options: shoal_model::message::MiopenExportOptions,
) -> Result<Vec<String>, ActorError> {
    let out = export_dir_under(export_root, out_dir)?;
    let base = match &options.base_dir {
        Some(dir) => Some(export_dir_under(export_root, dir)?),
        None => None,
    };
    let info = store
        .session(session)
        .await?
        .ok_or(ActorError::UnknownSession(session))?;
    if info.info.backend != shoal_model::Backend::Miopen {
        return Err(ActorError::NotMiopen(session));
    }
    let policy = if options.newer {
        shoal_miopen::export::merge::Policy::Newer
    } else {
        shoal_miopen::export::merge::Policy::Better
    };
    let which = shoal_miopen::export::Which {
        find_db: options.find_db,
        perf_db: options.perf_db,
        kern_db: options.kern_db,
        user_db: options.user_db,
        base: base.map(|dir| (dir, policy)),
        tag: options.tag,
        full_kdb: false,
    };
    let kernels = shoal_backend::miopen::artifact_kernels;
    Ok(shoal_miopen::export::export_selected(store, &info, &out, &which, true, kernels).await?)
}

#[cfg(test)]
mod tests {
    use super::export_dir_under;
    use std::path::Path;

    #[test]
    fn exports_stay_under_the_export_root() {
        let root = Path::new("/srv/shoal/exports");
        assert_eq!(
            export_dir_under(root, "nightly/gfx90a").unwrap(),
            root.join("nightly/gfx90a")
        );
        for bad in ["/etc", "../x", "a/../../b", "", "/"] {
            assert!(export_dir_under(root, bad).is_err(), "{bad}");
        }
    }
}
