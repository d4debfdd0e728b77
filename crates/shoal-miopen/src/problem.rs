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
