//! A text perf-db key read back into a driver-view [`ConvConfig`]: the inverse of
//! [`perf_db_key`](super::perf_db_key), so that the perf records of a shipped database can be
//! tied to the configs a session tunes (`shoal import-db --store`).
//!
//! Why it is not always possible: the perf key holds the problem's `in` tensor and no output
//! extent (`docs/miopen-formats.md` §2.4). For a forward problem `in` is x, and the output
//! follows from it. For a backward problem `in` is dy, and x must be solved for from dy; with a
//! stride above 1 several x extents give the same dy (and so the same perf key), as do the
//! extents that MIOpen clamps to an output of 1. Such a key describes several configs at once,
//! and [`parse_perf_db_key`] says so rather than picking one.

use super::{output_dims, perf_db_key};
use crate::problem::{ConfigError, ConvConfig, ConvMode, Direction, PadMode};

/// Fields of a perf-db key: 21 numbers, then layout, data type and direction.
const FIELDS: usize = 24;

/// Why a text is not a convolution's perf-db key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PerfKeyError {
    #[error(
        "not a perf-db key: {fields} `x`-separated fields, a perf-db key has {expected}, e.g. \
         2x256x28x28x1x3x3x1x512x128x1x1x0x1x1x0x1x1x0x0x1xNCHWxFP32xF",
        expected = FIELDS
    )]
    FieldCount { fields: usize },
    /// Field `field` (1-based) is `text`, no count.
    #[error("perf-db key field {field}: `{text}` is not a count")]
    NotACount { field: usize, text: String },
    #[error("perf-db key: bias is {bias}: convolution keys have bias 0")]
    Bias { bias: u32 },
    #[error("perf-db key: spatial dimension {spatial_dim} is not 2 or 3")]
    SpatialDim { spatial_dim: u32 },
    #[error("unknown data type `{data_type}` in find-db key")]
    DataType { data_type: String },
    #[error("perf-db key: direction `{direction}` is not F, B or W")]
    Direction { direction: String },
    /// The key's sizes make no convolution.
    #[error("perf-db key: {0}")]
    Convolution(#[source] ConfigError),
    /// The key read back into a config whose own key (`printed`) differs: a layout that
    /// MIOpen's heuristic rewrites, for one.
    #[error("perf-db key `{key}` is not the key of the convolution it describes ({printed})")]
    NotItsConvolution { key: String, printed: String },
}

/// Parses `2x256x28x28x1x3x3x1x512x128x1x1x0x1x1x0x1x1x0x0x1xNCHWxFP32xF` (the 24 values of the
/// SQLite perf db's `config` row, `x`-joined). `Ok(None)` when the key is well formed but
/// several configs share it (a backward key whose input extents cannot be solved for uniquely,
/// see the module's documentation); `Err` when it is not a convolution's perf key at all.
pub fn parse_perf_db_key(key: &str) -> Result<Option<ConvConfig>, PerfKeyError> {
    let key = key.split('=').next().unwrap_or("").trim_end();
    let fields: Vec<&str> = key.split('x').collect();
    if fields.len() != FIELDS {
        return Err(PerfKeyError::FieldCount {
            fields: fields.len(),
        });
    }
    let mut n = [0u32; 21];
    for (i, (slot, f)) in n.iter_mut().zip(&fields).enumerate() {
        *slot = f
            .parse()
            .ok()
            .filter(|_| f.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| PerfKeyError::NotACount {
                field: i + 1,
                text: f.to_string(),
            })?;
    }
    let [sd, in_c, in_h, in_w, in_d, fil_h, fil_w, fil_d, out_c, batch, pad_h, pad_w, pad_d, st_h, st_w, st_d, dil_h, dil_w, dil_d, bias, group] =
        n;
    if bias != 0 {
        return Err(PerfKeyError::Bias { bias });
    }
    let three_d = match sd {
        2 => false,
        3 => true,
        _ => return Err(PerfKeyError::SpatialDim { spatial_dim: sd }),
    };
    let layout = fields[21].to_string();
    let data_type = super::parse::data_type(0, fields[22]).map_err(|_| PerfKeyError::DataType {
        data_type: fields[22].to_string(),
    })?;
    let direction = fields[23]
        .chars()
        .next()
        .filter(|_| fields[23].len() == 1)
        .and_then(Direction::from_letter)
        .ok_or_else(|| PerfKeyError::Direction {
            direction: fields[23].to_string(),
        })?;
    // The key's depth values for 2-D are 1 (extents) and 0 (pad, stride, dilation); the driver's
    // are 1, 0, 1 and 1.
    let depth = |v: u32, two_d: u32| if three_d { v } else { two_d };
    let mut c = ConvConfig {
        data_type,
        direction,
        spatial_dim: sd as u8,
        batchsize: batch,
        in_channels: in_c,
        in_d: depth(in_d, 1),
        in_h,
        in_w,
        out_channels: out_c,
        fil_d: depth(fil_d, 1),
        fil_h,
        fil_w,
        pad_d: depth(pad_d, 0),
        pad_h,
        pad_w,
        conv_stride_d: depth(st_d, 1),
        conv_stride_h: st_h,
        conv_stride_w: st_w,
        dilation_d: depth(dil_d, 1),
        dilation_h: dil_h,
        dilation_w: dil_w,
        trans_output_pad_d: 0,
        trans_output_pad_h: 0,
        trans_output_pad_w: 0,
        group_count: group,
        mode: ConvMode::Conv,
        pad_mode: PadMode::Default,
        in_layout: layout.clone(),
        fil_layout: layout.clone(),
        out_layout: layout,
    };
    if direction != Direction::Forward {
        // The key's `in` is dy: K channels and the output extents; x is solved for.
        let dy = [c.in_d, c.in_h, c.in_w];
        (c.in_channels, c.out_channels) = (out_c, in_c);
        let axes = [
            (dy[0], c.fil_d, c.pad_d, c.conv_stride_d, c.dilation_d),
            (dy[1], c.fil_h, c.pad_h, c.conv_stride_h, c.dilation_h),
            (dy[2], c.fil_w, c.pad_w, c.conv_stride_w, c.dilation_w),
        ];
        let mut x = [1u32; 3];
        for (i, &(y, f, p, s, d)) in axes.iter().enumerate() {
            if i == 0 && !three_d {
                continue;
            }
            match inputs_giving(y, f, p, s, d)[..] {
                [only] => x[i] = only,
                _ => return Ok(None),
            }
        }
        [c.in_d, c.in_h, c.in_w] = x;
        let (od, oh, ow) = output_dims(&c).map_err(PerfKeyError::Convolution)?;
        if [if three_d { od } else { 1 }, oh, ow] != dy {
            return Ok(None);
        }
    }
    c.validate().map_err(PerfKeyError::Convolution)?;
    let printed = perf_db_key(&c);
    if printed != key {
        // Layouts that MIOpen's heuristic rewrites, for one: not a key this config prints.
        return Err(PerfKeyError::NotItsConvolution {
            key: key.to_string(),
            printed,
        });
    }
    Ok(Some(c))
}

/// The input extents (at most two: enough to tell one from several) whose output, by MIOpen's
/// formula for a plain convolution clamped to 1, is `y`, for filter `f`, pad `p`, stride `s` and
/// dilation `d`. Only `x0 .. x0 + s` can give `y` unclamped (`x0` the smallest that does), and
/// every input below `x0` gives 1: so the candidates are few whatever the extents.
fn inputs_giving(y: u32, f: u32, p: u32, s: u32, d: u32) -> Vec<u32> {
    let (y, f, p, s, d) = (
        i64::from(y),
        i64::from(f),
        i64::from(p),
        i64::from(s.max(1)),
        i64::from(d.max(1)),
    );
    let output = |x: i64| ((x - (1 + d * (f - 1)) + 2 * p) / s + 1).max(1);
    let x0 = (y - 1) * s - 2 * p + d * (f - 1) + 1;
    let first = if y == 1 { 1 } else { x0.max(1) };
    (first..x0 + s)
        .filter(|&x| output(x) == y)
        .filter_map(|x| u32::try_from(x).ok())
        .take(2)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver;
    use crate::keys::find_db_key;

    fn config(line: &str) -> ConvConfig {
        match driver::parse_line(line).unwrap() {
            driver::LineKind::Conv { configs, .. } => configs[0].clone(),
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn forward_and_unit_stride_backward_keys_read_back_whole() {
        for line in [
            "./bin/MIOpenDriver conv -n 128 -c 256 -H 28 -W 28 -k 512 -y 3 -x 3 -p 1 -q 1 -u 1 -v 1 -l 1 -j 1 -F 1",
            "./bin/MIOpenDriver convfp16 -n 16 -c 1024 -H 14 -W 14 -k 1024 -y 3 -x 3 -p 1 -q 1 -u 1 -v 1 -l 1 -j 1 -g 32 -F 1",
            "./bin/MIOpenDriver conv -n 16 -c 512 -H 13 -W 13 -k 1000 -y 1 -x 1 -p 0 -q 0 -u 1 -v 1 -l 1 -j 1 -F 2",
            "./bin/MIOpenDriver conv -n 8 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1 -u 1 -v 1 -l 1 -j 1 -F 4",
            "./bin/MIOpenDriver conv -n 4 -c 256 --in_d 16 -H 56 -W 56 -k 512 --fil_d 1 -y 1 -x 1 --pad_d 0 -p 0 -q 0 --conv_stride_d 2 -u 2 -v 2 --dilation_d 1 -l 1 -j 1 --spatial_dim 3 -F 1",
        ] {
            let c = config(line);
            let back = parse_perf_db_key(&perf_db_key(&c))
                .unwrap()
                .unwrap_or_else(|| panic!("{line}: ambiguous"));
            assert_eq!(find_db_key(&back), find_db_key(&c), "{line}");
            assert_eq!(perf_db_key(&back), perf_db_key(&c), "{line}");
        }
        // The reference's own example (docs/miopen-formats.md §2.4), with a record after it.
        let c = parse_perf_db_key(
            "2x1024x14x14x1x3x3x1x1024x16x1x1x0x1x1x0x1x1x0x0x32xNCHWxFP16xF=A:5",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            find_db_key(&c),
            "1024-14-14-3x3-1024-14-14-16-1x1-1x1-1x1-0-NCHW-FP16-F_g32"
        );
    }

    #[test]
    fn strided_backward_keys_name_several_configs() {
        // x of 56 or 57 both give dy 28 with stride 2: the key cannot tell them apart.
        let c = config(
            "./bin/MIOpenDriver conv -n 8 -c 64 -H 56 -W 56 -k 128 -y 3 -x 3 -p 1 -q 1 -u 2 -v 2 -l 1 -j 1 -F 2",
        );
        assert_eq!(parse_perf_db_key(&perf_db_key(&c)), Ok(None));
        // A clamped output of 1 has several inputs too.
        assert_eq!(inputs_giving(1, 3, 0, 1, 1), vec![1, 2]);
        assert_eq!(inputs_giving(14, 3, 1, 1, 1), vec![14]);
    }

    #[test]
    fn what_is_not_a_perf_key_is_refused_by_field() {
        for (key, why) in [
            (
                "1000-13-13-1x1-512-13-13-16-0x0-1x1-1x1-0-NCHW-FP16-B",
                "24",
            ),
            (
                "2x1024x14x14x1x3x3x1x1024x16x1x1x0x1x1x0x1x1x0x0x32xNCHWxFP99xF",
                "FP99",
            ),
            (
                "2x1024x14x14x1x3x3x1x1024x16x1x1x0x1x1x0x1x1x0x0x32xNCHWxFP16xQ",
                "`Q`",
            ),
            (
                "2x1024x14x14x1x3x3x1x1024x16x1x1x0x1x1x0x1x1x0x1x32xNCHWxFP16xF",
                "bias",
            ),
            (
                "2x-1x14x14x1x3x3x1x1024x16x1x1x0x1x1x0x1x1x0x0x32xNCHWxFP16xF",
                "field 2",
            ),
            (
                "4x1024x14x14x1x3x3x1x1024x16x1x1x0x1x1x0x1x1x0x0x32xNCHWxFP16xF",
                "spatial",
            ),
        ] {
            let e = parse_perf_db_key(key).unwrap_err().to_string();
            assert!(e.contains(why), "{key}: {e}");
        }
    }
}
