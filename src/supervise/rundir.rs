//! The meter on the fallback's run directory, where no tmpfs caps it
//! (`--tmp-size`; the directory and its tmpfs are the plan's:
//! plan::rundir).
//!
//! Unprivileged, or root without CAP_SYS_ADMIN as in a default container,
//! the payload gets RLIMIT_FSIZE at the cap (one file cannot outgrow it)
//! and the supervisor meters the directory ([`usage`]) every few tens of
//! milliseconds and once more at the end, and kills the jail when it holds
//! more than the cap.

#![deny(unsafe_code)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::dir::Dir;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fchmodat, fstat, fstatat, FchmodatFlags, FileStat, Mode, SFlag};

use crate::sys;

/// Every file, directory and symlink counts at least this much: an empty
/// file costs an inode and a directory entry, and a cap on bytes alone
/// would let a payload make millions of them (and make each walk long).
pub const MIN_CHARGE: u64 = 4096;

/// Directories nested deeper than this count as over the cap: the walk
/// holds one descriptor per level.
pub const MAX_DEPTH: usize = 256;

/// What a walk of the run directory found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Allocated bytes (st_blocks), each inode at least [`MIN_CHARGE`];
    /// hard links counted once.
    pub bytes: u64,
    /// Directories nested deeper than [`MAX_DEPTH`], or a directory the
    /// walk could not read: the payload hid something from the meter.
    pub hidden: bool,
}

fn charge(st: &FileStat) -> u64 {
    (st.st_blocks.max(0) as u64 * 512).max(MIN_CHARGE)
}

fn is_dir(st: &FileStat) -> bool {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR
}

/// Walk `root` without following symlinks or leaving its file system, and
/// add up what it holds. `Err` only when `root` itself cannot be opened.
pub fn usage(root: &Path) -> nix::Result<Usage> {
    let top = Dir::open(
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let st = fstat(&top)?;
    let mut w = Walk {
        dev: st.st_dev,
        links: HashSet::new(),
        // The directory itself is stockade's: what is in it counts.
        usage: Usage::default(),
        root: sys::geteuid() == 0,
    };
    w.dir(top, 0);
    Ok(w.usage)
}

struct Walk {
    dev: u64,
    /// Inodes with more than one link, counted already.
    links: HashSet<u64>,
    usage: Usage,
    /// Root reads every directory; the payload's own user (an unprivileged
    /// stockade) may first have to give itself back the right to.
    root: bool,
}

impl Walk {
    fn dir(&mut self, mut d: Dir, depth: usize) {
        let mut names = Vec::new();
        for e in d.iter() {
            let Ok(e) = e else {
                self.usage.hidden = true;
                break;
            };
            let name = e.file_name();
            if name != c"." && name != c".." {
                names.push(name.to_owned());
            }
        }
        let mut subdirs = Vec::new();
        for name in names {
            let st = match fstatat(&d, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                // Removed since the listing.
                Err(nix::errno::Errno::ENOENT) => continue,
                Err(_) => {
                    self.usage.hidden = true;
                    continue;
                }
            };
            if st.st_dev != self.dev {
                continue;
            }
            if st.st_nlink > 1 && !is_dir(&st) && !self.links.insert(st.st_ino) {
                continue;
            }
            self.usage.bytes = self.usage.bytes.saturating_add(charge(&st));
            if is_dir(&st) {
                subdirs.push((name, st.st_mode));
            }
        }
        for (name, mode) in subdirs {
            if depth + 1 > MAX_DEPTH {
                self.usage.hidden = true;
                return;
            }
            if !self.root && mode & 0o700 != 0o700 {
                // Our own user's directory (the payload is us): take back
                // the right to list it.
                let _ = fchmodat(
                    &d,
                    name.as_c_str(),
                    Mode::from_bits_truncate((mode | 0o700) & 0o7777),
                    FchmodatFlags::NoFollowSymlink,
                );
            }
            match Dir::openat(
                &d,
                name.as_c_str(),
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            ) {
                Ok(sub) => self.dir(sub, depth + 1),
                // Removed or replaced since the listing; seen next time.
                Err(
                    nix::errno::Errno::ENOENT
                    | nix::errno::Errno::ELOOP
                    | nix::errno::Errno::ENOTDIR,
                ) => {}
                Err(_) => self.usage.hidden = true,
            }
        }
    }
}

/// The supervisor's meter on a run directory without a tmpfs of its own.
pub struct Meter {
    dir: PathBuf,
    cap: u64,
    next: Instant,
    interval: Duration,
    /// What the last walk found.
    pub last: Usage,
    /// Most bytes seen.
    pub peak: u64,
    /// A walk found the directory past the cap (the watch killed the jail).
    pub hit: bool,
}

/// Shortest time between two walks; a walk that takes longer than a
/// twentieth of it stretches it, so metering costs at most about 5% of a CPU.
pub const PERIOD: Duration = Duration::from_millis(20);

impl Meter {
    pub fn new(dir: PathBuf, cap: u64) -> Meter {
        Meter {
            dir,
            cap,
            next: Instant::now(),
            interval: PERIOD,
            last: Usage::default(),
            peak: 0,
            hit: false,
        }
    }

    /// Walk now; true when the directory holds more than the cap (or hides
    /// something from the walk).
    pub fn check(&mut self) -> bool {
        let t0 = Instant::now();
        // The directory is ours until the run ends; not opening it means
        // something replaced it.
        self.last = usage(&self.dir).unwrap_or(Usage {
            bytes: 0,
            hidden: true,
        });
        self.peak = self.peak.max(self.last.bytes);
        let took = t0.elapsed();
        self.interval = PERIOD.max(took * 20).min(Duration::from_secs(1));
        self.next = Instant::now() + self.interval;
        self.over()
    }

    /// The last walk found more than the cap, or something hidden.
    pub fn over(&self) -> bool {
        self.last.bytes > self.cap || self.last.hidden
    }
}

/// As the watch's observer: walked when due while the jail runs; past
/// the cap, the jail is killed (once).
impl crate::observe::Observer for Meter {
    fn fds(&self, _gone: bool) -> [i32; 2] {
        [-1, -1]
    }

    fn due(&self, gone: bool) -> Option<Instant> {
        (!gone && !self.hit).then_some(self.next)
    }

    fn on_ready(&mut self, _fd: Option<i32>, asks: &mut Vec<crate::observe::Ask>) {
        if self.check() {
            self.hit = true;
            asks.push(crate::observe::Ask::Kill);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("stockade-rundir-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn usage_counts_blocks_once_per_inode_and_a_minimum_each() {
        let d = scratch("usage");
        let empty = usage(&d).unwrap();
        assert_eq!(empty, Usage::default());
        std::fs::write(d.join("big"), vec![1u8; 1 << 20]).unwrap();
        std::fs::hard_link(d.join("big"), d.join("link")).unwrap();
        std::os::unix::fs::symlink("/usr", d.join("sym")).unwrap();
        std::fs::create_dir_all(d.join("a/b/c")).unwrap();
        for i in 0..10 {
            std::fs::write(d.join(format!("a/b/c/f{i}")), b"").unwrap();
        }
        let u = usage(&d).unwrap();
        assert!(!u.hidden);
        // 1 MiB once, the symlink, three directories and ten empty files at
        // least one charge each; /usr behind the symlink not at all.
        assert!(u.bytes >= (1 << 20) + 14 * MIN_CHARGE, "{u:?}");
        assert!(u.bytes < (2 << 20) + 64 * MIN_CHARGE, "{u:?}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
