//! Every process of the jail, as init finds, signals and kills them: in a
//! pid namespace `kill(-1)`; without one (the fallback), the tree of init's
//! descendants (init is a subreaper), or every process of the jail's own
//! leased uid.

#![deny(unsafe_code)]

use crate::sys;

/// Children reaped per wake-up of init's wait loop (and per batch in
/// [`Tree::end`]).
pub(super) const REAP_BATCH: usize = 4096;

/// Every process of the jail.
pub(super) struct Tree {
    /// In our own pid namespace: "everyone but init" is `kill(-1)`. Without
    /// one, kill(-1) would reach the caller's other processes, so the jail is
    /// the tree of init's descendants (init is a subreaper, orphans come back).
    pub(super) contained: bool,
    /// The root-started fallback: the host uid leased to this jail alone
    /// (see plan::uids). Every process that has it is the jail's.
    own_uid: Option<u32>,
    me: u32,
    /// Without a pid namespace, the payload's process group (most of the
    /// jail, unless they left it) while the payload is not reaped: see
    /// [`Tree::kill_group`].
    group: std::cell::Cell<Option<i32>>,
}

/// What /proc/PID/stat says of a process: None when it is dead (a zombie
/// whose every thread has exited, or gone), else its number of threads.
fn live_threads(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: the
    // fields after it start after its last ')'.
    let mut f = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = f.next()?;
    // num_threads is field 20, the 18th after the state. A zombie thread
    // group leader whose other threads still run is not dead.
    let threads = f.nth(16).and_then(|t| t.parse::<u32>().ok()).unwrap_or(1);
    if (state == "Z" || state == "X") && threads <= 1 {
        return None;
    }
    Some(threads)
}

/// Append the children of every thread of `pid` to `out`.
fn children_of(pid: u32, threads: u32, out: &mut Vec<u32>) {
    let mut read = |path: std::path::PathBuf| {
        if let Ok(c) = std::fs::read_to_string(path) {
            out.extend(c.split_whitespace().filter_map(|k| k.parse::<u32>().ok()));
        }
    };
    if threads <= 1 {
        read(format!("/proc/{pid}/task/{pid}/children").into());
        return;
    }
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            read(t.path().join("children"));
        }
    }
}

impl Tree {
    pub(super) fn new(contained: bool, own_uid: Option<u32>, group: Option<i32>) -> Tree {
        Tree {
            contained,
            own_uid,
            me: std::process::id(),
            group: std::cell::Cell::new(group),
        }
    }

    /// SIGKILL to the payload's process group, at once: exact for what is
    /// in it (a signal to a group reaches a child being forked, like
    /// kill(-1) in [`Tree::end`]). Only while the payload is not reaped:
    /// its pid, the group's number, cannot name anyone else's group then.
    pub(super) fn kill_group(&self) {
        if let Some(g) = self.group.take() {
            let _ = sys::kill(-g, libc::SIGKILL);
        }
    }

    /// Whether the payload's group is still the jail's to signal.
    pub(super) fn has_group(&self) -> bool {
        self.group.get().is_some()
    }

    /// The payload was reaped: its group's number may be free again.
    pub(super) fn forget_group(&self) {
        self.group.set(None);
    }

    /// One pass over init's descendants, parents before children:
    /// `visit(pid)` runs before the children of `pid` are listed. Zombies
    /// are not looked into (their children went to a subreaper when they
    /// died). Linear in the number
    /// of processes: each is visited once (a set remembers them), costing a
    /// read of its stat and of its children. Returns the live ones, and how
    /// many were seen, zombies included.
    fn walk(&self, mut visit: impl FnMut(u32)) -> Walked {
        let mut seen = std::collections::HashSet::new();
        let mut live = Vec::new();
        let mut todo = vec![(self.me, 1u32)];
        let mut kids = Vec::new();
        while let Some((p, threads)) = todo.pop() {
            kids.clear();
            children_of(p, threads, &mut kids);
            kids.retain(|&k| k != self.me && seen.insert(k));
            // Newest first (the ones still forking, in a flood of orphans
            // coming back to us), and all of them before any is looked
            // into: a visit is one system call, a look two files.
            for &kid in kids.iter().rev() {
                visit(kid);
            }
            for &kid in kids.iter().rev() {
                if let Some(t) = live_threads(kid) {
                    live.push(kid);
                    todo.push((kid, t));
                }
            }
        }
        Walked {
            live,
            seen: seen.len(),
        }
    }

    /// Pids of every live descendant of init.
    pub(super) fn members(&self) -> Vec<u32> {
        self.walk(|_| {}).live
    }

    /// Send `sig` to every process of the jail, once (for SIGKILL, the
    /// payload's group first, see [`Tree::end`]).
    pub(super) fn signal_all(&self, sig: i32) {
        if self.contained {
            let _ = sys::kill(-1, sig);
            return;
        }
        if let Some(uid) = self.own_uid {
            // Exact, as kill(-1) in a pid namespace (see `end`): every
            // process with the jail's own uid, in one pass.
            if sys::kill_every_process_of(uid, sig).is_ok() {
                return;
            }
        }
        if sig == libc::SIGKILL {
            self.kill_group();
        }
        self.walk(|p| {
            let _ = sys::kill(p as i32, sig);
        });
    }

    /// Kill every process of the jail and reap them all: returns when init
    /// has no child left.
    pub(super) fn end(&self) {
        if self.contained {
            // Exact: kill(-1) signals every process of the namespace but
            // us in one pass under the kernel's task list lock, and a fork
            // racing with it either finishes first (its child is in the
            // list) or fails (copy_process sees the pending SIGKILL under
            // the same lock; a signal sent to many processes also reaches a
            // child being forked). No process of the jail is left to fork,
            // so blocking waits reap the rest.
            let _ = sys::kill(-1, libc::SIGKILL);
            while let Ok(Some(_)) = sys::waitpid(-1, false) {}
            return;
        }
        // No pid namespace, and kill(-1) would reach the caller's other
        // processes (the rootless fallback runs the jail as the caller; the
        // root-started one as a uid other jails share). So walk the tree,
        // killing each process before listing its children: once SIGKILL
        // is pending a process cannot fork again, so its set of children is
        // final; those it leaves behind when it dies are reparented to us
        // and found by the next pass. Passes repeat until we have no child
        // left. Dead children are reaped in one batch between passes, so a
        // pass never wades through a pile of zombies, and a pass follows a
        // batch of deaths, not each death: linear, however many processes
        // the jail made.
        //
        // With a uid of the jail's own, kill(-1) as that uid is exact, as
        // above: one pass, then blocking waits (orphans come back to us,
        // a subreaper).
        if let Some(uid) = self.own_uid {
            if sys::kill_every_process_of(uid, libc::SIGKILL).is_ok() {
                while let Ok(Some(_)) = sys::waitpid(-1, false) {}
                return;
            }
        }
        // First the payload's group, if the payload is not reaped yet (the
        // supervisor is gone); otherwise it was killed when the payload
        // ended.
        self.kill_group();
        let mut batch = REAP_BATCH;
        loop {
            // Reap the dead first (cheaper than looking at them), but no
            // more than a batch: a forker that escaped the kills must not
            // keep us reaping its orphans instead of passing again to kill
            // it.
            if let Reaped::Empty = reap_dead(batch) {
                return;
            }
            let pass = self.walk(|p| {
                let _ = sys::kill(p as i32, libc::SIGKILL);
            });
            batch = 2 * pass.seen + 64;
            // Those found are dying or dead: wait for one death rather
            // than spin.
            if !matches!(sys::waitpid(-1, false), Ok(Some(_))) {
                return;
            }
        }
    }
}

/// What [`Tree::walk`] found.
struct Walked {
    live: Vec<u32>,
    seen: usize,
}

/// What is left of init's children after [`reap_dead`].
enum Reaped {
    /// Init has no child left: the jail is empty.
    Empty,
    /// Some children still run, or more were dead than we reaped.
    Running,
}

/// Reap up to `max` children that are dead already, without waiting.
fn reap_dead(max: usize) -> Reaped {
    for _ in 0..max {
        match sys::waitpid(-1, true) {
            Ok(Some(_)) => {}
            Ok(None) => return Reaped::Running,
            // ECHILD (nothing else is expected with -1 and WNOHANG).
            Err(_) => return Reaped::Empty,
        }
    }
    Reaped::Running
}
