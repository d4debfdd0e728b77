//! `shoal compare OLD NEW`: two tunings side by side, shape by shape, as a CI gate. The
//! decisions (what is a shape, what is noise, which winner to keep) are in
//! `shoal_export::compare` and, for winners timed again side by side (`--retime`, see
//! [`crate::retime`]), `shoal_export::paired`; this reads the two tables, prints, and writes
//! the kept table.

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
    /// The least change that counts, in percent, however small the winners' spreads are. Two
    /// tunings of the same code on a busy machine can pick near-tied winners a few percent apart
    /// (2.3 % measured on the example, re-timed side by side), which a gate should not call a
    /// regression: hence 3.
    #[arg(long, default_value_t = 3.0, value_name = "PCT")]
    pub min_change: f64,
    /// Write the table that keeps the better winner of each shape (the new one only where it
    /// improved beyond the noise, or is new) as `tuned.csv` and `tuned.json` into DIR.
    #[arg(long, value_name = "DIR")]
    pub update_if_improved: Option<PathBuf>,
    /// Replace the files of an earlier table in DIR.
    #[arg(long)]
    pub force: bool,
    /// Build each shape's old and new winner again and time them in alternation on this
    /// machine (old, new, new, old, …), and judge from the rounds' new/old ratios: a change
    /// counts when the interval of their median lies wholly beyond --min-change (read every 10
    /// rounds; a false verdict in 1 % of shapes at most, however many looks). Load on the
    /// machine falls on both winners alike, so the verdict holds where the recorded spreads
    /// are too wide to see anything. Process-mode specs only.
    #[arg(long)]
    pub retime: bool,
    /// With --retime: the spec to build the winners of a table file with (a session's winners
    /// are built from that session's own spec).
    #[arg(long, value_name = "SPEC", requires = "retime")]
    pub spec: Option<PathBuf>,
    /// With --retime: the most rounds a shape gets (fewer once its verdict is clear; at least
    /// 10). A round times each winner at least 6 times and keeps the fastest.
    #[arg(long, default_value_t = 40, value_name = "N", requires = "retime",
          value_parser = clap::value_parser!(u32).range(10..=1000))]
    pub rounds: u32,
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
    let mut changes = compare::compare(&old, &new, args.min_change);
    if args.retime {
        let spec = args.spec.as_deref();
        let old_spec = crate::retime::spec_of(&args.old, db, spec).await?;
        let new_spec = crate::retime::spec_of(&args.new, db, spec).await?;
        crate::host::confine_children(None)?;
        changes = crate::retime::retime(
            changes,
            &old_spec,
            &new_spec,
            args.rounds as usize,
            args.min_change,
        )
        .await?;
    }
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
/// Re-timed shapes show the medians of their rounds, and the rounds with the ratio's interval.
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
    let any_retimed = changes.iter().any(|c| c.retimed.is_some());
    let mut header = vec![
        "shape", "solver", "old (us)", "new (us)", "change", "noise", "verdict",
    ];
    if any_retimed {
        header.push("re-timed side by side");
    }
    header.extend(["old winner", "new winner"]);
    let mut lines: Vec<Vec<String>> = vec![header.into_iter().map(String::from).collect()];
    for c in changes {
        let row = c.row();
        let new_winner = winner(&c.new);
        let same_winner = new_winner == winner(&c.old);
        let (old_time, new_time) = match &c.retimed {
            Some(r) => (format!("{:.2}", r.old_us), format!("{:.2}", r.new_us)),
            None => (time(&c.old), time(&c.new)),
        };
        let mut line = vec![
            row.shape.key(),
            row.solver.clone(),
            old_time,
            new_time,
            c.ratio
                .map_or("-".to_string(), |r| format!("{:+.1}%", 100.0 * (r - 1.0))),
            format!("{:.1}%", c.noise_pct),
            c.verdict.as_str().to_string(),
        ];
        if any_retimed {
            line.push(c.retimed.as_ref().map_or("-".to_string(), |r| {
                format!(
                    "{} rounds, new/old {:.3}..{:.3}",
                    r.rounds, r.ratio_low, r.ratio_high
                )
            }));
        }
        line.extend([
            winner(&c.old),
            if same_winner { "=".into() } else { new_winner },
        ]);
        lines.push(line);
    }
    shoal_export::text_columns(&lines, Align::Left, false)
}
