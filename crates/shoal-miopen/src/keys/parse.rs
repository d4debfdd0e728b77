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
use crate::problem::{ConvConfig, ConvMode, DataType, Direction, PadMode};

/// Parses `256-28-28-3x3-512-28-28-128-1x1-1x1-1x1-0-NCHW-FP32-F` (also with `_g<n>`, three
/// layouts, 3-D, and an optional `=…` record after the key). For `B` and `W` the key's first
/// tensor is dy, so C and K (and x's extents) are swapped back into the driver's view.
pub fn parse_find_db_key(key: &str) -> Result<ConvConfig, String> {
    parse_key_at(key).map_err(|(_, message)| message)
}

/// As [`parse_find_db_key`], with the byte offset (in `key`) of the field at fault.
pub(crate) fn parse_key_at(key: &str) -> Result<ConvConfig, (usize, String)> {
    let key = key.split('=').next().unwrap_or("").trim_end();
    let mut fields = Vec::new();
    let mut offset = 0;
    for f in key.split('-') {
        fields.push((offset, f));
        offset += f.len() + 1;
    }
    let n = fields.len();
    let parts = |i: usize| fields.get(i).map_or(0, |(_, f)| f.split('x').count());
    let three_d = match n {
        15 if parts(3) == 2 => false,
        17 if parts(3) == 2 => false,
        17 | 19 if parts(4) == 3 => true,
        _ => {
            return Err((
                0,
                format!(
                    "not a find-db key: {n} `-`-separated fields; a 2-D key has 15 (17 with three \
                     layouts), a 3-D key 17 (19), e.g. \
                     256-28-28-3x3-512-28-28-128-1x1-1x1-1x1-0-NCHW-FP32-F"
                ),
            ))
        }
    };
    let mut r = Reader {
        fields: &fields,
        pos: 0,
    };
    let sd = if three_d { 3 } else { 2 };
    let in_c = r.int("input channels")?;
    let in_dhw = r.extents(sd, "input")?;
    let fil = r.triple(sd, "filter")?;
    let out_c = r.int("output channels")?;
    let out_dhw = r.extents(sd, "output")?;
    let batch = r.int("batch size")?;
    let pad = r.triple(sd, "pad")?;
    let stride = r.triple(sd, "stride")?;
    let dilation = r.triple(sd, "dilation")?;
    let (bias_at, bias) = r.next();
    if bias != "0" {
        return Err((
            bias_at,
            format!("bias field is `{bias}`: convolution keys have bias 0"),
        ));
    }
    let layouts: Vec<(usize, &str)> = (0..n - r.pos - 2).map(|_| r.next()).collect();
    let (dt_at, dt) = r.next();
    let data_type = match dt {
        "FP32" => DataType::Fp32,
        "FP16" => DataType::Fp16,
        "BF16" => DataType::Bf16,
        "INT8" | "INT8INT8INT32" => DataType::Int8,
        "FP8" => DataType::Fp8,
        "BF8" => DataType::Bf8,
        _ => return Err((dt_at, format!("unknown data type `{dt}` in find-db key"))),
    };
    let (dir_at, last) = r.next();
    let (dir, suffix) = last.split_at(last.len().min(1));
    let direction = dir
        .chars()
        .next()
        .and_then(Direction::from_letter)
        .ok_or_else(|| (dir_at, format!("direction `{dir}` is not F, B or W")))?;
    let group_count = match suffix {
        "" => 1,
        s => match s.strip_prefix("_g").map(str::parse::<u32>) {
            Some(Ok(g)) if g >= 1 => g,
            _ => {
                return Err((
                    dir_at + 1,
                    format!("unsupported key suffix `{s}` (only `_g<groups>` is known here)"),
                ))
            }
        },
    };
    let layout = |i: usize| layouts[i].1.to_string();
    let (key_in, key_wei, key_out) = match layouts.len() {
        1 => (layout(0), layout(0), layout(0)),
        _ => (layout(0), layout(1), layout(2)),
    };
    // Back to the driver's view: for B and W the key's `in` is dy (K channels, output extents).
    let forward = direction == Direction::Forward;
    let (x_c, x_dhw, y_c, y_dhw) = if forward {
        (in_c, in_dhw, out_c, out_dhw)
    } else {
        (out_c, out_dhw, in_c, in_dhw)
    };
    let (in_layout, out_layout) = if forward {
        (key_in, key_out)
    } else {
        (key_out, key_in)
    };
    let depth = |v: [u32; 3], two_d: u32| if three_d { v[0] } else { two_d };
    let config = ConvConfig {
        data_type,
        direction,
        spatial_dim: sd as u8,
        batchsize: batch,
        in_channels: x_c,
        in_d: depth(x_dhw, 1),
        in_h: x_dhw[1],
        in_w: x_dhw[2],
        out_channels: y_c,
        fil_d: depth(fil, 1),
        fil_h: fil[1],
        fil_w: fil[2],
        pad_d: depth(pad, 0),
        pad_h: pad[1],
        pad_w: pad[2],
        conv_stride_d: depth(stride, 1),
        conv_stride_h: stride[1],
        conv_stride_w: stride[2],
        dilation_d: depth(dilation, 1),
        dilation_h: dilation[1],
        dilation_w: dilation[2],
        trans_output_pad_d: 0,
        trans_output_pad_h: 0,
        trans_output_pad_w: 0,
        group_count,
        mode: ConvMode::Conv,
        pad_mode: PadMode::Default,
        in_layout,
        fil_layout: key_wei,
        out_layout,
    };
    // The key's output must follow from its input. `same`/`valid` padding is not in the key, but
    // it can make the output differ from what the pads give (an even filter padded `same`):
    // such a key reads back with the pad mode that explains it.
    let output = |c: &ConvConfig| -> Result<[u32; 3], String> {
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
    let default_out = default_out.map_err(|e| {
        (
            0,
            format!("find-db key describes no valid convolution: {e}"),
        )
    })?;
    let shown = |v: [u32; 3]| {
        if three_d {
            format!("{}x{}x{}", v[0], v[1], v[2])
        } else {
            format!("{}x{}", v[1], v[2])
        }
    };
    let which = if forward { "output" } else { "input (dy)" };
    Err((
        0,
        format!(
            "inconsistent find-db key: its {which} is {} but input {}, filter, pad, stride and \
             dilation give {}",
            shown(y_dhw),
            shown(x_dhw),
            shown(default_out)
        ),
    ))
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

    fn int(&mut self, what: &str) -> Result<u32, (usize, String)> {
        let (at, f) = self.next();
        number(at, f, what)
    }

    /// `d-h-w` (3-D) or `h-w` (2-D) as separate fields; 2-D depth reads as 1.
    fn extents(&mut self, sd: usize, what: &str) -> Result<[u32; 3], (usize, String)> {
        let mut v = [1u32; 3];
        for slot in v.iter_mut().skip(3 - sd) {
            *slot = self.int(what)?;
        }
        Ok(v)
    }

    /// `dxhxw` (3-D) or `hxw` (2-D) in one field; 2-D depth reads as 0.
    fn triple(&mut self, sd: usize, what: &str) -> Result<[u32; 3], (usize, String)> {
        let (at, f) = self.next();
        let parts: Vec<&str> = f.split('x').collect();
        if parts.len() != sd {
            return Err((
                at,
                format!("{what} field `{f}` should have {sd} `x`-separated values"),
            ));
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

fn number(at: usize, text: &str, what: &str) -> Result<u32, (usize, String)> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err((
            at,
            format!("{what}: `{text}` is not a non-negative integer"),
        ));
    }
    text.parse()
        .map_err(|_| (at, format!("{what}: `{text}` is too large")))
}
