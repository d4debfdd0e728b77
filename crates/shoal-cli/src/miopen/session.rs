//! `shoal session init` for MIOpen: a session's identity is the architecture and CU count it
//! tunes for, the ROCm and MIOpen versions it tunes with, and the reason — as MITuna's. The same
//! identity twice gives back the existing session.

use std::path::Path;

use anyhow::Context;
use shoal_model::{NewSession, Session};
use shoal_store::Store;

/// Flags of `session init`; what is not given is detected on this machine.
pub struct SessionInit {
    pub arch: Option<String>,
    pub num_cu: Option<u32>,
    pub rocm_version: Option<String>,
    pub miopen_version: Option<String>,
    pub reason: String,
    pub max_retries: u32,
}

/// The installed ROCm version (`/opt/rocm/.info/version`), as MITuna reads it.
pub fn detect_rocm_version(root: &Path) -> Option<String> {
    std::fs::read_to_string(root.join("opt/rocm/.info/version"))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// MIOpen's version as MITuna records it: `MIOPEN_VERSION_TWEAK` (the git hash) from
/// `version.h`, with major.minor.patch in front when present.
pub fn detect_miopen_version(root: &Path) -> Option<String> {
    let header = [
        "opt/rocm/include/miopen/version.h",
        "opt/rocm/miopen/include/miopen/version.h",
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(root.join(p)).ok())?;
    let define = |name: &str| -> Option<String> {
        header.lines().find_map(|l| {
            let mut it = l.split_whitespace();
            (it.next()? == "#define" && it.next()? == name)
                .then(|| it.next().map(|v| v.trim_matches('"').to_string()))?
        })
    };
    let tweak = define("MIOPEN_VERSION_TWEAK")?;
    match (
        define("MIOPEN_VERSION_MAJOR"),
        define("MIOPEN_VERSION_MINOR"),
        define("MIOPEN_VERSION_PATCH"),
    ) {
        (Some(a), Some(b), Some(c)) => Some(format!("{a}.{b}.{c}-{tweak}")),
        _ => Some(tweak),
    }
}

/// Builds the identity from flags and the machine, or says which flag is missing.
pub fn identity(init: &SessionInit, root: &Path) -> anyhow::Result<NewSession> {
    let gpu = crate::host::devices_under(&shoal_gpu::SystemRoot(root.to_path_buf()))
        .into_iter()
        .find(|d| d.kind != shoal_gpu::DeviceKind::Cpu);
    let arch = init
        .arch
        .clone()
        .or_else(|| gpu.as_ref().map(|g| g.arch.clone()))
        .context("no AMD GPU found on this machine: pass --arch (e.g. gfx90a) and --num-cu")?;
    let num_cu = init
        .num_cu
        .or_else(|| gpu.as_ref().map(|g| g.num_cu))
        .context("no AMD GPU found on this machine: pass --num-cu (e.g. 110)")?;
    let rocm = init
        .rocm_version
        .clone()
        .or_else(|| detect_rocm_version(root))
        .context("ROCm not found (/opt/rocm/.info/version): pass --rocm-version")?;
    let miopen = init
        .miopen_version
        .clone()
        .or_else(|| detect_miopen_version(root))
        .context("MIOpen not found (/opt/rocm/include/miopen/version.h): pass --miopen-version")?;
    Ok(NewSession {
        reason: init.reason.clone(),
        arch,
        num_cu,
        backend: shoal_model::Backend::Miopen,
        spec: String::new(),
        spec_path: String::new(),
        library_version: miopen,
        driver_version: rocm,
        max_retries: init.max_retries,
    })
}

/// Finds the session with this identity or creates it; returns it and whether it existed.
pub async fn init(store: &dyn Store, identity: &NewSession) -> anyhow::Result<(Session, bool)> {
    if let Some(s) = store.find_session(identity).await? {
        return Ok((s, true));
    }
    let id = store.create_session(identity).await?;
    let s = store
        .session(id)
        .await?
        .context("the new session is not in the store")?;
    Ok((s, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_like_mituna() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("opt/rocm/.info")).unwrap();
        std::fs::write(dir.path().join("opt/rocm/.info/version"), "6.2.0-66\n").unwrap();
        std::fs::create_dir_all(dir.path().join("opt/rocm/include/miopen")).unwrap();
        std::fs::write(
            dir.path().join("opt/rocm/include/miopen/version.h"),
            "#define MIOPEN_VERSION_MAJOR 3\n#define MIOPEN_VERSION_MINOR 2\n#define MIOPEN_VERSION_PATCH 0\n#define MIOPEN_VERSION_TWEAK 2a1e2f3\n",
        )
        .unwrap();
        assert_eq!(detect_rocm_version(dir.path()).as_deref(), Some("6.2.0-66"));
        assert_eq!(
            detect_miopen_version(dir.path()).as_deref(),
            Some("3.2.0-2a1e2f3")
        );
        let init = SessionInit {
            arch: Some("gfx90a".into()),
            num_cu: Some(110),
            rocm_version: None,
            miopen_version: None,
            reason: "r".into(),
            max_retries: 3,
        };
        let id = identity(&init, dir.path()).unwrap();
        assert_eq!((id.arch.as_str(), id.num_cu), ("gfx90a", 110));
        assert_eq!(id.driver_version, "6.2.0-66");
        let empty = tempfile::tempdir().unwrap();
        let err = identity(&init, empty.path()).unwrap_err().to_string();
        assert!(err.contains("--rocm-version"), "{err}");
    }
}
