//! Removing a run's cgroup off the request path. A cgroup's rmdir fails
//! (EBUSY) until its last process has exited, and a forked run's answer
//! is ready before that: its init sends the payload's end, then exits. So
//! the answer does not wait: the run's cgroup goes to the janitor (one
//! thread per process, started at its first use) with a pidfd of the
//! run's first process, and the janitor removes it once that process has
//! exited (the pidfd reads ready). What is still there after [`LINGER`] is
//! killed; a cgroup that cannot be removed after [`GIVE_UP`] is named on
//! stderr and left to `cleanup_stale` (its name says whose it is).

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::RunCgroup;
use crate::sys;

/// After this long, what is left in a cgroup is killed.
const LINGER: Duration = Duration::from_secs(2);
/// After this long, the janitor stops trying.
const GIVE_UP: Duration = Duration::from_secs(10);
/// How often the janitor looks again while it holds cgroups.
const PERIOD_MS: i32 = 20;

struct Held {
    cgroup: RunCgroup,
    /// The run's first process: the cgroup can go once it has exited.
    pidfd: Option<OwnedFd>,
    since: Instant,
    killed: bool,
}

static QUEUE: OnceLock<Mutex<mpsc::Sender<Held>>> = OnceLock::new();
/// Cgroups handed over and not yet removed or given up.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Remove `cgroup` once the process of `pidfd` has exited (with no
/// pidfd: once nothing is left in it), without waiting here.
pub fn remove_after_exit(cgroup: RunCgroup, pidfd: Option<OwnedFd>) {
    let held = Held {
        cgroup,
        pidfd,
        since: Instant::now(),
        killed: false,
    };
    let queue = QUEUE.get_or_init(|| {
        let (tx, rx) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("stockade-cgroup-janitor".into())
            .spawn(move || work(rx));
        if let Err(e) = spawned {
            eprintln!("stockade: cannot start the cgroup janitor ({e}): run cgroups are removed in the request");
        }
        Mutex::new(tx)
    });
    HELD.fetch_add(1, Ordering::SeqCst);
    let sent = queue.lock().unwrap_or_else(|e| e.into_inner()).send(held);
    if let Err(mpsc::SendError(held)) = sent {
        // No janitor: remove it here, as before.
        let _ = held.cgroup.remove();
        HELD.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Wait until every cgroup handed over is removed (or given up), at most
/// `limit`: for a process about to exit, whose janitor dies with it.
pub fn settle(limit: Duration) {
    let t = Instant::now();
    while HELD.load(Ordering::SeqCst) > 0 && t.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn work(rx: mpsc::Receiver<Held>) {
    let mut held: Vec<Held> = Vec::new();
    loop {
        if held.is_empty() {
            match rx.recv() {
                Ok(h) => held.push(h),
                Err(_) => return,
            }
        }
        held.extend(rx.try_iter());
        let mut fds: Vec<libc::pollfd> = held
            .iter()
            .map(|h| libc::pollfd {
                fd: h.pidfd.as_ref().map_or(-1, |p| p.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let _ = sys::poll(&mut fds, PERIOD_MS);
        let mut i = 0;
        held.retain_mut(|h| {
            let exited = match &h.pidfd {
                Some(_) => fds[i].revents != 0,
                None => !h.cgroup.populated(),
            };
            i += 1;
            let keep = sweep(h, exited);
            if !keep {
                HELD.fetch_sub(1, Ordering::SeqCst);
            }
            keep
        });
    }
}

/// One look at a held cgroup: whether to keep holding it.
fn sweep(h: &mut Held, exited: bool) -> bool {
    let age = h.since.elapsed();
    if !exited && age < LINGER {
        return true;
    }
    if h.cgroup.try_remove() {
        return false;
    }
    if !h.killed && age >= LINGER {
        h.cgroup.kill();
        h.killed = true;
    }
    if age >= GIVE_UP {
        eprintln!(
            "stockade: run cgroup {} not removed after {GIVE_UP:?} (left to the next start's stale cleanup)",
            h.cgroup.path().display()
        );
        h.cgroup.forget();
        return false;
    }
    true
}
