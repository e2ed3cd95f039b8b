//! What the payload tries of the masked paths (`--deny`, `--deny-glob`):
//! each cover (an empty read-only file or directory over a denied path,
//! `jail::rootfs::cover`) has an inode of its own, watched by init with
//! inotify (IN_OPEN) and handed to the supervisor on the
//! control socket (`proto::MASKS`); watch descriptor N is the plan's Nth
//! cover.
//!
//! What can be seen: an open of a cover (a file opened for reading, a
//! directory opened to be listed), which finds it empty. What cannot: a
//! stat, an `O_PATH` open, an open for writing (the cover is read-only:
//! refused before it is opened), an access check, an exec (refused
//! before the open: the cover has no execute bit). The records are not attributed to a
//! process: only the jail can reach a cover.
//!
//! Bounded: one record per path and access (a repeat only counts), at
//! most [`MAX_DENIALS`]; the kernel's queue holds what the supervisor has
//! not read yet (`fs.inotify.max_queued_events`), and says when it
//! overflowed. Identical events in a row are merged by the kernel while
//! unread; closes are watched too so that repeated opens are not, but a
//! payload holding many opens at once is counted as fewer.

#![deny(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::lines::Lines;
use crate::jail::proto;
use crate::outcome::{Denial, MAX_DENIALS};
use crate::plan::{Plan, RootStep};
use crate::sys;

/// What the watch heard, for the outcome.
#[derive(Debug, Default)]
pub struct Heard {
    pub denials: Vec<Denial>,
    pub more: u64,
    /// Why some covers were not watched.
    pub unwatched: Option<String>,
    /// The kernel's queue overflowed: events were lost.
    pub overflowed: bool,
}

/// The supervisor's end of the covers' watch.
#[derive(Debug)]
pub struct MaskWatch {
    /// Each cover's jail path, in the plan's order.
    paths: Vec<String>,
    /// Waiting for init's watch on the control socket.
    waiting: bool,
    fd: Option<OwnedFd>,
    watched: u32,
    records: Vec<(usize, &'static str, u64)>,
    more: u64,
    overflowed: bool,
    lines: Lines,
    /// The supervisor's end of the control socket, where init's watch comes.
    ctl: RawFd,
}

impl MaskWatch {
    /// For a plan with covers (None without).
    pub fn for_plan(plan: &Plan, lines: Lines, ctl: RawFd) -> Option<MaskWatch> {
        let paths: Vec<String> = plan
            .root
            .steps
            .iter()
            .filter_map(|s| match s {
                RootStep::Cover { dst, .. } => {
                    Some(std::path::Path::new("/").join(dst).display().to_string())
                }
                _ => None,
            })
            .collect();
        if paths.is_empty() {
            return None;
        }
        Some(MaskWatch {
            paths,
            waiting: true,
            fd: None,
            watched: 0,
            records: Vec::new(),
            more: 0,
            overflowed: false,
            lines,
            ctl,
        })
    }

    /// The control socket is readable: take the watch.
    pub fn on_ctl(&mut self, ctl: RawFd) {
        let mut data = [0u8; 5];
        self.waiting = false;
        if let Ok((5, Some(fd))) = sys::fdpass::recv_fd_with(ctl, &mut data) {
            if data[0] == proto::MASKS {
                self.watched = u32::from_ne_bytes([data[1], data[2], data[3], data[4]]);
                self.fd = Some(fd);
            }
        }
    }

    /// The inotify fd to poll, once it came.
    pub fn fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(|f| f.as_raw_fd())
    }

    /// Read the events pending. Never blocks.
    pub fn on_ready(&mut self) {
        let mut buf = [0u8; 4096];
        for _ in 0..64 {
            let Some(fd) = self.fd() else { return };
            let n = match sys::read(fd, &mut buf) {
                Ok(0) => return,
                Ok(n) => n,
                Err(e) if e.errno == sys::Errno::EAGAIN => return,
                Err(_) => {
                    self.fd = None;
                    return;
                }
            };
            for (wd, mask) in events(&buf[..n]) {
                self.on_event(wd, mask);
            }
        }
    }

    fn on_event(&mut self, wd: i32, mask: u32) {
        if mask & libc::IN_Q_OVERFLOW != 0 {
            self.overflowed = true;
            return;
        }
        if mask & libc::IN_OPEN == 0 {
            return;
        }
        let access = "open";
        let Some(i) = usize::try_from(wd - 1)
            .ok()
            .filter(|&i| i < self.paths.len())
        else {
            return;
        };
        if let Some(r) = self
            .records
            .iter_mut()
            .find(|(p, a, _)| *p == i && *a == access)
        {
            r.2 += 1;
            return;
        }
        if self.records.len() >= MAX_DENIALS {
            self.more += 1;
            return;
        }
        self.lines.send(&self.denial(i, access, 1));
        self.records.push((i, access, 1));
    }

    fn denial(&self, i: usize, access: &str, count: u64) -> Denial {
        Denial::Mask {
            path: self.paths[i].clone(),
            access: access.into(),
            count,
        }
    }

    /// The jail is gone: what was heard.
    pub fn finish(mut self, ctl: RawFd) -> Heard {
        if self.waiting {
            let (readable, _) = sys::seccomp::poll_now(ctl);
            if readable {
                self.on_ctl(ctl);
            }
        }
        self.on_ready();
        let total = self.paths.len();
        let unwatched = match (self.fd.is_some(), self.watched as usize) {
            (false, _) => Some("the covers over denied paths could not be watched (no inotify watch came from the jail)".to_string()),
            (true, n) if n < total => Some(format!(
                "{n} of the {total} covers over denied paths are watched (inotify refused more watches: fs.inotify.max_user_watches); attempts on the others are not recorded"
            )),
            _ => None,
        };
        Heard {
            denials: self
                .records
                .iter()
                .map(|&(i, a, n)| self.denial(i, a, n))
                .collect(),
            more: self.more,
            unwatched,
            overflowed: self.overflowed,
        }
    }
}

/// `(wd, mask)` of each `struct inotify_event` in `buf`.
fn events(buf: &[u8]) -> Vec<(i32, u32)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 16 <= buf.len() {
        let wd = i32::from_ne_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
        let mask = u32::from_ne_bytes([buf[at + 4], buf[at + 5], buf[at + 6], buf[at + 7]]);
        let len = u32::from_ne_bytes([buf[at + 12], buf[at + 13], buf[at + 14], buf[at + 15]]);
        out.push((wd, mask));
        at += 16 + len as usize;
    }
    out
}

/// As the watch's observer: the control socket while init's watch is to
/// come, then the inotify fd.
impl super::Observer for MaskWatch {
    fn fds(&self, _gone: bool) -> [RawFd; 2] {
        let ctl = if self.waiting { self.ctl } else { -1 };
        [ctl, self.fd().unwrap_or(-1)]
    }

    fn on_ready(&mut self, fd: Option<RawFd>, _asks: &mut Vec<super::Ask>) {
        match fd {
            Some(fd) if fd == self.ctl && self.waiting => self.on_ctl(fd),
            Some(_) => MaskWatch::on_ready(self),
            None => {}
        }
    }
}
