//! What a config-file line may look like, and what `parse_line` says when it is wrong: every
//! accepted form (prefixes, program paths, comments, direction masks, API-name directions, other
//! primitives) and one test per kind of error, checking the message and the column it points at.

use shoal_miopen::driver::{parse_line, LineError, LineKind};
use shoal_miopen::{ConvMode, DataType, Direction, PadMode};

const BASE: &str = "conv -n 128 -c 256 -H 28 -W 28 -k 512 -y 3 -x 3 -p 1 -q 1 -u 1 -v 1 -l 1 -j 1";

fn dirs(line: &str) -> (Vec<Direction>, bool) {
    match parse_line(line) {
        Ok(LineKind::Conv { configs, expanded }) => {
            (configs.iter().map(|c| c.direction).collect(), expanded)
        }
        other => panic!("{line}: {other:?}"),
    }
}

fn err(line: &str) -> LineError {
    match parse_line(line) {
        Err(e) => e,
        other => panic!("{line}: expected an error, got {other:?}"),
    }
}

/// The column (1-based) of the first occurrence of `needle` in `line`.
fn col(line: &str, needle: &str) -> Option<usize> {
    Some(line[..line.find(needle).unwrap()].chars().count() + 1)
}

use Direction::{BackwardData as B, BackwardWeights as W, Forward as F};

#[test]
fn direction_masks() {
    assert_eq!(dirs(&format!("{BASE} -F 1")), (vec![F], false));
    assert_eq!(dirs(&format!("{BASE} -F 2")), (vec![B], false));
    assert_eq!(dirs(&format!("{BASE} -F 4")), (vec![W], false));
    assert_eq!(dirs(&format!("{BASE} -F 3")), (vec![F, B], false));
    assert_eq!(dirs(&format!("{BASE} -F 5")), (vec![F, W], false));
    assert_eq!(dirs(&format!("{BASE} -F 6")), (vec![B, W], false));
    assert_eq!(dirs(&format!("{BASE} --forw 7")), (vec![F, B, W], false));
    assert_eq!(dirs(&format!("{BASE} -F 0")), (vec![F, B, W], true));
    assert_eq!(dirs(BASE), (vec![F, B, W], true));
}

#[test]
fn api_names_in_a_prefix_select_the_direction_when_there_is_no_f() {
    let tail = "./bin/MIOpenDriver conv -n 64 -c 64 -H 56 -W 56 -k 64 -y 1 -x 1";
    for (prefix, d) in [
        ("miopenConvolutionForward:", F),
        ("miopenConvolutionBackwardData:", B),
        ("miopenConvolutionBackwardWeights:", W),
        ("miopenFindConvolutionForwardAlgorithm:", F),
        ("miopenFindConvolutionBackwardDataAlgorithm:", B),
        ("miopenFindConvolutionBackwardWeightsAlgorithm:", W),
        ("miopenConvolutionForwardImmediate:", F),
        ("miopenConvolutionBackwardDataImmediate:", B),
        ("miopenConvolutionBackwardWeightsImmediate:", W),
    ] {
        assert_eq!(
            dirs(&format!("{prefix} {tail}")),
            (vec![d], false),
            "{prefix}"
        );
    }
    // Not a direction: the bias API, or an unrelated log word; an explicit -F wins.
    assert_eq!(
        dirs(&format!("miopenConvolutionBackwardBias: {tail}"))
            .0
            .len(),
        3
    );
    assert_eq!(
        dirs(&format!("MIOpen(HIP): Command [LogCmdConvolution] {tail}"))
            .0
            .len(),
        3
    );
    assert_eq!(
        dirs(&format!("miopenConvolutionForward: {tail} -F 4")),
        (vec![W], false)
    );
    // Without the program: a prefix ending in `:` before the command.
    assert_eq!(
        dirs("miopenConvolutionBackwardData: conv -n 1 -c 4 -k 4"),
        (vec![B], false)
    );
}

#[test]
fn program_paths_comments_and_whitespace() {
    let want = parse_line(&format!("{BASE} -F 1")).unwrap();
    for line in [
        format!("./bin/MIOpenDriver {BASE} -F 1"),
        format!("MIOpenDriver {BASE} -F 1"),
        format!("/opt/rocm/bin/MIOpenDriver {BASE} -F 1"),
        format!(r"C:\rocm\bin\MIOpenDriver.exe {BASE} -F 1"),
        format!("   \t{BASE}   -F 1  \r"),
        format!("{BASE} -F 1 # resnet50 layer 3"),
        format!("{BASE} -F 1 -t 1 --time 1 -i 5 -V 0 -s 1 -b 0 -w 1 -S 0 -Z 0 -P 0 -o 0"),
        format!("{BASE} -F 1 -d in.bin -e w.bin -a b.bin -D dy.bin -G 1 -C /tmp/cache -r 0 -S ConvAsm3x3U"),
        format!("{BASE} -F 1 -U -1 -T -1 -R -1 -L 1"),
        format!("{BASE} --forw=1 --pad_val=0"),
        format!("17 2024-05-01T12:00:00 ./bin/MIOpenDriver {BASE} -F 1"),
    ] {
        assert_eq!(parse_line(&line).unwrap(), want, "{line}");
    }
    for blank in ["", "   ", "\t", "# a comment", "   # indented comment"] {
        assert_eq!(parse_line(blank).unwrap(), LineKind::Blank);
    }
}

#[test]
fn every_odd_short_flag_and_its_long_twin() {
    let short =
        "conv -_ 3 -n 2 -c 8 -! 6 -H 10 -W 10 -k 8 -@ 3 -y 3 -x 3 -# 2 -u 2 -v 2 -$ 1 -p 1 \
                 -q 1 -^ 1 -l 1 -j 1 -g 2 -m conv -z default -I NCDHW -f NCDHW -O ncdhw -F 1";
    let long = "conv --spatial_dim 3 --batchsize 2 --in_channels 8 --in_d 6 --in_h 10 --in_w 10 \
                --out_channels 8 --fil_d 3 --fil_h 3 --fil_w 3 --conv_stride_d 2 --conv_stride_h 2 \
                --conv_stride_w 2 --pad_d 1 --pad_h 1 --pad_w 1 --dilation_d 1 --dilation_h 1 \
                --dilation_w 1 --group_count 2 --mode conv --pad_mode default --in_layout NCDHW \
                --fil_layout NCDHW --out_layout NCDHW --forw 1";
    let a = parse_line(short).unwrap();
    assert_eq!(a, parse_line(long).unwrap());
    let LineKind::Conv { configs, .. } = a else {
        panic!()
    };
    let c = &configs[0];
    assert_eq!(
        (c.spatial_dim, c.in_d, c.fil_d, c.conv_stride_d, c.pad_d),
        (3, 6, 3, 2, 1)
    );
    assert_eq!(c.out_layout, "NCDHW");
    // Transposed output padding: -Y -X -%.
    let t = parse_line("conv -_ 3 -! 4 -H 4 -W 4 -@ 3 -# 2 -u 2 -v 2 -m trans -% 1 -Y 1 -X 0 -F 1")
        .unwrap();
    let LineKind::Conv { configs, .. } = t else {
        panic!()
    };
    let c = &configs[0];
    assert_eq!(
        (
            c.mode,
            c.trans_output_pad_d,
            c.trans_output_pad_h,
            c.trans_output_pad_w
        ),
        (ConvMode::Trans, 1, 1, 0)
    );
}

#[test]
fn defaults_types_and_two_d_depth_flags() {
    let LineKind::Conv { configs, .. } = parse_line("convbfp16 -F 1 --in_d 7 --fil_d 5").unwrap()
    else {
        panic!()
    };
    let c = &configs[0];
    // MIOpenDriver's defaults; depth flags of a 2-D line are ignored (as by the driver).
    assert_eq!(
        (c.batchsize, c.in_channels, c.in_h, c.in_w, c.out_channels),
        (100, 3, 32, 32, 32)
    );
    assert_eq!(
        (c.fil_h, c.fil_w, c.in_d, c.fil_d, c.data_type),
        (3, 3, 1, 1, DataType::Bf16)
    );
    assert_eq!(
        (c.pad_mode, c.in_layout.as_str()),
        (PadMode::Default, "NCHW")
    );
    for (cmd, t) in [
        ("conv", DataType::Fp32),
        ("convfp16", DataType::Fp16),
        ("convint8", DataType::Int8),
        ("convfp8", DataType::Fp8),
        ("convbfp8", DataType::Bf8),
    ] {
        let LineKind::Conv { configs, .. } = parse_line(&format!("{cmd} -F 1")).unwrap() else {
            panic!()
        };
        assert_eq!(configs[0].data_type, t);
    }
    // `-g 0` is read as 1 (the driver's max(g, 1)); equal duplicates are fine.
    let LineKind::Conv { configs, .. } = parse_line("conv -g 0 -n 4 --batchsize 4 -F 1").unwrap()
    else {
        panic!()
    };
    assert_eq!(configs[0].group_count, 1);
}

#[test]
fn other_primitives_are_classified_not_parsed() {
    for (line, p) in [
        (
            "./bin/MIOpenDriver pool -n 512 -c 192 -H 27 -W 27 -y 3 -x 3 -m max -t 1",
            "pool",
        ),
        (
            "./bin/MIOpenDriver bnormfp16 -n 32 -c 1024 -H 14 -W 14 -m 1 --forw 0 -b 1 -r 1",
            "bnormfp16",
        ),
        ("bnorm -n 32 -c 1024 -H 14 -W 14 -m 1 --forw 0", "bnorm"),
        ("bnormbfp16fp32 -n 32", "bnormbfp16fp32"),
        ("lrn -n 1", "lrn"),
        ("CBAInferfp16 -n 1", "CBAInferfp16"),
        ("softmax -n 1", "softmax"),
        ("reducefp64 -n 1", "reducefp64"),
        ("groupnorm -n 1", "groupnorm"),
        (
            "MIOpenDriver multimarginloss --whatever 1",
            "multimarginloss",
        ),
        (
            "./bin/MIOpenDriver brandnewprimitive -Q 1",
            "brandnewprimitive",
        ),
    ] {
        assert_eq!(
            parse_line(line).unwrap(),
            LineKind::Other {
                primitive: p.into()
            },
            "{line}"
        );
    }
}

#[test]
fn errors_say_what_and_where() {
    let cases: &[(&str, &str, &str)] = &[
        // (line, expected message, text the column points at)
        ("conv -n 128 -Q 5 -F 1", "unknown flag `-Q`", "-Q"),
        ("conv -n 128 --out_chanels 5", "unknown flag `--out_chanels`", "--out_chanels"),
        ("conv -n 128 -k", "missing value for `-k` (--out_channels)", "-k"),
        (
            "conv -k -n 5",
            "missing value for `-k` (--out_channels): the next token `-n` is a flag",
            "-k",
        ),
        ("conv -n abc -F 1", "non-integer value `abc` for `-n` (--batchsize)", "abc"),
        ("conv --in_h 2.5", "non-integer value `2.5` for `--in_h`", "2.5"),
        ("conv -n -5", "negative value `-5` for `-n` (--batchsize)", "-5"),
        ("conv -n 0 -F 1", "-n (--batchsize) must be at least 1, got 0", "0 -F"),
        ("conv -c 64 -k 30 -g 4 -F 1", "group count 4 does not divide out_channels 30", "-g"),
        ("conv -c 6 -k 8 -g 4 -F 1", "group count 4 does not divide in_channels 6", "-g"),
        ("conv -n 1 -n 2", "--batchsize given twice with different values: `-n` 1 and `-n` 2", "-n 2"),
        ("conv -F 8", "-F/--forw 8 names no direction (0 all, 1 F, 2 B, 4 W, or a sum)", "-F"),
        ("conv --spatial_dim 4", "--spatial_dim must be 2 or 3, got 4", "4"),
        ("conv -m deconv", "-m/--mode must be conv or trans, got `deconv`", "deconv"),
        ("conv -z half", "-z/--pad_mode must be default, same or valid, got `half`", "half"),
        (
            "conv --in_layout NCDHW",
            "--in_layout `NCDHW` is not a 2-D layout (use NCHW, NHWC, CHWN)",
            "NCDHW",
        ),
        ("conv -Z 1 -L 4", "vectorised tensors (-Z/--tensor_vect, -L/--vector_length) are not supported: their layouts (NCHWc4 …) have no place in a ConvConfig", "-Z"),
        ("conv -m trans -u 2 -v 2 -Y 2", "trans_output_pad_h 2 must be smaller than the stride 2", "-Y"),
        ("conv -h", "`-h` asks for help: not a config line", "-h"),
        ("conv -F1", "`-F1`: a short flag is one character, its value the next token (`-F 1`)", "-F1"),
        ("conv -n 1 5", "expected a flag, found `5` (flags start with `-`; each takes exactly one value)", "5"),
        ("hello -n 1", "unknown sub-command `hello`: a line is an MIOpenDriver command (conv …, ./bin/MIOpenDriver conv …), a find-db key, blank, or a # comment", "hello"),
        ("convfp64 -n 1", "unsupported convolution sub-command `convfp64` (conv, convfp16, convbfp16, convint8, convfp8, convbfp8)", "convfp64"),
        ("./bin/MIOpenDriver -n 1 -c 3", "expected a sub-command (conv, convfp16, convbfp16, convint8, pool, …) before flag `-n`", "-n"),
        ("./bin/MIOpenDriver", "no sub-command (conv, convfp16, …) after the program", "./bin"),
        (
            "256-28-28-3x3-512-28-28-128-1x1-1x1-1x1-0-NCHW-FP32-F extra",
            "unexpected `extra` after a find-db key (a key is one token)",
            "extra",
        ),
        (
            "256-28-28-3x3-512-28-28-128-1x1-1x1-1x1-0-NCHW-FP64-F",
            "unknown data type `FP64` in find-db key",
            "FP64",
        ),
    ];
    for (line, message, at) in cases {
        let e = err(line);
        assert_eq!(e.message, *message, "{line}");
        assert_eq!(e.column, col(line, at), "{line}: column");
        assert_eq!(e.to_string(), *message);
    }
    // A filter larger than the padded input: MIOpen clamps that output size to 1, and so do we
    // (shipped find dbs hold such entries).
    let clamped = |line: &str| match parse_line(line) {
        Ok(LineKind::Conv { configs, .. }) => shoal_miopen::keys::output_dims(&configs[0]).unwrap(),
        other => panic!("{line}: {other:?}"),
    };
    assert_eq!(clamped("conv -H 2 -W 2 -y 5 -x 5 -F 1"), (1, 1, 1));
    assert_eq!(clamped("conv -y 40 -F 1"), (1, 1, 30));
    // Cast types are refused unless -1.
    let e = err("convfp16 --in_cast_type fp8");
    assert!(
        e.message
            .starts_with("--in_cast_type fp8: cast types are not supported"),
        "{}",
        e.message
    );
}
