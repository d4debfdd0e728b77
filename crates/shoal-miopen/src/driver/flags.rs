//! MIOpenDriver's convolution flags (`driver/conv_driver.hpp AddCmdLineArgs`, §5.3 of
//! `docs/miopen-formats.md`) as one table, and the scan of a command line's tokens
//! into `(field, value)` pairs. Every flag has a long form (`--out_channels`) and a one-character
//! short form (`-k`), including the odd ones (`-_ -! -@ -# -$ -% -^`); the value is always the
//! next token, as in `InputFlags::Parse` (`--name=value` is accepted too). Flags that change the
//! problem map to a [`Field`]; run-time flags (`-i -t -V -s …`) are accepted and ignored.

use super::LineError;

/// A token of the line and its 1-based character column.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Token<'a> {
    pub text: &'a str,
    pub col: usize,
}

/// The problem-defining values a convolution line can set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Field {
    SpatialDim,
    Forw,
    Batchsize,
    InChannels,
    InD,
    InH,
    InW,
    OutChannels,
    FilD,
    FilH,
    FilW,
    StrideD,
    StrideH,
    StrideW,
    PadD,
    PadH,
    PadW,
    TransPadD,
    TransPadH,
    TransPadW,
    DilationD,
    DilationH,
    DilationW,
    GroupCount,
    Mode,
    PadMode,
    InLayout,
    OutLayout,
    FilLayout,
    TensorVect,
    VectorLength,
    InCastType,
    OutCastType,
    WeiCastType,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Problem(Field),
    /// Run-time only (iterations, verification, timing, files, solution choice): no effect on
    /// the problem or its keys.
    Ignored,
    Help,
}

pub(crate) struct Flag {
    pub long: &'static str,
    pub short: Option<char>,
    pub role: Role,
}

const fn problem(long: &'static str, short: char, f: Field) -> Flag {
    Flag {
        long,
        short: Some(short),
        role: Role::Problem(f),
    }
}

const fn ignored(long: &'static str, short: char) -> Flag {
    Flag {
        long,
        short: Some(short),
        role: Role::Ignored,
    }
}

/// Every flag of `ConvDriver::AddCmdLineArgs`, plus the help flags and the long names of the
/// old driver (`conv_stride_0`/`conv_stride_1`).
pub(crate) const FLAGS: &[Flag] = &[
    problem("spatial_dim", '_', Field::SpatialDim),
    problem("forw", 'F', Field::Forw),
    problem("batchsize", 'n', Field::Batchsize),
    problem("in_channels", 'c', Field::InChannels),
    problem("in_d", '!', Field::InD),
    problem("in_h", 'H', Field::InH),
    problem("in_w", 'W', Field::InW),
    problem("out_channels", 'k', Field::OutChannels),
    problem("fil_d", '@', Field::FilD),
    problem("fil_h", 'y', Field::FilH),
    problem("fil_w", 'x', Field::FilW),
    problem("conv_stride_d", '#', Field::StrideD),
    problem("conv_stride_h", 'u', Field::StrideH),
    problem("conv_stride_w", 'v', Field::StrideW),
    problem("pad_d", '$', Field::PadD),
    problem("pad_h", 'p', Field::PadH),
    problem("pad_w", 'q', Field::PadW),
    problem("trans_output_pad_d", '%', Field::TransPadD),
    problem("trans_output_pad_h", 'Y', Field::TransPadH),
    problem("trans_output_pad_w", 'X', Field::TransPadW),
    problem("dilation_d", '^', Field::DilationD),
    problem("dilation_h", 'l', Field::DilationH),
    problem("dilation_w", 'j', Field::DilationW),
    problem("group_count", 'g', Field::GroupCount),
    problem("mode", 'm', Field::Mode),
    problem("pad_mode", 'z', Field::PadMode),
    problem("in_layout", 'I', Field::InLayout),
    problem("out_layout", 'O', Field::OutLayout),
    problem("fil_layout", 'f', Field::FilLayout),
    problem("tensor_vect", 'Z', Field::TensorVect),
    problem("vector_length", 'L', Field::VectorLength),
    problem("in_cast_type", 'U', Field::InCastType),
    problem("out_cast_type", 'T', Field::OutCastType),
    problem("wei_cast_type", 'R', Field::WeiCastType),
    ignored("pad_val", 'r'),
    ignored("iter", 'i'),
    ignored("verify", 'V'),
    ignored("verification_cache", 'C'),
    ignored("time", 't'),
    ignored("wall", 'w'),
    ignored("search", 's'),
    ignored("printconv", 'P'),
    ignored("dump_output", 'o'),
    ignored("in_data", 'd'),
    ignored("weights", 'e'),
    ignored("bias", 'b'),
    ignored("in_bias", 'a'),
    ignored("dout_data", 'D'),
    ignored("solution", 'S'),
    ignored("gpualloc", 'G'),
    Flag {
        long: "conv_stride_0",
        short: None,
        role: Role::Problem(Field::StrideH),
    },
    Flag {
        long: "conv_stride_1",
        short: None,
        role: Role::Problem(Field::StrideW),
    },
    Flag {
        long: "help",
        short: Some('h'),
        role: Role::Help,
    },
    Flag {
        long: "help",
        short: Some('?'),
        role: Role::Help,
    },
];

/// The canonical long name of a field (for messages).
pub(crate) fn long_name(field: Field) -> &'static str {
    FLAGS
        .iter()
        .find(|f| f.role == Role::Problem(field))
        .map_or("?", |f| f.long)
}

/// The short flag of a field, `-k`, or `--long` when it has none.
pub(crate) fn short_name(field: Field) -> String {
    FLAGS
        .iter()
        .find(|f| f.role == Role::Problem(field))
        .map_or_else(
            || "?".to_string(),
            |f| match f.short {
                Some(c) => format!("-{c}"),
                None => format!("--{}", f.long),
            },
        )
}

/// One problem flag as written on the line.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arg<'a> {
    pub field: Field,
    /// The flag as written (`-k`, `--out_channels`).
    pub flag: &'a str,
    pub flag_col: usize,
    pub value: &'a str,
    pub value_col: usize,
}

impl Arg<'_> {
    /// `-k` or `--out_channels`, with the long name added to a short flag: "`-k` (--out_channels)".
    pub fn shown(&self) -> String {
        if self.flag.starts_with("--") {
            format!("`{}`", self.flag)
        } else {
            format!("`{}` (--{})", self.flag, long_name(self.field))
        }
    }
}

/// Reads `-x value` / `--long value` / `--long=value` pairs. Errors name the flag and column:
/// a token that is not a flag, an unknown flag, a flag without a value, a help flag.
pub(crate) fn scan<'a>(tokens: &[Token<'a>]) -> Result<Vec<Arg<'a>>, LineError> {
    let mut args = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let tok = tokens[i];
        i += 1;
        let (name, inline) = if let Some(long) = tok.text.strip_prefix("--") {
            match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            }
        } else if let Some(short) = tok.text.strip_prefix('-') {
            (short, None)
        } else {
            return Err(LineError::at(
                tok.col,
                format!(
                    "expected a flag, found `{}` (flags start with `-`; each takes exactly one value)",
                    tok.text
                ),
            ));
        };
        let is_long = tok.text.starts_with("--");
        let flag = if is_long {
            FLAGS.iter().find(|f| f.long == name)
        } else {
            let mut chars = name.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => FLAGS.iter().find(|f| f.short == Some(c)),
                (None, _) => None,
                (Some(c), Some(_)) => {
                    return Err(LineError::at(
                        tok.col,
                        format!(
                            "`{}`: a short flag is one character, its value the next token \
                             (`-{c} {}`)",
                            tok.text,
                            &name[c.len_utf8()..]
                        ),
                    ))
                }
            }
        };
        let Some(flag) = flag else {
            return Err(LineError::at(
                tok.col,
                format!("unknown flag `{}`", tok.text),
            ));
        };
        if flag.role == Role::Help {
            return Err(LineError::at(
                tok.col,
                format!("`{}` asks for help: not a config line", tok.text),
            ));
        }
        let (value, value_col) = match inline {
            Some(v) => (v, tok.col + name.len() + 3),
            None => match tokens.get(i) {
                // `-k -n 5`: the value is missing, not `-n` (negative numbers stay values).
                Some(v) if looks_like_flag(v.text) => {
                    return Err(LineError::at(
                        tok.col,
                        format!(
                            "missing value for `{}` (--{}): the next token `{}` is a flag",
                            tok.text, flag.long, v.text
                        ),
                    ))
                }
                Some(v) => {
                    i += 1;
                    (v.text, v.col)
                }
                None => {
                    return Err(LineError::at(
                        tok.col,
                        format!("missing value for `{}` (--{})", tok.text, flag.long),
                    ))
                }
            },
        };
        if let Role::Problem(field) = flag.role {
            args.push(Arg {
                field,
                flag: tok.text,
                flag_col: tok.col,
                value,
                value_col,
            });
        }
    }
    Ok(args)
}

/// A known flag (`-n`, `--in_h`), as opposed to a value such as `-1`.
fn looks_like_flag(text: &str) -> bool {
    if let Some(long) = text.strip_prefix("--") {
        let name = long.split('=').next().unwrap_or(long);
        return FLAGS.iter().any(|f| f.long == name);
    }
    let mut chars = text.chars();
    match (chars.next(), chars.next(), chars.next()) {
        (Some('-'), Some(c), None) if !c.is_ascii_digit() => {
            FLAGS.iter().any(|f| f.short == Some(c))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn flag_table_has_no_duplicate_names() {
        let mut longs = HashSet::new();
        let mut shorts = HashSet::new();
        for f in FLAGS.iter().filter(|f| f.role != Role::Help) {
            assert!(longs.insert(f.long), "duplicate --{}", f.long);
            if let Some(c) = f.short {
                assert!(shorts.insert(c), "duplicate -{c}");
            }
        }
        // The §5.3 table: 50 flags with a short form.
        assert_eq!(shorts.len(), 50);
    }
}
