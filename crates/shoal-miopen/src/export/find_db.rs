//! The find db, `<base>.HIP.fdb.txt` (`docs/miopen-formats.md` §3.2; MITuna `export_db.py`
//! `build_miopen_fdb` + `write_fdb`):
//!
//! ```text
//! KEY=SOLVER:TIME,WORKSPACE,ALGO;SOLVER:TIME,WORKSPACE,ALGO…\n
//! ```
//!
//! KEY is the Serialize key (§1.2a); lines are sorted by key in byte order; per key the first
//! record per solver is kept, entries are sorted by (time, solver name) and cut to the
//! [`FIND_DB_TOP`] fastest. TIME is printed as MIOpen's `ostream << float` does (`%g`, 6
//! significant digits, see [`format_time`]), which is what the shipped files contain.

use super::FindDbEntry;
use crate::keys::find_db_key;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashSet};

/// MITuna keeps the 4 fastest solvers per key (`while len(entries) > 4: entries.pop()`).
pub const FIND_DB_TOP: usize = 4;

/// Which entries the find db keeps, per key in byte order: the first record per solver,
/// sorted by (time, solver name), cut to the [`FIND_DB_TOP`] fastest. Indexes into `entries`.
pub fn find_db_kept(entries: &[FindDbEntry]) -> BTreeMap<String, Vec<usize>> {
    let mut by_key: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut seen: HashSet<(String, &str)> = HashSet::new();
    for (i, e) in entries.iter().enumerate() {
        let key = find_db_key(&e.config);
        if seen.insert((key.clone(), e.solver.as_str())) {
            by_key.entry(key).or_default().push(i);
        }
    }
    for list in by_key.values_mut() {
        list.sort_by(|&a, &b| {
            let (a, b) = (&entries[a], &entries[b]);
            a.time_ms
                .partial_cmp(&b.time_ms)
                .unwrap_or(Ordering::Equal)
                .then_with(|| a.solver.cmp(&b.solver))
        });
        list.truncate(FIND_DB_TOP);
    }
    by_key
}

/// The find-db text for `entries`.
pub fn find_db_text(entries: &[FindDbEntry]) -> String {
    let mut out = String::new();
    for (key, kept) in find_db_kept(entries) {
        let list: Vec<&FindDbEntry> = kept.iter().map(|&i| &entries[i]).collect();
        out.push_str(&key);
        out.push('=');
        for (i, e) in list.iter().enumerate() {
            if i > 0 {
                out.push(';');
            }
            out.push_str(&format!(
                "{}:{},{},{}",
                e.solver,
                format_time(e.time_ms),
                e.workspace,
                e.algorithm
            ));
        }
        out.push('\n');
    }
    out
}

/// A `float` as C++ `std::ostream << x` prints it with default flags: `%g` with precision 6
/// (6 significant digits, round half to even on the exact binary value, trailing zeros
/// removed, exponent form below 1e-4 and from 1e6 on): `0.0863205`, `19.046`, `1e-05`,
/// `1.23456e+06`.
pub fn format_time(x: f32) -> String {
    const P: usize = 6;
    let v = f64::from(x);
    if v.is_nan() {
        return if v.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if v.is_infinite() {
        return if v < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    let sign = if v.is_sign_negative() { "-" } else { "" };
    if v == 0.0 {
        return format!("{sign}0");
    }
    // The exact decimal expansion of the value (an f32 has at most ~112 significant digits).
    let exact = format!("{:.119e}", v.abs());
    let (mantissa, exp) = exact.split_once('e').expect("exponent form");
    let mut exp: i32 = exp.parse().expect("exponent");
    let all: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    let (kept, rest) = all.split_at(P);
    let mut digits: Vec<u8> = kept.to_vec();
    let round_up = match rest[0].cmp(&b'5') {
        Ordering::Greater => true,
        Ordering::Less => false,
        Ordering::Equal => rest[1..].iter().any(|d| *d != b'0') || (digits[P - 1] - b'0') % 2 == 1,
    };
    if round_up {
        let mut i = P;
        loop {
            if i == 0 {
                digits.insert(0, b'1');
                digits.truncate(P);
                exp += 1;
                break;
            }
            i -= 1;
            if digits[i] == b'9' {
                digits[i] = b'0';
            } else {
                digits[i] += 1;
                break;
            }
        }
    }
    let digits = String::from_utf8(digits).expect("ascii digits");
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if exp < -4 || exp >= P as i32 {
        let m = trim(&format!("{}.{}", &digits[..1], &digits[1..]));
        let es = if exp < 0 { '-' } else { '+' };
        format!("{sign}{m}e{es}{:02}", exp.abs())
    } else if exp >= 0 {
        let point = exp as usize + 1;
        let s = format!("{}.{}", &digits[..point], &digits[point..]);
        format!("{sign}{}", trim(&s))
    } else {
        let zeros = "0".repeat((-exp - 1) as usize);
        format!("{sign}{}", trim(&format!("0.{zeros}{digits}")))
    }
}

#[cfg(test)]
mod tests {
    use super::format_time;

    #[test]
    fn like_printf_g() {
        // Expected strings from C's printf("%g", (double)x) (Python's '%g' agrees).
        let cases: [(f32, &str); 16] = [
            (2.859_684, "2.85968"),
            (0.086_320_5, "0.0863205"),
            (19.046, "19.046"),
            (1.013_05, "1.01305"),
            (6.286_26, "6.28626"),
            (0.051_639, "0.051639"),
            (1e-5, "1e-05"),
            (0.000_123_456_79, "0.000123457"),
            (1_234_565.0, "1.23456e+06"), // exact tie, half to even
            (2.015_625, "2.01562"),       // exact tie, half to even
            (2.046_875, "2.04688"),       // exact tie, rounds up to even
            (999_999.5, "1e+06"),         // carry into a new digit
            (123_456.0, "123456"),
            (100.0, "100"),
            (0.0, "0"),
            (-0.5, "-0.5"),
        ];
        for (x, want) in cases {
            assert_eq!(format_time(x), want, "{x:e}");
        }
    }
}
