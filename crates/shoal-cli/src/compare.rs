//! `shoal compare OLD NEW`: two tunings side by side, shape by shape, as a CI gate. The
//! decisions (what is a shape, what is noise, which winner to keep) are in
//! `shoal_export::compare`; this reads the two tables, prints, and writes the kept table.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use shoal_actors::backends::SessionBackends;
use shoal_export::compare::{self, ShapeChange, Verdict};
use shoal_export::{Align, TableContext, TunedRow};
use shoal_model::SessionId;

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The old tuning: a session number of the `--db` store, or a `tuned.json` (or the
    /// directory holding one, as `shoal export` writes it).
    pub old: String,
    /// The new tuning, named the same way.
    pub new: String,
    /// The least change that counts, in percent, however small the winners' spreads are.
    #[arg(long, default_value_t = 1.0, value_name = "PCT")]
    pub min_change: f64,
    /// Write the table that keeps the better winner of each shape (the new one only where it
    /// improved beyond the noise, or is new) as `tuned.csv` and `tuned.json` into DIR.
    #[arg(long, value_name = "DIR")]
    pub update_if_improved: Option<PathBuf>,
    /// Replace the files of an earlier table in DIR.
    #[arg(long)]
    pub force: bool,
}

/// The exit status when the two tunings could not be compared (a table that cannot be read, a
/// session that is not there, a kept table that exists): not 1, which says "regressed".
pub const COULD_NOT_COMPARE: u8 = 2;

pub async fn run(args: CompareArgs, db: &Path) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.min_change.is_finite() && args.min_change >= 0.0,
        "--min-change must be a percentage, 0 or more"
    );
    let old = table(&args.old, db).await?;
    let new = table(&args.new, db).await?;
    let changes = compare::compare(&old, &new, args.min_change);
    print!("{}", render(&changes));
    let counts = compare::counts(&changes);
    let n = |v: Verdict| counts.get(&v).copied().unwrap_or(0);
    println!(
        "compare shapes={} improved={} regressed={} lost={} same={} added={}",
        changes.len(),
        n(Verdict::Improved),
        n(Verdict::Regressed),
        n(Verdict::Lost),
        n(Verdict::Same),
        n(Verdict::Added),
    );
    if let Some(dir) = &args.update_if_improved {
        let kept = compare::keep_better(&changes);
        let columns = shape_columns(&kept);
        let ctx = TableContext {
            arch: kept.first().map_or("", |r| r.arch.as_str()),
            num_cu: kept.first().map_or(0, |r| r.num_cu),
            shape_columns: &columns,
            flops: &|_| None,
        };
        let (csv, json) = shoal_export::write_files(&ctx, &kept, dir, args.force)?;
        println!(
            "wrote {} and {} (the better winner of each shape)",
            csv.display(),
            json.display()
        );
    }
    let regressed = changes.iter().any(|c| c.verdict.is_regression());
    Ok(if regressed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// A tuned table named on the command line: a session number, or a `tuned.json` file or the
/// directory holding one.
async fn table(name: &str, db: &Path) -> anyhow::Result<Vec<TunedRow>> {
    if let Ok(session) = name.parse::<i64>() {
        let store = crate::store_open::open_existing(db).await?;
        crate::store_open::session_or_newest(&*store, Some(session)).await?;
        let backends = SessionBackends::new(crate::host::fin_path(None));
        return shoal_actors::exporter::tuned_table(&*store, &backends, SessionId(session))
            .await
            .with_context(|| format!("session {session} of {}", db.display()));
    }
    let mut path = PathBuf::from(name);
    if path.is_dir() {
        path = path.join("tuned.json");
    }
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "`{name}` is neither a session number nor a readable tuned table ({})",
            path.display()
        )
    })?;
    serde_json::from_str(&text).with_context(|| {
        format!(
            "{}: not a tuned table as `shoal export` writes it",
            path.display()
        )
    })
}

/// The shape columns of rows read back: their parameters' names, in first-seen order.
fn shape_columns(rows: &[TunedRow]) -> Vec<String> {
    let mut columns: Vec<String> = Vec::new();
    for r in rows {
        for n in r.shape.names() {
            if !columns.iter().any(|c| c == n) {
                columns.push(n.to_string());
            }
        }
    }
    columns
}

/// One line per shape: the shape, old and new time and winner, the change against the noise.
fn render(changes: &[ShapeChange]) -> String {
    // Each winner's time with its own run-to-run spread, the noise the verdict weighs.
    let time = |r: &Option<TunedRow>| match r.as_ref().and_then(|r| r.time_us.map(|t| (t, r))) {
        None => "-".to_string(),
        Some((t, r)) => match r.spread_pct {
            Some(s) => format!("{t:.2} ±{s:.1}%"),
            None => format!("{t:.2}"),
        },
    };
    let winner = |r: &Option<TunedRow>| {
        r.as_ref()
            .and_then(|r| r.best.as_ref())
            .map_or("-".to_string(), |b| b.key())
    };
    let mut lines: Vec<Vec<String>> = vec![[
        "shape",
        "solver",
        "old (us)",
        "new (us)",
        "change",
        "noise",
        "verdict",
        "old winner",
        "new winner",
    ]
    .map(String::from)
    .to_vec()];
    for c in changes {
        let row = c.row();
        let new_winner = winner(&c.new);
        let same_winner = new_winner == winner(&c.old);
        lines.push(vec![
            row.shape.key(),
            row.solver.clone(),
            time(&c.old),
            time(&c.new),
            c.ratio
                .map_or("-".to_string(), |r| format!("{:+.1}%", 100.0 * (r - 1.0))),
            format!("{:.1}%", c.noise_pct),
            c.verdict.as_str().to_string(),
            winner(&c.old),
            if same_winner { "=".into() } else { new_winner },
        ]);
    }
    shoal_export::text_columns(&lines, Align::Left, false)
}
