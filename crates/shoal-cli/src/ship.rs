//! Shipping a spec with its files (`shoal_model::shipped`) for `shoal tune --cluster`: the spec,
//! its sources, its shapes CSV and a replay's recorded space are gathered into a tree rooted at
//! the deepest directory that holds them all, and each file the cluster's store lacks is sent
//! in parts as commands. The Scheduler, the workers and the exporter then read the spec from
//! that tree, on their own hosts, and none of them needs the operator's checkout.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use shoal_backend::spec::TuningSpec;
use shoal_model::command::{Command, CommandOutcome};
use shoal_model::shipped::{self, Tree, TreeFile};

use crate::commands::{CommandClient, NoAnswer};

/// A spec's tree, read: what [`send`] ships.
pub struct Shipment {
    pub tree: Tree,
    /// The spec file's path in the tree.
    pub spec: String,
    /// Each file's content, in the tree's order.
    contents: Vec<Vec<u8>>,
}

/// `path` with `.` and `..` resolved by name (the spec's own directory is canonical, so `..`
/// means its parent, as it does to the build).
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The deepest directory holding every path of `paths` (absolute files).
fn common_dir(paths: &[PathBuf]) -> PathBuf {
    let mut root = paths[0].parent().map(Path::to_path_buf).unwrap_or_default();
    for p in &paths[1..] {
        while !p.starts_with(&root) {
            if !root.pop() {
                break;
            }
        }
    }
    root
}

/// Reads the spec's tree: the spec file (as parsed) and every file it names by a relative
/// path. Errors name the file and the limit it passes.
pub fn gather(spec: &TuningSpec) -> anyhow::Result<Shipment> {
    let dir = std::fs::canonicalize(&spec.dir)
        .with_context(|| format!("resolving the spec's directory {}", spec.dir.display()))?;
    let spec_name = spec
        .path
        .file_name()
        .with_context(|| format!("{} names no file", spec.path.display()))?;
    let spec_file = dir.join(spec_name);
    let mut local = vec![spec_file.clone()];
    local.extend(spec.named_files().iter().map(|f| normal(&dir.join(f))));
    let root = common_dir(&local);
    // The limits, from the sizes alone: nothing is read when the tree would be refused. The
    // spec itself is shipped as it was parsed.
    let mut named = Vec::new();
    for path in &local[1..] {
        use std::os::unix::fs::PermissionsExt;
        let meta =
            std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
        named.push((
            path.clone(),
            meta.len(),
            meta.permissions().mode() & 0o111 != 0,
        ));
    }
    let sizes: Vec<(PathBuf, u64)> = named.iter().map(|(p, len, _)| (p.clone(), *len)).collect();
    within_limits(&spec.path, &sizes)?;
    let mut files: Vec<(TreeFile, Vec<u8>)> = Vec::new();
    let spec_entry = (spec_file, 0, false);
    for (path, _, executable) in std::iter::once(&spec_entry).chain(&named) {
        let in_tree = path
            .strip_prefix(&root)
            .ok()
            .and_then(|p| p.to_str())
            .with_context(|| {
                format!(
                    "{} cannot be shipped: its path is not UTF-8",
                    path.display()
                )
            })?
            .to_string();
        if files.iter().any(|(f, _)| f.path == in_tree) {
            continue;
        }
        let bytes = if *path == spec_entry.0 {
            spec.source_text.clone().into_bytes()
        } else {
            std::fs::read(path).with_context(|| format!("reading {}", path.display()))?
        };
        let file = TreeFile {
            path: in_tree,
            sha256: shipped::sha256_hex(&bytes),
            size: bytes.len() as u64,
            executable: *executable,
        };
        files.push((file, bytes));
    }
    let spec_in_tree = files[0].0.path.clone();
    // The tree's order (by path), for the contents too.
    files.sort_by(|a, b| a.0.path.cmp(&b.0.path));
    let (files, contents): (Vec<TreeFile>, Vec<Vec<u8>>) = files.into_iter().unzip();
    let tree = Tree::new(files).map_err(|e| {
        anyhow::anyhow!(
            "{} cannot be shipped to the cluster: {e}",
            spec.path.display()
        )
    })?;
    Ok(Shipment {
        tree,
        spec: spec_in_tree,
        contents,
    })
}

/// Whether files of these sizes may be shipped as one tree (the spec itself is a few KB): the
/// error names the first file over the per-file limit, or the total.
fn within_limits(spec: &Path, sizes: &[(PathBuf, u64)]) -> anyhow::Result<()> {
    let advice = "put it on every host and name it by an absolute path, which is not shipped";
    if let Some((path, size)) = sizes.iter().find(|(_, s)| *s > shipped::MAX_FILE_BYTES) {
        anyhow::bail!(
            "{} has {size} bytes; a file shipped to the cluster has at most {} ({advice})",
            path.display(),
            shipped::MAX_FILE_BYTES
        );
    }
    let total: u64 = sizes.iter().map(|(_, s)| s).sum();
    if total > shipped::MAX_TREE_BYTES {
        anyhow::bail!(
            "{}: the files it names have {total} bytes in all; a spec shipped to the cluster \
             carries at most {} ({advice})",
            spec.display(),
            shipped::MAX_TREE_BYTES
        );
    }
    if sizes.len() + 1 > shipped::MAX_TREE_FILES {
        anyhow::bail!(
            "{} names {} files; a spec shipped to the cluster carries at most {}",
            spec.display(),
            sizes.len(),
            shipped::MAX_TREE_FILES - 1
        );
    }
    Ok(())
}

/// Sends every file of `shipment` the cluster lacks, the tree last, then the command
/// `load`, and waits for its answer; with the numbers of the spec's files and bytes sent.
///
/// When no Scheduler answers the first question (which files it lacks), every file and the
/// command are published all the same, unawaited, and the error is [`NoAnswer`]: they wait in
/// the commands queue, in order, and the spec is loaded when a Scheduler runs.
pub async fn send_and_load(
    client: &mut CommandClient<'_>,
    shipment: &Shipment,
    load: Command,
    wait: Duration,
) -> anyhow::Result<(CommandOutcome, usize, u64)> {
    let tree_bytes = shipment.tree.encode();
    let tree_address = shipment.tree.address();
    let mut asked: Vec<(String, u64)> = shipment
        .tree
        .files()
        .iter()
        .map(|f| (f.sha256.clone(), f.size))
        .collect();
    asked.push((tree_address.clone(), tree_bytes.len() as u64));
    let missing = match client
        .send(Command::MissingFiles { files: asked }, wait)
        .await
    {
        Ok(CommandOutcome::FilesMissing { sha256 }) => Some(sha256),
        Ok(other) => anyhow::bail!("the Scheduler answered {other:?} to missing-files"),
        Err(e) if e.downcast_ref::<NoAnswer>().is_some() => None,
        Err(e) => return Err(e),
    };
    let mut sent = (0, 0);
    let files = shipment.tree.files().iter().zip(&shipment.contents);
    let tree = std::iter::once((tree_address.as_str(), "the tree", &tree_bytes));
    for (sha256, name, bytes) in files
        .map(|(f, b)| (f.sha256.as_str(), f.path.as_str(), b))
        .chain(tree)
    {
        let lacking = missing
            .as_ref()
            .is_none_or(|m| m.iter().any(|s| s == sha256));
        if !lacking || sent_before(shipment, sha256, name) {
            continue;
        }
        let awaited = missing.is_some().then_some(wait);
        put_file(client, sha256, name, bytes, awaited).await?;
        // The tree's own listing is not one of the spec's files.
        if sha256 != tree_address {
            sent.0 += 1;
            sent.1 += bytes.len() as u64;
        }
    }
    if missing.is_none() {
        let (id, name) = client.publish(load).await?;
        return Err(NoAnswer {
            name,
            id,
            waited: wait,
            namespace: client.namespace(),
            queue: client.commands_queue().to_string(),
        }
        .into());
    }
    let outcome = client.send(load, wait).await?;
    Ok((outcome, sent.0, sent.1))
}

/// Whether another file of the tree with the same content comes before `name` (it was sent).
fn sent_before(shipment: &Shipment, sha256: &str, name: &str) -> bool {
    shipment
        .tree
        .files()
        .iter()
        .take_while(|f| f.path != name)
        .any(|f| f.sha256 == sha256)
}

/// Sends one file in parts, saying how far it is when it takes more than one; each part's
/// answer awaited up to `wait`, or none awaited.
async fn put_file(
    client: &mut CommandClient<'_>,
    sha256: &str,
    name: &str,
    bytes: &[u8],
    wait: Option<Duration>,
) -> anyhow::Result<()> {
    let size = bytes.len() as u64;
    let parts = shipped::parts(size);
    let mut start = 0;
    for part in 0..parts {
        let len = shipped::part_len(size, part).expect("a part of the file");
        let command = Command::PutFilePart {
            sha256: sha256.to_string(),
            size,
            part,
            bytes: bytes[start..start + len].to_vec(),
        };
        start += len;
        let Some(wait) = wait else {
            client.publish(command).await?;
            continue;
        };
        let outcome = client
            .send(command, wait)
            .await
            .with_context(|| format!("shipping {name}"))?;
        let CommandOutcome::FilePartStored { complete } = outcome else {
            anyhow::bail!("the Scheduler answered {outcome:?} to a part of {name}");
        };
        if parts > 1 {
            eprintln!("shipping {name}: part {}/{parts}", part + 1);
        }
        if part + 1 == parts && !complete {
            anyhow::bail!(
                "shipping {name}: every part was sent, and the Scheduler has not all of them"
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_holds_the_spec_and_every_file_it_names() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            common_dir(&[
                p("/r/examples/cuda/spec.toml"),
                p("/r/examples/cuda/gemm.cu")
            ]),
            p("/r/examples/cuda")
        );
        assert_eq!(
            common_dir(&[p("/r/examples/cuda/spec.toml"), p("/r/include/k.h")]),
            p("/r")
        );
        assert_eq!(
            normal(&p("/r/examples/cuda/../../include/k.h")),
            p("/r/include/k.h")
        );
    }

    #[test]
    fn a_tree_over_the_limits_is_refused_with_the_limit_named() {
        let spec = Path::new("big/spec.toml");
        let mib = |n: u64| n << 20;
        let files = |sizes: &[u64]| -> Vec<(PathBuf, u64)> {
            sizes
                .iter()
                .enumerate()
                .map(|(i, s)| (PathBuf::from(format!("big/f{i}")), *s))
                .collect()
        };
        within_limits(spec, &files(&[mib(64), mib(64), mib(64), mib(63)])).unwrap();
        let e = within_limits(spec, &files(&[mib(1), mib(64) + 1])).unwrap_err();
        assert!(
            e.to_string().starts_with("big/f1 has 67108865 bytes"),
            "{e}"
        );
        let e = within_limits(spec, &files(&[mib(64), mib(64), mib(64), mib(64), 1])).unwrap_err();
        assert!(e.to_string().contains("268435457 bytes in all"), "{e}");
        assert!(e.to_string().contains("at most 268435456"), "{e}");
        let e = within_limits(spec, &files(&[0; 1000])).unwrap_err();
        assert!(e.to_string().contains("at most 999"), "{e}");
    }

    #[test]
    fn a_spec_s_tree_keeps_files_where_the_spec_names_them() {
        let dir = tempfile::tempdir().unwrap();
        let spec_dir = dir.path().join("examples/k");
        std::fs::create_dir_all(&spec_dir).unwrap();
        std::fs::create_dir_all(dir.path().join("include")).unwrap();
        std::fs::write(dir.path().join("include/k.h"), "#define K 1\n").unwrap();
        std::fs::write(spec_dir.join("k.c"), "int main(void){return 0;}\n").unwrap();
        std::fs::write(spec_dir.join("shapes.csv"), "N\n1\n2\n").unwrap();
        std::fs::write(spec_dir.join("gen.sh"), "#!/bin/sh\n").unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            let exec = std::fs::Permissions::from_mode(0o755);
            std::fs::set_permissions(spec_dir.join("gen.sh"), exec).unwrap();
        }
        let text = r#"
name = "k"
sources = ["k.c", "../../include/k.h", "gen.sh"]
shapes_csv = "shapes.csv"
[build]
command = "cc -o {out} {spec_dir}/k.c"
[run]
command = "{artifact} {N}"
[params.compile]
U = [1, 2]
"#;
        std::fs::write(spec_dir.join("spec.toml"), text).unwrap();
        let spec = shoal_backend::spec::load(&spec_dir.join("spec.toml")).unwrap();
        let shipment = gather(&spec).unwrap();
        let paths: Vec<&str> = shipment
            .tree
            .files()
            .iter()
            .map(|f| f.path.as_str())
            .collect();
        assert_eq!(
            paths,
            [
                "examples/k/gen.sh",
                "examples/k/k.c",
                "examples/k/shapes.csv",
                "examples/k/spec.toml",
                "include/k.h"
            ]
        );
        assert_eq!(shipment.spec, "examples/k/spec.toml");
        let header = shipment
            .tree
            .files()
            .iter()
            .position(|f| f.path == "include/k.h")
            .unwrap();
        assert_eq!(shipment.contents[header], b"#define K 1\n");
        let executable: Vec<bool> = shipment.tree.files().iter().map(|f| f.executable).collect();
        assert_eq!(
            executable,
            [true, false, false, false, false],
            "gen.sh keeps its mode"
        );
    }
}
