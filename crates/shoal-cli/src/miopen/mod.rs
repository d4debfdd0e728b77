//! The MIOpen tuning workflow as `shoal` commands, in MITuna's order: import configs, update
//! solvers, init a session, update applicability, load jobs, run, export; and around it, the
//! databases of other versions: imported (`import-db`), kept as golden versions, compared
//! (`miopen report`).

pub mod export;
pub mod fin_steps;
pub mod golden;
pub mod import;
mod import_db;
mod report;
mod report_sides;
pub mod session;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

use shoal_model::command::{Command, CommandOutcome};
use shoal_model::SessionId;

use crate::store_open::{open_existing, open_migrated, session_or_newest};

/// `shoal import-configs`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Tag every imported config with this (e.g. the network's name).
    #[arg(short = 't', long)]
    pub tag: String,
    /// A file of MIOpenDriver command lines (or find-db keys), one per line.
    #[arg(short = 'f', long)]
    pub file: PathBuf,
    /// Also mark the configs as recurrent (tag `recurrent`), to be tuned again with every release.
    #[arg(long)]
    pub mark_recurrent: bool,
    /// Stop at the first line that cannot be parsed, before anything is written. By default
    /// every line that parses is imported and each rejected line is listed on stderr.
    #[arg(long)]
    pub strict: bool,
    /// The default since lines that cannot be parsed are skipped anyway (kept for scripts that
    /// pass it).
    #[arg(long, hide = true)]
    pub skip_bad: bool,
    /// Cluster mode: send the configs to the cluster's Scheduler (commands on the broker,
    /// SHOAL_BROKER, at most 500 configs each), instead of writing the --db store.
    #[arg(long)]
    pub cluster: bool,
}

#[derive(Debug, Subcommand)]
pub enum MiopenCommand {
    /// Print the find-db and perf-db keys MIOpen looks each MIOpenDriver line up by.
    ///
    /// One output line per input line: `<find-db key>\t<perf-db key>` (pairs for several
    /// directions follow one another on the line), an empty line for a blank or comment, and
    /// `error: <source>:<line>: <reason>` for a line that is not a convolution.
    Key {
        /// The input file; `-` or nothing reads standard input.
        file: Option<PathBuf>,
    },
    /// List the databases imported into the --db store (`shoal import-db --store`): id, label,
    /// device, record counts, files.
    Imports {
        /// As a JSON list.
        #[arg(long)]
        json: bool,
        /// Read the cluster's database (SHOAL_DB or the config file) instead of --db.
        #[arg(long)]
        cluster: bool,
    },
    /// Compare two versions of the MIOpen databases, config by config and solver by solver
    /// (MITuna's `update_golden --create_perf_table`).
    ///
    /// Each side is `golden:V` (a golden version), `session:N` (a session of the --db store),
    /// `import:N` (an import of `shoal import-db --store`) or a directory of MIOpen databases.
    /// Per (config, solver): the old and new time, the change in percent, the old and new perf
    /// params; per config: the fastest solver and time on each side. Times are compared as the
    /// find db prints them (6 significant digits): times that print the same are the same.
    /// Prints the configs whose fastest solution changed, worst slowdown first, and ends with
    /// `report configs=… faster=… slower=… same=… only_old=… only_new=…`, counting (config,
    /// solver) rows; --csv writes every row. It is a report: it exits 0 whatever changed.
    ///
    /// Example: shoal miopen report import:1 session:3 --csv report.csv
    Report(report_sides::ReportArgs),
}

/// Where `shoal import-db` puts the databases.
pub struct DbImportInto {
    /// `--store`, with its label and tag.
    pub store: Option<StoreImport>,
    /// `--golden-v`: the golden directory, the version, `--force`.
    pub golden: Option<(PathBuf, u32, bool)>,
}

/// `import-db --store`'s options.
pub struct StoreImport {
    pub label: Option<String>,
    pub tag: Option<String>,
    /// Into the cluster's database instead of --db.
    pub cluster: bool,
}

/// `shoal import-db`: the golden version first (every file is checked before anything is
/// copied, and a version that exists is refused without --force), then the store, so that a
/// refused version leaves the store as it was.
pub async fn import_db(dir: &Path, into: DbImportInto, db: &Path) -> anyhow::Result<ExitCode> {
    if let Some((golden, v, force)) = &into.golden {
        let code = golden::import(golden, *v, dir, *force)?;
        if code != ExitCode::SUCCESS {
            return Ok(code);
        }
    }
    if let Some(opts) = into.store {
        // The cluster's schema is the administrator's (`shoal db migrate`); --db's is brought
        // up to date here, as every command that writes it does.
        let store = if opts.cluster {
            crate::fleet::store_for_reading(db, true).await?
        } else {
            open_migrated(db).await?
        };
        let label = opts.label.unwrap_or_else(|| dir.display().to_string());
        let tags: Vec<String> = opts.tag.into_iter().collect();
        for imported in import_db::import(&*store, dir, &label, &tags).await? {
            println!("{imported}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Subcommand)]
pub enum SolversCommand {
    /// Fill the solver table: from `fin get_solvers`, or from Shoal's built-in copy of MIOpen's
    /// solver registry with --builtin.
    Update {
        /// MIOpen's tuning handle (default: $SHOAL_FIN, else /opt/rocm/bin/fin).
        #[arg(long)]
        fin: Option<PathBuf>,
        /// Use the built-in solver table instead of asking fin.
        #[arg(long)]
        builtin: bool,
        /// Cluster mode: ask the cluster's Scheduler to do it (a command on the broker,
        /// SHOAL_BROKER), instead of writing the --db store.
        #[arg(long)]
        cluster: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Open a MIOpen tuning session for one architecture; prints its id. The same identity
    /// (arch, CU count, ROCm and MIOpen versions, reason) gives back the existing session.
    Init {
        /// GPU architecture, e.g. gfx90a (default: the first AMD GPU of this machine).
        #[arg(short = 'a', long)]
        arch: Option<String>,
        /// Compute units, e.g. 110 (default: that GPU's).
        #[arg(short = 'n', long)]
        num_cu: Option<u32>,
        /// ROCm version (default: /opt/rocm/.info/version).
        #[arg(long)]
        rocm_version: Option<String>,
        /// MIOpen version (default: from /opt/rocm/include/miopen/version.h).
        #[arg(long)]
        miopen_version: Option<String>,
        /// Why this session exists.
        #[arg(short = 'l', long)]
        reason: String,
        /// Infrastructure failures a job survives before it is marked errored.
        #[arg(long, default_value_t = 3)]
        max_retries: u32,
        /// Cluster mode: ask the cluster's Scheduler to do it (a command on the broker,
        /// SHOAL_BROKER), instead of writing the --db store.
        #[arg(long)]
        cluster: bool,
    },
    /// Cancel a session of the cluster: the Scheduler starts none of its work and skips what is
    /// not under way; builds and timings under way finish. (An embedded run is stopped with
    /// Ctrl-C, and resumed by running it again.)
    Cancel {
        /// The session to cancel.
        #[arg(long)]
        session: i64,
        /// Ask the cluster's Scheduler (a command on the broker, SHOAL_BROKER). Required: a
        /// session of a local store has nothing running to cancel.
        #[arg(long)]
        cluster: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ApplicabilityCommand {
    /// Ask fin which solvers apply to which configs, for a session's architecture.
    Update {
        /// Session id (default: the newest in the store).
        #[arg(long)]
        session: Option<i64>,
        /// Only configs with this tag.
        #[arg(short = 't', long)]
        tag: String,
        #[arg(long)]
        fin: Option<PathBuf>,
        /// Cluster mode: the cluster's Scheduler asks its host's fin and records the answer (a
        /// command on the broker, SHOAL_BROKER), instead of this machine writing the --db store.
        #[arg(long)]
        cluster: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// Create one job per (config with the tag, solver) in a session. Idempotent.
    Load {
        /// Session id (default: the newest in the store).
        #[arg(long)]
        session: Option<i64>,
        #[arg(short = 't', long)]
        tag: String,
        /// The fin steps of the jobs, compile then eval.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "miopen_perf_compile,miopen_perf_eval"
        )]
        fin_steps: Vec<String>,
        /// Only these solvers (default: every tunable solver).
        #[arg(long, value_delimiter = ',')]
        solvers: Vec<String>,
        /// Also load (config, solver) pairs not recorded as applicable. By default only the
        /// pairs `shoal applicability update` recorded as applicable are loaded, as MITuna does.
        #[arg(long, conflicts_with = "only_applicable")]
        all: bool,
        /// The default (kept for scripts that pass MITuna's flag).
        #[arg(long, hide = true)]
        only_applicable: bool,
        /// Why these jobs are loaded.
        #[arg(short = 'l', long, default_value = "")]
        reason: String,
        /// Cluster mode: ask the cluster's Scheduler to do it (a command on the broker,
        /// SHOAL_BROKER), instead of writing the --db store.
        #[arg(long)]
        cluster: bool,
    },
}

/// `shoal run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Session id (default: the newest in the store).
    #[arg(long)]
    pub session: Option<i64>,
    /// MIOpen's tuning handle (default: $SHOAL_FIN, else /opt/rocm/bin/fin).
    #[arg(long)]
    pub fin: Option<PathBuf>,
    /// Concurrent compiles (default: one per core).
    #[arg(short = 'j', long)]
    pub jobs: Option<usize>,
    /// Working directory (default: <db>.work).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
}

pub fn fin_path(flag: Option<PathBuf>) -> PathBuf {
    crate::host::fin_path(flag)
}

pub async fn import_configs(args: ImportArgs, db: &Path) -> anyhow::Result<ExitCode> {
    let mut tags = vec![args.tag.clone()];
    if args.mark_recurrent {
        tags.push("recurrent".into());
    }
    let bad_lines = if args.strict {
        import::BadLines::Stop
    } else {
        import::BadLines::Skip
    };
    let (summary, code) = if args.cluster {
        let bus = crate::connect::bus_from_env().await?;
        import::import(
            import::ConfigSink::Cluster(crate::commands::CommandClient::open(&*bus).await?),
            &args.file,
            &tags,
            bad_lines,
        )
        .await?
    } else {
        let store = open_migrated(db).await?;
        import::import(
            import::ConfigSink::Store(&*store),
            &args.file,
            &tags,
            bad_lines,
        )
        .await?
    };
    println!("{}: {summary}", args.file.display());
    Ok(code)
}

pub async fn miopen(cmd: MiopenCommand, db: &Path) -> anyhow::Result<ExitCode> {
    match cmd {
        MiopenCommand::Imports { json, cluster } => {
            let store = crate::fleet::store_for_reading(db, cluster).await?;
            import_db::list(&*store, json).await
        }
        MiopenCommand::Report(args) => report_sides::run(args, db).await,
        MiopenCommand::Key { file } => {
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            let ok = match file.filter(|f| f.as_os_str() != "-") {
                Some(path) => {
                    let f = std::fs::File::open(&path)
                        .with_context(|| format!("opening {}", path.display()))?;
                    import::keys_of(
                        &mut std::io::BufReader::new(f),
                        &path.display().to_string(),
                        &mut out,
                    )?
                }
                None => import::keys_of(&mut std::io::stdin().lock(), "<stdin>", &mut out)?,
            };
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}

pub async fn session(cmd: SessionCommand, db: &Path) -> anyhow::Result<ExitCode> {
    if let SessionCommand::Cancel { session, cluster } = cmd {
        return cancel(SessionId(session), cluster).await;
    }
    let SessionCommand::Init {
        arch,
        num_cu,
        rocm_version,
        miopen_version,
        reason,
        max_retries,
        cluster,
    } = cmd
    else {
        unreachable!("cancel is handled above")
    };
    let init = session::SessionInit {
        arch,
        num_cu,
        rocm_version,
        miopen_version,
        reason,
        max_retries,
    };
    let identity = session::identity(&init, Path::new("/"))?;
    let (id, existed) = if cluster {
        let bus = crate::connect::bus_from_env().await?;
        let command = Command::CreateSession {
            identity: identity.clone(),
        };
        match crate::commands::send(&*bus, command, crate::commands::WAIT).await? {
            CommandOutcome::SessionReady { session, existed } => (session, existed),
            other => anyhow::bail!("the Scheduler answered {other:?} to session init"),
        }
    } else {
        let store = open_migrated(db).await?;
        let (s, existed) = session::init(&*store, &identity).await?;
        (s.id, existed)
    };
    eprintln!(
        "{} session {id}: {} with {} CUs, ROCm {}, MIOpen {}",
        if existed { "existing" } else { "new" },
        identity.arch,
        identity.num_cu,
        identity.driver_version,
        identity.library_version
    );
    println!("{id}");
    Ok(ExitCode::SUCCESS)
}

/// `shoal session cancel --cluster`.
async fn cancel(session: SessionId, cluster: bool) -> anyhow::Result<ExitCode> {
    if !cluster {
        anyhow::bail!(
            "session cancel: only a cluster's session can be cancelled (--cluster); an embedded \
             `shoal tune` or `shoal run` is stopped with Ctrl-C and resumed by running it again"
        );
    }
    let bus = crate::connect::bus_from_env().await?;
    let command = Command::CancelSession { session };
    match crate::commands::send(&*bus, command, crate::commands::WAIT).await? {
        CommandOutcome::SessionCancelled { session, already } => {
            println!(
                "session {session} {}: work not under way is skipped within seconds; builds and \
                 timings under way finish",
                if already {
                    "was already cancelled"
                } else {
                    "cancelled"
                }
            );
            Ok(ExitCode::SUCCESS)
        }
        other => anyhow::bail!("the Scheduler answered {other:?} to session cancel"),
    }
}

pub async fn jobs(cmd: JobsCommand, db: &Path) -> anyhow::Result<ExitCode> {
    let JobsCommand::Load {
        session,
        tag,
        fin_steps,
        solvers,
        all,
        only_applicable: _,
        reason,
        cluster,
    } = cmd;
    let (session, configs, candidates, created, skipped) = if cluster {
        let bus = crate::connect::bus_from_env().await?;
        let command = Command::LoadJobs {
            session: session.map(SessionId),
            tag,
            fin_steps,
            solvers,
            only_applicable: !all,
            reason,
        };
        match crate::commands::send(&*bus, command, crate::commands::WAIT).await? {
            CommandOutcome::JobsLoaded {
                session,
                configs,
                candidates,
                created,
                not_applicable_skipped,
            } => (
                session,
                configs,
                candidates,
                created,
                not_applicable_skipped,
            ),
            other => anyhow::bail!("the Scheduler answered {other:?} to jobs load"),
        }
    } else {
        let store = open_existing(db).await?;
        let session = session_or_newest(&*store, session).await?.id;
        let req = shoal_miopen::load::JobsLoad {
            session,
            tag,
            fin_steps,
            solvers,
            only_applicable: !all,
            reason,
        };
        let loaded = shoal_miopen::load::load(&*store, &req).await?;
        (
            session,
            loaded.configs as u64,
            loaded.candidates as u64,
            loaded.created,
            loaded.not_applicable_skipped as u64,
        )
    };
    println!(
        "session {session}: {configs} configs, {candidates} (config, solver) jobs, {created} new{}",
        if skipped > 0 {
            format!(", {skipped} pairs skipped as not applicable")
        } else {
            String::new()
        }
    );
    Ok(ExitCode::SUCCESS)
}
