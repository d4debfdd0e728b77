//! MIOpenDriver command lines, the way teams hand over the convolutions they care about:
//! [`parse_line`] reads one line of a config file into configs (one per direction), and
//! [`driver_line`] writes the canonical command for one config.
//!
//! A line may be a bare command (`conv -n 128 …`), a command with the program
//! (`./bin/MIOpenDriver conv …`, `/opt/rocm/bin/MIOpenDriver conv …`), a logged command with a
//! prefix (`miopenConvolutionForward: ./bin/MIOpenDriver …`, MIOpen's own
//! `MIOpen(HIP): Command [LogCmdConvolution] ./bin/MIOpenDriver …`), a find-db key
//! (`256-28-28-3x3-512-28-28-128-1x1-1x1-1x1-0-NCHW-FP32-F`, optionally with its `=…` record),
//! a command for another primitive (`pool`, `bnorm`, … counted and skipped), blank, or a
//! `#` comment.
//!
//! Where MITuna's `import_configs` drops real lines (`docs/mituna.md` §6), this keeps them: no `-F`
//! (all three directions, or the one named by an API prefix), `-F 0` and the two-direction
//! masks 3/5/6, long flags (`--time`), other primitives mixed in, and different in/fil/out
//! layouts. What is wrong is an error that says what and where ([`LineError`]).

mod build;
mod flags;
mod params;

use crate::problem::{ConvConfig, ConvMode, DataType, Direction, PadMode};
use build::Values;
use flags::{Field, Token};
use std::fmt;

/// What one line of a config file holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LineKind {
    /// A convolution line: one config per direction it names (several when `-F 0`, or no `-F`
    /// and no API-name prefix). `expanded` says the directions were implied (all three because
    /// `-F 0` or no `-F`), not listed by the line.
    Conv {
        configs: Vec<ConvConfig>,
        expanded: bool,
    },
    /// A line for another primitive (`bnorm`, `pool`, `lrn`, `activ`, `softmax`, `gemm`, …, any
    /// known or unknown non-conv driver command), counted and skipped. `primitive` is the
    /// sub-command as written (`pool`, `bnormfp16`).
    Other { primitive: String },
    /// Blank or a comment (`#…`).
    Blank,
}

/// Why a line was refused, and where: `column` is the 1-based character column of the token at
/// fault, when there is one. Displays as the bare message (the caller adds `file:line`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineError {
    pub column: Option<usize>,
    pub message: String,
}

impl LineError {
    fn at(column: usize, message: impl Into<String>) -> LineError {
        LineError {
            column: Some(column),
            message: message.into(),
        }
    }
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for LineError {}

/// Non-convolution primitives of MIOpenDriver (`driver/dm_*.cpp`, `driver.hpp ParseBaseArg`),
/// recognised without the program name in front; data-type suffixes (`fp16`, `bfp16fp32`, …)
/// are stripped first. After `MIOpenDriver` any word is taken as a primitive.
#[rustfmt::skip]
const OTHER_PRIMITIVES: &[&str] = &[
    "activ", "adam", "adamw", "adaptiveavgpool", "adaptivemaxpool", "addlayernorm", "allclose",
    "ampadam", "any", "argmax", "argmin", "avgpool", "bnorm", "cartesianprod", "cat", "CBAInfer",
    "cosineembeddingloss", "ctc", "cumulative_reduction", "diag", "dropout", "fold",
    "fractionalmaxpool", "gemm", "getitem", "glu", "gradientdescent", "groupnorm",
    "hingeembeddingloss", "instancenorm", "interpolate", "kerasmomentum", "kldivloss", "kthvalue",
    "layernorm", "logcumsumexp", "logsumexp", "lppool", "lrn", "marginrankingloss", "maskedfill",
    "matrixbandpart", "median", "mseloss", "multilabelmarginloss", "multilabelsoftmarginloss",
    "multimarginloss", "nllloss", "normalize", "outer", "padconstant", "padreflection", "pdist",
    "pool", "prelu", "reduce", "reducecalculation", "reduceextreme", "rnn", "rnn_seq", "rope",
    "sigmoidfocalloss", "smoothl1loss", "softmarginloss", "softmax",
    "softmaxcrossentropywithlogits", "sum", "t5layernorm", "tensorop", "transformersadamw",
    "unfold", "unsortedsegmentsum", "where",
];

const TYPE_SUFFIXES: &[&str] = &[
    "bfp16", "fp16", "bfp8", "fp8", "fp32", "fp64", "int8", "bf16",
];

/// Reads one line. See the module docs for what a line may be.
pub fn parse_line(line: &str) -> Result<LineKind, LineError> {
    let tokens = tokenize(line);
    let Some(first) = tokens.first() else {
        return Ok(LineKind::Blank);
    };
    // The program, if present; everything before it is a prefix (a log or an API name).
    let program = tokens.iter().position(|t| is_program(t.text));
    if program.is_none() && first.text.starts_with(|c: char| c.is_ascii_digit()) {
        return parse_key_line(&tokens);
    }
    let cmd_index = match program {
        Some(i) => i + 1,
        None => tokens.iter().take_while(|t| t.text.ends_with(':')).count(),
    };
    let prefix = &tokens[..cmd_index];
    let Some(cmd) = tokens.get(cmd_index) else {
        let last = prefix.last().map_or(first.col, |t| t.col);
        return Err(LineError::at(
            last,
            "no sub-command (conv, convfp16, …) after the program",
        ));
    };
    if cmd.text.starts_with('-') {
        return Err(LineError::at(
            cmd.col,
            format!(
                "expected a sub-command (conv, convfp16, convbfp16, convint8, pool, …) before \
                 flag `{}`",
                cmd.text
            ),
        ));
    }
    let Some(data_type) = DataType::from_driver_command(cmd.text) else {
        return other_primitive(*cmd, program.is_some());
    };
    let args = flags::scan(&tokens[cmd_index + 1..])?;
    let values = Values::new(&args)?;
    let config = build::build(data_type, &values)?;
    let (directions, expanded) = match values.text(Field::Forw) {
        Some(_) => {
            let col = values.col(Field::Forw).unwrap_or(cmd.col);
            match values.int(Field::Forw, 0)? {
                0 => (Direction::ALL.to_vec(), true),
                m @ 1..=7 => {
                    let ds = Direction::ALL
                        .iter()
                        .copied()
                        .filter(|d| m & u32::from(d.driver_bit()) != 0);
                    (ds.collect(), false)
                }
                m => {
                    return Err(LineError::at(
                        col,
                        format!(
                            "-F/--forw {m} names no direction (0 all, 1 F, 2 B, 4 W, or a sum)"
                        ),
                    ))
                }
            }
        }
        None => match prefix.iter().find_map(|t| api_direction(t.text)) {
            Some(d) => (vec![d], false),
            None => (Direction::ALL.to_vec(), true),
        },
    };
    let configs = directions
        .into_iter()
        .map(|direction| ConvConfig {
            direction,
            ..config.clone()
        })
        .collect();
    Ok(LineKind::Conv { configs, expanded })
}

/// Splits on whitespace, keeping 1-based character columns; a token starting with `#` ends
/// the line (a comment).
fn tokenize(line: &str) -> Vec<Token<'_>> {
    let mut tokens = Vec::new();
    let mut start: Option<(usize, usize)> = None; // (byte, column)
    let mut col = 0;
    for (byte, ch) in line.char_indices() {
        col += 1;
        if ch.is_whitespace() {
            if let Some((b, c)) = start.take() {
                tokens.push(Token {
                    text: &line[b..byte],
                    col: c,
                });
            }
        } else if start.is_none() {
            if ch == '#' {
                return tokens;
            }
            start = Some((byte, col));
        }
    }
    if let Some((b, c)) = start {
        tokens.push(Token {
            text: &line[b..],
            col: c,
        });
    }
    tokens
}

/// `MIOpenDriver`, with or without a directory in front.
fn is_program(token: &str) -> bool {
    let name = token.rsplit(['/', '\\']).next().unwrap_or(token);
    let name = name.strip_suffix(".exe").unwrap_or(name);
    name == "MIOpenDriver" || name.ends_with(":MIOpenDriver")
}

/// The direction of a MIOpen API name in a log prefix: `miopenConvolutionForward`,
/// `miopenFindConvolutionBackwardDataAlgorithm`, `miopenConvolutionBackwardWeightsImmediate`, ….
fn api_direction(token: &str) -> Option<Direction> {
    token
        .split(|c: char| !c.is_ascii_alphanumeric())
        .find_map(|word| {
            let rest = word.strip_prefix("miopen")?;
            let rest = rest.strip_prefix("Find").unwrap_or(rest);
            let rest = rest.strip_prefix("Convolution")?;
            if rest.starts_with("BackwardData") {
                Some(Direction::BackwardData)
            } else if rest.starts_with("BackwardWeights") {
                Some(Direction::BackwardWeights)
            } else if let Some(after) = rest.strip_prefix("Forward") {
                (!after.starts_with("Bias")).then_some(Direction::Forward)
            } else {
                None
            }
        })
}

fn parse_key_line(tokens: &[Token]) -> Result<LineKind, LineError> {
    let key = tokens[0];
    if let Some(extra) = tokens.get(1) {
        return Err(LineError::at(
            extra.col,
            format!(
                "unexpected `{}` after a find-db key (a key is one token)",
                extra.text
            ),
        ));
    }
    match crate::keys::parse_find_db_key(key.text) {
        Ok(c) => Ok(LineKind::Conv {
            configs: vec![c],
            expanded: false,
        }),
        Err(e) => {
            let col = key.col + key.text[..e.offset().min(key.text.len())].chars().count();
            Err(LineError::at(col, e.to_string()))
        }
    }
}

fn other_primitive(cmd: Token, after_program: bool) -> Result<LineKind, LineError> {
    let word = cmd.text;
    let identifier = word.starts_with(|c: char| c.is_ascii_alphabetic())
        && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if identifier && word.to_ascii_lowercase().starts_with("conv") {
        return Err(LineError::at(
            cmd.col,
            format!(
                "unsupported convolution sub-command `{word}` (conv, convfp16, convbfp16, \
                 convint8, convfp8, convbfp8)"
            ),
        ));
    }
    let mut base = word;
    while let Some(s) = TYPE_SUFFIXES.iter().find_map(|s| base.strip_suffix(s)) {
        base = s;
    }
    if identifier && (after_program || OTHER_PRIMITIVES.contains(&base)) {
        return Ok(LineKind::Other {
            primitive: word.to_string(),
        });
    }
    Err(LineError::at(
        cmd.col,
        format!(
            "unknown sub-command `{word}`: a line is an MIOpenDriver command (conv …, \
             ./bin/MIOpenDriver conv …), a find-db key, blank, or a # comment"
        ),
    ))
}

/// The canonical MIOpenDriver command for one config, e.g.
/// `conv -n 128 -c 256 -H 28 -W 28 -k 512 -y 3 -x 3 -p 1 -q 1 -u 1 -v 1 -l 1 -j 1 -m conv -g 1 -F 1`.
/// 3-D spells depth with long flags and ends the sizes with `--spatial_dim 3` (as MIOpen's
/// `MIOPEN_ENABLE_LOGGING_CMD` does); non-default layouts, transposed output pads and a pad
/// mode other than `default` are added. `parse_line(&driver_line(c))` gives back exactly `c`
/// for every config that passes [`ConvConfig::validate`].
pub fn driver_line(c: &ConvConfig) -> String {
    use std::fmt::Write as _;
    let three_d = c.spatial_dim == 3;
    let mut s = String::from(c.data_type.driver_command());
    let mut put = |flag: &str, value: &dyn fmt::Display| {
        let _ = write!(s, " {flag} {value}");
    };
    put("-n", &c.batchsize);
    put("-c", &c.in_channels);
    if three_d {
        put("--in_d", &c.in_d);
    }
    put("-H", &c.in_h);
    put("-W", &c.in_w);
    put("-k", &c.out_channels);
    if three_d {
        put("--fil_d", &c.fil_d);
    }
    put("-y", &c.fil_h);
    put("-x", &c.fil_w);
    if three_d {
        put("--pad_d", &c.pad_d);
    }
    put("-p", &c.pad_h);
    put("-q", &c.pad_w);
    if three_d {
        put("--conv_stride_d", &c.conv_stride_d);
    }
    put("-u", &c.conv_stride_h);
    put("-v", &c.conv_stride_w);
    if three_d {
        put("--dilation_d", &c.dilation_d);
    }
    put("-l", &c.dilation_h);
    put("-j", &c.dilation_w);
    if three_d {
        put("--spatial_dim", &3);
    }
    let default_layout = if three_d { "NCDHW" } else { "NCHW" };
    for (flag, layout) in [
        ("--in_layout", &c.in_layout),
        ("--fil_layout", &c.fil_layout),
        ("--out_layout", &c.out_layout),
    ] {
        if layout != default_layout {
            put(flag, layout);
        }
    }
    if c.mode == ConvMode::Trans {
        if three_d && c.trans_output_pad_d != 0 {
            put("--trans_output_pad_d", &c.trans_output_pad_d);
        }
        if c.trans_output_pad_h != 0 || c.trans_output_pad_w != 0 {
            put("-Y", &c.trans_output_pad_h);
            put("-X", &c.trans_output_pad_w);
        }
    }
    put(
        "-m",
        &if c.mode == ConvMode::Trans {
            "trans"
        } else {
            "conv"
        },
    );
    put("-g", &c.group_count);
    match c.pad_mode {
        PadMode::Default => {}
        PadMode::Same => put("--pad_mode", &"same"),
        PadMode::Valid => put("--pad_mode", &"valid"),
    }
    put("-F", &c.direction.driver_bit());
    s
}
