//! A [`ConvConfig`] as Shoal's generic [`Params`] (the `config_params` of a job), named after
//! MITuna's `conv_config` columns so the two line up column for column. Lossless:
//! `ConvConfig::from_params(&c.to_params()) == Ok(c)` for every valid config; `from_params`
//! ignores extra names (a `Params` may carry more) and validates what it builds.

use crate::problem::{ConfigError, ConvConfig, ConvMode, DataType, Direction, PadMode};
use shoal_model::Params;

/// The integer columns, in MITuna's order after `cmd`, `direction` and `spatial_dim`.
const INT_FIELDS: [&str; 22] = [
    "batchsize",
    "in_channels",
    "in_d",
    "in_h",
    "in_w",
    "out_channels",
    "fil_d",
    "fil_h",
    "fil_w",
    "pad_d",
    "pad_h",
    "pad_w",
    "conv_stride_d",
    "conv_stride_h",
    "conv_stride_w",
    "dilation_d",
    "dilation_h",
    "dilation_w",
    "trans_output_pad_d",
    "trans_output_pad_h",
    "trans_output_pad_w",
    "group_count",
];

fn ints(c: &ConvConfig) -> [u32; 22] {
    [
        c.batchsize,
        c.in_channels,
        c.in_d,
        c.in_h,
        c.in_w,
        c.out_channels,
        c.fil_d,
        c.fil_h,
        c.fil_w,
        c.pad_d,
        c.pad_h,
        c.pad_w,
        c.conv_stride_d,
        c.conv_stride_h,
        c.conv_stride_w,
        c.dilation_d,
        c.dilation_h,
        c.dilation_w,
        c.trans_output_pad_d,
        c.trans_output_pad_h,
        c.trans_output_pad_w,
        c.group_count,
    ]
}

impl ConvConfig {
    /// `cmd, direction, spatial_dim, batchsize, in_channels, in_d, in_h, in_w, out_channels,
    /// fil_d, fil_h, fil_w, pad_d, pad_h, pad_w, conv_stride_d/h/w, dilation_d/h/w,
    /// trans_output_pad_d/h/w, group_count, mode, pad_mode, in_layout, fil_layout, out_layout`;
    /// `cmd` is the driver sub-command (`conv`, `convfp16`, …), `direction` F/B/W, `mode`
    /// conv/trans, `pad_mode` default/same/valid.
    pub fn to_params(&self) -> Params {
        let mut p = Params::new();
        p.push("cmd", self.data_type.driver_command());
        p.push("direction", self.direction.letter().to_string());
        p.push("spatial_dim", self.spatial_dim.to_string());
        for (name, v) in INT_FIELDS.iter().zip(ints(self)) {
            p.push(*name, v.to_string());
        }
        p.push(
            "mode",
            if self.mode == ConvMode::Trans {
                "trans"
            } else {
                "conv"
            },
        );
        p.push(
            "pad_mode",
            match self.pad_mode {
                PadMode::Default => "default",
                PadMode::Same => "same",
                PadMode::Valid => "valid",
            },
        );
        p.push("in_layout", self.in_layout.clone());
        p.push("fil_layout", self.fil_layout.clone());
        p.push("out_layout", self.out_layout.clone());
        p
    }

    /// The inverse of [`to_params`](Self::to_params). Every name must be present; the result
    /// must pass [`validate`](Self::validate).
    pub fn from_params(p: &Params) -> Result<ConvConfig, ConfigError> {
        let get = |name: &'static str| p.get(name).ok_or(ConfigError::MissingParam { name });
        let int = |name: &'static str| -> Result<u32, ConfigError> {
            let v = get(name)?;
            v.parse().map_err(|_| ConfigError::NotAnInteger {
                name,
                value: v.to_string(),
            })
        };
        let cmd = get("cmd")?;
        let data_type =
            DataType::from_driver_command(cmd).ok_or_else(|| ConfigError::NotConvCommand {
                cmd: cmd.to_string(),
            })?;
        let dir = get("direction")?;
        let direction = match dir {
            "F" => Direction::Forward,
            "B" => Direction::BackwardData,
            "W" => Direction::BackwardWeights,
            _ => {
                return Err(ConfigError::BadDirection {
                    value: dir.to_string(),
                })
            }
        };
        let sd = int("spatial_dim")?;
        let spatial_dim = u8::try_from(sd).map_err(|_| ConfigError::BadSpatialDim { value: sd })?;
        let mut v = [0u32; 22];
        for (slot, name) in v.iter_mut().zip(INT_FIELDS) {
            *slot = int(name)?;
        }
        let mode = match get("mode")? {
            "conv" => ConvMode::Conv,
            "trans" => ConvMode::Trans,
            m => {
                return Err(ConfigError::BadMode {
                    value: m.to_string(),
                })
            }
        };
        let pad_mode = match get("pad_mode")? {
            "default" => PadMode::Default,
            "same" => PadMode::Same,
            "valid" => PadMode::Valid,
            m => {
                return Err(ConfigError::BadPadMode {
                    value: m.to_string(),
                })
            }
        };
        let c = ConvConfig {
            data_type,
            direction,
            spatial_dim,
            batchsize: v[0],
            in_channels: v[1],
            in_d: v[2],
            in_h: v[3],
            in_w: v[4],
            out_channels: v[5],
            fil_d: v[6],
            fil_h: v[7],
            fil_w: v[8],
            pad_d: v[9],
            pad_h: v[10],
            pad_w: v[11],
            conv_stride_d: v[12],
            conv_stride_h: v[13],
            conv_stride_w: v[14],
            dilation_d: v[15],
            dilation_h: v[16],
            dilation_w: v[17],
            trans_output_pad_d: v[18],
            trans_output_pad_h: v[19],
            trans_output_pad_w: v[20],
            group_count: v[21],
            mode,
            pad_mode,
            in_layout: get("in_layout")?.to_string(),
            fil_layout: get("fil_layout")?.to_string(),
            out_layout: get("out_layout")?.to_string(),
        };
        c.validate()?;
        Ok(c)
    }
}
