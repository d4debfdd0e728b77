//! Every line of every real config file (MITuna's recurrent configs, copied into
//! `tests/driver_configs/`, with their SHA-256 sums) is read: each one parses, is
//! classified (other primitive, blank), or is refused with one clear error. The per-file counts
//! are pinned, and a summary is printed (`cargo test -p shoal-miopen --test
//! driver_config_files -- --nocapture`).

use shoal_miopen::driver::{parse_line, LineKind};
use shoal_miopen::keys::find_db_key;
use shoal_miopen::Direction;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Default, PartialEq, Eq)]
struct Summary {
    lines: usize,
    conv_lines: usize,
    configs: usize,
    expanded_lines: usize,
    blank: usize,
    other: BTreeMap<String, usize>,
    /// (line number, column, message)
    errors: Vec<(usize, Option<usize>, String)>,
}

fn summarize(path: &Path) -> Summary {
    let text = std::fs::read_to_string(path).unwrap();
    let mut s = Summary::default();
    for (i, line) in text.lines().enumerate() {
        s.lines += 1;
        match parse_line(line) {
            Ok(LineKind::Conv { configs, expanded }) => {
                s.conv_lines += 1;
                s.configs += configs.len();
                s.expanded_lines += usize::from(expanded);
                for c in &configs {
                    c.validate().unwrap();
                    // Every config yields a well-formed key that reads back to the same key.
                    let key = find_db_key(c);
                    let back = parse_line(&key).unwrap();
                    let LineKind::Conv { configs: back, .. } = back else {
                        panic!("{key}")
                    };
                    assert_eq!(find_db_key(&back[0]), key);
                }
            }
            Ok(LineKind::Other { primitive }) => *s.other.entry(primitive).or_default() += 1,
            Ok(LineKind::Blank) => s.blank += 1,
            Err(e) => s.errors.push((i + 1, e.column, e.message)),
        }
    }
    s
}

/// (lines, conv lines, configs, expanded lines, blank, other primitives by name, errors)
type Counts = (
    usize,
    usize,
    usize,
    usize,
    usize,
    &'static [(&'static str, usize)],
    usize,
);

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/driver_configs")
}

fn files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(data_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_line_of_every_config_file_is_accounted_for() {
    // name: (lines, conv lines, configs, expanded lines, blank, other primitives, errors)
    let expected: BTreeMap<&str, Counts> = [
        ("alexnet.txt", (17, 14, 14, 0, 0, &[("pool", 3)][..], 0)),
        ("conv_configs_NCHW.txt", (5, 4, 4, 0, 1, &[][..], 0)),
        ("conv_configs_NHWC.txt", (9, 5, 5, 0, 4, &[][..], 0)),
        ("msra.txt", (2, 2, 2, 0, 0, &[][..], 0)),
        ("resnet50.txt", (60, 59, 59, 0, 0, &[("pool", 1)][..], 0)),
        ("resnet50_pytorch.txt", (61, 60, 60, 0, 1, &[][..], 0)),
        ("vgg16.txt", (31, 26, 26, 0, 0, &[("pool", 5)][..], 0)),
    ]
    .into_iter()
    .collect();

    let mut total = Summary::default();
    println!(
        "{:<24} {:>5} {:>5} {:>7} {:>8} {:>5}  {:<10} errors",
        "file", "lines", "conv", "configs", "expanded", "blank", "other"
    );
    let files = files();
    assert_eq!(files.len(), expected.len(), "{files:?}");
    for path in &files {
        let name = path.file_name().unwrap().to_str().unwrap();
        let s = summarize(path);
        let other: Vec<String> = s.other.iter().map(|(k, v)| format!("{k}×{v}")).collect();
        println!(
            "{:<24} {:>5} {:>5} {:>7} {:>8} {:>5}  {:<10} {}",
            name,
            s.lines,
            s.conv_lines,
            s.configs,
            s.expanded_lines,
            s.blank,
            other.join(","),
            s.errors.len()
        );
        for (line, col, msg) in &s.errors {
            println!(
                "    {name}:{line}:{}: {msg}",
                col.map_or(String::new(), |c| c.to_string())
            );
        }
        let (lines, conv, configs, expanded, blank, others, errors) = expected[name];
        let others: BTreeMap<String, usize> =
            others.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        assert_eq!(
            (
                s.lines,
                s.conv_lines,
                s.configs,
                s.expanded_lines,
                s.blank,
                &s.other,
                s.errors.len()
            ),
            (lines, conv, configs, expanded, blank, &others, errors),
            "{name}"
        );
        assert_eq!(
            s.lines,
            s.conv_lines + s.blank + s.other.values().sum::<usize>() + s.errors.len()
        );
        total.lines += s.lines;
        total.configs += s.configs;
        total.errors.extend(
            s.errors
                .into_iter()
                .map(|(l, c, m)| (l, c, format!("{name}: {m}"))),
        );
    }
    println!(
        "total: {} lines, {} configs, {} errors",
        total.lines,
        total.configs,
        total.errors.len()
    );

    // msra.txt:1 ends in `-F 1.`, which MIOpenDriver reads as 1 (MITuna rejects the line).
    assert!(total.errors.is_empty(), "{:?}", total.errors);
    let msra = std::fs::read_to_string(data_dir().join("msra.txt")).unwrap();
    let first = msra.lines().next().unwrap();
    assert!(first.ends_with("-F 1."));
    let LineKind::Conv { configs, .. } = parse_line(first).unwrap() else {
        panic!("{first}")
    };
    assert_eq!(configs.len(), 1);
    assert_eq!(configs[0].direction, shoal_miopen::Direction::Forward);
    let err = parse_line(&first.replace("-F 1.", "-F 1.5")).unwrap_err();
    assert!(err.message.contains("1.5"), "{err}");
}

#[test]
fn the_pytorch_log_prefix_selects_forward() {
    let s = std::fs::read_to_string(data_dir().join("resnet50_pytorch.txt")).unwrap();
    for line in s.lines().filter(|l| !l.trim().is_empty()) {
        let LineKind::Conv { configs, expanded } = parse_line(line).unwrap() else {
            panic!()
        };
        assert!(!expanded);
        assert_eq!(configs.len(), 1);
        assert_eq!(configs[0].direction, Direction::Forward);
    }
}

#[test]
fn differing_layout_lines_and_long_flags_parse_like_their_short_twins() {
    let dir = data_dir();
    let nchw = std::fs::read_to_string(dir.join("conv_configs_NCHW.txt")).unwrap();
    let first = nchw.lines().next().unwrap();
    let short =
        "conv -n 256 -c 128 -H 28 -W 28 -k 128 -y 3 -x 3 -p 1 -q 1 -u 1 -v 1 -l 1 -j 1 -g 1 -F 1";
    assert_eq!(parse_line(first).unwrap(), parse_line(short).unwrap());
}

/// The copies under `tests/driver_configs/` are byte for byte the files they were copied from
/// (MITuna's recurrent configs): `SHA256SUMS` beside them was written from the originals, so an
/// edit to a copy, or a file added without its sum, fails here on any clone.
#[test]
fn fixtures_are_the_recorded_files() {
    use sha2::{Digest, Sha256};
    let sums = std::fs::read_to_string(data_dir().join("SHA256SUMS")).unwrap();
    let mut listed = Vec::new();
    for line in sums.lines() {
        let (sum, name) = line.split_once("  ").expect("`<sha256>  <file>`");
        let bytes = std::fs::read(data_dir().join(name)).unwrap();
        let digest: String = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(digest, sum, "{name} differs from the recorded file");
        listed.push(name.to_string());
    }
    let mut present: Vec<String> = std::fs::read_dir(data_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".txt"))
        .collect();
    present.sort();
    listed.sort();
    assert_eq!(present, listed, "every config file has its sum");
}
