//! Property tests over many generated configs (a fixed-seed PRNG, so failures reproduce):
//! `parse_line(driver_line(c)) == c`, `from_params(to_params(c)) == c`, and a find-db key read
//! back gives the same keys. Lines are generated the way people write them: short, long and
//! `--name=value` flags in any order, run-time flags sprinkled in, program paths and log
//! prefixes in front.

use shoal_miopen::driver::{driver_line, parse_line, LineKind};
use shoal_miopen::keys::{find_db_key, network_config, parse_find_db_key, perf_db_key};
use shoal_miopen::{ConvConfig, ConvMode, DataType, Direction, PadMode};

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn range(&mut self, lo: u32, hi: u32) -> u32 {
        lo + self.below(u64::from(hi - lo + 1)) as u32
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const TYPES: [DataType; 6] = [
    DataType::Fp32,
    DataType::Fp16,
    DataType::Bf16,
    DataType::Int8,
    DataType::Fp8,
    DataType::Bf8,
];

/// A random config, straight into the struct (may be invalid; callers filter with `validate`).
fn random_config(r: &mut Rng) -> ConvConfig {
    let mut c = random_config_default_pads(r);
    // `same`/`valid`: pads as MIOpenDriver rewrites them (an independent restatement of
    // `docs/miopen-formats.md` §1.3).
    let three_d = c.spatial_dim == 3;
    let dil_one = c.dilation_h == 1 && c.dilation_w == 1 && (!three_d || c.dilation_d == 1);
    let fil_one = c.fil_h == 1 && c.fil_w == 1 && (!three_d || c.fil_d == 1);
    let rewrite = c.mode == ConvMode::Conv && (dil_one || fil_one);
    let same = |i: u32, f: u32, s: u32| {
        if i.is_multiple_of(s) {
            f.saturating_sub(s) / 2
        } else {
            f.saturating_sub(i % s) / 2
        }
    };
    match r.below(4) {
        0 => {
            c.pad_mode = PadMode::Same;
            if rewrite {
                c.pad_d = if three_d {
                    same(c.in_d, c.fil_d, c.conv_stride_d)
                } else {
                    0
                };
                c.pad_h = same(c.in_h, c.fil_h, c.conv_stride_h);
                c.pad_w = same(c.in_w, c.fil_w, c.conv_stride_w);
            }
        }
        1 => {
            c.pad_mode = PadMode::Valid;
            if rewrite {
                (c.pad_d, c.pad_h, c.pad_w) = (0, 0, 0);
            }
        }
        _ => {}
    }
    c
}

fn random_config_default_pads(r: &mut Rng) -> ConvConfig {
    let three_d = r.chance(30);
    let g = *r.pick(&[1, 1, 1, 2, 3, 4, 8, 32]);
    let layouts: &[&str] = if three_d {
        &["NCDHW", "NDHWC"]
    } else {
        &["NCHW", "NHWC", "CHWN"]
    };
    let mode = if r.chance(20) {
        ConvMode::Trans
    } else {
        ConvMode::Conv
    };
    let stride = [r.range(1, 3), r.range(1, 3), r.range(1, 3)];
    let opad = |r: &mut Rng, s: u32| {
        if mode == ConvMode::Trans {
            r.range(0, s - 1)
        } else {
            0
        }
    };
    let depth =
        |r: &mut Rng, lo: u32, hi: u32, two_d: u32| if three_d { r.range(lo, hi) } else { two_d };
    ConvConfig {
        data_type: *r.pick(&TYPES),
        direction: *r.pick(&Direction::ALL),
        spatial_dim: if three_d { 3 } else { 2 },
        batchsize: r.range(1, 256),
        in_channels: g * r.range(1, 16),
        in_d: depth(r, 1, 16, 1),
        in_h: r.range(1, 64),
        in_w: r.range(1, 64),
        out_channels: g * r.range(1, 16),
        fil_d: depth(r, 1, 5, 1),
        fil_h: r.range(1, 7),
        fil_w: r.range(1, 7),
        pad_d: depth(r, 0, 3, 0),
        pad_h: r.range(0, 3),
        pad_w: r.range(0, 3),
        conv_stride_d: if three_d { stride[0] } else { 1 },
        conv_stride_h: stride[1],
        conv_stride_w: stride[2],
        dilation_d: depth(r, 1, 3, 1),
        dilation_h: r.range(1, 3),
        dilation_w: r.range(1, 3),
        trans_output_pad_d: if three_d { opad(r, stride[0]) } else { 0 },
        trans_output_pad_h: opad(r, stride[1]),
        trans_output_pad_w: opad(r, stride[2]),
        group_count: g,
        mode,
        pad_mode: PadMode::Default,
        in_layout: r.pick(layouts).to_string(),
        fil_layout: r.pick(layouts).to_string(),
        out_layout: r.pick(layouts).to_string(),
    }
}

fn check(c: &ConvConfig) {
    let line = driver_line(c);
    match parse_line(&line) {
        Ok(LineKind::Conv {
            configs,
            expanded: false,
        }) => assert_eq!(configs, vec![c.clone()], "{line}"),
        other => panic!("{line}: {other:?}"),
    }
    assert_eq!(
        ConvConfig::from_params(&c.to_params()).as_ref(),
        Ok(c),
        "{line}"
    );
    // The key reads back to a config with the same three strings (a transposed conv reads back
    // as the convolution it is tuned as; same/valid padding is folded into the pads).
    let key = find_db_key(c);
    let back = parse_find_db_key(&key).unwrap_or_else(|e| panic!("{line}\n{key}\n{e}"));
    assert_eq!(find_db_key(&back), key, "{line}");
    assert_eq!(perf_db_key(&back), perf_db_key(c), "{line}");
    assert_eq!(network_config(&back), network_config(c), "{line}");
}

#[test]
fn driver_line_and_params_round_trip_for_random_configs() {
    let mut r = Rng(0x0051_40A1_C0DE);
    let mut valid = 0;
    for _ in 0..20_000 {
        let c = random_config(&mut r);
        if c.validate().is_ok() {
            valid += 1;
            check(&c);
        }
    }
    assert!(valid > 5_000, "only {valid} valid configs");
}

/// Builds a random command line for a random problem, in any of the accepted spellings, and
/// returns it with what the driver would select.
fn random_line(r: &mut Rng) -> String {
    let three_d = r.chance(25);
    let g = *r.pick(&[1, 1, 2, 4]);
    let cmd = *r.pick(&[
        "conv",
        "convfp16",
        "convbfp16",
        "convint8",
        "convfp8",
        "convbfp8",
    ]);
    let mut flags: Vec<(&str, &str, String)> = vec![
        ("n", "batchsize", r.range(1, 64).to_string()),
        ("c", "in_channels", (g * r.range(1, 8)).to_string()),
        ("H", "in_h", r.range(4, 40).to_string()),
        ("W", "in_w", r.range(4, 40).to_string()),
        ("k", "out_channels", (g * r.range(1, 8)).to_string()),
        ("y", "fil_h", r.range(1, 4).to_string()),
        ("x", "fil_w", r.range(1, 4).to_string()),
        ("p", "pad_h", r.range(0, 2).to_string()),
        ("q", "pad_w", r.range(0, 2).to_string()),
        ("u", "conv_stride_h", r.range(1, 2).to_string()),
        ("v", "conv_stride_w", r.range(1, 2).to_string()),
        ("l", "dilation_h", r.range(1, 2).to_string()),
        ("j", "dilation_w", r.range(1, 2).to_string()),
        ("g", "group_count", g.to_string()),
        ("t", "time", "1".into()),
        ("i", "iter", "10".into()),
        ("V", "verify", "0".into()),
        (
            "S",
            "solution",
            r.pick(&["-1", "0", "ConvAsm1x1U"]).to_string(),
        ),
    ];
    if three_d {
        flags.extend([
            ("_", "spatial_dim", "3".to_string()),
            ("!", "in_d", r.range(2, 12).to_string()),
            ("@", "fil_d", r.range(1, 3).to_string()),
            ("$", "pad_d", r.range(0, 1).to_string()),
            ("#", "conv_stride_d", r.range(1, 2).to_string()),
            ("^", "dilation_d", "1".to_string()),
        ]);
    }
    let layouts: &[&str] = if three_d {
        &["ncdhw", "NDHWC"]
    } else {
        &["NCHW", "nhwc", "CHWN"]
    };
    for (s, l) in [("I", "in_layout"), ("f", "fil_layout"), ("O", "out_layout")] {
        if r.chance(30) {
            flags.push((s, l, r.pick(layouts).to_string()));
        }
    }
    if r.chance(20) {
        flags.push((
            "z",
            "pad_mode",
            r.pick(&["same", "valid", "default"]).to_string(),
        ));
    }
    if r.chance(15) {
        flags.push(("m", "mode", "trans".into()));
    }
    if r.chance(80) {
        flags.push(("F", "forw", r.range(0, 7).to_string()));
    }
    // Shuffle.
    for i in (1..flags.len()).rev() {
        flags.swap(i, r.below(i as u64 + 1) as usize);
    }
    let prefix = *r.pick(&[
        "",
        "./bin/MIOpenDriver ",
        "MIOpenDriver ",
        "/opt/rocm/bin/MIOpenDriver ",
        "miopenConvolutionForward: ./bin/MIOpenDriver ",
        "miopenConvolutionBackwardWeights: ./bin/MIOpenDriver ",
        "MIOpen(HIP): Command [LogCmdConvolution] ./bin/MIOpenDriver ",
    ]);
    let mut line = format!("{prefix}{cmd}");
    for (short, long, value) in flags {
        line += &match r.below(3) {
            0 => format!(" -{short} {value}"),
            1 => format!(" --{long} {value}"),
            _ => format!(" --{long}={value}"),
        };
    }
    line
}

#[test]
fn generated_command_lines_parse_and_round_trip() {
    let mut r = Rng(42);
    let (mut ok, mut refused) = (0, 0);
    for _ in 0..10_000 {
        let line = random_line(&mut r);
        match parse_line(&line) {
            Ok(LineKind::Conv { configs, expanded }) => {
                ok += 1;
                assert!(!configs.is_empty() && configs.len() <= 3, "{line}");
                let has_forw = line.contains(" -F ") || line.contains("--forw");
                if !has_forw {
                    let api = line.starts_with("miopenConvolution");
                    assert_eq!(expanded, !api, "{line}");
                    assert_eq!(configs.len(), if api { 1 } else { 3 }, "{line}");
                }
                for c in &configs {
                    check(c);
                }
            }
            Ok(other) => panic!("{line}: {other:?}"),
            Err(e) => {
                // Only real problems are refused: a filter larger than the padded input, or
                // output padding of a transposed conv that is not below its stride, etc.
                refused += 1;
                let col = e.column.unwrap_or(1);
                assert!(col >= 1 && col <= line.chars().count(), "{line}: {e:?}");
            }
        }
    }
    assert!(ok > 8_000, "{ok} parsed, {refused} refused");
}
