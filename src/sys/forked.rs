//! A fork server's child: the steps that confine it, in the payload's
//! order, run by the child itself inside the zygote's interpreter. The
//! zygote loads this crate as a shared library (`src/confine`, carried
//! inside the stockade binary and handed over as a memfd), so the child
//! runs the same calls as every other launcher's jail, from the same code.
//!
//! The zygote's jail (stockade's payload step, `jail::zygote`) writes the
//! [`Recipe`] of its children on the hand-off pipe; [`Zygote::prepare`]
//! reads it once. Per run: [`Zygote::before_fork`] (the next child's pid
//! namespace), the interpreter's own fork, [`Zygote::after_fork`] in the
//! zygote (its children's pid namespace is its own again), and
//! [`Zygote::confine`] in the child: its stdio, a session of its own, new
//! mount, network, IPC, UTS and cgroup namespaces, its /proc, /tmp,
//! workdir, /dev/shm, /dev/pts and /dev/mqueue, `lo` up, every capability
//! dropped, no_new_privs, the Landlock ruleset made (after the mounts: a
//! rule on a mount point is not seen beneath a mount over it) and
//! enforced, every other fd closed, the seccomp program installed.

use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::sys::signal::{SigSet, SigmaskHow, Signal};

use super::{Errno, SysError, SysResult};

/// What each child of a zygote applies, as its jail decided it.
#[derive(Clone, Default)]
pub struct Recipe {
    /// The size of each tmpfs the child mounts (/tmp, the workdir,
    /// /dev/shm), bytes.
    pub tmp_size: u64,
    /// The workdir's owner.
    pub uid: u32,
    pub gid: u32,
    /// The workdir, a fresh tmpfs per child; the child's cwd.
    pub workdir: PathBuf,
    /// The Landlock ruleset each child makes and enforces; None: none.
    pub landlock: Option<Ruleset>,
    /// stockade's seccomp program, installed last; empty: none.
    pub seccomp: Vec<libc::sock_filter>,
    /// The records of the layers each child applies (the report pipe's
    /// encoding), passed on to the server as they are.
    pub layers: Vec<u8>,
}

/// A Landlock ruleset as the kernel takes it: the handled rights and
/// scopes (only bits the running kernel knows) and each rule.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ruleset {
    pub fs: u64,
    pub net: u64,
    pub scoped: u64,
    /// `(access, path)`: the fs rights granted beneath each path.
    pub rules: Vec<(u64, PathBuf)>,
}

const MAGIC: &[u8; 4] = b"SKZ1";

impl Recipe {
    /// The recipe as bytes, for the hand-off pipe.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend(self.tmp_size.to_le_bytes());
        b.extend(self.uid.to_le_bytes());
        b.extend(self.gid.to_le_bytes());
        put(&mut b, self.workdir.as_os_str().as_bytes());
        match &self.landlock {
            None => b.push(0),
            Some(r) => {
                b.push(1);
                for v in [r.fs, r.net, r.scoped] {
                    b.extend(v.to_le_bytes());
                }
                b.extend((r.rules.len() as u32).to_le_bytes());
                for (access, path) in &r.rules {
                    b.extend(access.to_le_bytes());
                    put(&mut b, path.as_os_str().as_bytes());
                }
            }
        }
        b.extend((self.seccomp.len() as u32).to_le_bytes());
        for i in &self.seccomp {
            b.extend(i.code.to_le_bytes());
            b.extend([i.jt, i.jf]);
            b.extend(i.k.to_le_bytes());
        }
        put(&mut b, &self.layers);
        b
    }

    /// [`Recipe::encode`]'s bytes read back; None for anything else.
    pub fn decode(bytes: &[u8]) -> Option<Recipe> {
        let mut r = Reader(bytes);
        if r.take(4)? != MAGIC {
            return None;
        }
        let tmp_size = r.u64()?;
        let (uid, gid) = (r.u32()?, r.u32()?);
        let workdir = r.path()?;
        let landlock = match r.take(1)?[0] {
            0 => None,
            1 => {
                let (fs, net, scoped) = (r.u64()?, r.u64()?, r.u64()?);
                let n = r.u32()? as usize;
                let mut rules = Vec::with_capacity(n.min(4096));
                for _ in 0..n {
                    rules.push((r.u64()?, r.path()?));
                }
                Some(Ruleset {
                    fs,
                    net,
                    scoped,
                    rules,
                })
            }
            _ => return None,
        };
        let n = r.u32()? as usize;
        let mut seccomp = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            let i = r.take(8)?;
            seccomp.push(libc::sock_filter {
                code: u16::from_le_bytes([i[0], i[1]]),
                jt: i[2],
                jf: i[3],
                k: u32::from_le_bytes([i[4], i[5], i[6], i[7]]),
            });
        }
        let layers = r.bytes()?.to_vec();
        r.0.is_empty().then_some(Recipe {
            tmp_size,
            uid,
            gid,
            workdir,
            landlock,
            seccomp,
            layers,
        })
    }
}

fn put(b: &mut Vec<u8>, data: &[u8]) {
    b.extend((data.len() as u32).to_le_bytes());
    b.extend(data);
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn path(&mut self) -> Option<PathBuf> {
        let b = self.bytes()?;
        (!b.contains(&0)).then(|| PathBuf::from(OsStr::from_bytes(b)))
    }
}

/// A zygote, once it has read its children's recipe.
pub struct Zygote {
    recipe: Recipe,
    /// The /proc entries each child masks: those this kernel has.
    masked: (Vec<&'static str>, Vec<&'static str>),
    /// The zygote's own pid namespace, to return to after each fork.
    own_pidns: OwnedFd,
}

/// What the server writes first on a child's stdin once the child is in its
/// run's cgroup: `G`, then the run's /tmp (and /dev/shm) size and its
/// workdir's size, each a little-endian u64 (0: the recipe's size).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Go {
    pub tmp_size: u64,
    pub workdir_size: u64,
}

impl Go {
    pub const LEN: usize = 17;

    pub fn encode(&self) -> [u8; Go::LEN] {
        let mut b = [0u8; Go::LEN];
        b[0] = b'G';
        b[1..9].copy_from_slice(&self.tmp_size.to_le_bytes());
        b[9..17].copy_from_slice(&self.workdir_size.to_le_bytes());
        b
    }

    /// Read one from `fd`, exactly its length (what follows is the
    /// payload's).
    fn read(fd: RawFd) -> SysResult<Go> {
        let mut b = [0u8; Go::LEN];
        let mut got = 0;
        while got < Go::LEN {
            match super::read(fd, &mut b[got..])? {
                0 => return Err(bad("no go from the server")),
                n => got += n,
            }
        }
        if b[0] != b'G' {
            return Err(bad("no go from the server"));
        }
        let word = |r: &[u8]| u64::from_le_bytes(r.try_into().unwrap_or_default());
        Ok(Go {
            tmp_size: word(&b[1..9]),
            workdir_size: word(&b[9..17]),
        })
    }
}

/// The most a hand-off may hold.
pub const HANDOFF_MAX: usize = 60 << 10;

impl Zygote {
    /// Read the recipe from the hand-off pipe `fd` (to its end; closed),
    /// and make the zygote not dumpable (its memory is every child's
    /// template: nothing of the jail's uid may read it).
    pub fn prepare(fd: OwnedFd) -> SysResult<Zygote> {
        let mut bytes = Vec::new();
        let mut buf = [0u8; 16 << 10];
        loop {
            let n = super::read(fd.as_raw_fd(), &mut buf)?;
            if n == 0 {
                break;
            }
            bytes.extend_from_slice(&buf[..n]);
            if bytes.len() > HANDOFF_MAX {
                return Err(bad("the hand-off is larger than it may be"));
            }
        }
        drop(fd);
        let recipe = Recipe::decode(&bytes).ok_or_else(|| bad("the hand-off is not a recipe"))?;
        super::set_dumpable(false)?;
        let own_pidns = nix::fcntl::open(
            "/proc/self/ns/pid",
            nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .or_else(|e| super::err("open", "/proc/self/ns/pid", e))?;
        let masked = super::procfs::present(Path::new("/proc"));
        Ok(Zygote {
            recipe,
            masked,
            own_pidns,
        })
    }

    /// The layers' records, for the server.
    pub fn layers(&self) -> &[u8] {
        &self.recipe.layers
    }

    /// Before a fork: the next child is pid 1 of a new pid namespace.
    pub fn before_fork(&self) -> SysResult<()> {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWPID)
            .or_else(|e| super::err("unshare", "CLONE_NEWPID", e))
    }

    /// After a fork, in the zygote: the children after this one are born
    /// in a namespace of their own again (a new one at the next
    /// [`Zygote::before_fork`]).
    pub fn after_fork(&self) -> SysResult<()> {
        super::setns_pid(self.own_pidns.as_raw_fd())
    }

    /// In the child, right after the fork: confine it (see the module's
    /// steps). The child becomes the run's init ([`init`], pid 1 of its
    /// namespace, which never returns) and forks the payload (pid 2),
    /// which returns here confined. `stdio`: its stdin, stdout and
    /// stderr; `setup`: where the payload says "k" when confined and init
    /// the payload's end. On failure the child says `e` and the failed
    /// step there, and ends (125); it never returns then.
    pub fn confine(&self, stdio: [RawFd; 3], setup: RawFd) {
        match self.steps(stdio, setup) {
            Ok(()) => {
                let _ = super::write_all(setup, b"k");
                // SAFETY: no value of the child's owns `setup` (an fd
                // number the zygote's caller handed over).
                unsafe { super::close_raw(setup) };
            }
            Err(e) => {
                let _ = super::write_all(setup, &failure(&e));
                super::exit_now(125)
            }
        }
    }

    fn steps(&self, stdio: [RawFd; 3], setup: RawFd) -> SysResult<()> {
        let r = &self.recipe;
        for (i, fd) in stdio.into_iter().enumerate() {
            // SAFETY: 0, 1 and 2 are the process's stdio, owned by no value
            // of the interpreter's that this child will use again.
            unsafe { super::dup2(fd, i as RawFd)? };
        }
        super::setsid()?;
        use nix::sched::CloneFlags as F;
        let flags = F::CLONE_NEWNS | F::CLONE_NEWNET | F::CLONE_NEWIPC | F::CLONE_NEWUTS;
        nix::sched::unshare(flags).or_else(|e| super::err("unshare", "mount, net, ipc, uts", e))?;
        super::mount(
            None,
            Path::new("/"),
            None,
            libc::MS_REC | libc::MS_PRIVATE,
            None,
        )?;
        // Mounted while the server puts us in the run's cgroup (at the
        // recipe's sizes: a tmpfs is charged for what is written in it,
        // not for its mount).
        mount_fresh(r, &self.masked)?;
        super::netns::loopback_up()?;
        super::chdir(&r.workdir)?;
        // The server's go (first on stdin) once we are in the run's cgroup,
        // with the run's tmpfs sizes: the payload is forked in it, and our
        // cgroup namespace is rooted at it.
        let go = Go::read(0)?;
        resize(r, &go)?;
        super::unshare_cgroupns()?;
        // pid 1 stays here as the run's init; the payload is pid 2, as in
        // every jail. Its signals blocked first: none is lost or acted on
        // between the fork and the signalfd.
        let mut init_sigs = SigSet::empty();
        for s in INIT_SIGNALS {
            init_sigs.add(s);
        }
        let old = init_sigs
            .thread_swap_mask(SigmaskHow::SIG_BLOCK)
            .or_else(|e| super::err("sigprocmask", "SIG_BLOCK", e))?;
        // SIGCHLD back to its default (the zygote ignores it, so that the
        // kernel reaps its children): init waits for the payload, which
        // finds it as a cold payload does.
        super::default_sigchld();
        // SAFETY: the interpreter's fork made this process with one
        // thread, and it has started none since.
        let Some(payload) = (unsafe { super::fork() })? else {
            old.thread_set_mask()
                .or_else(|e| super::err("sigprocmask", "SIG_SETMASK", e))?;
            return self.payload_steps(setup);
        };
        init(payload, setup)
    }

    /// pid 2's steps, the payload's in the payload's order.
    fn payload_steps(&self, setup: RawFd) -> SysResult<()> {
        let r = &self.recipe;
        // A session of its own, as a cold payload's (no controlling
        // terminal; its init's session is not its).
        super::setsid()?;
        let bounding = super::drop_all_caps()?;
        if super::caps_left(bounding).iter().any(|&n| n != 0) {
            return Err(bad("capabilities are left after dropping them all"));
        }
        // Dumpable, as a cold payload is after its execve (the zygote and
        // init are not): its /proc/self files are its own.
        super::set_dumpable(true)?;
        super::set_no_new_privs()?;
        if let Some(l) = &r.landlock {
            enforce_landlock(l)?;
        }
        // SAFETY: the child never returns to the code that owns the fds
        // closed here (the zygote's loop): it runs its program, whose
        // objects own none of them, and exits.
        unsafe { super::close_all_but(&[0, 1, 2, setup])? };
        if !r.seccomp.is_empty() {
            super::seccomp::install(&r.seccomp, false)?;
        }
        Ok(())
    }
}

/// The signals the run's init reads: a child's end, and what it passes on.
const INIT_SIGNALS: [Signal; 5] = [
    Signal::SIGCHLD,
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

/// The payload's end as its init writes it on the setup pipe: `x`, its
/// wait status, then what the run used (every process init reaped: user
/// and system µs, the largest RSS in KiB), little-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct End {
    pub status: i32,
    pub user_us: u64,
    pub sys_us: u64,
    pub maxrss_kb: u64,
    /// The workdir's tmpfs was found full (no block or no inode left):
    /// init then killed the run, or the payload ended on its own with it
    /// full (the run's `disk_limit`, as a cold jail's init finds it).
    pub workdir_full: bool,
}

impl End {
    pub const LEN: usize = 30;

    /// `status`, with what init's reaped children used.
    fn of(status: i32, workdir_full: bool) -> End {
        let ru = super::rusage_children();
        let us = |t: libc::timeval| (t.tv_sec.max(0) as u64) * 1_000_000 + t.tv_usec.max(0) as u64;
        End {
            status,
            user_us: us(ru.ru_utime),
            sys_us: us(ru.ru_stime),
            maxrss_kb: ru.ru_maxrss.max(0) as u64,
            workdir_full,
        }
    }

    pub fn encode(&self) -> [u8; End::LEN] {
        let mut b = [0u8; End::LEN];
        b[0] = b'x';
        b[1..5].copy_from_slice(&self.status.to_le_bytes());
        b[5..13].copy_from_slice(&self.user_us.to_le_bytes());
        b[13..21].copy_from_slice(&self.sys_us.to_le_bytes());
        b[21..29].copy_from_slice(&self.maxrss_kb.to_le_bytes());
        b[29] = u8::from(self.workdir_full);
        b
    }

    /// The record at the start of `b`, if whole.
    pub fn decode(b: &[u8]) -> Option<End> {
        let b = b.get(..End::LEN).filter(|b| b[0] == b'x')?;
        let w = |r: &[u8]| u64::from_le_bytes(r.try_into().unwrap_or_default());
        Some(End {
            status: i32::from_le_bytes(b[1..5].try_into().ok()?),
            user_us: w(&b[5..13]),
            sys_us: w(&b[13..21]),
            maxrss_kb: w(&b[21..29]),
            workdir_full: b[29] == 1,
        })
    }
}

/// pid 1 of a forked run, as a jail's init: holding nothing of the run's
/// (no stdio, no capability), it reaps every process that ends, passes
/// on the signals it is sent (the server's, from outside the namespace,
/// to every process of the run, as the deadline's SIGTERM reaches a cold
/// jail's; one from inside to the payload), and once the payload has
/// ended kills the rest, writes `x` and the payload's wait status on the
/// setup pipe, and exits. Never returns.
fn init(payload: i32, setup: RawFd) -> ! {
    let sfd = match super::signalfd_for(&INIT_SIGNALS) {
        Ok(f) => f,
        Err(_) => {
            let _ = super::kill(-1, libc::SIGKILL);
            super::exit_now(125)
        }
    };
    // SAFETY: init never returns to the interpreter, whose values own the
    // fds closed here.
    let _ = unsafe { super::close_all_but(&[setup, sfd.as_raw_fd()]) };
    let _ = super::drop_all_caps();
    let _ = super::set_no_new_privs();
    // Reap first, then wait: a payload that ended before the signalfd was
    // made left no SIGCHLD to read (setting SIGCHLD's disposition to
    // SIG_DFL discards one pending), so each turn looks before it sleeps.
    // The workdir (init's cwd, the run's own tmpfs) is looked at on each
    // turn and at least every WORKDIR_LOOK_MS: full, the run is killed.
    let mut full = false;
    loop {
        let mut ended = None;
        while let Ok(Some((pid, st))) = super::waitpid(-1, true) {
            if pid == payload {
                ended = Some(st);
            }
        }
        full = full || workdir_full();
        if let Some(st) = ended {
            let _ = super::kill(-1, libc::SIGKILL);
            while super::waitpid(-1, false).is_ok() {}
            let _ = super::write_all(setup, &End::of(st, full).encode());
            super::exit_now(0)
        }
        if full {
            let _ = super::kill(-1, libc::SIGKILL);
        }
        let mut fds = [libc::pollfd {
            fd: sfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let _ = super::poll(&mut fds, WORKDIR_LOOK_MS);
        while let Ok(Some(si)) = sfd.read_signal() {
            let sig = si.ssi_signo as i32;
            if sig == libc::SIGCHLD {
                continue;
            }
            // From outside the namespace (the server) the sender's pid
            // reads 0: every process of the run; else the payload.
            let to = if si.ssi_pid == 0 { -1 } else { payload };
            let _ = super::kill(to, sig);
        }
    }
}

/// How often a forked run's init looks at its workdir while nothing else
/// wakes it.
const WORKDIR_LOOK_MS: i32 = 100;

/// Whether the workdir (the cwd) has no block or no inode left.
fn workdir_full() -> bool {
    nix::sys::statvfs::statvfs(".")
        .is_ok_and(|s| s.blocks_available() == 0 || s.files_available() == 0)
}

/// The child's own /proc (of its pid namespace, masked as every jail's:
/// `procfs::mask`), /tmp, workdir, /dev/shm,
/// /dev/pts and, where the jail has one, /dev/mqueue (its new IPC
/// namespace's queues).
fn mount_fresh(r: &Recipe, masked: &(Vec<&str>, Vec<&str>)) -> SysResult<()> {
    let (nosuid, nodev, noexec) = (libc::MS_NOSUID, libc::MS_NODEV, libc::MS_NOEXEC);
    let size = format!("size={}", r.tmp_size);
    let wd = format!("{size},mode=755,uid={},gid={}", r.uid, r.gid);
    super::mount(
        Some("proc"),
        Path::new("/proc"),
        Some("proc"),
        super::procfs::FLAGS,
        None,
    )?;
    let proc_root = open_dir(Path::new("/proc"))?;
    let devnull = open_path(Path::new("/dev/null"))?;
    super::procfs::mask_these(
        &proc_root,
        Path::new("/proc"),
        &devnull,
        &masked.0,
        &masked.1,
    )?;
    let mounts: [(&str, &Path, libc::c_ulong, String); 4] = [
        (
            "tmpfs",
            Path::new("/tmp"),
            nosuid | nodev,
            format!("{size},mode=1777"),
        ),
        ("tmpfs", &r.workdir, nosuid | nodev, wd),
        (
            "tmpfs",
            Path::new("/dev/shm"),
            nosuid | nodev,
            format!("{size},mode=1777"),
        ),
        (
            "devpts",
            Path::new("/dev/pts"),
            nosuid | noexec,
            "newinstance,ptmxmode=0666,mode=620".into(),
        ),
    ];
    for (fstype, at, flags, data) in mounts {
        super::mount(Some(fstype), at, Some(fstype), flags, Some(&data))?;
    }
    if Path::new("/dev/mqueue").is_dir() {
        let at = Path::new("/dev/mqueue");
        super::mount(
            Some("mqueue"),
            at,
            Some("mqueue"),
            nosuid | nodev | noexec,
            None,
        )?;
    }
    Ok(())
}

/// The run's own tmpfs sizes where its go names them (remounted: nothing
/// is in them yet).
fn resize(r: &Recipe, go: &Go) -> SysResult<()> {
    let flags = libc::MS_REMOUNT | libc::MS_NOSUID | libc::MS_NODEV;
    let mut at: Vec<(&Path, u64)> = Vec::new();
    if go.tmp_size > 0 && go.tmp_size != r.tmp_size {
        at.extend([
            (Path::new("/tmp"), go.tmp_size),
            (Path::new("/dev/shm"), go.tmp_size),
        ]);
    }
    if go.workdir_size > 0 && go.workdir_size != r.tmp_size {
        at.push((&r.workdir, go.workdir_size));
    }
    for (p, size) in at {
        super::mount(None, p, None, flags, Some(&format!("size={size}")))?;
    }
    Ok(())
}

fn open_path(p: &Path) -> SysResult<OwnedFd> {
    nix::fcntl::open(
        p,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .or_else(|e| super::err("open", p.display(), e))
}

fn open_dir(p: &Path) -> SysResult<OwnedFd> {
    nix::fcntl::open(
        p,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .or_else(|e| super::err("open", p.display(), e))
}

/// Make `l` and enforce it on the calling process. A rule whose path is
/// gone is left out (less granted, never more).
fn enforce_landlock(l: &Ruleset) -> SysResult<()> {
    let rs = super::landlock::ruleset(l.fs, l.net, l.scoped)?;
    for (access, path) in &l.rules {
        match super::landlock::open_rule(path) {
            Ok(fd) => super::landlock::add_path_rule(&rs, *access, &fd, path)?,
            Err(e) if e.errno == Errno::ENOENT => continue,
            Err(e) => return Err(e),
        }
    }
    super::landlock::restrict_self(&rs, 0)
}

/// A failed step's record on the setup pipe, one line (init's record may
/// follow it): `e`, the call, a tab, what it was called on, a tab, the
/// errno's number. [`failure_of`] reads it back.
fn failure(e: &SysError) -> Vec<u8> {
    let clean = |s: &str| s.replace(['\t', '\n'], " ");
    format!(
        "e{}\t{}\t{}\n",
        clean(e.call),
        clean(&e.arg),
        e.errno as i32
    )
    .into_bytes()
}

/// [`failure`]'s record read back: the call, what it was called on, the
/// errno.
pub fn failure_of(rec: &[u8]) -> Option<(String, String, Errno)> {
    let line = rec.strip_prefix(b"e")?.split(|&b| b == b'\n').next()?;
    let line = String::from_utf8_lossy(line);
    let mut f = line.splitn(3, '\t');
    let (call, arg, errno) = (f.next()?, f.next()?, f.next()?);
    Some((
        call.into(),
        arg.into(),
        Errno::from_raw(errno.parse().ok()?),
    ))
}

fn bad(why: &str) -> SysError {
    SysError {
        call: "zygote",
        arg: why.into(),
        errno: Errno::EINVAL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recipe_reads_back_as_it_was_written() {
        let r = Recipe {
            tmp_size: 64 << 20,
            uid: 65534,
            gid: 65534,
            workdir: "/work".into(),
            landlock: Some(Ruleset {
                fs: 0xffff,
                net: 3,
                scoped: 2,
                rules: vec![(7, "/usr".into()), (0x1fff, "/tmp".into())],
            }),
            seccomp: vec![libc::sock_filter {
                code: 6,
                jt: 1,
                jf: 2,
                k: 0x7fff0000,
            }],
            layers: b"L{}".to_vec(),
        };
        let b = r.encode();
        let back = Recipe::decode(&b).expect("read back");
        assert_eq!(back.landlock, r.landlock);
        assert_eq!(
            (back.tmp_size, back.uid, back.workdir.clone()),
            (64 << 20, 65534, "/work".into())
        );
        assert_eq!(back.encode(), b);
        let end = End {
            status: 9,
            user_us: 1,
            sys_us: 2,
            maxrss_kb: 3,
            workdir_full: true,
        };
        assert_eq!(End::decode(&end.encode()), Some(end));
        assert_eq!(End::decode(&end.encode()[..End::LEN - 1]), None);
        let e = bad("a\tb\nc");
        let (call, arg, errno) = failure_of(&failure(&e)).expect("read back");
        assert_eq!(
            (call.as_str(), arg.as_str(), errno),
            ("zygote", "a b c", Errno::EINVAL)
        );
        for cut in 0..b.len() {
            assert!(Recipe::decode(&b[..cut]).is_none(), "cut at {cut}");
        }
        let mut more = b.clone();
        more.push(0);
        assert!(Recipe::decode(&more).is_none(), "trailing bytes");
        let none = Recipe {
            landlock: None,
            seccomp: Vec::new(),
            ..r
        };
        assert_eq!(
            Recipe::decode(&none.encode()).map(|r| r.encode()),
            Some(none.encode())
        );
    }
}

/// The zygote's door to these steps, as the shared library exports it
/// (`src/confine`): integers only, no pointer crosses it. Each returns 0,
/// or -1 with the reason written on stderr (the server's log).
pub mod abi {
    use std::os::fd::{FromRawFd, OwnedFd, RawFd};
    use std::sync::OnceLock;

    use super::Zygote;

    static ZYGOTE: OnceLock<Zygote> = OnceLock::new();

    fn said(what: &str, r: super::SysResult<()>) -> i32 {
        match r {
            Ok(()) => 0,
            Err(e) => {
                let _ = super::super::write_all(
                    2,
                    format!("stockade: zygote: {what}: {e}\n").as_bytes(),
                );
                -1
            }
        }
    }

    fn zygote() -> super::SysResult<&'static Zygote> {
        ZYGOTE.get().ok_or_else(|| super::bad("not prepared"))
    }

    /// Read the recipe from the hand-off pipe `handoff`, whose fd this
    /// takes (and closes).
    #[no_mangle]
    pub extern "C" fn stockade_zygote_prepare(handoff: RawFd) -> i32 {
        if handoff < 0 {
            return said("prepare", Err(super::bad("no hand-off")));
        }
        // SAFETY: the caller gives the fd up to us: no value of its owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(handoff) };
        said(
            "prepare",
            Zygote::prepare(fd)
                .and_then(|z| ZYGOTE.set(z).map_err(|_| super::bad("prepared twice"))),
        )
    }

    /// Say ready on the server's socket `sock`: `R` and the layers'
    /// records, one message, with a pidfd of the zygote (where the kernel
    /// gives one): the server tells from it that the zygote has ended
    /// before anything else it held goes.
    #[no_mangle]
    pub extern "C" fn stockade_zygote_ready(sock: RawFd) -> i32 {
        said(
            "ready",
            zygote().and_then(|z| {
                let mut m = b"R".to_vec();
                m.extend_from_slice(z.layers());
                match super::super::pidfd_self() {
                    Ok(me) => super::super::fdpass::send_with_fds(
                        sock,
                        &m,
                        &[std::os::fd::AsRawFd::as_raw_fd(&me)],
                    ),
                    Err(_) => super::super::write_all(sock, &m),
                }
            }),
        )
    }

    /// [`Zygote::before_fork`].
    #[no_mangle]
    pub extern "C" fn stockade_zygote_before_fork() -> i32 {
        said("before fork", zygote().and_then(|z| z.before_fork()))
    }

    /// [`Zygote::after_fork`].
    #[no_mangle]
    pub extern "C" fn stockade_zygote_after_fork() -> i32 {
        said("after fork", zygote().and_then(|z| z.after_fork()))
    }

    /// [`Zygote::confine`], in the child; returns 0 once confined, else
    /// it has ended the child (125).
    #[no_mangle]
    pub extern "C" fn stockade_zygote_child(
        stdin: RawFd,
        stdout: RawFd,
        stderr: RawFd,
        setup: RawFd,
    ) -> i32 {
        match zygote() {
            Ok(z) => {
                z.confine([stdin, stdout, stderr], setup);
                0
            }
            Err(e) => {
                let _ = super::super::write_all(setup, &super::failure(&e));
                super::super::exit_now(125)
            }
        }
    }
}
