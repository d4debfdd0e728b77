//! The strings MIOpen looks a convolution up by, computed from a driver-view [`ConvConfig`]:
//! the find-db key (`ProblemDescription::Serialize`), the text perf-db key (the `x`-joined
//! `VisitAll` of MIOpen ≥ 3.2), the network config (`MakeNetworkConfig`), and the output size
//! they all need (`GetForwardOutputTensorWithLayout`). `parse` reads a find-db key back.
//!
//! Why a separate "problem view": MIOpen describes a backward problem with the tensors swapped
//! (`in` is dy, `out` is dx), and a transposed convolution with the directions swapped, so the
//! key of `-F 2` starts with K, not C. [`ProblemView`] does that swap in one place, exactly as
//! `src/ocl/convolutionocl.cpp` and `src/convolution_api.cpp` build their problems
//! (`docs/miopen-formats.md` §1.1–§1.3); every writer below only prints it.
//!
//! int8: MIOpenDriver's own `convint8` makes y INT32, so MIOpen's API would print
//! `INT8INT8INT32`; fin builds every tensor as INT8 and the shipped databases (written by
//! MITuna from fin's `db_key`) say plain `INT8`. Shoal tunes through fin and exports for those
//! databases, so keys here print `INT8` (the one data type name, [`DataType::key_name`]).

mod parse;
mod perf_key;

pub use parse::{parse_find_db_key, FindKeyError};
pub use perf_key::{parse_perf_db_key, PerfKeyError};

use crate::problem::{ConfigError, ConvConfig, ConvMode, DataType, Direction, PadMode};
use std::fmt::Write as _;

/// Find-db key (§1.2 a), e.g. `256-28-28-3x3-512-28-28-128-1x1-1x1-1x1-0-NCHW-FP32-F`, with
/// three layouts when they are not all NCHW (NCDHW), and `_g<n>` for grouped convolutions.
/// Keys of a config that [`ConvConfig::validate`] rejects are best effort.
pub fn find_db_key(c: &ConvConfig) -> String {
    let p = ProblemView::new(c);
    let mut s = String::new();
    let _ = write!(
        s,
        "{}-{}-{}-{}-{}-{}-{}-{}-{}-0-{}-{}-{}",
        p.in_c,
        p.dhw('-', p.in_dhw),
        p.dhw('x', p.fil),
        p.out_c,
        p.dhw('-', p.out_dhw),
        p.n,
        p.dhw('x', p.pad),
        p.dhw('x', p.stride),
        p.dhw('x', p.dilation),
        p.layouts('-'),
        p.data_type.key_name(),
        p.direction.letter()
    );
    if p.group != 1 {
        let _ = write!(s, "_g{}", p.group);
    }
    s
}

/// Text perf-db key of MIOpen ≥ 3.2 (§1.2 b), e.g.
/// `2x256x28x28x1x3x3x1x512x128x1x1x0x1x1x0x1x1x0x0x1xNCHWxFP32xF`: the 24 values of the
/// SQLite `config` row joined by `x` (depth after height and width; 2-D depth is 1 and 2-D pad,
/// stride and dilation depth are 0; one layout, the problem's `in` layout).
pub fn perf_db_key(c: &ConvConfig) -> String {
    let p = ProblemView::new(c);
    let [in_d, in_h, in_w] = p.in_dhw;
    let [fil_d, fil_h, fil_w] = p.fil;
    let [pad_d, pad_h, pad_w] = p.pad;
    let [st_d, st_h, st_w] = p.stride;
    let [dil_d, dil_h, dil_w] = p.dilation;
    format!(
        "{}x{}x{in_h}x{in_w}x{in_d}x{fil_h}x{fil_w}x{fil_d}x{}x{}x{pad_h}x{pad_w}x{pad_d}\
         x{st_h}x{st_w}x{st_d}x{dil_h}x{dil_w}x{dil_d}x0x{}x{}x{}x{}",
        p.spatial_dim,
        p.in_c,
        p.out_c,
        p.n,
        p.group,
        p.in_layout,
        p.data_type.key_name(),
        p.direction.letter()
    )
}

/// Network config (§1.2 c), current form with the alpha/beta case (`Default`: Shoal's problems
/// have alpha = 1, beta = 0), e.g.
/// `1024x14x14x1x1x256x14x14x128xNCHWxFP32x0x0x1x1x1x1x1xFxDefault`. Not a file key: the
/// invoker-cache key, and fin's `network_config` output.
pub fn network_config(c: &ConvConfig) -> String {
    let p = ProblemView::new(c);
    format!(
        "{}x{}x{}x{}x{}x{}x{}x{}x{}x{}x{}x{}x{}xDefault",
        p.in_c,
        p.dhw('x', p.in_dhw),
        p.dhw('x', p.fil),
        p.out_c,
        p.dhw('x', p.out_dhw),
        p.n,
        p.layouts('x'),
        p.data_type.key_name(),
        p.dhw('x', p.pad),
        p.dhw('x', p.stride),
        p.dhw('x', p.dilation),
        p.group,
        p.direction.letter()
    )
}

/// The forward output size `(out_d, out_h, out_w)` of the driver's x (`out_d` = 1 for 2-D), as
/// `ConvolutionDescriptor::GetForwardOutputTensorWithLayout` computes it: `same`/`valid` padding
/// formulas for a convolution with all dilations 1, the transposed formula for `-m trans`, the
/// default formula otherwise. A convolution whose (dilated) filter is larger than its padded input
/// gets an output size of 1 on that axis, as MIOpen's own formula clamps it
/// (`std::max(1, …)`); shipped find dbs hold such entries. A transposed convolution whose output
/// is padded away is an error.
pub fn output_dims(c: &ConvConfig) -> Result<(u32, u32, u32), ConfigError> {
    let dims = spatial(c);
    for &(axis, _, _, _, stride, dil, _) in &dims {
        if stride == 0 {
            return Err(ConfigError::StrideZero { axis });
        }
        if dil == 0 {
            return Err(ConfigError::DilationZero { axis });
        }
    }
    let mut out = [1u32; 3];
    let first = 3 - dims.len();
    for (i, d) in dims.iter().enumerate() {
        let (axis, input, fil, pad, stride, dil, _) = *d;
        let mut v = raw_output(c, &dims, i);
        if v < 1 {
            if c.mode == ConvMode::Trans {
                return Err(ConfigError::PaddedAway {
                    axis,
                    output: v,
                    input,
                    fil,
                    pad,
                    stride,
                    dilation: dil,
                });
            }
            v = 1;
        }
        out[first + i] =
            u32::try_from(v).map_err(|_| ConfigError::OutputTooLarge { axis, output: v })?;
    }
    Ok((out[0], out[1], out[2]))
}

/// `(axis name, in, fil, pad, stride, dilation, trans output pad)` per spatial axis, outermost
/// first (d, h, w for 3-D; h, w for 2-D).
type Axis = (char, u32, u32, u32, u32, u32, u32);

fn spatial(c: &ConvConfig) -> Vec<Axis> {
    let all = [
        (
            'd',
            c.in_d,
            c.fil_d,
            c.pad_d,
            c.conv_stride_d,
            c.dilation_d,
            c.trans_output_pad_d,
        ),
        (
            'h',
            c.in_h,
            c.fil_h,
            c.pad_h,
            c.conv_stride_h,
            c.dilation_h,
            c.trans_output_pad_h,
        ),
        (
            'w',
            c.in_w,
            c.fil_w,
            c.pad_w,
            c.conv_stride_w,
            c.dilation_w,
            c.trans_output_pad_w,
        ),
    ];
    if c.spatial_dim == 3 {
        all.to_vec()
    } else {
        all[1..].to_vec()
    }
}

fn all_dilations_one(dims: &[Axis]) -> bool {
    dims.iter().all(|d| d.5 == 1)
}

/// One output extent with MIOpen's arithmetic (`ptrdiff_t`, division truncating toward zero),
/// before any clamping. Strides and dilations of 0 are read as 1 (callers check them first).
fn raw_output(c: &ConvConfig, dims: &[Axis], i: usize) -> i128 {
    let (_, input, fil, pad, stride, dil, opad) = dims[i];
    let (input, fil, pad) = (i128::from(input), i128::from(fil), i128::from(pad));
    let (stride, dil, opad) = (
        i128::from(stride.max(1)),
        i128::from(dil.max(1)),
        i128::from(opad),
    );
    let ceil_div = |x: i128, y: i128| (x + y - 1) / y;
    match (c.mode, c.pad_mode) {
        (ConvMode::Conv, PadMode::Same) if all_dilations_one(dims) => ceil_div(input, stride),
        (ConvMode::Conv, PadMode::Valid) if all_dilations_one(dims) => {
            ceil_div(input - fil + 1, stride)
        }
        (ConvMode::Trans, _) => stride * (input - 1) + 1 + dil * (fil - 1) - 2 * pad + opad,
        (ConvMode::Conv, _) => (input - (1 + dil * (fil - 1)) + 2 * pad) / stride + 1,
    }
}

/// Output extents as MIOpen computes them for the key, clamped to at least 1 (best effort for the
/// transposed configs that [`output_dims`] rejects).
fn clamped_output(c: &ConvConfig) -> [u32; 3] {
    let dims = spatial(c);
    let mut out = [1u32; 3];
    let first = 3 - dims.len();
    for i in 0..dims.len() {
        out[first + i] = u32::try_from(raw_output(c, &dims, i).max(1)).unwrap_or(u32::MAX);
    }
    out
}

/// MIOpen's `conv::ProblemDescription` of one driver-view config and direction: the tensor
/// called `in` (x for forward, dy for backward), the weights, the tensor called `out`, the
/// problem direction, and the three layouts after `HeuristicUpdateLayouts`. Depth values follow
/// the problem getters: for 2-D, extents print as 1 and pad/stride/dilation depth as 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ProblemView {
    pub spatial_dim: u8,
    pub direction: Direction,
    pub data_type: DataType,
    pub n: u32,
    pub in_c: u32,
    pub in_dhw: [u32; 3],
    pub out_c: u32,
    pub out_dhw: [u32; 3],
    pub fil: [u32; 3],
    pub pad: [u32; 3],
    pub stride: [u32; 3],
    pub dilation: [u32; 3],
    pub group: u32,
    pub in_layout: String,
    pub weights_layout: String,
    pub out_layout: String,
}

impl ProblemView {
    pub fn new(c: &ConvConfig) -> ProblemView {
        let three_d = c.spatial_dim == 3;
        let [od, oh, ow] = clamped_output(c);
        let x_dhw = [if three_d { c.in_d } else { 1 }, c.in_h, c.in_w];
        let y_dhw = [if three_d { od } else { 1 }, oh, ow];
        let depth = |v: u32| if three_d { v } else { 0 };
        let group = c.group_count.max(1);
        // Which of x and y MIOpen calls `in`, and the direction it tunes (§1.1): backward
        // problems swap the tensors; a transposed convolution swaps Forward and BackwardData,
        // and its weight-gradient problem keeps x as `in`.
        let (x_is_in, direction) = match (c.mode, c.direction) {
            (ConvMode::Conv, d) => (d == Direction::Forward, d),
            (ConvMode::Trans, Direction::Forward) => (true, Direction::BackwardData),
            (ConvMode::Trans, Direction::BackwardData) => (false, Direction::Forward),
            (ConvMode::Trans, Direction::BackwardWeights) => (true, Direction::BackwardWeights),
        };
        let x = (c.in_channels, x_dhw, c.in_layout.as_str());
        let y = (c.out_channels, y_dhw, c.out_layout.as_str());
        let (pin, pout) = if x_is_in { (x, y) } else { (y, x) };
        // Weights: (K, C/g, …) for a convolution, (C, K/g, …) for a transposed one.
        let wei_nc = match c.mode {
            ConvMode::Conv => (c.out_channels, c.in_channels / group),
            ConvMode::Trans => (c.in_channels, c.out_channels / group),
        };
        let fil = [if three_d { c.fil_d } else { 1 }, c.fil_h, c.fil_w];
        let (in_layout, weights_layout, out_layout) = heuristic_layouts(
            c.spatial_dim,
            (c.batchsize, pin.0, pin.1, pin.2),
            (wei_nc.0, wei_nc.1, fil, c.fil_layout.as_str()),
            (c.batchsize, pout.0, pout.1, pout.2),
        );
        ProblemView {
            spatial_dim: c.spatial_dim,
            direction,
            data_type: c.data_type,
            n: c.batchsize,
            in_c: pin.0,
            in_dhw: pin.1,
            out_c: pout.0,
            out_dhw: pout.1,
            fil,
            pad: [depth(c.pad_d), c.pad_h, c.pad_w],
            stride: [depth(c.conv_stride_d), c.conv_stride_h, c.conv_stride_w],
            dilation: [depth(c.dilation_d), c.dilation_h, c.dilation_w],
            group,
            in_layout,
            weights_layout,
            out_layout,
        }
    }

    /// `PrintDHW`: `d<sep>h<sep>w` for 3-D, `h<sep>w` for 2-D.
    fn dhw(&self, sep: char, v: [u32; 3]) -> String {
        if self.spatial_dim == 3 {
            format!("{}{sep}{}{sep}{}", v[0], v[1], v[2])
        } else {
            format!("{}{sep}{}", v[1], v[2])
        }
    }

    /// One layout when all three are NCHW (or all NCDHW), else in, weights, out.
    fn layouts(&self, sep: char) -> String {
        let same = self.in_layout == self.weights_layout && self.in_layout == self.out_layout;
        if same && (self.in_layout == "NCHW" || self.in_layout == "NCDHW") {
            self.in_layout.clone()
        } else {
            format!(
                "{}{sep}{}{sep}{}",
                self.in_layout, self.weights_layout, self.out_layout
            )
        }
    }
}

/// `(dim0, dim1, [d, h, w], declared layout)` of one packed tensor, dims in N,C,(D),H,W order.
type TensorDesc<'a> = (u32, u32, [u32; 3], &'a str);

/// `ProblemDescription::HeuristicUpdateLayouts`: the first of NCHW, NHWC, CHWN, NCDHW that the
/// strides of all three tensors allow (each packed in its declared layout) becomes the layout
/// of all three; if none fits, the declared layouts stay. It only changes anything for
/// degenerate extents (a 1x1 filter declared NCHW next to NHWC activations, say).
fn heuristic_layouts(
    spatial_dim: u8,
    a: TensorDesc,
    w: TensorDesc,
    b: TensorDesc,
) -> (String, String, String) {
    let tensors = [a, w, b];
    for candidate in ["NCHW", "NHWC", "CHWN", "NCDHW"] {
        if tensors
            .iter()
            .all(|t| possible_layout(spatial_dim, *t, candidate))
        {
            return (candidate.into(), candidate.into(), candidate.into());
        }
    }
    (a.3.to_string(), w.3.to_string(), b.3.to_string())
}

/// `TensorDescriptor::IsPossibleLayout4D5D`: the strides read in `candidate` order never grow.
fn possible_layout(spatial_dim: u8, t: TensorDesc, candidate: &str) -> bool {
    let canonical = if spatial_dim == 3 { "NCDHW" } else { "NCHW" };
    if candidate.len() != canonical.len() || t.3.len() != canonical.len() {
        return false;
    }
    let (n, c, [d, h, w], declared) = t;
    let len = |letter: char| -> u64 {
        u64::from(match letter {
            'N' => n,
            'C' => c,
            'D' => d,
            'H' => h,
            _ => w,
        })
    };
    // Packed strides of the declared layout: the last letter is contiguous.
    let mut strides = Vec::with_capacity(declared.len());
    let mut acc = 1u64;
    for letter in declared.chars().rev() {
        strides.push((letter, acc));
        acc = acc.saturating_mul(len(letter));
    }
    let stride = |letter: char| strides.iter().find(|(l, _)| *l == letter).map(|(_, s)| *s);
    let mut prev = u64::MAX;
    for letter in candidate.chars() {
        match stride(letter) {
            Some(s) if s <= prev => prev = s,
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nchw(layout: &str) -> String {
        layout.to_string()
    }

    #[test]
    fn heuristic_keeps_plain_layouts_and_unifies_a_degenerate_filter() {
        let x = (8, 64, [1, 14, 14], "NHWC");
        let w1 = (128, 64, [1, 1, 1], "NCHW");
        let y = (8, 128, [1, 14, 14], "NHWC");
        // A 1x1 filter packed NCHW has NHWC-compatible strides: all three become NHWC.
        assert_eq!(
            heuristic_layouts(2, x, w1, y),
            (nchw("NHWC"), nchw("NHWC"), nchw("NHWC"))
        );
        // A 3x3 filter packed NCHW does not: the declared layouts stay.
        let w3 = (128, 64, [1, 3, 3], "NCHW");
        assert_eq!(
            heuristic_layouts(2, x, w3, y),
            (nchw("NHWC"), nchw("NCHW"), nchw("NHWC"))
        );
        // NDHWC is not in MIOpen's candidate list: 3-D NDHWC stays NDHWC.
        let x3 = (2, 8, [4, 6, 6], "NDHWC");
        let w33 = (8, 8, [3, 3, 3], "NDHWC");
        assert_eq!(
            heuristic_layouts(3, x3, w33, x3),
            (nchw("NDHWC"), nchw("NDHWC"), nchw("NDHWC"))
        );
    }
}
