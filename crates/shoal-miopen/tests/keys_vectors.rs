//! The verified test vectors of `docs/miopen-formats.md` §1.4 (each key string was
//! found in a shipped MIOpen database or a fin fixture): driver line → `parse_line` → the find-db
//! key, the perf-db key and the network config, exactly. Then real find-db keys read back as
//! lines, and the direction/mode/padding rules of §1.1–§1.3 that no shipped file shows.

use shoal_miopen::driver::{driver_line, parse_line, LineKind};
use shoal_miopen::keys::{
    find_db_key, network_config, output_dims, parse_find_db_key, perf_db_key, FindKeyError,
};
use shoal_miopen::{ConvConfig, Direction};

fn one(line: &str) -> ConvConfig {
    match parse_line(line) {
        Ok(LineKind::Conv { configs, .. }) if configs.len() == 1 => {
            configs.into_iter().next().unwrap()
        }
        other => panic!("{line}: {other:?}"),
    }
}

/// (driver command, find-db key, perf-db key) of §1.4.
const VECTORS: &[(&str, &str, &str)] = &[
    (
        "conv -n 128 -c 256 -H 28 -W 28 -k 512 -y 3 -x 3 -p 1 -q 1 -u 1 -v 1 -l 1 -j 1 -g 1 -F 1",
        "256-28-28-3x3-512-28-28-128-1x1-1x1-1x1-0-NCHW-FP32-F",
        "2x256x28x28x1x3x3x1x512x128x1x1x0x1x1x0x1x1x0x0x1xNCHWxFP32xF",
    ),
    (
        "conv -n 128 -c 1024 -H 14 -W 14 -k 256 -y 1 -x 1 -p 0 -q 0 -u 1 -v 1 -l 1 -j 1 -g 1 -F 1",
        "1024-14-14-1x1-256-14-14-128-0x0-1x1-1x1-0-NCHW-FP32-F",
        "2x1024x14x14x1x1x1x1x256x128x0x0x0x1x1x0x1x1x0x0x1xNCHWxFP32xF",
    ),
    (
        "conv -n 128 -c 1024 -H 14 -W 14 -k 2048 -y 1 -x 1 -p 0 -q 0 -u 2 -v 2 -l 1 -j 1 -g 1 -F 2",
        "2048-7-7-1x1-1024-14-14-128-0x0-2x2-1x1-0-NCHW-FP32-B",
        "2x2048x7x7x1x1x1x1x1024x128x0x0x0x2x2x0x1x1x0x0x1xNCHWxFP32xB",
    ),
    (
        "convbfp16 -n 32 -c 128 -H 28 -W 28 -k 128 -y 3 -x 3 -p 1 -q 1 -u 1 -v 1 -F 1",
        "128-28-28-3x3-128-28-28-32-1x1-1x1-1x1-0-NCHW-BF16-F",
        "2x128x28x28x1x3x3x1x128x32x1x1x0x1x1x0x1x1x0x0x1xNCHWxBF16xF",
    ),
    (
        "convfp16 -n 16 -c 1024 -H 14 -W 14 -k 1024 -y 3 -x 3 -p 1 -q 1 -u 1 -v 1 -g 32 -F 1",
        "1024-14-14-3x3-1024-14-14-16-1x1-1x1-1x1-0-NCHW-FP16-F_g32",
        "2x1024x14x14x1x3x3x1x1024x16x1x1x0x1x1x0x1x1x0x0x32xNCHWxFP16xF",
    ),
    (
        "conv -n 16 -c 1024 -H 14 -W 14 -k 1024 -y 3 -x 3 -p 1 -q 1 -u 2 -v 2 -F 1",
        "1024-14-14-3x3-1024-7-7-16-1x1-2x2-1x1-0-NCHW-FP32-F",
        "2x1024x14x14x1x3x3x1x1024x16x1x1x0x2x2x0x1x1x0x0x1xNCHWxFP32xF",
    ),
    (
        "conv -n 30 -c 1280 -H 4 -W 4 -k 1280 -y 1 -x 1 --in_layout NHWC --fil_layout NHWC --out_layout NHWC -F 1",
        "1280-4-4-1x1-1280-4-4-30-0x0-1x1-1x1-0-NHWC-NHWC-NHWC-FP32-F",
        "2x1280x4x4x1x1x1x1x1280x30x0x0x0x1x1x0x1x1x0x0x1xNHWCxFP32xF",
    ),
    (
        "conv --spatial_dim 3 -n 4 -c 256 --in_d 16 -H 56 -W 56 -k 512 --fil_d 1 -y 1 -x 1 --conv_stride_d 2 -u 2 -v 2 -F 1",
        "256-16-56-56-1x1x1-512-8-28-28-4-0x0x0-2x2x2-1x1x1-0-NCDHW-FP32-F",
        "3x256x56x56x16x1x1x1x512x4x0x0x0x2x2x2x1x1x1x0x1xNCDHWxFP32xF",
    ),
    (
        // #8: the B problem of gfx942130.db config id 1 (forward C=512, K=1000, 13x13, n=16).
        "convfp16 -n 16 -c 512 -H 13 -W 13 -k 1000 -y 1 -x 1 -p 0 -q 0 -u 1 -v 1 -F 2",
        "1000-13-13-1x1-512-13-13-16-0x0-1x1-1x1-0-NCHW-FP16-B",
        "2x1000x13x13x1x1x1x1x512x16x0x0x0x1x1x0x1x1x0x0x1xNCHWxFP16xB",
    ),
];

#[test]
fn every_reference_vector() {
    for (line, fdb, pdb) in VECTORS {
        let c = one(line);
        assert_eq!(find_db_key(&c), *fdb, "{line}");
        assert_eq!(perf_db_key(&c), *pdb, "{line}");
        // The key read back gives the same keys, and so does the canonical command.
        let back = parse_find_db_key(fdb).unwrap();
        assert_eq!(find_db_key(&back), *fdb);
        assert_eq!(perf_db_key(&back), *pdb);
        assert_eq!(one(&driver_line(&c)), c);
    }
}

#[test]
fn network_configs() {
    // §1.4: #1 in the current form (code-derived), and the fin fixture's pre-alpha/beta form of
    // a BF16 problem plus the `Default` case.
    let c = one(VECTORS[1].0);
    assert_eq!(
        network_config(&c),
        "1024x14x14x1x1x256x14x14x128xNCHWxFP32x0x0x1x1x1x1x1xFxDefault"
    );
    let bf16 = one("convbfp16 -n 32 -c 128 -H 28 -W 28 -k 128 -y 3 -x 3 -p 1 -q 1 -u 1 -v 1 -F 1");
    assert_eq!(
        network_config(&bf16),
        "128x28x28x3x3x128x28x28x32xNCHWxBF16x1x1x1x1x1x1x1xFxDefault"
    );
    let nhwc = one(VECTORS[6].0);
    assert_eq!(
        network_config(&nhwc),
        "1280x4x4x1x1x1280x4x4x30xNHWCxNHWCxNHWCxFP32x0x0x1x1x1x1x1xFxDefault"
    );
    let three_d = one(VECTORS[7].0);
    assert_eq!(
        network_config(&three_d),
        "256x16x56x56x1x1x1x512x8x28x28x4xNCDHWxFP32x0x0x0x2x2x2x1x1x1x1xFxDefault"
    );
}

#[test]
fn the_same_problem_written_as_miopen_logs_it() {
    let logged = "MIOpen(HIP): Command [LogCmdConvolution] ./bin/MIOpenDriver conv -n 128 -c 1024 \
                  -H 14 -W 14 -k 256 -y 1 -x 1 -p 0 -q 0 -u 1 -v 1 -l 1 -j 1 -m conv -g 1 -F 1 -t 1";
    assert_eq!(find_db_key(&one(logged)), VECTORS[1].1);
    let immediate = "MIOpen(HIP): Command [LogCmdConvolution] ./bin/MIOpenDriver conv -n 128 -c 1024 \
                     -H 14 -W 14 -k 2048 -y 1 -x 1 -p 0 -q 0 -u 2 -v 2 -l 1 -j 1 -m conv -g 1 -F 2 -t 1 -S 0";
    assert_eq!(find_db_key(&one(immediate)), VECTORS[2].1);
}

#[test]
fn real_find_db_keys_read_back_exactly() {
    // Keys (and whole records) from the shipped find dbs, the legacy perf db and MITuna fixtures.
    for line in [
        "256-28-28-3x3-512-28-28-128-1x1-1x1-1x1-0-NCHW-FP32-F=ConvBinWinogradRxSf2x3g1:6.28626,0,miopenConvolutionFwdAlgoWinograd;ConvMlirIgemmFwdXdlops:6.91922,0,miopenConvolutionFwdAlgoImplicitGEMM",
        "1000-13-13-1x1-512-13-13-16-0x0-1x1-1x1-0-NCHW-FP16-B=ConvAsmImplicitGemmGTCDynamicBwdXdlopsNHWC:0.051639,13714688,miopenConvolutionBwdDataAlgoImplicitGEMM",
        "1280-4-4-1x1-1280-4-4-30-0x0-1x1-1x1-0-NHWC-NHWC-NHWC-FP32-F",
        "1024-14-14-3x3-1024-14-14-16-1x1-1x1-1x1-0-NCHW-FP16-F_g32",
        "256-16-56-56-1x1x1-512-8-28-28-4-0x0x0-2x2x2-1x1x1-0-NCDHW-FP32-F",
        "2048-7-7-1x1-1024-14-14-128-0x0-2x2-1x1-0-NCHW-FP32-B",
        "1024-14-14-1x1-256-14-14-128-0x0-1x1-1x1-0-NCHW-FP32-F",
        "16-55-55-3x3-64-55-55-2-1x1-1x1-1x1-0-NCHW-FP16-B",
        "1440-7-7-1x1-128-7-7-256-0x0-1x1-1x1-0-NCHW-FP32-F",
        "1-700-161-20x5-32-681-157-1-0x0-1x1-1x1-0-NCHW-FP16-F",
        "1-160-698-5x5-64-79-348-1-1x1-2x2-1x1-0-NCHW-FP32-F",
        "1-19-19-1x1-64-19-19-1024-0x0-1x1-1x1-0-NCHW-FP32-B",
    ] {
        let key = line.split('=').next().unwrap();
        let c = one(line);
        assert_eq!(find_db_key(&c), key, "{line}");
        assert_eq!(parse_find_db_key(line).unwrap(), c);
        // The driver view: a B key's first tensor is dy.
        assert_eq!(one(&driver_line(&c)), c);
    }
    let b = one("1000-13-13-1x1-512-13-13-16-0x0-1x1-1x1-0-NCHW-FP16-B");
    assert_eq!(
        (b.in_channels, b.out_channels, b.direction),
        (512, 1000, Direction::BackwardData)
    );
    assert_eq!(b, one(VECTORS[8].0));
}

#[test]
fn find_db_keys_with_three_layouts_and_3d_w_keys() {
    // Mixed layouts: for B and W the key's in/out layouts are the driver's out/in layouts.
    let c = one("conv -n 8 -c 64 -H 14 -W 14 -k 32 -y 3 -x 3 -p 1 -q 1 --in_layout NHWC --fil_layout NCHW --out_layout NHWC -F 4");
    let key = find_db_key(&c);
    assert_eq!(
        key,
        "32-14-14-3x3-64-14-14-8-1x1-1x1-1x1-0-NHWC-NCHW-NHWC-FP32-W"
    );
    assert_eq!(parse_find_db_key(&key).unwrap(), c);
    let c = one("conv -n 2 -c 8 -H 10 -W 10 -k 16 -y 3 -x 3 -p 1 -q 1 --in_layout NCHW --fil_layout NCHW --out_layout NHWC -F 2");
    assert_eq!(
        find_db_key(&c),
        "16-10-10-3x3-8-10-10-2-1x1-1x1-1x1-0-NHWC-NCHW-NCHW-FP32-B"
    );
    assert_eq!(parse_find_db_key(&find_db_key(&c)).unwrap(), c);
    // A 1x1 filter declared NCHW among NHWC activations becomes NHWC (HeuristicUpdateLayouts).
    let c =
        one("conv -n 8 -c 64 -H 14 -W 14 -k 32 -y 1 -x 1 --in_layout NHWC --out_layout NHWC -F 1");
    assert_eq!(
        find_db_key(&c),
        "64-14-14-1x1-32-14-14-8-0x0-1x1-1x1-0-NHWC-NHWC-NHWC-FP32-F"
    );
    // 3-D, grouped, three layouts, W.
    let c = one("convfp16 --spatial_dim 3 -n 2 -c 32 --in_d 8 -H 16 -W 16 -k 64 --fil_d 3 -y 3 -x 3 --pad_d 1 -p 1 -q 1 -g 4 -I NDHWC -f NDHWC -O NDHWC -F 4");
    let key = find_db_key(&c);
    assert_eq!(
        key,
        "64-8-16-16-3x3x3-32-8-16-16-2-1x1x1-1x1x1-1x1x1-0-NDHWC-NDHWC-NDHWC-FP16-W_g4"
    );
    assert_eq!(
        perf_db_key(&c),
        "3x64x16x16x8x3x3x3x32x2x1x1x1x1x1x1x1x1x1x0x4xNDHWCxFP16xW"
    );
    assert_eq!(parse_find_db_key(&key).unwrap(), c);
}

#[test]
fn int8_keys_are_plain_int8_as_fin_and_the_shipped_dbs_write_them() {
    let c = one("convint8 -n 16 -c 64 -H 28 -W 28 -k 64 -y 3 -x 3 -p 1 -q 1 -F 1");
    assert_eq!(
        find_db_key(&c),
        "64-28-28-3x3-64-28-28-16-1x1-1x1-1x1-0-NCHW-INT8-F"
    );
    assert_eq!(
        perf_db_key(&c),
        "2x64x28x28x1x3x3x1x64x16x1x1x0x1x1x0x1x1x0x0x1xNCHWxINT8xF"
    );
    // The driver/API spelling reads as the same problem.
    assert_eq!(
        parse_find_db_key("64-28-28-3x3-64-28-28-16-1x1-1x1-1x1-0-NCHW-INT8INT8INT32-F").unwrap(),
        c
    );
}

#[test]
fn transposed_convolutions_swap_directions() {
    // §1.1: Find-Fwd of a transposed conv is a BackwardData problem with in = x, out = y;
    // Find-Bwd is a Forward problem with in = dy; WrW keeps in = x. y = 2*(7-1)+1+2-2 = 13.
    let base = "conv -n 4 -c 8 -H 7 -W 7 -k 16 -y 3 -x 3 -p 1 -q 1 -u 2 -v 2 -m trans";
    let f = one(&format!("{base} -F 1"));
    assert_eq!(output_dims(&f).unwrap(), (1, 13, 13));
    assert_eq!(
        find_db_key(&f),
        "8-7-7-3x3-16-13-13-4-1x1-2x2-1x1-0-NCHW-FP32-B"
    );
    assert_eq!(
        find_db_key(&one(&format!("{base} -F 2"))),
        "16-13-13-3x3-8-7-7-4-1x1-2x2-1x1-0-NCHW-FP32-F"
    );
    assert_eq!(
        find_db_key(&one(&format!("{base} -F 4"))),
        "8-7-7-3x3-16-13-13-4-1x1-2x2-1x1-0-NCHW-FP32-W"
    );
    // Output padding adds to the transposed output.
    let t = one(&format!("{base} -Y 1 -X 0 -F 1"));
    assert_eq!(output_dims(&t).unwrap(), (1, 14, 13));
    assert_eq!(one(&driver_line(&t)), t);
    // The key of a transposed conv reads back as the ordinary convolution it is tuned as.
    let back = parse_find_db_key(&find_db_key(&f)).unwrap();
    assert_eq!(find_db_key(&back), find_db_key(&f));
}

#[test]
fn pad_modes_rewrite_pads_and_pick_the_output_formula() {
    // `same`: pad = max(7-2, 0)/2 = 2 and out = ceil(224/2) = 112 (the default formula would
    // give 111 with pad 2).
    let c = one("conv -n 1 -c 3 -H 224 -W 224 -k 64 -y 7 -x 7 -u 2 -v 2 --pad_mode same -F 1");
    assert_eq!((c.pad_h, c.pad_w), (2, 2));
    assert_eq!(
        find_db_key(&c),
        "3-224-224-7x7-64-112-112-1-2x2-2x2-1x1-0-NCHW-FP32-F"
    );
    assert_eq!(one(&driver_line(&c)), c);
    // `valid`: pads 0 whatever was given, out = ceil((10-3+1)/2) = 4.
    let v = one("conv -n 1 -c 3 -H 10 -W 10 -k 8 -y 3 -x 3 -p 5 -q 5 -u 2 -v 2 -z valid -F 1");
    assert_eq!((v.pad_h, v.pad_w), (0, 0));
    assert_eq!(output_dims(&v).unwrap(), (1, 4, 4));
    // With a dilation (and a filter that is not 1x1) the pad mode changes nothing.
    let d = one("conv -n 1 -c 3 -H 10 -W 10 -k 8 -y 3 -x 3 -p 1 -q 1 -l 2 -j 2 -z same -F 1");
    assert_eq!((d.pad_h, output_dims(&d).unwrap()), (1, (1, 8, 8)));
}

#[test]
fn an_inconsistent_key_is_refused_with_what_it_should_be() {
    // The illustrative key of MIOpen's source comment: 4x4 in, 1x1 filter, pad 1, stride 2 give
    // a 3x3 output, not 4x4.
    let e = parse_find_db_key("576-4-4-1x1-192-4-4-8-1x1-2x2-3x3-0-NCHW-FP32-F").unwrap_err();
    assert!(
        matches!(&e, FindKeyError::Inconsistent { key, computed, .. } if key == "4x4" && computed == "3x3"),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("output is 4x4") && e.to_string().contains("give 3x3"),
        "{e}"
    );
    let e = parse_find_db_key("256-28-28-3x3-512-28-28-128-1x1-1x1-1x1-0-NCHW-FP32-X").unwrap_err();
    assert!(e.to_string().contains("direction `X`"), "{e}");
    assert_eq!(e.offset(), 52, "the direction field");
    let e = parse_find_db_key("256-28-28-3x3-512-28-28-128-1x1-1x1-0-NCHW-FP32-F").unwrap_err();
    assert!(e.to_string().contains("not a find-db key"), "{e}");
    let e = parse_find_db_key("256-28-28-3x3-512-28-28-128-1x1-1x1-1x1-0-NCHW-FP32-F_ciFP8")
        .unwrap_err();
    assert!(e.to_string().contains("_ciFP8"), "{e}");
}
