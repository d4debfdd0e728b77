//! A find-db key read back into a driver-view [`ConvConfig`]: the inverse of
//! [`find_db_key`](super::find_db_key), so that keys copied out of a `*.fdb.txt` (or fin's
//! `db_key`) can be imported as configs. MITuna's `parse_2d`/`parse_3d` do the same; unlike them
//! this keeps three different layouts, the `_g` group count and 3-D, and checks that the key's
//! output size is the one its input, filter, pad and stride give.
//!
//! What a key cannot say: a transposed convolution's key is the key of an ordinary convolution
//! in the swapped direction (`docs/miopen-formats.md` §1.1), and `same`/`valid` padding is
//! already folded into the pads. So the config read back is always `-m conv`, with the default
//! pad mode unless only `same` or `valid` explains the key's output size (an even filter padded
//! `same`); its keys equal the input.

use super::output_dims;
use crate::problem::{ConfigError, ConvConfig, ConvMode, DataType, Direction, PadMode};

/// Why a find-db key was refused. [`FindKeyError::offset`] is the byte offset (in the key) of
/// the field at fault: 0 for what concerns the whole key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FindKeyError {
    #[error(
        "not a find-db key: {fields} `-`-separated fields; a 2-D key has 15 (17 with three \
         layouts), a 3-D key 17 (19), e.g. 256-28-28-3x3-512-28-28-128-1x1-1x1-1x1-0-NCHW-FP32-F"
    )]
    FieldCount { fields: usize },
    #[error("bias field is `{bias}`: convolution keys have bias 0")]
    Bias { offset: usize, bias: String },
    #[error("unknown data type `{data_type}` in find-db key")]
    DataType { offset: usize, data_type: String },
    #[error("direction `{direction}` is not F, B or W")]
    Direction { offset: usize, direction: String },
    #[error("unsupported key suffix `{suffix}` (only `_g<groups>` is known here)")]
    Suffix { offset: usize, suffix: String },
    /// A `x`-separated field (`what`: filter, pad, stride, dilation) with other than
    /// `expected` values (2 for a 2-D key, 3 for 3-D).
    #[error("{what} field `{field}` should have {expected} `x`-separated values")]
    Values {
        offset: usize,
        what: &'static str,
        field: String,
        expected: usize,
    },
    #[error("{what}: `{text}` is not a non-negative integer")]
    NotANumber {
        offset: usize,
        what: &'static str,
        text: String,
    },
    #[error("{what}: `{text}` is too large")]
    TooLarge {
        offset: usize,
        what: &'static str,
        text: String,
    },
    /// The key's sizes make no convolution under any pad mode.
    #[error("find-db key describes no valid convolution: {0}")]
    NoConvolution(#[source] ConfigError),
    /// The key's `which` tensor (`output`, or `input (dy)` for a backward key) has extents
    /// `key` where its input `input` and the rest give `computed` (each `HxW` or `DxHxW`).
    #[error(
        "inconsistent find-db key: its {which} is {key} but input {input}, filter, pad, stride \
         and dilation give {computed}"
    )]
    Inconsistent {
        which: &'static str,
        key: String,
        input: String,
        computed: String,
    },
}

impl FindKeyError {
    /// The byte offset in the key of the field at fault; 0 when the whole key is.
    pub fn offset(&self) -> usize {
        match self {
            FindKeyError::Bias { offset, .. }
            | FindKeyError::DataType { offset, .. }
            | FindKeyError::Direction { offset, .. }
            | FindKeyError::Suffix { offset, .. }
            | FindKeyError::Values { offset, .. }
            | FindKeyError::NotANumber { offset, .. }
            | FindKeyError::TooLarge { offset, .. } => *offset,
            FindKeyError::FieldCount { .. }
            | FindKeyError::NoConvolution(_)
            | FindKeyError::Inconsistent { .. } => 0,
        }
    }
}

/// Parses `256-28-28-3x3-512-28-28-128-1x1-1x1-1x1-0-NCHW-FP32-F` (also with `_g<n>`, three
/// layouts, 3-D, and an optional `=…` record after the key). For `B` and `W` the key's first
/// tensor is dy, so C and K (and x's extents) are swapped back into the driver's view.
pub fn parse_find_db_key(key: &str) -> Result<ConvConfig, FindKeyError> {
    let key = key.split('=').next().unwrap_or("").trim_end();
    let fields = split_fields(key);
    let three_d = is_three_d(&fields)?;
    let mut r = Reader {
        fields: &fields,
        pos: 0,
    };
    let geometry = Geometry::read(&mut r, if three_d { 3 } else { 2 })?;
    let tail = Tail::read(&mut r, fields.len())?;
    let config = driver_view(&geometry, tail, three_d);
    with_consistent_output(config, &geometry, three_d)
}

/// The key's `-`-separated fields, each with its byte offset in the key.
fn split_fields(key: &str) -> Vec<(usize, &str)> {
    let mut fields = Vec::new();
    let mut offset = 0;
    for f in key.split('-') {
        fields.push((offset, f));
        offset += f.len() + 1;
    }
    fields
}

/// Whether the key is 3-D, told by its field count and the shape of its filter field; a key of
/// neither shape is not a find-db key at all.
fn is_three_d(fields: &[(usize, &str)]) -> Result<bool, FindKeyError> {
    let n = fields.len();
    let parts = |i: usize| fields.get(i).map_or(0, |(_, f)| f.split('x').count());
    match n {
        15 if parts(3) == 2 => Ok(false),
        17 if parts(3) == 2 => Ok(false),
        17 | 19 if parts(4) == 3 => Ok(true),
        _ => Err(FindKeyError::FieldCount { fields: n }),
    }
}

/// The numeric fields of a key, in the key's view (for `B` and `W` its input is dy). Extents
/// and triples are `[d, h, w]`, with a 2-D key's depth as [`Reader`] fills it.
struct Geometry {
    in_c: u32,
    in_dhw: [u32; 3],
    fil: [u32; 3],
    out_c: u32,
    out_dhw: [u32; 3],
    batch: u32,
    pad: [u32; 3],
    stride: [u32; 3],
    dilation: [u32; 3],
}

impl Geometry {
    /// Reads the fields from the input channels to the bias, which must be 0.
    fn read(r: &mut Reader, sd: usize) -> Result<Geometry, FindKeyError> {
        let geometry = Geometry {
            in_c: r.int("input channels")?,
            in_dhw: r.extents(sd, "input")?,
            fil: r.triple(sd, "filter")?,
            out_c: r.int("output channels")?,
            out_dhw: r.extents(sd, "output")?,
            batch: r.int("batch size")?,
            pad: r.triple(sd, "pad")?,
            stride: r.triple(sd, "stride")?,
            dilation: r.triple(sd, "dilation")?,
        };
        let (bias_at, bias) = r.next();
        if bias != "0" {
            return Err(FindKeyError::Bias {
                offset: bias_at,
                bias: bias.to_string(),
            });
        }
        Ok(geometry)
    }
}

/// The fields after the bias: one or three layouts, the data type, and the direction with its
/// optional `_g<groups>` suffix.
struct Tail {
    /// (input, weights, output) layouts in the key's view; one layout stands for all three.
    layouts: (String, String, String),
    data_type: DataType,
    direction: Direction,
    group_count: u32,
}

impl Tail {
    /// Reads the rest of the `n` fields.
    fn read(r: &mut Reader, n: usize) -> Result<Tail, FindKeyError> {
        let layouts: Vec<(usize, &str)> = (0..n - r.pos - 2).map(|_| r.next()).collect();
        let (dt_at, dt) = r.next();
        let data_type = data_type(dt_at, dt)?;
        let (dir_at, last) = r.next();
        let (direction, group_count) = direction_and_groups(dir_at, last)?;
        let layout = |i: usize| layouts[i].1.to_string();
        let layouts = match layouts.len() {
            1 => (layout(0), layout(0), layout(0)),
            _ => (layout(0), layout(1), layout(2)),
        };
        Ok(Tail {
            layouts,
            data_type,
            direction,
            group_count,
        })
    }
}

/// A key's data type field (a find-db key's, or a perf-db key's).
pub(super) fn data_type(at: usize, dt: &str) -> Result<DataType, FindKeyError> {
    match dt {
        "FP32" => Ok(DataType::Fp32),
        "FP16" => Ok(DataType::Fp16),
        "BF16" => Ok(DataType::Bf16),
        "INT8" | "INT8INT8INT32" => Ok(DataType::Int8),
        "FP8" => Ok(DataType::Fp8),
        "BF8" => Ok(DataType::Bf8),
        _ => Err(FindKeyError::DataType {
            offset: at,
            data_type: dt.to_string(),
        }),
    }
}

/// The last field: the direction letter, then `_g<groups>` for a grouped convolution.
fn direction_and_groups(at: usize, last: &str) -> Result<(Direction, u32), FindKeyError> {
    let (dir, suffix) = last.split_at(last.len().min(1));
    let direction = dir
        .chars()
        .next()
        .and_then(Direction::from_letter)
        .ok_or_else(|| FindKeyError::Direction {
            offset: at,
            direction: dir.to_string(),
        })?;
    let group_count = match suffix {
        "" => 1,
        s => match s.strip_prefix("_g").map(str::parse::<u32>) {
            Some(Ok(g)) if g >= 1 => g,
            _ => {
                return Err(FindKeyError::Suffix {
                    offset: at + 1,
                    suffix: s.to_string(),
                })
            }
        },
    };
    Ok((direction, group_count))
}

/// The key's x and y extents in the driver's view: for B and W the key's `in` is dy (K
/// channels, output extents), so they swap back. Returns (x channels, x extents, y channels,
/// y extents).
fn driver_tensors(g: &Geometry, direction: Direction) -> (u32, [u32; 3], u32, [u32; 3]) {
    if direction == Direction::Forward {
        (g.in_c, g.in_dhw, g.out_c, g.out_dhw)
    } else {
        (g.out_c, g.out_dhw, g.in_c, g.in_dhw)
    }
}

/// The config the key describes, in the driver's view, with the default pad mode.
fn driver_view(g: &Geometry, tail: Tail, three_d: bool) -> ConvConfig {
    let direction = tail.direction;
    let (x_c, x_dhw, y_c, _) = driver_tensors(g, direction);
    let (key_in, key_wei, key_out) = tail.layouts;
    let (in_layout, out_layout) = if direction == Direction::Forward {
        (key_in, key_out)
    } else {
        (key_out, key_in)
    };
    let depth = |v: [u32; 3], two_d: u32| if three_d { v[0] } else { two_d };
    ConvConfig {
        data_type: tail.data_type,
        direction,
        spatial_dim: if three_d { 3 } else { 2 },
        batchsize: g.batch,
        in_channels: x_c,
        in_d: depth(x_dhw, 1),
        in_h: x_dhw[1],
        in_w: x_dhw[2],
        out_channels: y_c,
        fil_d: depth(g.fil, 1),
        fil_h: g.fil[1],
        fil_w: g.fil[2],
        pad_d: depth(g.pad, 0),
        pad_h: g.pad[1],
        pad_w: g.pad[2],
        conv_stride_d: depth(g.stride, 1),
        conv_stride_h: g.stride[1],
        conv_stride_w: g.stride[2],
        dilation_d: depth(g.dilation, 1),
        dilation_h: g.dilation[1],
        dilation_w: g.dilation[2],
        trans_output_pad_d: 0,
        trans_output_pad_h: 0,
        trans_output_pad_w: 0,
        group_count: tail.group_count,
        mode: ConvMode::Conv,
        pad_mode: PadMode::Default,
        in_layout,
        fil_layout: key_wei,
        out_layout,
    }
}

/// The key's output must follow from its input. `same`/`valid` padding is not in the key, but
/// it can make the output differ from what the pads give (an even filter padded `same`): such a
/// key reads back with the pad mode that explains it. A key that none explains is an error
/// naming both sizes.
fn with_consistent_output(
    config: ConvConfig,
    g: &Geometry,
    three_d: bool,
) -> Result<ConvConfig, FindKeyError> {
    let forward = config.direction == Direction::Forward;
    let (_, x_dhw, _, y_dhw) = driver_tensors(g, config.direction);
    let output = |c: &ConvConfig| -> Result<[u32; 3], ConfigError> {
        c.validate()?;
        let (od, oh, ow) = output_dims(c)?;
        Ok([if three_d { od } else { 1 }, oh, ow])
    };
    let default_out = output(&config);
    if default_out.as_ref().is_ok_and(|o| *o == y_dhw) {
        return Ok(config);
    }
    for pad_mode in [PadMode::Same, PadMode::Valid] {
        let c = ConvConfig {
            pad_mode,
            ..config.clone()
        };
        if output(&c).is_ok_and(|o| o == y_dhw) {
            return Ok(c);
        }
    }
    let default_out = default_out.map_err(FindKeyError::NoConvolution)?;
    let shown = |v: [u32; 3]| {
        if three_d {
            format!("{}x{}x{}", v[0], v[1], v[2])
        } else {
            format!("{}x{}", v[1], v[2])
        }
    };
    let which = if forward { "output" } else { "input (dy)" };
    Err(FindKeyError::Inconsistent {
        which,
        key: shown(y_dhw),
        input: shown(x_dhw),
        computed: shown(default_out),
    })
}

/// A cursor over the `-`-separated fields, each with its byte offset.
struct Reader<'a, 'k> {
    fields: &'a [(usize, &'k str)],
    pos: usize,
}

impl<'k> Reader<'_, 'k> {
    fn next(&mut self) -> (usize, &'k str) {
        let f = self.fields[self.pos];
        self.pos += 1;
        f
    }

    fn int(&mut self, what: &'static str) -> Result<u32, FindKeyError> {
        let (at, f) = self.next();
        number(at, f, what)
    }

    /// `d-h-w` (3-D) or `h-w` (2-D) as separate fields; 2-D depth reads as 1.
    fn extents(&mut self, sd: usize, what: &'static str) -> Result<[u32; 3], FindKeyError> {
        let mut v = [1u32; 3];
        for slot in v.iter_mut().skip(3 - sd) {
            *slot = self.int(what)?;
        }
        Ok(v)
    }

    /// `dxhxw` (3-D) or `hxw` (2-D) in one field; 2-D depth reads as 0.
    fn triple(&mut self, sd: usize, what: &'static str) -> Result<[u32; 3], FindKeyError> {
        let (at, f) = self.next();
        let parts: Vec<&str> = f.split('x').collect();
        if parts.len() != sd {
            return Err(FindKeyError::Values {
                offset: at,
                what,
                field: f.to_string(),
                expected: sd,
            });
        }
        let mut v = [0u32; 3];
        let mut part_at = at;
        for (slot, p) in v.iter_mut().skip(3 - sd).zip(parts) {
            *slot = number(part_at, p, what)?;
            part_at += p.len() + 1;
        }
        Ok(v)
    }
}

fn number(at: usize, text: &str, what: &'static str) -> Result<u32, FindKeyError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(FindKeyError::NotANumber {
            offset: at,
            what,
            text: text.to_string(),
        });
    }
    text.parse().map_err(|_| FindKeyError::TooLarge {
        offset: at,
        what,
        text: text.to_string(),
    })
}
