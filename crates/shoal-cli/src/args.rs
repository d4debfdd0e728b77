//! The commands and their flags, as clap parses them; `--help` text lives on the definitions
//! here. Kept apart from `cli.rs` (which carries the commands out) so that a subcommand module
//! that takes these flags, such as `tune.rs` with [`TuneArgs`], does not depend on the
//! dispatcher that calls it.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::host::SandboxMode;
use crate::logging::LogFormat;
// The flags of `shoal tune`, and the `--max-candidates` parser other commands share.
use crate::tune_args::max_candidates;
pub use crate::tune_args::{spec_limits, TuneArgs};

/// Shoal tunes kernels: it compiles every candidate parameter set, times each on the device it
/// will run on, keeps every result in a database, and writes the best parameters per shape.
#[derive(Debug, Parser)]
#[command(name = "shoal", version, about, long_about = None)]
pub struct Cli {
    /// Log format on stderr (level from RUST_LOG, default info).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// The store: a SQLite database file. Commands that tune create it if missing; commands
    /// that only read it (status, export, failures, serve, …) refuse a missing file.
    #[arg(long, global = true, default_value = "shoal.db", env = "SHOAL_DB_FILE")]
    pub db: PathBuf,

    /// Where tuned code (builds, candidates, the library runner, fin) runs. `on`: in a
    /// bubblewrap sandbox (`bwrap`, Debian's `bubblewrap`) that shows it no other process, no
    /// network, the host read-only and none of Shoal's key and credential files; a command that
    /// runs tuned code refuses to start without it. `off`: as this user, unconfined, able to
    /// read this process's secrets: only for a host where tuned code is as trusted as you.
    #[arg(long, global = true, value_enum, default_value_t = SandboxMode::On, env = "SHOAL_SANDBOX")]
    pub sandbox: SandboxMode,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Tune a kernel described by a tuning spec (TOML), end to end, in this process.
    ///
    /// Creates (or resumes) a session for this machine's device, loads one job per shape and
    /// candidate, compiles every distinct compile-time parameter set once, times every candidate,
    /// and writes the best candidate per shape as CSV and JSON under --out. Run it again after
    /// Ctrl-C or a crash: it resumes and redoes nothing that finished.
    ///
    /// Examples:
    ///   shoal tune examples/cpu-gemm/spec.toml
    ///   shoal tune spec.toml --out tuned/ --db runs.db --devices 2
    ///   shoal tune spec.toml --cluster          # on the cluster of SHOAL_BROKER and SHOAL_DB
    ///
    /// Exit status: 0 every shape has a winner; 3 a shape has no valid candidate (every one
    /// of its candidates failed: the errors are listed, and `shoal failures` lists them all);
    /// 130 interrupted (run the same command again to resume); 1 any other error; 2 a bad
    /// argument.
    #[command(verbatim_doc_comment)]
    Tune(TuneArgs),
    /// Check a tuning spec and show its parameter space, without creating anything.
    Check {
        /// The tuning spec (TOML).
        spec: PathBuf,
        /// Print the builds instead, one line per distinct compile-time parameter set:
        /// `<PARAMS>\t<SHAPES>\t<ARGV>`, where SHAPES are the shapes it has candidates for
        /// (separated by `;`) and ARGV is its build command with `{out}` left in place. For
        /// scripts that compare other ways of tuning on exactly the same space.
        #[arg(long)]
        list_builds: bool,
        /// Refuse a spec that would produce more candidates than this (compile sets × run
        /// sets × shapes, before the rules); at most 100000000, past which no host holds the
        /// list.
        #[arg(long, value_name = "N", default_value_t = shoal_backend::spec::DEFAULT_MAX_CANDIDATES,
              value_parser = max_candidates)]
        max_candidates: u64,
    },
    /// Database maintenance.
    Db {
        #[command(subcommand)]
        command: DbCommand,
    },
    /// List the sessions in the store with their progress.
    Sessions {
        /// Print JSON (one object per session) instead of a table.
        #[arg(long)]
        json: bool,
        /// Read the cluster's database (SHOAL_DB or the config file) instead of --db.
        #[arg(long)]
        cluster: bool,
    },
    /// Serve the read-only web dashboard: sessions with progress and ETA, one session's
    /// winners, failures and a chart of every candidate's time per shape, and the fleet.
    ///
    /// Examples:
    ///   shoal serve                                  # http://127.0.0.1:8080, the store shoal.db
    ///   shoal serve --db runs.db --addr 127.0.0.1:9000
    ///   shoal serve --cluster                        # the cluster's database (SHOAL_DB)
    #[command(verbatim_doc_comment)]
    Serve(crate::web::ServeArgs),
    /// List the worker processes that report to the store: live, stale (silent for 3
    /// heartbeats) or stopped, with their hosts, roles, devices and the jobs they hold. Reads the
    /// cluster's database with --cluster, else --db.
    Workers(crate::fleet::WorkersArgs),
    /// Show a session's progress (rate over the last 5 minutes and ETA), jobs per state,
    /// failed candidates grouped by kind and error (with the tool's own first lines of output
    /// and a few of the candidates' parameters), and a summary of the workers reporting.
    Status {
        /// Session id (default: the newest in the store).
        #[arg(long)]
        session: Option<i64>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Read the cluster's database (SHOAL_DB or the config file) instead of --db.
        #[arg(long)]
        cluster: bool,
    },
    /// List a session's failed candidates, grouped by kind and by the error the build or the
    /// kernel printed: per group the error line, the first lines of the tool's own output, and
    /// every failed candidate's shape and parameters.
    ///
    /// Examples:
    ///   shoal failures                 # the newest session
    ///   shoal failures --session 3 --json | jq '.[0].candidates'
    #[command(verbatim_doc_comment)]
    Failures {
        /// Session id (default: the newest in the store).
        #[arg(long)]
        session: Option<i64>,
        /// Print JSON (a list of groups) instead of text.
        #[arg(long)]
        json: bool,
        /// Read the cluster's database (SHOAL_DB or the config file) instead of --db.
        #[arg(long)]
        cluster: bool,
    },
    /// Cluster mode: how many messages wait in the dead-letter queue `<ns>.dead` (on the
    /// broker of SHOAL_BROKER or the config file), against the bound the broker keeps it under
    /// (SHOAL_DEAD_MAX_LENGTH, default 10000, and SHOAL_DEAD_MAX_AGE_S, default 7 days: the
    /// policy scripts/services-up sets), and whether it is full and dropping the oldest.
    DeadLetters {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Also read every dead letter (at most 65,535) and count them by who published the
        /// original, who dead-lettered it and why; each is given back, its reading counted by
        /// the broker as one more delivery.
        #[arg(long)]
        messages: bool,
    },
    /// Write a session's results into a directory: the tuned table (CSV and JSON) of an
    /// exec-backend session, or MIOpen's databases of a MIOpen session.
    ///
    /// Examples:
    ///   shoal export --out tuned/                    # the newest session's tuned.csv and tuned.json
    ///   shoal export --session 3 --format t4 --out t4/   # every candidate's time (T4)
    ///   shoal export --session 7 --base /opt/rocm/share/miopen/db --out merged/   # MIOpen
    #[command(verbatim_doc_comment)]
    Export {
        /// Session id (default: the newest in the store; with --cluster, required).
        #[arg(long)]
        session: Option<i64>,
        /// MIOpen: write golden version V (`shoal golden update`, `shoal import-db`) instead of
        /// a session's results.
        #[arg(long, value_name = "V", conflicts_with_all = ["session", "base", "cluster"])]
        golden_v: Option<u32>,
        /// Where the golden versions live (default: `<--db>.golden`).
        #[arg(long, value_name = "DIR")]
        golden_dir: Option<PathBuf>,
        /// Output directory. With --cluster: a relative directory inside the exporter's
        /// `--export-dir` on its host.
        #[arg(short = 'o', long)]
        out: PathBuf,
        /// MIOpen: write the find db `<base>.HIP.fdb.txt`.
        #[arg(long)]
        find_db: bool,
        /// MIOpen: write the perf db, SQLite `<base>.db` and text `<base>.db.txt`.
        #[arg(long)]
        perf_db: bool,
        /// MIOpen: write the kernel db `<base>.kdb`.
        #[arg(long)]
        kern_db: bool,
        /// MIOpen: write the user databases an unmodified MIOpen install reads from
        /// `MIOPEN_USER_DB_PATH` instead of the system ones: `<base>.HIP.<M>_<m>_<p>_<tweak>.ufdb.txt`
        /// (find db), `<base>.HIP.<…>.udb.txt` (text perf db, MIOpen 3.2+), `<base>_1.1.0.udb`
        /// (SQLite perf db, for builds that use it) and `<base>.ukdb` (kernel cache; MIOpen reads
        /// it from its cache directory, `MIOPEN_CUSTOM_CACHE_DIR`).
        #[arg(long)]
        user_db: bool,
        /// With --user-db: the MIOpen version the names are for, `M.m.p-tweak` as in MIOpen's
        /// version.h (default: the session's, recorded by `shoal session init`).
        #[arg(long, requires = "user_db")]
        miopen_version: Option<String>,
        /// MIOpen: merge the session's results into the databases found in this directory
        /// (e.g. a copy of MIOpen's shipped `gfx942130.db`, `gfx942130.HIP.fdb.txt` and
        /// `gfx942.kdb`, under the names this export writes) and write the merged files to -o.
        /// The directory is only read, and nothing in it is lost: a key or pair the session did
        /// not tune is written byte for byte, and on a tuned key every record the session does
        /// not supersede (by --policy) stays (docs/miopen-merge.md). Only the formats the base
        /// has are written, unless --find-db, --perf-db or --kern-db ask; the text perf db is
        /// generated from the merged SQLite one. A summary prints keys or pairs kept, added,
        /// improved, worse and updated. With --user-db, DIR must hold user databases of that
        /// version. With --cluster: a relative directory inside the exporter's `--export-dir`.
        ///
        /// Example: shoal export --session 3 --base /opt/rocm/share/miopen/db -o merged/
        #[arg(long, value_name = "DIR")]
        base: Option<PathBuf>,
        /// With --base, where both have an entry: `better` takes the faster one where the
        /// times compare (the base's find db has a time for that solver), else the session's;
        /// `newer` always takes the session's.
        #[arg(long, requires = "base", value_enum, default_value_t = MergePolicy::Better)]
        policy: MergePolicy,
        /// MIOpen: export only the results of configs with this tag (`import-configs -t`), e.g.
        /// one network of a session that tuned several.
        #[arg(short = 't', long)]
        tag: Option<String>,
        /// MIOpen: the kernel db holds the kernels of every entry the find and perf dbs hold.
        /// By default it holds those of each find-db key's fastest entry (MITuna's rule; MIOpen
        /// compiles any other it picks at run time), about a tenth as many.
        #[arg(long, conflicts_with = "cluster")]
        full_kdb: bool,
        /// `t4`: write the session as recorded search spaces in the T4 format instead, one
        /// `<solver>-<config>.T4.json` per problem (any backend), for search strategies to be
        /// developed and compared on, here or in KernelTuner.
        #[arg(long, value_enum, default_value_t = ExportFormat::Table, conflicts_with = "cluster")]
        format: ExportFormat,
        /// Cluster mode: ask the cluster's exporter (`shoal worker --role exporter`) to write the
        /// tuned table, or a MIOpen session's databases with the options above (--find-db,
        /// --perf-db, --kern-db, --user-db, --base, --policy, -t), into the directory on its
        /// host, instead of writing them here. The exporter logs what it wrote.
        #[arg(long)]
        cluster: bool,
        /// Replace files already in the output directory. Without it, an export into a
        /// directory that holds any of the files it would write stops before writing anything,
        /// and lists them. Either way each file is written whole, through a temporary file
        /// renamed into place, so an interrupted export never leaves half a database.
        #[arg(long)]
        force: bool,
    },
    /// List the devices this host can evaluate on, as the GpuMonitor sees them.
    Devices {
        /// Print JSON (one object per device, with its health readings) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Import MIOpenDriver command lines as configs with a tag (deduplicated).
    ///
    /// Accepts conv, convfp16, convbfp16 and convint8 lines, short and long flags, 2-D and 3-D,
    /// layouts and groups, prefixes such as `miopenConvolutionForward: ./bin/MIOpenDriver …`, and
    /// find-db keys. A line with no -F takes its direction from the API name in its prefix, else
    /// is expanded into all three directions; -F 0 means all three. Lines for other primitives
    /// are counted and skipped. A line that cannot be parsed is listed on stderr as file:line
    /// with the reason and the others are imported; --strict stops at the first bad line
    /// instead, writing nothing. The file is streamed, so large files import in bounded memory.
    ImportConfigs(crate::miopen::ImportArgs),
    /// MIOpen tools.
    Miopen {
        #[command(subcommand)]
        command: crate::miopen::MiopenCommand,
    },
    /// MIOpen: take in existing databases (e.g. MIOpen's shipped `gfx942130.HIP.fdb.txt` and
    /// `gfx942130.db`): into the store as rows (--store), as golden version V (--golden-v), or
    /// both.
    ///
    /// --store (MITuna's import_db) reads every `*.HIP.fdb.txt`, `*.db` and `*.db.txt` of DIR
    /// into the --db store, one import per device (the device read from the base name:
    /// `gfx942130` is gfx942 with 304 CUs, `gfx906_60` gfx906 with 60), each record tied to the
    /// config its key describes (made as `import-configs` makes it), so the rows join to a
    /// session's results by config id. Where DIR has both `X.db` and `X.db.txt`, their union is
    /// taken, the `.db` winning where they disagree. A key that is not a convolution's is
    /// listed as file:line and skipped; a file that does not follow MIOpen's grammar stops the
    /// import before anything is written. `shoal miopen imports` lists the imports and `shoal
    /// miopen report import:N session:M` compares one with a session.
    ///
    /// --golden-v V copies the databases as they are into a new golden version, each checked
    /// first; sessions are then compared against it and merged into it with `shoal golden
    /// update`.
    ///
    /// Example: shoal import-db --store -l rocm-6.2 --golden-v 1 /opt/rocm/share/miopen/db
    #[command(group(
        clap::ArgGroup::new("into")
            .args(["store", "golden_v"])
            .required(true)
            .multiple(true)
    ))]
    ImportDb {
        /// Import the databases into the --db store.
        #[arg(long)]
        store: bool,
        /// With --store: what the import is called in listings and reports (default: DIR).
        #[arg(short = 'l', long, requires = "store")]
        label: Option<String>,
        /// With --store: also tag the configs (to tune them: `shoal jobs load -t TAG`).
        #[arg(short = 't', long, requires = "store")]
        tag: Option<String>,
        /// With --store: import into the cluster's database (SHOAL_DB or the config file)
        /// instead of --db. It writes configs and imports directly, so it needs a database user
        /// that may (the administrator's of `shoal db migrate`; the cli role only reads).
        #[arg(long, requires = "store")]
        cluster: bool,
        /// Copy the databases into golden version V.
        #[arg(long, value_name = "V")]
        golden_v: Option<u32>,
        /// The directory holding the databases.
        dir: PathBuf,
        /// Where the golden versions live (default: `<--db>.golden`).
        #[arg(long, value_name = "DIR")]
        golden_dir: Option<PathBuf>,
        /// Replace files the golden version already has.
        #[arg(long)]
        force: bool,
    },
    /// MIOpen golden versions: cumulative baselines of tuned databases (MITuna's golden tables).
    Golden {
        #[command(subcommand)]
        command: GoldenCommand,
    },
    /// MIOpen solvers.
    Solvers {
        #[command(subcommand)]
        command: crate::miopen::SolversCommand,
    },
    /// MIOpen tuning sessions.
    Session {
        #[command(subcommand)]
        command: crate::miopen::SessionCommand,
    },
    /// Which MIOpen solvers apply to which configs.
    Applicability {
        #[command(subcommand)]
        command: crate::miopen::ApplicabilityCommand,
    },
    /// Tuning jobs.
    Jobs {
        #[command(subcommand)]
        command: crate::miopen::JobsCommand,
    },
    /// Run the actors of one or more roles of the cluster over RabbitMQ and MySQL, until
    /// SIGTERM or Ctrl-C (then drain). Connection settings: SHOAL_BROKER, SHOAL_DB or --config.
    /// A RabbitMQ cluster is one URL listing its nodes (`amqp://u:p@mq1:5672,mq2:5672/%2f`):
    /// the worker fails over to the next node when its node goes.
    Worker(crate::worker::WorkerArgs),
    /// Send an order to the cluster's workers: pause or resume a device, drain a host, or
    /// restart one of its actors.
    Control {
        #[command(subcommand)]
        command: ControlCommand,
    },
    /// Compare two tunings shape by shape: OLD and NEW are session numbers of the `--db`
    /// store or exported tables (`tuned.json`, or the directory holding one). Prints each
    /// shape's old and new winner and time, flags changes larger than the winners' recorded
    /// spread, and exits 1 when a shape regressed or lost its winner, 2 when the two could not
    /// be compared (for CI gates).
    ///
    /// Examples:
    ///   shoal compare 3 4                            # two sessions of the --db store
    ///   shoal compare before/tuned.json after/       # two exported tables
    ///   shoal compare 3 4 --update-if-improved tuned/   # keep the new table only if better
    ///
    /// Exit status: 0 no shape regressed; 1 a shape regressed or lost its winner; 2 a bad
    /// argument or input (a table that cannot be read, a session not in the store).
    #[command(verbatim_doc_comment)]
    Compare(crate::compare::CompareArgs),
    /// Run a session's jobs to the end in this process (compile, evaluate, record), resuming
    /// whatever an earlier run left.
    Run(crate::miopen::RunArgs),
}

#[derive(Debug, Subcommand)]
pub enum ControlCommand {
    /// Stop evaluating on a device (its Evaluators stop consuming) until resumed.
    Pause {
        /// The host (as its workers name it), or `any`.
        #[arg(long)]
        host: String,
        /// The device id (see `shoal devices`), e.g. amdgpu0.
        #[arg(long)]
        device: String,
    },
    /// Evaluate on a paused device again.
    Resume {
        #[arg(long)]
        host: String,
        #[arg(long)]
        device: String,
    },
    /// Let a host's workers finish what they hold, take no more work, and exit.
    Drain {
        /// The host, or `any` for every worker of the deployment.
        #[arg(long)]
        host: String,
    },
    /// Restart one actor of a host's workers with clean state, without restarting the process:
    /// it is stopped as at shutdown (work in hand is handed back to the Scheduler, a Scheduler
    /// applies the replies it holds), then started again from nothing with the same settings.
    /// For an actor that is stuck or misbehaving; the worker's log says when it is back.
    Restart {
        /// Which actor.
        #[arg(value_enum)]
        actor: RestartableActor,
        /// The host name: every worker process of that host that runs the actor restarts it.
        /// `any`: every worker of the deployment that runs it.
        #[arg(long)]
        host: String,
    },
}

/// The actors `shoal control restart` can restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RestartableActor {
    Scheduler,
    Compiler,
    Evaluator,
    Exporter,
}

impl RestartableActor {
    /// The actor the worker knows it as (`shoal_actors::cluster::RESTARTABLE`).
    pub fn actor(self) -> shoal_model::message::Actor {
        use shoal_model::message::Actor;
        match self {
            RestartableActor::Scheduler => Actor::Scheduler,
            RestartableActor::Compiler => Actor::Compiler,
            RestartableActor::Evaluator => Actor::Evaluator,
            RestartableActor::Exporter => Actor::Exporter,
        }
    }
}

/// `--policy` of a merge into MIOpen's databases, where both sides have an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MergePolicy {
    /// The faster entry where the times compare, else the session's.
    Better,
    /// Always the session's.
    Newer,
}

impl MergePolicy {
    pub fn policy(self) -> shoal_miopen::export::merge::Policy {
        match self {
            MergePolicy::Better => shoal_miopen::export::merge::Policy::Better,
            MergePolicy::Newer => shoal_miopen::export::merge::Policy::Newer,
        }
    }
}

/// `shoal export --format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// The tuned table (`tuned.csv`, `tuned.json`), or a MIOpen session's databases.
    Table,
    /// Every candidate's time as recorded search spaces, one T4 file per problem.
    T4,
}

#[derive(Debug, Subcommand)]
pub enum GoldenCommand {
    /// Merge a session's results into golden version V (created if missing), as `export
    /// --base` merges: nothing the version holds is lost, the session's entries go in by
    /// --policy, and a summary says what was kept, added, improved, worse and updated. The new
    /// version replaces the old whole (written beside it, then renamed).
    ///
    /// Example: shoal golden update --session 4 --golden-v 3 --base-golden-v 2
    Update {
        /// Session id (default: the newest in the store).
        #[arg(long)]
        session: Option<i64>,
        #[arg(long, value_name = "V")]
        golden_v: u32,
        /// Build version V as a new version from version N and the session (MITuna's
        /// `update_golden --base_golden_v`): N is only read, and V must not exist yet.
        #[arg(long, value_name = "N")]
        base_golden_v: Option<u32>,
        /// Write the find db even if the version has none.
        #[arg(long)]
        find_db: bool,
        /// Write the perf dbs even if the version has none (the session's alone would stand
        /// in for MIOpen's shipped perf db wherever the version is installed).
        #[arg(long)]
        perf_db: bool,
        /// Write the kernel db even if the version has none.
        #[arg(long)]
        kern_db: bool,
        /// The kernel db gets the kernels of every entry, not only each key's fastest.
        #[arg(long)]
        full_kdb: bool,
        /// Where both have an entry: `better` (the faster, where times compare) or `newer`.
        #[arg(long, value_enum, default_value_t = MergePolicy::Better)]
        policy: MergePolicy,
        /// Where the golden versions live (default: `<--db>.golden`).
        #[arg(long, value_name = "DIR")]
        golden_dir: Option<PathBuf>,
    },
    /// List the golden versions and their databases.
    List {
        /// Where the golden versions live (default: `<--db>.golden`).
        #[arg(long, value_name = "DIR")]
        golden_dir: Option<PathBuf>,
        /// Print JSON (one object per version, with its files) instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum DbCommand {
    /// Create the schema or bring it up to date: the cluster's database (SHOAL_DB or the
    /// config file) when one is set, else the --db file.
    Migrate,
}

#[cfg(test)]
mod tests {
    use super::RestartableActor;
    use clap::ValueEnum;

    /// The CLI offers exactly the actors a worker can restart, by the names it knows them by.
    #[test]
    fn restartable_actors_match_the_worker() {
        let actors: Vec<_> = RestartableActor::value_variants()
            .iter()
            .map(|a| a.actor())
            .collect();
        assert_eq!(actors, shoal_actors::cluster::RESTARTABLE);
        for a in RestartableActor::value_variants() {
            let name = a.to_possible_value().unwrap().get_name().to_string();
            assert_eq!(
                name,
                a.actor().as_str(),
                "the flag value is the actor's name"
            );
        }
    }
}
