//! Errors of a tuning spec, pointing at a file, a line (and column where known) and a field.
//!
//! A spec is written by hand, so every error says where to look: `spec.toml:20: rules[1]: …`.
//! Positions come from the byte spans that `toml` records for [`toml::Spanned`] fields; this
//! module turns them into 1-based lines and columns.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// A problem in a tuning spec or in a file it names (a shapes CSV, a source).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    /// The file at fault, as the user named it.
    pub file: PathBuf,
    /// 1-based line, where known.
    pub line: Option<usize>,
    /// 1-based column (in characters), where known.
    pub column: Option<usize>,
    /// The field at fault, in TOML path syntax: `build.command`, `rules[1]`, `params.compile.BM`.
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        f.write_str(": ")?;
        if let Some(field) = &self.field {
            write!(f, "{field}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for SpecError {}

impl SpecError {
    /// An error about a whole file (it cannot be read, say).
    pub fn file(file: &Path, message: impl Into<String>) -> Self {
        SpecError {
            file: file.to_path_buf(),
            line: None,
            column: None,
            field: None,
            message: message.into(),
        }
    }

    /// An error on a line of a file other than the spec (a CSV row).
    pub fn line(file: &Path, line: usize, message: impl Into<String>) -> Self {
        SpecError {
            line: Some(line),
            ..SpecError::file(file, message)
        }
    }
}

/// 1-based line and column (in characters) of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let col = before[line_start..].chars().count() + 1;
    (line, col)
}

/// The spec text and its path: builds errors from spans. A message is anything displayed: a
/// text, or the typed error of a check.
#[derive(Clone, Copy)]
pub(crate) struct Ctx<'a> {
    pub path: &'a Path,
    pub text: &'a str,
}

impl Ctx<'_> {
    /// An error on the line where `span` starts.
    pub fn at(
        &self,
        span: Range<usize>,
        field: impl Into<String>,
        msg: impl fmt::Display,
    ) -> SpecError {
        let (line, _) = line_col(self.text, span.start);
        SpecError {
            file: self.path.to_path_buf(),
            line: Some(line),
            column: None,
            field: Some(field.into()),
            message: msg.to_string(),
        }
    }

    /// An error at an exact byte offset (line and column).
    pub fn at_offset(
        &self,
        offset: usize,
        field: impl Into<String>,
        msg: impl fmt::Display,
    ) -> SpecError {
        let (line, col) = line_col(self.text, offset);
        SpecError {
            file: self.path.to_path_buf(),
            line: Some(line),
            column: Some(col),
            field: Some(field.into()),
            message: msg.to_string(),
        }
    }

    /// An error about a field with no position (a missing section, say).
    pub fn field(&self, field: impl Into<String>, msg: impl fmt::Display) -> SpecError {
        SpecError {
            field: Some(field.into()),
            ..SpecError::file(self.path, msg.to_string())
        }
    }

    /// Where the content of the string literal at `span` begins (after its opening quotes).
    pub fn string_content_start(&self, span: &Range<usize>) -> usize {
        let raw = self.text.get(span.clone()).unwrap_or("");
        let quotes = if raw.starts_with("\"\"\"") || raw.starts_with("'''") {
            3
        } else if raw.starts_with('"') || raw.starts_with('\'') {
            1
        } else {
            0
        };
        span.start + quotes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column() {
        let t = "ab\ncdé\nf";
        assert_eq!(line_col(t, 0), (1, 1));
        assert_eq!(line_col(t, 3), (2, 1));
        assert_eq!(line_col(t, 7), (2, 4));
        assert_eq!(line_col(t, 8), (3, 1));
        assert_eq!(line_col(t, 100), (3, 2));
    }

    #[test]
    fn display_forms() {
        let mut e = SpecError::line(Path::new("shapes.csv"), 3, "expected 3 values, found 2");
        assert_eq!(e.to_string(), "shapes.csv:3: expected 3 values, found 2");
        e.column = Some(5);
        e.field = Some("rules[1]".into());
        assert_eq!(
            e.to_string(),
            "shapes.csv:3:5: rules[1]: expected 3 values, found 2"
        );
        assert_eq!(
            SpecError::file(Path::new("a.toml"), "gone").to_string(),
            "a.toml: gone"
        );
    }
}
