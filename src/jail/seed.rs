//! The payload's first files: written into its workdir by the payload step
//! itself, as the payload's own user, just before the command starts
//! (`Workdir::files`: a server's request files). So they land on the
//! jail's own storage (its workdir tmpfs, or the fallback's metered run
//! directory), are charged to the run and count against its workdir's
//! size. Nothing is followed: each parent is made here and entered
//! without following a symlink, each file is created new.

#![deny(unsafe_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use super::error::{JailError, Step};
use crate::policy::SeedFile;
use crate::sys;

/// Write `files` under `dir`.
pub fn write(dir: &Path, files: &[SeedFile]) -> Result<(), JailError> {
    let root = sys::open_path_nofollow(dir).step("workdir files", dir)?;
    for f in files {
        let shown = dir.join(&f.path);
        let parts: Vec<&str> = f.path.split('/').collect();
        let (name, parents) = parts.split_last().expect("a checked path is not empty");
        let mut at = None;
        let mut walked = PathBuf::new();
        for p in parents {
            walked.push(p);
            let d = at.as_ref().unwrap_or(&root);
            sys::at::mkdir(d, OsStr::new(p), 0o755, &walked).step("workdir files", &shown)?;
            at = Some(sys::at::open_dir(d, OsStr::new(p), &walked).step("workdir files", &shown)?);
        }
        let d = at.as_ref().unwrap_or(&root);
        let mode = if f.executable { 0o755 } else { 0o644 };
        let fd = sys::at::open(
            d,
            OsStr::new(name),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            mode,
            Path::new(&f.path),
        )
        .step("workdir files", &shown)?;
        sys::write_all(std::os::fd::AsRawFd::as_raw_fd(&fd), &f.content)
            .step("workdir files", &shown)?;
    }
    Ok(())
}
