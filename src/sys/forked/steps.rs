//! A zygote once it has read its children's recipe, and the steps each
//! child runs to confine itself, in the payload's order: its stdio, a
//! session, its namespaces, its mounts, `lo`, the server's go, then (as
//! pid 2, init staying pid 1) capabilities, no_new_privs, Landlock, fds,
//! seccomp.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;

use nix::sys::signal::{SigSet, SigmaskHow};

use super::failure::{bad, failure, Failed, Step};
use super::init::{init, INIT_SIGNALS};
use super::recipe::{Go, Recipe, Ruleset, HANDOFF_MAX};
use crate::{Errno, SysResult};

/// A zygote, once it has read its children's recipe.
pub struct Zygote {
    recipe: Recipe,
    /// The /proc entries each child masks: those this kernel has.
    masked: (Vec<&'static str>, Vec<&'static str>),
    /// The zygote's own pid namespace, to return to after each fork.
    own_pidns: OwnedFd,
}

impl Zygote {
    /// Read the recipe from the hand-off pipe `fd` (to its end; closed),
    /// and make the zygote not dumpable (its memory is every child's
    /// template: nothing of the jail's uid may read it).
    pub fn prepare(fd: OwnedFd) -> SysResult<Zygote> {
        let mut bytes = Vec::new();
        let mut buf = [0u8; 16 << 10];
        loop {
            let n = crate::read(fd.as_raw_fd(), &mut buf)?;
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
        crate::set_dumpable(false)?;
        let own_pidns = nix::fcntl::open(
            "/proc/self/ns/pid",
            nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .or_else(|e| crate::err("open", "/proc/self/ns/pid", e))?;
        let masked = crate::procfs::present(Path::new("/proc"));
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
            .or_else(|e| crate::err("unshare", "CLONE_NEWPID", e))
    }

    /// After a fork, in the zygote: the children after this one are born
    /// in a namespace of their own again (a new one at the next
    /// [`Zygote::before_fork`]).
    pub fn after_fork(&self) -> SysResult<()> {
        crate::setns_pid(self.own_pidns.as_raw_fd())
    }

    /// In the child, right after the fork: confine it (see the module's
    /// steps). The child becomes the run's init ([`init`], pid 1 of its
    /// namespace, which never returns) and forks the payload (pid 2),
    /// which returns here confined. `stdio`: its stdin, stdout and
    /// stderr; `setup`: where the payload says "k" when confined and init
    /// the payload's end. On failure the child says `e` and the failed
    /// step there (named as a cold jail names it, `failure`), and ends
    /// (125); it never returns then.
    ///
    /// `notify`: a socket to the server (or -1), over which the payload
    /// sends its seccomp listener when the recipe has a program for one.
    pub fn confine(&self, stdio: [RawFd; 3], setup: RawFd, notify: RawFd) {
        match self.steps(stdio, setup, notify) {
            Ok(()) => {
                let _ = crate::write_all(setup, b"k");
                // SAFETY: no value of the child's owns `setup` (an fd
                // number the zygote's caller handed over).
                unsafe { crate::close_raw(setup) };
            }
            Err(e) => {
                let _ = crate::write_all(setup, &failure(&e));
                crate::exit_now(125)
            }
        }
    }

    fn steps(&self, stdio: [RawFd; 3], setup: RawFd, notify: RawFd) -> Result<(), Failed> {
        let r = &self.recipe;
        for (i, fd) in stdio.into_iter().enumerate() {
            // SAFETY: 0, 1 and 2 are the process's stdio, owned by no value
            // of the interpreter's that this child will use again.
            unsafe { crate::dup2(fd, i as RawFd) }.step("stdio", "")?;
        }
        crate::setsid().step("setsid", "")?;
        use nix::sched::CloneFlags as F;
        let flags = F::CLONE_NEWNS | F::CLONE_NEWNET | F::CLONE_NEWIPC | F::CLONE_NEWUTS;
        nix::sched::unshare(flags)
            .or_else(|e| crate::err("unshare", "mount, net, ipc, uts", e))
            .step("create namespaces", "")?;
        crate::mount(
            None,
            Path::new("/"),
            None,
            libc::MS_REC | libc::MS_PRIVATE,
            None,
        )
        .step("make / private", "")?;
        // Mounted while the server puts us in the run's cgroup (at the
        // recipe's sizes: a tmpfs is charged for what is written in it,
        // not for its mount).
        mount_fresh(r, &self.masked)?;
        crate::netns::loopback_up().step("network", "lo")?;
        crate::chdir(&r.workdir).step("chdir", r.workdir.display())?;
        // The server's go (first on stdin) once we are in the run's cgroup,
        // with the run's tmpfs sizes: the payload is forked in it, and our
        // cgroup namespace is rooted at it.
        let go = Go::read(0).step("go", "")?;
        resize(r, &go)?;
        crate::unshare_cgroupns().step("cgroup namespace", "")?;
        // pid 1 stays here as the run's init; the payload is pid 2, as in
        // every jail. Its signals blocked first: none is lost or acted on
        // between the fork and the signalfd.
        let mut init_sigs = SigSet::empty();
        for s in INIT_SIGNALS {
            init_sigs.add(s);
        }
        let old = init_sigs
            .thread_swap_mask(SigmaskHow::SIG_BLOCK)
            .or_else(|e| crate::err("sigprocmask", "SIG_BLOCK", e))
            .step("signalfd", "")?;
        // SIGCHLD back to its default (the zygote ignores it, so that the
        // kernel reaps its children): init waits for the payload, which
        // finds it as a cold payload does.
        crate::default_sigchld();
        // SAFETY: the interpreter's fork made this process with one
        // thread, and it has started none since.
        let Some(payload) = (unsafe { crate::fork() }).step("start payload", "")? else {
            old.thread_set_mask()
                .or_else(|e| crate::err("sigprocmask", "SIG_SETMASK", e))
                .step("signals", "")?;
            return self.payload_steps(setup, notify);
        };
        if notify >= 0 {
            // The payload's to use: with init's copy closed, the server
            // hears the socket's end when the payload ends without a
            // listener sent.
            // SAFETY: no value of init's owns it (an fd number the
            // zygote's caller handed over).
            unsafe { crate::close_raw(notify) };
        }
        init(payload, setup)
    }

    /// pid 2's steps, the payload's in the payload's order.
    fn payload_steps(&self, setup: RawFd, notify: RawFd) -> Result<(), Failed> {
        let r = &self.recipe;
        // A session of its own, as a cold payload's (no controlling
        // terminal; its init's session is not its).
        crate::setsid().step("setsid", "")?;
        let bounding = crate::drop_all_caps().step("drop capabilities", "")?;
        if crate::caps_left(bounding).iter().any(|&n| n != 0) {
            return Err(bad("capabilities are left after dropping them all"))
                .step("drop capabilities", "");
        }
        // Dumpable, as a cold payload is after its execve (the zygote and
        // init are not): its /proc/self files are its own.
        crate::set_dumpable(true).step("dumpable", "")?;
        crate::set_no_new_privs().step("no_new_privs", "")?;
        if let Some(l) = &r.landlock {
            enforce_landlock(l)?;
        }
        // SAFETY: the child never returns to the code that owns the fds
        // closed here (the zygote's loop): it runs its program, whose
        // objects own none of them, and exits.
        unsafe { crate::close_all_but(&[0, 1, 2, setup, notify]) }.step("close fds", "")?;
        install_seccomp(r, notify)
    }
}

/// The recipe's seccomp program, last: with a listener passed to the
/// server over `notify` when there is a program for one and a socket to
/// send it on. Then neither fd is left to the payload: this process goes
/// on to run the program without an execve, and a listener held by the
/// filtered process itself could answer its own refused syscalls.
fn install_seccomp(r: &Recipe, notify: RawFd) -> Result<(), Failed> {
    if r.seccomp.is_empty() {
        return Ok(());
    }
    let plain = || crate::seccomp::install(&r.seccomp, false).map(|_| ());
    if r.seccomp_notify.is_empty() || notify < 0 {
        return plain().step("seccomp", "");
    }
    let sent = match crate::seccomp::install(&r.seccomp_notify, true) {
        Ok(Some(l)) => crate::fdpass::send_fd(notify, l.as_raw_fd(), b'L'),
        Ok(None) => Err(bad("NEW_LISTENER returned no fd")),
        // A filter above ours already has the one listener a process
        // tree may have: the kernel judges alone, the server hears no
        // listener and says refusals went unrecorded.
        Err(e) if e.errno == Errno::EBUSY => plain(),
        Err(e) => Err(e),
    };
    // SAFETY: no value of the payload's owns it (an fd number the
    // zygote's caller handed over); closed whether the send worked or not.
    unsafe { crate::close_raw(notify) };
    sent.step("seccomp", "")
}

/// The child's own /proc (of its pid namespace, masked as every jail's:
/// `procfs::mask`), /tmp, workdir, /dev/shm,
/// /dev/pts and, where the jail has one, /dev/mqueue (its new IPC
/// namespace's queues). Each failure is the cold root's step for it.
fn mount_fresh(r: &Recipe, masked: &(Vec<&str>, Vec<&str>)) -> Result<(), Failed> {
    let (nosuid, nodev, noexec) = (libc::MS_NOSUID, libc::MS_NODEV, libc::MS_NOEXEC);
    let size = format!("size={}", r.tmp_size);
    let wd = format!("{size},mode=755,uid={},gid={}", r.uid, r.gid);
    let proc = Path::new("/proc");
    crate::mount(Some("proc"), proc, Some("proc"), crate::procfs::FLAGS, None)
        .step("proc", rel(proc))?;
    let proc_root = open_dir(proc).step("proc", rel(proc))?;
    let null = Path::new("/dev/null");
    let devnull = open_path(null).step("open device", null.display())?;
    crate::procfs::mask_these(&proc_root, proc, &devnull, &masked.0, &masked.1)
        .step("proc", rel(proc))?;
    // (the cold root's step, the filesystem, where, flags, options)
    let mounts: [(&str, &str, &Path, libc::c_ulong, String); 4] = [
        (
            "tmpfs",
            "tmpfs",
            Path::new("/tmp"),
            nosuid | nodev,
            format!("{size},mode=1777"),
        ),
        ("tmpfs", "tmpfs", &r.workdir, nosuid | nodev, wd),
        (
            "dev",
            "tmpfs",
            Path::new("/dev/shm"),
            nosuid | nodev,
            format!("{size},mode=1777"),
        ),
        (
            "dev",
            "devpts",
            Path::new("/dev/pts"),
            nosuid | noexec,
            "newinstance,ptmxmode=0666,mode=620".into(),
        ),
    ];
    for (step, fstype, at, flags, data) in mounts {
        crate::mount(Some(fstype), at, Some(fstype), flags, Some(&data)).step(step, rel(at))?;
    }
    let mq = Path::new("/dev/mqueue");
    if mq.is_dir() {
        crate::mount(
            Some("mqueue"),
            mq,
            Some("mqueue"),
            nosuid | nodev | noexec,
            None,
        )
        .step("dev", rel(mq))?;
    }
    Ok(())
}

/// The run's own tmpfs sizes where its go names them (remounted: nothing
/// is in them yet).
fn resize(r: &Recipe, go: &Go) -> Result<(), Failed> {
    let flags = libc::MS_REMOUNT | libc::MS_NOSUID | libc::MS_NODEV;
    // (the cold root's step, where, the size)
    let mut at: Vec<(&str, &Path, u64)> = Vec::new();
    if go.tmp_size > 0 && go.tmp_size != r.tmp_size {
        at.extend([
            ("tmpfs", Path::new("/tmp"), go.tmp_size),
            ("dev", Path::new("/dev/shm"), go.tmp_size),
        ]);
    }
    if go.workdir_size > 0 && go.workdir_size != r.tmp_size {
        at.push(("tmpfs", &r.workdir, go.workdir_size));
    }
    for (step, p, size) in at {
        crate::mount(None, p, None, flags, Some(&format!("size={size}"))).step(step, rel(p))?;
    }
    Ok(())
}

/// A jail path as a cold root's step names it: without its leading `/`.
fn rel(p: &Path) -> std::path::Display<'_> {
    p.strip_prefix("/").unwrap_or(p).display()
}

fn open_path(p: &Path) -> SysResult<OwnedFd> {
    nix::fcntl::open(
        p,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .or_else(|e| crate::err("open", p.display(), e))
}

fn open_dir(p: &Path) -> SysResult<OwnedFd> {
    nix::fcntl::open(
        p,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .or_else(|e| crate::err("open", p.display(), e))
}

/// Make `l` and enforce it on the calling process. A rule whose path is
/// gone is left out (less granted, never more).
fn enforce_landlock(l: &Ruleset) -> Result<(), Failed> {
    let rs = crate::landlock::ruleset(l.fs, l.net, l.scoped).step("landlock", "")?;
    for (access, path) in &l.rules {
        match crate::landlock::open_rule(path) {
            Ok(fd) => crate::landlock::add_path_rule(&rs, *access, &fd, path)
                .step("landlock", path.display())?,
            Err(e) if e.errno == Errno::ENOENT => continue,
            Err(e) => return Err(e).step("landlock", path.display()),
        }
    }
    crate::landlock::restrict_self(&rs, 0).step("landlock", "")
}
