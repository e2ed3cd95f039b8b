# A session command that tries one way (argv[1]) to kill or stop the
# session's agent, whose pid the shell gives as $A (its $PPID; 0 when the
# agent is not in the command's pid namespace), also found by name in
# /proc. It prints "through: WHAT" for every call the kernel accepted
# that could reach the agent, "refused: WHAT: ERRNO" otherwise.
import ctypes
import os
import signal
import sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
SYS = {  # x86_64, aarch64
    "tkill": (200, 130),
    "tgkill": (234, 131),
    "rt_sigqueueinfo": (129, 138),
    "rt_tgsigqueueinfo": (297, 240),
    "pidfd_open": (434, 434),
    "pidfd_send_signal": (424, 424),
    "ptrace": (101, 117),
    "process_vm_writev": (311, 271),
}
ARM = os.uname().machine == "aarch64"
PTRACE_ATTACH, PTRACE_DETACH, PTRACE_SEIZE = 16, 17, 0x4206
SIGS = [signal.SIGKILL, signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU]
WHAT = sys.argv[1]


def call(name, *args):
    r = libc.syscall(SYS[name][ARM], *[ctypes.c_long(a) for a in args])
    return r, ctypes.get_errno()


def say(ok, what, err=0):
    if ok:
        print(f"through: {what}", flush=True)
    else:
        print(f"refused: {what}: {os.strerror(err)}", flush=True)


def agents():
    found = set()
    a = int(os.environ.get("A", "0") or 0)
    if a > 0:
        found.add(a)
    try:
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/cmdline", "rb") as f:
                        if b"\0session-agent\0" in f.read():
                            found.add(int(d))
                except OSError:
                    pass
    except OSError:
        pass
    found.discard(os.getpid())
    return sorted(found)


def tids(pid):
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        pass
    # /proc closed (the fallback): the ids just after the agent's that
    # share its process group are its threads (or its init's).
    try:
        group = os.getpgid(pid)
    except OSError:
        return [pid]
    found = [pid]
    for t in range(pid + 1, pid + 200):
        try:
            if t not in (os.getpid(), os.getppid()) and os.getpgid(t) == group:
                found.append(t)
        except OSError:
            pass
    return found


def pgids(pid):
    out = {pid}
    for f in (os.getpgid, os.getsid):
        try:
            out.add(f(pid))
        except OSError:
            pass
    return sorted(g for g in out if g > 1)


def in_child(fn):
    """fn in a child (it may signal its own group); reports come from it."""
    pid = os.fork()
    if pid == 0:
        try:
            fn()
        finally:
            os._exit(0)
    _, st = os.waitpid(pid, os.WUNTRACED)
    if os.WIFSTOPPED(st):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def kill_each(targets, label):
    for t in targets:
        for s in SIGS:
            try:
                os.kill(t, s)
                say(True, f"{label} kill({t}, {s.name})")
            except OSError as e:
                say(False, f"{label} kill({t}, {s.name})", e.errno)


def join_then_kill0(how, sig):
    def go():
        for agent in agents():
            for g in pgids(agent):
                if how == "setsid":
                    try:
                        os.setsid()
                    except OSError:
                        pass
                try:
                    os.setpgid(0, g)
                    print(f"joined: group {g}", flush=True)
                except OSError as e:
                    say(False, f"setpgid(0, {g})", e.errno)
                    continue
                # The group holds this child too: a stop or kill of the
                # agent can only be seen by the session's next command.
                os.kill(0, sig)
                say(True, f"kill(0, {sig.name}) in group {g}")
    in_child(go)


def main():
    found = agents()
    print(f"agents: {found}", flush=True)
    if WHAT == "kill":
        kill_each(found, "pid")
    elif WHAT == "threads":
        for a in found:
            kill_each([t for t in tids(a) if t != a], "thread")
            for t in tids(a):
                for s in SIGS:
                    r, e = call("tkill", t, s)
                    say(r == 0, f"tkill({t}, {s.name})", e)
                    r, e = call("tgkill", a, t, s)
                    say(r == 0, f"tgkill({a}, {t}, {s.name})", e)
                    info = ctypes.create_string_buffer(128)
                    ctypes.memmove(info, ctypes.byref(ctypes.c_int(int(s))), 4)
                    ctypes.memmove(ctypes.byref(info, 8), ctypes.byref(ctypes.c_int(-1)), 4)
                    r, e = call("rt_sigqueueinfo", t, s, ctypes.addressof(info))
                    say(r == 0, f"rt_sigqueueinfo({t}, {s.name})", e)
                    r, e = call("rt_tgsigqueueinfo", a, t, s, ctypes.addressof(info))
                    say(r == 0, f"rt_tgsigqueueinfo({a}, {t}, {s.name})", e)
    elif WHAT == "killpg":
        for a in found:
            for g in pgids(a):
                for s in SIGS:
                    try:
                        os.killpg(g, s)
                        say(True, f"killpg({g}, {s.name})")
                    except OSError as e:
                        say(False, f"killpg({g}, {s.name})", e.errno)
    elif WHAT in ("group_stop", "group_kill", "session_stop", "session_kill"):
        sig = signal.SIGSTOP if WHAT.endswith("stop") else signal.SIGKILL
        join_then_kill0("setsid" if WHAT.startswith("session") else "setpgid", sig)
    elif WHAT == "kill_all":
        def go():
            try:
                os.kill(-1, signal.SIGSTOP)
                os.kill(-1, signal.SIGKILL)
            except OSError as e:
                say(False, "kill(-1)", e.errno)
        in_child(go)
    elif WHAT == "pidfd":
        for a in found:
            for t in tids(a):
                fds = []
                r, e = call("pidfd_open", t, 0)
                if r >= 0:
                    fds.append(("pidfd_open", r))
                else:
                    say(False, f"pidfd_open({t})", e)
                try:
                    fds.append(("/proc dir", os.open(f"/proc/{t}", os.O_DIRECTORY)))
                except OSError as e:
                    say(False, f"open(/proc/{t})", e.errno)
                for how, fd in fds:
                    for s in SIGS:
                        r, e = call("pidfd_send_signal", fd, s, 0, 0)
                        say(r == 0, f"pidfd_send_signal({how} {t}, {s.name})", e)
                    os.close(fd)
    elif WHAT == "ptrace":
        for a in found:
            for t in tids(a):
                for req, name in ((PTRACE_SEIZE, "SEIZE"), (PTRACE_ATTACH, "ATTACH")):
                    r, e = call("ptrace", req, t, 0, 0)
                    say(r == 0, f"ptrace(PTRACE_{name}, {t})", e)
                    if r == 0:
                        call("ptrace", PTRACE_DETACH, t, 0, 0)
                # One byte at address 0: EFAULT means the kernel let us in.
                local = ctypes.create_string_buffer(1)
                liov = (ctypes.c_void_p * 2)(ctypes.addressof(local), 1)
                riov = (ctypes.c_void_p * 2)(0, 1)
                r, e = call("process_vm_writev", t, ctypes.addressof(liov), 1,
                            ctypes.addressof(riov), 1, 0)
                say(r >= 0 or e == 14, f"process_vm_writev({t})", e)
                try:
                    fd = os.open(f"/proc/{t}/mem", os.O_RDWR)
                    os.close(fd)
                    say(True, f"open(/proc/{t}/mem, O_RDWR)")
                except OSError as e:
                    say(False, f"open(/proc/{t}/mem, O_RDWR)", e.errno)
    elif WHAT == "fsetown":
        import fcntl
        F_SETSIG = 10
        for a in found:
            for t in tids(a):
                for s in (signal.SIGSTOP, signal.SIGKILL):
                    r, w = os.pipe()
                    try:
                        fcntl.fcntl(r, fcntl.F_SETOWN, t)
                        fcntl.fcntl(r, F_SETSIG, s)
                        fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_ASYNC)
                        # Input on r: its owner is sent the signal.
                        os.write(w, b"x")
                        print(f"armed: F_SETOWN {t}, F_SETSIG {s.name}", flush=True)
                    except OSError as e:
                        say(False, f"F_SETOWN {t}, F_SETSIG {s.name}", e.errno)
                    os.close(r)
                    os.close(w)
    elif WHAT == "cgroup_freeze":
        try:
            with open("/proc/self/cgroup") as f:
                rel = f.read().strip().split("\n")[-1].split(":", 2)[2]
        except OSError:
            rel = "/"
        for d in {f"/sys/fs/cgroup{rel}".rstrip("/"), "/sys/fs/cgroup"}:
            for name in ("cgroup.freeze", "cgroup.kill"):
                try:
                    with open(f"{d}/{name}", "w") as f:
                        f.write("1")
                    say(True, f"write {d}/{name}")
                except OSError as e:
                    say(False, f"write {d}/{name}", e.errno)
    else:
        sys.exit(f"unknown way {WHAT}")
    print("done", flush=True)


main()
