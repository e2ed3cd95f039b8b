//! Each run's workdir is the jail's own (a tmpfs in the jail, charged to
//! the run's memory and capped by `--max-workdir`, or in the fallback the
//! jail's metered run directory): nothing of it is on the host's disk, so
//! no request can fill the host and no server killed mid-run leaves one
//! behind. The request's files are written into it by the jail itself
//! ([`crate::policy::Workdir::files`]); this module only checks them and
//! hands them over.

use super::error::ApiError;
use super::request::FileSpec;
use crate::policy::SeedFile;

/// Refuse `files` that cannot all be written (a path that is also
/// another's directory, a path given twice) before a jail is started.
pub fn check_files(files: &[FileSpec]) -> Result<(), ApiError> {
    for f in files {
        let field = format!("files[{}]", serde_json::Value::String(f.path.clone()));
        for g in files {
            if g.path.len() > f.path.len()
                && g.path.starts_with(&f.path)
                && g.path.as_bytes()[f.path.len()] == b'/'
            {
                let part = f.path.rsplit('/').next().unwrap_or(&f.path);
                return Err(ApiError::field(
                    format!("files[{}]", serde_json::Value::String(g.path.clone())),
                    format!("{part:?} is also given as a file"),
                ));
            }
            if std::ptr::eq(f, g) {
                continue;
            }
            if g.path == f.path {
                return Err(ApiError::field(field, "given twice"));
            }
        }
    }
    Ok(())
}

/// The files as the jail writes them.
pub fn seed(files: &[FileSpec]) -> Vec<SeedFile> {
    files
        .iter()
        .map(|f| SeedFile {
            path: f.path.clone(),
            content: f.content.clone(),
            executable: f.executable,
        })
        .collect()
}
