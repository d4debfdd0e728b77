//! Helpers shared by the `fin_*` and `export_*` integration tests: where the recorded fin
//! fixtures are, and a compact way to write a driver-view convolution.
#![allow(dead_code)]

use shoal_miopen::{ConvConfig, ConvMode, DataType, Direction, PadMode};
use std::path::PathBuf;

/// MIFin's recorded inputs and outputs (MIT license), copied from MIFin's `src/tests/` into
/// `tests/fin-fixtures` (see `docs/data-provenance.md`), or `$SHOAL_FIN_FIXTURES`.
pub fn fixtures_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("SHOAL_FIN_FIXTURES") {
        return PathBuf::from(dir);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fin-fixtures")
}

pub fn fixture(name: &str) -> String {
    let path = fixtures_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "fin fixture {} not readable ({e}); the copies live in tests/fin-fixtures \
             (or point SHOAL_FIN_FIXTURES at another copy of MIFin's src/tests)",
            path.display()
        )
    })
}

pub fn fixture_json(name: &str) -> serde_json::Value {
    serde_json::from_str(&fixture(name)).unwrap()
}

pub fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

pub fn golden(name: &str) -> String {
    let path = golden_dir().join(name);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("golden file {} not readable: {e}", path.display()))
}

/// A 2-D convolution as `MIOpenDriver <cmd> -n n -c c -H h -W w -k k -y y -x x -p p -q q
/// -u u -v v -l 1 -j 1 -g 1 -F <dir>` (NCHW).
#[allow(clippy::too_many_arguments)]
pub fn conv2d(
    data_type: DataType,
    direction: Direction,
    n: u32,
    c: u32,
    hw: (u32, u32),
    k: u32,
    fil: (u32, u32),
    pad: (u32, u32),
    stride: (u32, u32),
) -> ConvConfig {
    ConvConfig {
        data_type,
        direction,
        spatial_dim: 2,
        batchsize: n,
        in_channels: c,
        in_d: 1,
        in_h: hw.0,
        in_w: hw.1,
        out_channels: k,
        fil_d: 1,
        fil_h: fil.0,
        fil_w: fil.1,
        pad_d: 0,
        pad_h: pad.0,
        pad_w: pad.1,
        conv_stride_d: 1,
        conv_stride_h: stride.0,
        conv_stride_w: stride.1,
        dilation_d: 1,
        dilation_h: 1,
        dilation_w: 1,
        trans_output_pad_d: 0,
        trans_output_pad_h: 0,
        trans_output_pad_w: 0,
        group_count: 1,
        mode: ConvMode::Conv,
        pad_mode: PadMode::Default,
        in_layout: "NCHW".into(),
        fil_layout: "NCHW".into(),
        out_layout: "NCHW".into(),
    }
}

/// Test vector #7 of `docs/miopen-formats.md` §1.4: `conv --spatial_dim 3 -n 4 -c 256 --in_d 16
/// -H 56 -W 56 -k 512 --fil_d 1 -y 1 -x 1 --conv_stride_d 2 -u 2 -v 2 -F 1`.
pub fn conv3d_vector7() -> ConvConfig {
    let mut c = conv2d(
        DataType::Fp32,
        Direction::Forward,
        4,
        256,
        (56, 56),
        512,
        (1, 1),
        (0, 0),
        (2, 2),
    );
    c.spatial_dim = 3;
    c.in_d = 16;
    c.fil_d = 1;
    c.conv_stride_d = 2;
    c.in_layout = "NCDHW".into();
    c.fil_layout = "NCDHW".into();
    c.out_layout = "NCDHW".into();
    c
}
