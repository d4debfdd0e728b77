//! One convolution as MIOpenDriver (and MITuna's `conv_config` table) describes it: the x tensor,
//! the filter, the convolution descriptor, the data type from the driver command, and the
//! direction being tuned. MIOpen's own "problem" view (which swaps in and out for backward
//! directions) is derived from this in the key functions, never stored.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Data types as MIOpen names them in keys (`GetDataTypeName`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DataType {
    Fp32,
    Fp16,
    Bf16,
    Int8,
    Int32,
    Fp8,
    Bf8,
}

impl DataType {
    /// `FP32`, `FP16`, `BF16`, `INT8`, `INT32`, `FP8`, `BF8`.
    pub fn key_name(self) -> &'static str {
        match self {
            DataType::Fp32 => "FP32",
            DataType::Fp16 => "FP16",
            DataType::Bf16 => "BF16",
            DataType::Int8 => "INT8",
            DataType::Int32 => "INT32",
            DataType::Fp8 => "FP8",
            DataType::Bf8 => "BF8",
        }
    }

    /// The MIOpenDriver sub-command for this input data type.
    pub fn driver_command(self) -> &'static str {
        match self {
            DataType::Fp32 => "conv",
            DataType::Fp16 => "convfp16",
            DataType::Bf16 => "convbfp16",
            DataType::Int8 => "convint8",
            DataType::Int32 => "conv",
            DataType::Fp8 => "convfp8",
            DataType::Bf8 => "convbfp8",
        }
    }

    /// The data type of a driver sub-command (`conv` → FP32 …); `None` for other primitives.
    pub fn from_driver_command(cmd: &str) -> Option<DataType> {
        Some(match cmd {
            "conv" => DataType::Fp32,
            "convfp16" => DataType::Fp16,
            "convbfp16" => DataType::Bf16,
            "convint8" => DataType::Int8,
            "convfp8" => DataType::Fp8,
            "convbfp8" => DataType::Bf8,
            _ => return None,
        })
    }
}

/// The direction being tuned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Direction {
    Forward,
    BackwardData,
    BackwardWeights,
}

impl Direction {
    pub const ALL: [Direction; 3] = [
        Direction::Forward,
        Direction::BackwardData,
        Direction::BackwardWeights,
    ];

    /// `F`, `B`, `W` (`GetDirectionStr`).
    pub fn letter(self) -> char {
        match self {
            Direction::Forward => 'F',
            Direction::BackwardData => 'B',
            Direction::BackwardWeights => 'W',
        }
    }

    pub fn from_letter(c: char) -> Option<Direction> {
        Some(match c {
            'F' => Direction::Forward,
            'B' => Direction::BackwardData,
            'W' => Direction::BackwardWeights,
            _ => return None,
        })
    }

    /// The driver's `-F` bit for this direction (1, 2, 4).
    pub fn driver_bit(self) -> u8 {
        match self {
            Direction::Forward => 1,
            Direction::BackwardData => 2,
            Direction::BackwardWeights => 4,
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.letter())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConvMode {
    Conv,
    Trans,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PadMode {
    Default,
    Same,
    Valid,
}

/// A convolution config in the driver's view (x = input even for B and W), for one direction.
/// Field names follow MIOpenDriver's long flags and MITuna's `conv_config` columns. For 2-D
/// configs the depth fields hold the driver's 2-D values: `in_d = fil_d = 1`, and
/// `pad_d = 0`, `conv_stride_d = dilation_d = 1` as parsed (keys print what MIOpen prints).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ConvConfig {
    pub data_type: DataType,
    pub direction: Direction,
    pub spatial_dim: u8,
    pub batchsize: u32,
    pub in_channels: u32,
    pub in_d: u32,
    pub in_h: u32,
    pub in_w: u32,
    pub out_channels: u32,
    pub fil_d: u32,
    pub fil_h: u32,
    pub fil_w: u32,
    pub pad_d: u32,
    pub pad_h: u32,
    pub pad_w: u32,
    pub conv_stride_d: u32,
    pub conv_stride_h: u32,
    pub conv_stride_w: u32,
    pub dilation_d: u32,
    pub dilation_h: u32,
    pub dilation_w: u32,
    pub trans_output_pad_d: u32,
    pub trans_output_pad_h: u32,
    pub trans_output_pad_w: u32,
    pub group_count: u32,
    pub mode: ConvMode,
    pub pad_mode: PadMode,
    /// Upper-case layouts: `NCHW`, `NHWC`, `NCDHW`, `NDHWC` …
    pub in_layout: String,
    pub fil_layout: String,
    pub out_layout: String,
}

/// Why a [`ConvConfig`] is no convolution MIOpenDriver would run, or why parameters do not
/// describe one ([`ConvConfig::from_params`]). Each names the field and the value at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("spatial_dim must be 2 or 3, got {got}")]
    SpatialDim { got: u8 },
    #[error("INT32 is an output type, not a convolution input type")]
    Int32Input,
    /// A 2-D config whose depth fields are not the 2-D ones.
    #[error(
        "a 2-D config has in_d = fil_d = 1, pad_d = 0, conv_stride_d = dilation_d = 1 and \
         trans_output_pad_d = 0"
    )]
    TwoDDepth,
    /// A size, stride, dilation or group count of 0.
    #[error("{field} must be at least 1, got 0")]
    Zero { field: &'static str },
    /// `what` (`in_channels`, `out_channels`) is `count`, which `groups` does not divide.
    #[error("group count {groups} does not divide {what} {count}")]
    GroupCount {
        groups: u32,
        what: &'static str,
        count: u32,
    },
    /// `field` (`in_layout`, or the driver's `--in_layout`) names no layout of the dimension.
    #[error(
        "{field} `{layout}` is not a {spatial_dim}-D layout (use {allowed})",
        allowed = layouts(*.spatial_dim).join(", ")
    )]
    Layout {
        field: &'static str,
        layout: String,
        spatial_dim: u8,
    },
    #[error(
        "trans_output_pad_{axis} {pad} on a non-transposed convolution (it only applies to -m \
         trans)"
    )]
    TransOutputPadOnConv { axis: char, pad: u32 },
    #[error("trans_output_pad_{axis} {pad} must be smaller than the stride {stride}")]
    TransOutputPadTooLarge { axis: char, pad: u32, stride: u32 },
    /// Pads (d, h, w) other than those the pad mode sets.
    #[error(
        "pads {}x{}x{} do not match pad mode {pad_mode:?}, which sets {}x{}x{}",
        .pads[0], .pads[1], .pads[2], .expected[0], .expected[1], .expected[2]
    )]
    PadsMismatch {
        pads: [u32; 3],
        pad_mode: PadMode,
        expected: [u32; 3],
    },
    #[error("conv_stride_{axis} must be at least 1")]
    StrideZero { axis: char },
    #[error("dilation_{axis} must be at least 1")]
    DilationZero { axis: char },
    /// A transposed convolution whose output on `axis` is below 1.
    #[error(
        "output {axis} would be {output} (< 1): in_{axis} {input}, fil_{axis} {fil}, pad_{axis} \
         {pad}, stride {stride}, dilation {dilation}; the transposed output is padded away"
    )]
    PaddedAway {
        axis: char,
        output: i128,
        input: u32,
        fil: u32,
        pad: u32,
        stride: u32,
        dilation: u32,
    },
    #[error("output {axis} {output} is too large")]
    OutputTooLarge { axis: char, output: i128 },
    #[error("config parameter `{name}` is missing")]
    MissingParam { name: &'static str },
    #[error("config parameter {name}={value} is not a non-negative integer")]
    NotAnInteger { name: &'static str, value: String },
    #[error("cmd={cmd} is not a convolution command")]
    NotConvCommand { cmd: String },
    #[error("direction={value} is not F, B or W")]
    BadDirection { value: String },
    #[error("spatial_dim={value} is not 2 or 3")]
    BadSpatialDim { value: u32 },
    #[error("mode={value} is not conv or trans")]
    BadMode { value: String },
    #[error("pad_mode={value} is not default, same or valid")]
    BadPadMode { value: String },
}

/// The layouts MIOpenDriver accepts for a dimension (`ValidateLayoutInputParameters`): 2-D
/// NCHW, NHWC, CHWN; 3-D NCDHW, NDHWC.
pub(crate) fn layouts(spatial_dim: u8) -> &'static [&'static str] {
    if spatial_dim == 3 {
        &["NCDHW", "NDHWC"]
    } else {
        &["NCHW", "NHWC", "CHWN"]
    }
}
