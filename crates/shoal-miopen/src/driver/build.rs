//! From scanned flags to a [`ConvConfig`], the way MIOpenDriver sets up its tensors and
//! descriptor (`ParseCmdLineArgs`, `GetWeightTensorLengthsFromCmdLine`,
//! `SetConvDescriptorFromCmdLineArgs`): defaults, layouts, groups, the `same`/`valid` pad
//! rewrite, and [`ConvConfig::validate`], the one check every config passes (parsed lines,
//! find-db keys, configs read back from params).
//!
//! Where the driver silently does something odd, this refuses with a message instead: a flag
//! given twice with different values (the driver keeps the last), a fractional value (`1.5`,
//! which the driver's integer conversion truncates; `1.` and `1.0` are read as 1, as the driver
//! does), cast types and vectorised layouts (they change the key in ways a
//! `ConvConfig` cannot hold). Depth flags on a 2-D line are ignored, as by the driver.

use super::flags::{long_name, short_name, Arg, Field};
use super::LineError;
use crate::keys::output_dims;
use crate::problem::{layouts, ConfigError, ConvConfig, ConvMode, DataType, Direction, PadMode};
use std::collections::HashMap;

/// The values of one line, by field, with duplicates resolved.
pub(crate) struct Values<'a> {
    map: HashMap<Field, Arg<'a>>,
}

impl<'a> Values<'a> {
    pub fn new(args: &[Arg<'a>]) -> Result<Values<'a>, LineError> {
        let mut map: HashMap<Field, Arg<'a>> = HashMap::new();
        for a in args {
            if let Some(prev) = map.get(&a.field) {
                if prev.value != a.value {
                    return Err(LineError::at(
                        a.flag_col,
                        format!(
                            "--{} given twice with different values: `{}` {} and `{}` {}",
                            long_name(a.field),
                            prev.flag,
                            prev.value,
                            a.flag,
                            a.value
                        ),
                    ));
                }
            }
            map.insert(a.field, *a);
        }
        Ok(Values { map })
    }

    pub fn col(&self, f: Field) -> Option<usize> {
        self.map.get(&f).map(|a| a.flag_col)
    }

    /// An integer flag, or `default` when absent.
    pub fn int(&self, f: Field, default: u32) -> Result<u32, LineError> {
        let Some(a) = self.map.get(&f) else {
            return Ok(default);
        };
        // The driver converts with `std::stoi`, which reads the digits and stops: `1.` and `1.0`
        // are 1 to it, so they are 1 here too (MITuna rejects such lines and loses them). A
        // fraction that is not zero (`1.5`) is still an error: the driver would truncate it.
        let v = match a.value.split_once('.') {
            Some((int, frac)) if !int.is_empty() && frac.bytes().all(|b| b == b'0') => int,
            _ => a.value,
        };
        if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
            return v.parse().map_err(|_| {
                LineError::at(
                    a.value_col,
                    format!("value `{v}` for {} is too large", a.shown()),
                )
            });
        }
        let message =
            if v.starts_with('-') && v[1..].bytes().all(|b| b.is_ascii_digit()) && v.len() > 1 {
                format!("negative value `{v}` for {}", a.shown())
            } else if v.starts_with('-') {
                format!(
                    "missing value for {} (the next token `{v}` is a flag)",
                    a.shown()
                )
            } else {
                format!("non-integer value `{v}` for {}", a.shown())
            };
        Err(LineError::at(a.value_col, message))
    }

    pub fn text(&self, f: Field) -> Option<(&'a str, usize)> {
        self.map.get(&f).map(|a| (a.value, a.value_col))
    }

    /// A size that must be at least 1.
    fn size(&self, f: Field, default: u32) -> Result<u32, LineError> {
        let v = self.int(f, default)?;
        if v == 0 {
            return Err(LineError {
                column: self.map.get(&f).map(|a| a.value_col),
                message: format!(
                    "{} (--{}) must be at least 1, got 0",
                    short_name(f),
                    long_name(f)
                ),
            });
        }
        Ok(v)
    }
}

/// Builds the config of a `conv*` line (direction set to Forward; the caller sets it per
/// selected direction). `-F` is read by the caller.
pub(crate) fn build(data_type: DataType, v: &Values) -> Result<ConvConfig, LineError> {
    let spatial_dim = spatial_dim(v)?;
    let three_d = spatial_dim == 3;
    refuse_unsupported(v)?;
    let mode = mode(v)?;
    let pad_mode = pad_mode(v)?;
    let default_layout = if three_d { "NCDHW" } else { "NCHW" };
    let layout = |f: Field| -> Result<String, LineError> {
        let Some((text, col)) = v.text(f) else {
            return Ok(default_layout.to_string());
        };
        let up = text.to_ascii_uppercase();
        check_layout(long_name(f), spatial_dim, &up)
            .map_err(|e| LineError::at(col, format!("--{e}")))?;
        Ok(up)
    };
    let depth = |f: Field, default: u32, two_d: u32| -> Result<u32, LineError> {
        if three_d {
            v.int(f, default)
        } else {
            Ok(two_d)
        }
    };
    let mut c = ConvConfig {
        data_type,
        direction: Direction::Forward,
        spatial_dim,
        batchsize: v.size(Field::Batchsize, 100)?,
        in_channels: v.size(Field::InChannels, 3)?,
        in_d: if three_d { v.size(Field::InD, 32)? } else { 1 },
        in_h: v.size(Field::InH, 32)?,
        in_w: v.size(Field::InW, 32)?,
        out_channels: v.size(Field::OutChannels, 32)?,
        fil_d: if three_d { v.size(Field::FilD, 3)? } else { 1 },
        fil_h: v.size(Field::FilH, 3)?,
        fil_w: v.size(Field::FilW, 3)?,
        pad_d: depth(Field::PadD, 0, 0)?,
        pad_h: v.int(Field::PadH, 0)?,
        pad_w: v.int(Field::PadW, 0)?,
        conv_stride_d: if three_d {
            v.size(Field::StrideD, 1)?
        } else {
            1
        },
        conv_stride_h: v.size(Field::StrideH, 1)?,
        conv_stride_w: v.size(Field::StrideW, 1)?,
        dilation_d: if three_d {
            v.size(Field::DilationD, 1)?
        } else {
            1
        },
        dilation_h: v.size(Field::DilationH, 1)?,
        dilation_w: v.size(Field::DilationW, 1)?,
        trans_output_pad_d: 0,
        trans_output_pad_h: 0,
        trans_output_pad_w: 0,
        // The driver reads `max(group_count, 1)`.
        group_count: v.int(Field::GroupCount, 1)?.max(1),
        mode,
        pad_mode,
        in_layout: layout(Field::InLayout)?,
        fil_layout: layout(Field::FilLayout)?,
        out_layout: layout(Field::OutLayout)?,
    };
    if mode == ConvMode::Trans {
        c.trans_output_pad_d = depth(Field::TransPadD, 0, 0)?;
        c.trans_output_pad_h = v.int(Field::TransPadH, 0)?;
        c.trans_output_pad_w = v.int(Field::TransPadW, 0)?;
    }
    rewrite_pads(&mut c);
    c.validate().map_err(|e| LineError {
        column: column_for(&e, v),
        message: e.to_string(),
    })?;
    Ok(c)
}

/// `--spatial_dim`: 2 (the default) or 3.
fn spatial_dim(v: &Values) -> Result<u8, LineError> {
    match v.int(Field::SpatialDim, 2)? {
        2 => Ok(2u8),
        3 => Ok(3),
        other => Err(LineError {
            column: v.text(Field::SpatialDim).map(|(_, c)| c),
            message: format!("--spatial_dim must be 2 or 3, got {other}"),
        }),
    }
}

/// Refuses what changes the key in ways a [`ConvConfig`] cannot hold: vectorised tensors and
/// cast types.
fn refuse_unsupported(v: &Values) -> Result<(), LineError> {
    for (f, what) in [(Field::TensorVect, 0), (Field::VectorLength, 1)] {
        if v.int(f, what)? != what {
            return Err(LineError {
                column: v.col(f),
                message: "vectorised tensors (-Z/--tensor_vect, -L/--vector_length) are not \
                          supported: their layouts (NCHWc4 …) have no place in a ConvConfig"
                    .into(),
            });
        }
    }
    for f in [Field::InCastType, Field::OutCastType, Field::WeiCastType] {
        if let Some((text, col)) = v.text(f) {
            if text != "-1" {
                return Err(LineError::at(
                    col,
                    format!(
                        "--{} {text}: cast types are not supported (they add `_ci`/`_cw`/`_co` to \
                         the key, which a ConvConfig cannot hold)",
                        long_name(f)
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// `-m/--mode`: conv (the default) or trans, in any case.
fn mode(v: &Values) -> Result<ConvMode, LineError> {
    let mode = match v.text(Field::Mode) {
        None => ConvMode::Conv,
        Some((m, col)) => match m.to_ascii_lowercase().as_str() {
            "conv" => ConvMode::Conv,
            "trans" => ConvMode::Trans,
            _ => {
                return Err(LineError::at(
                    col,
                    format!("-m/--mode must be conv or trans, got `{m}`"),
                ))
            }
        },
    };
    Ok(mode)
}

/// `-z/--pad_mode`: default, same or valid, in any case.
fn pad_mode(v: &Values) -> Result<PadMode, LineError> {
    let pad_mode = match v.text(Field::PadMode) {
        None => PadMode::Default,
        Some((m, col)) => match m.to_ascii_lowercase().as_str() {
            "default" => PadMode::Default,
            "same" => PadMode::Same,
            "valid" => PadMode::Valid,
            _ => {
                return Err(LineError::at(
                    col,
                    format!("-z/--pad_mode must be default, same or valid, got `{m}`"),
                ))
            }
        },
    };
    Ok(pad_mode)
}

/// The column of the flag an error message of [`ConvConfig::validate`] is about.
fn column_for(e: &ConfigError, v: &Values) -> Option<usize> {
    let field = match e {
        ConfigError::GroupCount { .. } => Field::GroupCount,
        ConfigError::TransOutputPadOnConv { axis, .. }
        | ConfigError::TransOutputPadTooLarge { axis, .. } => match axis {
            'd' => Field::TransPadD,
            'h' => Field::TransPadH,
            _ => Field::TransPadW,
        },
        ConfigError::PaddedAway { axis, .. } | ConfigError::OutputTooLarge { axis, .. } => {
            match axis {
                'd' => Field::InD,
                'h' => Field::InH,
                _ => Field::InW,
            }
        }
        _ => return None,
    };
    v.col(field)
}

/// `SetConvDescriptorFromCmdLineArgs`: for a convolution whose dilations are all 1 (or whose
/// filter is all 1s), `same` pads each axis by `(in % s == 0 ? max(f - s, 0) : max(f - in % s,
/// 0)) / 2` and `valid` pads nothing. The config keeps the rewritten pads (they are what MIOpen
/// prints in keys) and the pad mode (it selects the output-size formula).
pub(crate) fn rewrite_pads(c: &mut ConvConfig) {
    if let Some(p) = rewritten_pads(c) {
        [c.pad_d, c.pad_h, c.pad_w] = p;
    }
}

/// The pads `rewrite_pads` would set, if it would change anything.
fn rewritten_pads(c: &ConvConfig) -> Option<[u32; 3]> {
    let three_d = c.spatial_dim == 3;
    let dil_one = c.dilation_h == 1 && c.dilation_w == 1 && (!three_d || c.dilation_d == 1);
    let fil_one = c.fil_h == 1 && c.fil_w == 1 && (!three_d || c.fil_d == 1);
    if c.mode != ConvMode::Conv || !(dil_one || fil_one) {
        return None;
    }
    let same = |input: u32, fil: u32, stride: u32| -> u32 {
        let stride = stride.max(1);
        let r = input % stride;
        let p = if r == 0 {
            fil.saturating_sub(stride)
        } else {
            fil.saturating_sub(r)
        };
        p / 2
    };
    match c.pad_mode {
        PadMode::Default => None,
        PadMode::Valid => Some([0, 0, 0]),
        PadMode::Same => Some([
            if three_d {
                same(c.in_d, c.fil_d, c.conv_stride_d)
            } else {
                0
            },
            same(c.in_h, c.fil_h, c.conv_stride_h),
            same(c.in_w, c.fil_w, c.conv_stride_w),
        ]),
    }
}

/// 2-D: NCHW, NHWC, CHWN; 3-D: NCDHW, NDHWC (`ValidateLayoutInputParameters`, by dimension).
/// `field` names the layout in the error (`in_layout`, or the driver flag's long name).
fn check_layout(field: &'static str, spatial_dim: u8, layout: &str) -> Result<(), ConfigError> {
    if layouts(spatial_dim).contains(&layout) {
        Ok(())
    } else {
        Err(ConfigError::Layout {
            field,
            layout: layout.to_string(),
            spatial_dim,
        })
    }
}

impl ConvConfig {
    /// Checks that this is a convolution MIOpenDriver would run, in the canonical form that
    /// [`parse_line`](super::parse_line) produces (so `parse_line(driver_line(c)) == c` holds
    /// for every config that passes): sizes ≥ 1, 2 or 3 spatial dimensions, a group count that
    /// divides C and K, known layouts, an output of at least 1 per axis, transposed output pads
    /// below the stride; 2-D depth fields at their 2-D values (`in_d = fil_d = 1`, `pad_d = 0`,
    /// `conv_stride_d = dilation_d = 1`), transposed output pads 0 unless `-m trans`, pads
    /// already rewritten for `same`/`valid`, and an input data type (not INT32).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let c = self;
        if c.spatial_dim != 2 && c.spatial_dim != 3 {
            return Err(ConfigError::SpatialDim { got: c.spatial_dim });
        }
        if c.data_type == DataType::Int32 {
            return Err(ConfigError::Int32Input);
        }
        let three_d = c.spatial_dim == 3;
        let mut sizes = vec![
            (Field::Batchsize, c.batchsize),
            (Field::InChannels, c.in_channels),
            (Field::InH, c.in_h),
            (Field::InW, c.in_w),
            (Field::OutChannels, c.out_channels),
            (Field::FilH, c.fil_h),
            (Field::FilW, c.fil_w),
            (Field::StrideH, c.conv_stride_h),
            (Field::StrideW, c.conv_stride_w),
            (Field::DilationH, c.dilation_h),
            (Field::DilationW, c.dilation_w),
            (Field::GroupCount, c.group_count),
        ];
        if three_d {
            sizes.extend([
                (Field::InD, c.in_d),
                (Field::FilD, c.fil_d),
                (Field::StrideD, c.conv_stride_d),
                (Field::DilationD, c.dilation_d),
            ]);
        } else if (
            c.in_d,
            c.fil_d,
            c.pad_d,
            c.conv_stride_d,
            c.dilation_d,
            c.trans_output_pad_d,
        ) != (1, 1, 0, 1, 1, 0)
        {
            return Err(ConfigError::TwoDDepth);
        }
        if let Some((f, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError::Zero {
                field: long_name(*f),
            });
        }
        let g = c.group_count;
        if g > 1 {
            for (what, n) in [
                ("in_channels", c.in_channels),
                ("out_channels", c.out_channels),
            ] {
                if n % g != 0 {
                    return Err(ConfigError::GroupCount {
                        groups: g,
                        what,
                        count: n,
                    });
                }
            }
        }
        for (what, l) in [
            ("in_layout", &c.in_layout),
            ("fil_layout", &c.fil_layout),
            ("out_layout", &c.out_layout),
        ] {
            check_layout(what, c.spatial_dim, l)?;
        }
        let opads = [
            ('d', c.trans_output_pad_d, c.conv_stride_d),
            ('h', c.trans_output_pad_h, c.conv_stride_h),
            ('w', c.trans_output_pad_w, c.conv_stride_w),
        ];
        for (axis, opad, stride) in opads {
            if c.mode == ConvMode::Conv && opad != 0 {
                return Err(ConfigError::TransOutputPadOnConv { axis, pad: opad });
            }
            if c.mode == ConvMode::Trans && opad >= stride {
                return Err(ConfigError::TransOutputPadTooLarge {
                    axis,
                    pad: opad,
                    stride,
                });
            }
        }
        if let Some(p) = rewritten_pads(c) {
            if p != [c.pad_d, c.pad_h, c.pad_w] {
                return Err(ConfigError::PadsMismatch {
                    pads: [c.pad_d, c.pad_h, c.pad_w],
                    pad_mode: c.pad_mode,
                    expected: p,
                });
            }
        }
        output_dims(c)?;
        Ok(())
    }
}
