//! Device names as MIOpen and MITuna spell them: the base name of MIOpen's database files
//! (`gfx90878.HIP.fdb.txt`, `gfx906_60.db`, `gfx942130.kdb` …), which MIOpen derives from the
//! device and its CU count and which an exported database must match byte for byte to be found,
//! and the target id that MITuna hands to fin.
//!
//! Rules (`docs/miopen-formats.md` §2.2, §3.1, §4.3, §9.7; MIOpen
//! `Handle::GetDbBasename`, `TargetProperties::Init/InitDbId`; MITuna `export_db.get_filename`):
//! base = `DbId` followed by `_<decimal CUs>` when the device has at most 64 CUs, else by the CU
//! count in lowercase hex with no separator (120 = 0x78 → `gfx90878`, 304 = 0x130 →
//! `gfx942130`). `DbId` = the name before the first `:` (target features such as
//! `:sramecc+:xnack-` are dropped), legacy marketing names mapped to their gfx name
//! (`Vega10` → `gfx900`, `Fiji` → `gfx803` …), and `_xnack` appended when the name says
//! `xnack+`: MIOpen ignores a reported `sramecc` (it computes the default and, for the default,
//! adds no suffix) but keeps XNACK-on databases apart. MITuna names its exports from the bare
//! session arch, so for XNACK-off devices (every shipped database) the two agree.

/// MIOpen's `GetDeviceNameFromMap`: old marketing names of gfx803/gfx900/gfx1030 parts.
const LEGACY_NAMES: &[(&str, &str)] = &[
    ("Ellesmere", "gfx803"),
    ("Baffin", "gfx803"),
    ("RacerX", "gfx803"),
    ("Polaris10", "gfx803"),
    ("Polaris11", "gfx803"),
    ("Tonga", "gfx803"),
    ("Fiji", "gfx803"),
    ("gfx800", "gfx803"),
    ("gfx802", "gfx803"),
    ("gfx804", "gfx803"),
    ("Vega10", "gfx900"),
    ("gfx901", "gfx900"),
    ("10.3.0 Sienna_Cichlid 18", "gfx1030"),
];

/// The device name without target features, legacy names mapped: `gfx90a:sramecc+:xnack-` →
/// `gfx90a`, `Vega10` → `gfx900`.
pub fn base_arch(arch: &str) -> &str {
    let name = arch.split(':').next().unwrap_or(arch).trim();
    LEGACY_NAMES
        .iter()
        .find(|(legacy, _)| *legacy == name)
        .map_or(name, |(_, gfx)| gfx)
}

/// MIOpen's `TargetProperties::DbId()`: [`base_arch`], plus `_xnack` for an `xnack+` target.
pub fn db_id(arch: &str) -> String {
    let mut id = base_arch(arch).to_string();
    if arch.contains(":xnack+") {
        id.push_str("_xnack");
    }
    id
}

/// The base name of MIOpen's database files for a device: `gfx908`/120 → `gfx90878`,
/// `gfx906`/60 → `gfx906_60`, `gfx90a:sramecc+:xnack-`/104 → `gfx90a68`, `gfx942`/304 →
/// `gfx942130`, `gfx1030`/36 → `gfx1030_36`.
pub fn db_base_name(arch: &str, num_cu: u32) -> String {
    let id = db_id(arch);
    if num_cu <= 64 {
        format!("{id}_{num_cu}")
    } else {
        format!("{id}{num_cu:x}")
    }
}

/// A file name's base that [`db_base_name`] writes for no device, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{base}` is not a MIOpen database base name ({why}); one is the gfx name followed by \
     `_<CUs>` for at most 64 CUs or by the CU count in lowercase hex above 64, e.g. gfx906_60, \
     gfx90a6e, gfx942130"
)]
pub struct NotABaseName {
    pub base: String,
    pub why: BaseNameProblem,
}

/// What a [`NotABaseName`] lacks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BaseNameProblem {
    #[error("it does not start with `gfx`")]
    NoGfxPrefix,
    #[error("no gfx name such as gfx906 or gfx1030")]
    NoGfxName,
    #[error("no CU count after the gfx name")]
    NoCuCount,
    /// The name has `num_cu` CUs in the base (decimal or hex) that [`db_base_name`] does not
    /// use for that count: it writes `written`.
    #[error("{num_cu} CUs would be written `{written}`")]
    WrittenOtherwise { num_cu: u32, written: String },
}

/// The device a database base name is for, the inverse of [`db_base_name`]: `gfx942130` →
/// (`gfx942`, 304), `gfx906_60` → (`gfx906`, 60), `gfx90a_xnack6e` → (`gfx90a:xnack+`, 110).
///
/// Why it can be undone: a gfx name is `gfx` and three characters (`gfx906`, `gfx90a`), or four
/// when its major version has two digits (`gfx1030`, always starting `gfx1`), and the CU count
/// that follows is decimal after `_` up to 64 and lowercase hex above it, so where the name ends
/// and which base the count is in are both known. Used to read the device of a shipped database
/// from its file name (`shoal import-db --store`), as MIOpen's own fallback lookup does. A name
/// that [`db_base_name`] would not write back the same is refused, with the rule.
pub fn split_db_base_name(base: &str) -> Result<(String, u32), NotABaseName> {
    let refused = |why: BaseNameProblem| NotABaseName {
        base: base.to_string(),
        why,
    };
    let rest = base
        .strip_prefix("gfx")
        .ok_or_else(|| refused(BaseNameProblem::NoGfxPrefix))?;
    let id_len = if rest.starts_with('1') { 4 } else { 3 };
    let (id, rest) = rest
        .split_at_checked(id_len)
        .filter(|(id, _)| {
            id.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
        .ok_or_else(|| refused(BaseNameProblem::NoGfxName))?;
    let (arch, rest) = match rest.strip_prefix("_xnack") {
        Some(rest) => (format!("gfx{id}:xnack+"), rest),
        None => (format!("gfx{id}"), rest),
    };
    let num_cu = match rest.strip_prefix('_') {
        Some(decimal) if decimal.bytes().all(|b| b.is_ascii_digit()) => decimal.parse().ok(),
        Some(_) => None,
        None => u32::from_str_radix(rest, 16).ok(),
    }
    .filter(|&cu| cu > 0)
    .ok_or_else(|| refused(BaseNameProblem::NoCuCount))?;
    let written = db_base_name(&arch, num_cu);
    if written != base {
        return Err(refused(BaseNameProblem::WrittenOtherwise {
            num_cu,
            written,
        }));
    }
    Ok((arch, num_cu))
}

/// MITuna's `arch2targetid`, the `arch` fin is given: `gfx1030` → `gfx1030`, `gfx900` →
/// `gfx900:xnack-`, any other → `<arch>:sram-ecc+:xnack-` (MITuna's spelling, with the hyphen
/// in `sram-ecc`). Features already on `arch` are dropped first (MITuna is only ever called
/// with a bare arch).
pub fn arch_target_id(arch: &str) -> String {
    let arch = arch.split(':').next().unwrap_or(arch).trim();
    match arch {
        "gfx1030" => arch.to_string(),
        "gfx900" => format!("{arch}:xnack-"),
        _ => format!("{arch}:sram-ecc+:xnack-"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_database_name_of_the_reference() {
        // §2.2, §3.1, §4.3 and docs/mituna.md §3.3: shipped and exported names.
        for (arch, cu, name) in [
            ("gfx908", 120, "gfx90878"),
            ("gfx906", 60, "gfx906_60"),
            ("gfx906", 64, "gfx906_64"),
            ("gfx900", 56, "gfx900_56"),
            ("gfx900", 64, "gfx900_64"),
            ("gfx803", 36, "gfx803_36"),
            ("gfx803", 64, "gfx803_64"),
            ("gfx90a", 104, "gfx90a68"),
            ("gfx90a", 110, "gfx90a6e"),
            ("gfx942", 304, "gfx942130"),
            ("gfx942", 228, "gfx942e4"),
            ("gfx1030", 36, "gfx1030_36"),
        ] {
            assert_eq!(db_base_name(arch, cu), name, "{arch}/{cu}");
        }
        // 64 is the last decimal count, 65 the first hex one.
        assert_eq!(db_base_name("gfx90a", 65), "gfx90a41");
    }

    #[test]
    fn target_features_and_legacy_names() {
        assert_eq!(db_base_name("gfx90a:sramecc+:xnack-", 104), "gfx90a68");
        assert_eq!(db_base_name("gfx908:sramecc-:xnack-", 120), "gfx90878");
        assert_eq!(
            db_base_name("gfx90a:sramecc+:xnack+", 110),
            "gfx90a_xnack6e"
        );
        assert_eq!(db_base_name("Vega10", 64), "gfx900_64");
        assert_eq!(db_base_name("gfx901:xnack-", 56), "gfx900_56");
        assert_eq!(base_arch("gfx942:sramecc+:xnack-"), "gfx942");
    }

    #[test]
    fn base_names_read_back_into_their_device() {
        for (arch, cu, name) in [
            ("gfx908", 120, "gfx90878"),
            ("gfx906", 60, "gfx906_60"),
            ("gfx906", 64, "gfx906_64"),
            ("gfx803", 36, "gfx803_36"),
            ("gfx90a", 104, "gfx90a68"),
            ("gfx90a", 110, "gfx90a6e"),
            ("gfx942", 304, "gfx942130"),
            ("gfx942", 228, "gfx942e4"),
            ("gfx1030", 36, "gfx1030_36"),
            ("gfx1100", 96, "gfx110060"),
            ("gfx90a", 65, "gfx90a41"),
            ("gfx90a:xnack+", 110, "gfx90a_xnack6e"),
        ] {
            assert_eq!(
                split_db_base_name(name),
                Ok((arch.to_string(), cu)),
                "{name}"
            );
            assert_eq!(db_base_name(arch, cu), name, "the inverse of {name}");
        }
    }

    #[test]
    fn names_no_device_writes_are_refused_with_the_rule() {
        for (name, why) in [
            ("gfx942", "no CU count"),
            ("vega10_64", "does not start with `gfx`"),
            ("gfx9", "no gfx name"),
            ("gfx9g2130", "no gfx name"),
            // 60 CUs are written in decimal, 100 in hex: neither name is MIOpen's.
            ("gfx9063c", "60 CUs would be written `gfx906_60`"),
            ("gfx906_100", "100 CUs would be written `gfx90664`"),
            ("gfx906_0", "no CU count"),
            ("gfx906_6x", "no CU count"),
            ("gfx942130.HIP", "no CU count"),
        ] {
            let e = split_db_base_name(name).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains(name), "{name}: {e}");
            assert!(e.contains("gfx942130"), "the error shows an example: {e}");
        }
    }

    #[test]
    fn mituna_target_ids() {
        assert_eq!(arch_target_id("gfx1030"), "gfx1030");
        assert_eq!(arch_target_id("gfx900"), "gfx900:xnack-");
        assert_eq!(arch_target_id("gfx90a"), "gfx90a:sram-ecc+:xnack-");
        assert_eq!(arch_target_id("gfx908"), "gfx908:sram-ecc+:xnack-");
        assert_eq!(
            arch_target_id("gfx90a:sramecc+:xnack-"),
            "gfx90a:sram-ecc+:xnack-"
        );
    }
}
