//! The shapes to tune: inline `[[shapes]]` tables or a CSV file.
//!
//! The CSV form reads the "untuned" files of aiter's tuners: a header row names the shape
//! columns, whitespace around headers and values is ignored, and empty rows are skipped.
//! Errors name the CSV file and its line.

use std::collections::HashSet;
use std::path::Path;

use shoal_model::Params;
use toml::Spanned;

use super::error::{Ctx, SpecError};
use super::raw::{check_value, in_file_order, scalar, SpannedTable};

/// Shapes with their column names, and warnings (duplicates dropped).
#[derive(Debug)]
pub struct Shapes {
    pub columns: Vec<String>,
    pub rows: Vec<Params>,
    pub warnings: Vec<String>,
}

pub(crate) fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn dedup(
    rows: Vec<Params>,
    warnings: &mut Vec<String>,
    place: &dyn Fn(usize) -> String,
) -> Vec<Params> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (i, row) in rows.into_iter().enumerate() {
        if seen.insert(row.key()) {
            out.push(row);
        } else {
            warnings.push(format!(
                "{}: duplicate shape {} ignored",
                place(i),
                row.key()
            ));
        }
    }
    out
}

/// Inline `[[shapes]]`: every table must have the same keys; columns in the first table's order.
pub fn inline(ctx: Ctx, shapes: &Spanned<Vec<Spanned<SpannedTable>>>) -> Result<Shapes, SpecError> {
    let list = shapes.get_ref();
    let Some(first) = list.first() else {
        return Err(ctx.at(shapes.span(), "shapes", "no shapes given"));
    };
    let columns: Vec<String> = in_file_order(first.get_ref())
        .into_iter()
        .map(|(k, _)| k.get_ref().clone())
        .collect();
    if columns.is_empty() {
        return Err(ctx.at(
            first.span(),
            "shapes[0]",
            "a shape needs at least one column",
        ));
    }
    let mut rows = Vec::new();
    for (i, shape) in list.iter().enumerate() {
        let field = format!("shapes[{i}]");
        let table = shape.get_ref();
        let mut keys: Vec<&str> = table.keys().map(|k| k.get_ref().as_str()).collect();
        let mut want: Vec<&str> = columns.iter().map(String::as_str).collect();
        keys.sort();
        want.sort();
        if keys != want {
            return Err(ctx.at(
                shape.span(),
                field,
                format!(
                    "keys {} differ from those of shapes[0]: {} (every shape needs the same keys)",
                    keys.join(", "),
                    want.join(", ")
                ),
            ));
        }
        let mut row = Params::new();
        for column in &columns {
            let (key, value) = table
                .iter()
                .find(|(k, _)| k.get_ref() == column)
                .expect("keys checked above");
            let text = scalar(value.get_ref())
                .and_then(|v| check_value(&v).map(|()| v))
                .map_err(|m| ctx.at(key.span(), format!("{field}.{column}"), m))?;
            row.push(column.clone(), text);
        }
        rows.push(row);
    }
    let mut warnings = Vec::new();
    let rows = dedup(rows, &mut warnings, &|i| {
        format!("{}: shapes[{i}]", ctx.path.display())
    });
    Ok(Shapes {
        columns,
        rows,
        warnings,
    })
}

/// A CSV with a header row. `shown` is the path used in messages.
pub fn csv_text(text: &str, shown: &Path) -> Result<Shapes, SpecError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let mut header: Option<Vec<String>> = None;
    let mut rows = Vec::new();
    let mut lines = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map(|p| p.line() as usize);
            SpecError {
                line,
                ..SpecError::file(shown, format!("CSV: {e}"))
            }
        })?;
        let line = record.position().map(|p| p.line() as usize).unwrap_or(0);
        if record.iter().all(str::is_empty) {
            continue;
        }
        let Some(columns) = &header else {
            let mut seen = HashSet::new();
            for name in record.iter() {
                if !is_ident(name) {
                    return Err(SpecError::line(
                        shown,
                        line,
                        format!(
                            "column name `{name}` is not an identifier ([A-Za-z_][A-Za-z0-9_]*)"
                        ),
                    ));
                }
                if !seen.insert(name) {
                    return Err(SpecError::line(
                        shown,
                        line,
                        format!("column `{name}` appears twice"),
                    ));
                }
            }
            header = Some(record.iter().map(str::to_string).collect());
            continue;
        };
        if record.len() != columns.len() {
            return Err(SpecError::line(
                shown,
                line,
                format!("expected {} values, found {}", columns.len(), record.len()),
            ));
        }
        let mut row = Params::new();
        for (column, value) in columns.iter().zip(record.iter()) {
            check_value(value)
                .map_err(|m| SpecError::line(shown, line, format!("column `{column}`: {m}")))?;
            row.push(column.clone(), value);
        }
        rows.push(row);
        lines.push(line);
    }
    let Some(columns) = header else {
        return Err(SpecError::file(shown, "no header row: the CSV is empty"));
    };
    if rows.is_empty() {
        return Err(SpecError::file(
            shown,
            "no shapes: the CSV has a header row only",
        ));
    }
    let mut warnings = Vec::new();
    let rows = dedup(rows, &mut warnings, &|i| {
        format!("{}:{}", shown.display(), lines[i])
    });
    Ok(Shapes {
        columns,
        rows,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aiter_style_csv() {
        let text = " M , N ,K\n\n 1, 2 ,3\n,,\n4,5,6\n1,2,3\n";
        let s = csv_text(text, Path::new("untuned.csv")).unwrap();
        assert_eq!(s.columns, vec!["M", "N", "K"]);
        assert_eq!(s.rows.len(), 2);
        assert_eq!(s.rows[0].key(), "M=1,N=2,K=3");
        assert_eq!(s.rows[1].key(), "M=4,N=5,K=6");
        assert_eq!(s.warnings.len(), 1);
        assert!(s.warnings[0].contains("untuned.csv:6"), "{:?}", s.warnings);
    }

    #[test]
    fn csv_errors_name_file_and_line() {
        let e = csv_text("M,N,K\n1,2,3\n4,5\n", Path::new("shapes.csv")).unwrap_err();
        assert_eq!(e.to_string(), "shapes.csv:3: expected 3 values, found 2");
        let e = csv_text("M,N\n1,\n", Path::new("s.csv")).unwrap_err();
        assert_eq!(e.to_string(), "s.csv:2: column `N`: empty value");
        let e = csv_text("M,M\n1,2\n", Path::new("s.csv")).unwrap_err();
        assert!(e
            .to_string()
            .starts_with("s.csv:1: column `M` appears twice"));
        let e = csv_text("M,a b\n", Path::new("s.csv")).unwrap_err();
        assert!(e.to_string().contains("not an identifier"));
        assert!(csv_text("M\n", Path::new("s.csv")).is_err());
        assert!(csv_text("\n\n", Path::new("s.csv")).is_err());
    }
}
