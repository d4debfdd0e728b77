//! The two commands of a spec: their placeholders (which names each may use) and their
//! programs (which must exist when the spec is loaded).

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use toml::Spanned;

use super::error::{Ctx, SpecError};
use super::template::Template;
use super::validate::Origin;

/// A placeholder a command may not use.
#[derive(Debug, thiserror::Error)]
pub(super) enum PlaceholderError {
    /// A run parameter or shape column (`origin` says which) in the build command.
    #[error(
        "`{{{var}}}` is {origin}; the build command may use compile parameters, {{out}}, \
         {{spec_dir}}, {{repeat}} and {{warmup}}"
    )]
    NotForBuild { var: String, origin: &'static str },
    #[error("`{{out}}` belongs to the build command; the run command has `{{artifact}}`")]
    OutInRun,
    #[error("`{{artifact}}` belongs to the run command; the build command writes to `{{out}}`")]
    ArtifactInBuild,
    #[error("unknown placeholder `{{{var}}}`")]
    Unknown { var: String },
}

/// Why a command's program cannot be started: what `execvp` would fail with, said before it
/// runs.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    #[error("program `{program}` is not an executable file")]
    NotExecutable { program: String },
    /// A program named by a path, which resolves to `path`, where nothing is.
    #[error("program `{program}` not found ({} does not exist)", .path.display())]
    Missing { program: String, path: PathBuf },
    #[error("program `{program}` not found (looked on PATH)")]
    NotOnPath { program: String },
}

/// Parses a command's argv elements into templates and checks every placeholder.
pub(super) fn templates(
    ctx: Ctx,
    field: &str,
    value: &Spanned<toml::Value>,
    argv: &[String],
    allowed: &dyn Fn(&str) -> Result<(), PlaceholderError>,
) -> Result<Vec<Template>, SpecError> {
    argv.iter()
        .map(|arg| {
            let t = Template::parse(arg).map_err(|(_, m)| ctx.at(value.span(), field, m))?;
            for var in t.vars() {
                allowed(var).map_err(|m| ctx.at(value.span(), field, m))?;
            }
            Ok(t)
        })
        .collect()
}

pub(super) fn placeholder_rule(
    names: &HashMap<String, (Origin, Range<usize>)>,
    build: bool,
) -> impl Fn(&str) -> Result<(), PlaceholderError> + '_ {
    move |var: &str| {
        let builtin_ok = match var {
            "spec_dir" | "repeat" | "warmup" => true,
            "out" => build,
            "artifact" => !build,
            _ => false,
        };
        if builtin_ok {
            return Ok(());
        }
        match names.get(var) {
            Some((Origin::Compile, _)) => Ok(()),
            Some((_, _)) if !build => Ok(()),
            Some((origin, _)) => Err(PlaceholderError::NotForBuild {
                var: var.to_string(),
                origin: origin.describe(),
            }),
            None if var == "out" => Err(PlaceholderError::OutInRun),
            None if var == "artifact" => Err(PlaceholderError::ArtifactInBuild),
            None => Err(PlaceholderError::Unknown {
                var: var.to_string(),
            }),
        }
    }
}

/// Finds a program the way `execvp` would, from the directory commands run in.
pub fn find_program(program: &str, cwd: &Path) -> Result<PathBuf, ProgramError> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if program.contains('/') {
        let p = cwd.join(program);
        if runnable(&p) {
            return Ok(p);
        }
        let program = program.to_string();
        return Err(if p.exists() {
            ProgramError::NotExecutable { program }
        } else {
            ProgramError::Missing { program, path: p }
        });
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let dir = if dir.as_os_str().is_empty() {
            cwd.to_path_buf()
        } else {
            cwd.join(dir)
        };
        let p = dir.join(program);
        if runnable(&p) {
            return Ok(p);
        }
    }
    Err(ProgramError::NotOnPath {
        program: program.to_string(),
    })
}

pub(super) fn check_program(
    ctx: Ctx,
    field: &str,
    value: &Spanned<toml::Value>,
    first: &Template,
    dir: &Path,
) -> Result<(), SpecError> {
    let dir_text = dir.display().to_string();
    let lookup = |n: &str| (n == "spec_dir").then(|| dir_text.clone());
    if first.vars().any(|v| v != "spec_dir") {
        return Ok(()); // made from a parameter or the artifact: checked when it runs
    }
    let program = first.render(&lookup);
    find_program(&program, dir)
        .map(|_| ())
        .map_err(|m| ctx.at(value.span(), field, m))
}
