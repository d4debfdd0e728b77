//! Tidy rules checked as ordinary tests (after rust-analyzer's `tidy.rs`): every source file of
//! every crate opens with a `//!` comment saying what it is and why.

mod common;

use std::path::Path;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_source_file_starts_with_a_module_doc() {
    let mut files = Vec::new();
    for krate in std::fs::read_dir(common::repo_root().join("crates")).unwrap() {
        let src = krate.unwrap().path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut files);
        }
    }
    assert!(files.len() > 20, "found only {} files", files.len());
    let missing: Vec<String> = files
        .iter()
        .filter(|f| {
            !std::fs::read_to_string(f)
                .unwrap()
                .trim_start()
                .starts_with("//!")
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "files without a `//!` header: {missing:#?}"
    );
}
