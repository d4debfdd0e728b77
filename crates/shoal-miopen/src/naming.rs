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
