
# stockade serve's fork server (src/serve/zygote.rs), appended to warm.py's
# definitions and run as `python3 -c THIS SOCK_FD MODULES RECIPE` as the
# payload of a jail whose payload steps stopped short (Policy::zygote): it
# still holds CAP_SYS_ADMIN, CAP_NET_ADMIN and CAP_SETPCAP in the jail's user
# namespace; the Landlock rules and stockade's seccomp program are in the
# hand-off pipe (STOCKADE_ZYGOTE_FD).
#
# The zygote imports MODULES, then serves the server on SOCK_FD: for each
# run, three fds (the child's stdin, stdout and stderr) and a fourth,
# the setup pipe; later the child's pidfd, to reap it. It never reads a
# request's program, stdin or files: those go to the child, after the
# fork, on its stdin; and it keeps no record of runs. Each child is pid 1 of a
# new pid namespace (the zygote's pid_for_children is a new namespace for
# the one fork, then its own again), makes its own mount, net, ipc, uts and
# cgroup namespaces, mounts a fresh /proc, /tmp, workdir, /dev/shm,
# /dev/pts and /dev/mqueue, brings lo up, drops every capability, makes and enforces the
# Landlock ruleset (a rule on a mount point is not seen beneath a mount over
# it, so the ruleset is made after the mounts, from the rules stockade
# wrote), closes every other fd and installs the seccomp program: the
# payload's steps, in its order. Then it says "k" on the setup pipe (or the
# failed step, and exits 125), reads its program as warm.py does, and runs
# it, from a frame of its own: it returns out of the zygote's, which
# hold nothing of other runs. The zygote reaps it when the server asks
# and passes the kernel's record of its end (status, rusage) on.


def _zygote(sys, os):
    import array, ctypes, fcntl, socket, struct, json

    libc = ctypes.CDLL(None, use_errno=True)
    sock_fd = int(sys.argv[1])
    recipe = json.loads(sys.argv[3])
    handoff = os.environ.pop("STOCKADE_ZYGOTE_FD", None)
    if handoff is None:
        sys.stderr.write("stockade: zygote: the jail handed nothing over (no user namespace?)\n")
        os._exit(1)
    with os.fdopen(int(handoff), "rb") as f:
        lines = f.read().split(b"\n")
    layers = b"\n".join(l for l in lines if l[:1] == b"L")
    prog = b"".join(bytes.fromhex(l[1:].decode()) for l in lines if l[:1] == b"B")
    handled = [tuple(int(x) for x in l.split()[1:4]) for l in lines if l[:2] == b"A "]
    rules = [(int(l.split(b" ", 2)[1]), l.split(b" ", 2)[2]) for l in lines if l[:2] == b"R "]
    for m in filter(None, sys.argv[2].split(",")):
        __import__(m)

    def check(what, r):
        if r < 0:
            e = ctypes.get_errno()
            raise OSError(e, "%s: %s" % (what, os.strerror(e)))

    NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWPID, NEWNET = (
        0x20000, 0x2000000, 0x4000000, 0x8000000, 0x20000000, 0x40000000)
    PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 4, 24, 38
    PR_SET_SECCOMP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 22, 47, 4
    MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 16384, 1 << 18
    SYS_landlock_create_ruleset, SYS_landlock_add_rule, SYS_landlock_restrict_self = 444, 445, 446

    class RulesetAttr(ctypes.Structure):
        _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    attr = RulesetAttr(*handled[0]) if handled else None
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last_cap = int(f.read())
    bounding = [c for c in range(last_cap + 1) if libc.prctl(23, c, 0, 0, 0) == 1]  # PR_CAPBSET_READ
    lo_up = struct.pack("16sH14x", b"lo", 0x1 | 0x8 | 0x40)  # IFF_UP | IFF_LOOPBACK | IFF_RUNNING

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    fprog = Fprog(len(prog) // 8, prog) if prog else None

    class CapHeader(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    CapData = ctypes.c_uint32 * 6
    # A child's end as the kernel writes it (waitid(2): siginfo_t, then
    # struct rusage), for the server; zeroed once sent.
    SYS_waitid = {"x86_64": 247, "aarch64": 95, "riscv64": 95}[os.uname().machine]
    P_PIDFD, WEXITED = 3, 4
    rec = (ctypes.c_char * (128 + 144))()
    ru = ctypes.byref(rec, 128)
    check("prctl(PR_SET_DUMPABLE)", libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0))
    own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    sock = socket.socket(fileno=sock_fd)
    sock.set_inheritable(False)
    tmp_opts = "size=%d" % recipe["tmp_size"]
    uid, gid, workdir = recipe["uid"], recipe["gid"], recipe["workdir"]

    def mount(src, dst, fstype, flags, data):
        check("mount %s" % dst, libc.mount(
            src and src.encode(), dst.encode(), fstype and fstype.encode(), flags,
            data and data.encode()))

    def confine(setup_w):
        """The payload's steps in the child, in the payload's order."""
        check("unshare", libc.unshare(NEWNS | NEWNET | NEWIPC | NEWUTS | NEWCGROUP))
        mount(None, "/", None, MS_REC | MS_PRIVATE, None)
        # /proc of this pid namespace: only its processes (subset=pid: none of
        # the entries that reach the kernel or the host).
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "subset=pid")
        mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, tmp_opts + ",mode=1777")
        mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV,
              tmp_opts + ",mode=755,uid=%d,gid=%d" % (uid, gid))
        mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, tmp_opts + ",mode=1777")
        mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
              "newinstance,ptmxmode=0666,mode=620")
        # The new IPC namespace's queues (the jail's /dev/mqueue shows the
        # zygote's; Landlock's rule on it reaches mq_open's through this).
        if os.path.isdir("/dev/mqueue"):
            mount("mqueue", "/dev/mqueue", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        fcntl.ioctl(s, 0x8914, lo_up)  # SIOCSIFFLAGS
        s.close()
        os.chdir(workdir)
        # Every capability: the bounding set's (the zygote's three; it
        # needs CAP_SETPCAP, so first), ambient, then the rest; checked.
        for c in bounding:
            check("prctl(PR_CAPBSET_DROP)", libc.prctl(PR_CAPBSET_DROP, c, 0, 0, 0))
        check("prctl(PR_CAP_AMBIENT)", libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0))
        check("capset", libc.capset(ctypes.byref(CapHeader(0x20080522, 0)), ctypes.byref(CapData())))
        left = CapData()
        check("capget", libc.capget(ctypes.byref(CapHeader(0x20080522, 0)), ctypes.byref(left)))
        if any(left):
            raise OSError(0, "drop capabilities: some are left")
        # Dumpable, as a cold payload is after its execve (the zygote is
        # not): its /proc/self files are its own.
        check("prctl(PR_SET_DUMPABLE)", libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0))
        check("prctl(PR_SET_NO_NEW_PRIVS)", libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
        if attr is not None:
            rs = libc.syscall(SYS_landlock_create_ruleset, ctypes.byref(attr), ctypes.sizeof(attr), 0)
            check("landlock_create_ruleset", rs)
            for access, path in rules:
                try:
                    p = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
                except FileNotFoundError:
                    continue  # less granted, never more
                rule = PathBeneath(access, p)
                check("landlock_add_rule %s" % path.decode(errors="replace"),
                      libc.syscall(SYS_landlock_add_rule, rs, 1, ctypes.byref(rule), 0))
                os.close(p)
            check("landlock_restrict_self", libc.syscall(SYS_landlock_restrict_self, rs, 0))
            os.close(rs)
        os.closerange(3, setup_w)
        os.closerange(setup_w + 1, 1 << 20)
        if fprog is not None:
            check("seccomp", libc.prctl(PR_SET_SECCOMP, 2, ctypes.byref(fprog), 0, 0))

    def child(fds):
        """In the forked child: its stdio, the payload's steps, "k" on the
        setup pipe. Returns confined; any failure ends it (125)."""
        stdin, stdout, stderr, setup_w = fds
        try:
            os.dup2(stdin, 0)
            os.dup2(stdout, 1)
            os.dup2(stderr, 2)
            os.setsid()
            confine(setup_w)
            os.write(setup_w, b"k")
            os.close(setup_w)
        except BaseException as e:
            try:
                os.write(setup_w, ("e%s" % e).encode())
            finally:
                os._exit(125)

    def fork(fds):
        """A child confined (in it: None), or its pidfd (in the zygote)."""
        check("unshare(CLONE_NEWPID)", libc.unshare(NEWPID))
        pid = os.fork()
        if pid == 0:
            try:
                child(fds)
            except BaseException:
                os._exit(125)
            return None
        # Children after this one go to a namespace of their own again;
        # should that fail, nothing more may be forked.
        if libc.setns(own_pidns, NEWPID) < 0:
            os._exit(70)
        # The pid only opens the pidfd, which the server keeps. Freed
        # memory is not scrubbed, and the pid (in the zygote's namespace:
        # a count of forks) would be there for the next child to find: its
        # digits are zeroed first. A fresh int from os.fork, held only
        # here; a small one (up to 256) is the interpreter's, shared by
        # all and never freed.
        pidfd = os.pidfd_open(pid)
        if pid > 256:
            ctypes.memset(id(pid) + int.__basicsize__, 0, sys.getsizeof(pid) - int.__basicsize__)
        return pidfd

    # One child confined and ended before the zygote says it is ready: a
    # host where a step fails gets no fork server, not failing runs.
    null = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
    probe_r, probe_w = os.pipe()
    pidfd = fork([null, null, null, probe_w])
    if pidfd is None:
        os._exit(0)
    os.close(probe_w)
    said = os.read(probe_r, 4096)
    os.close(probe_r)
    os.close(null)
    end = os.waitid(os.P_PIDFD, pidfd, os.WEXITED)
    os.close(pidfd)
    if said != b"k" or end.si_code != os.CLD_EXITED or end.si_status != 0:
        sock.sendall(b"F" + said[1:])
        os._exit(1)
    del said, end, pidfd, null, probe_r, probe_w
    # Every object so far out of the collector's reach: a child's
    # collections then never write to the zygote's pages (each write is a
    # page copied).
    import gc

    gc.collect()
    gc.freeze()
    sock.sendall(b"R" + layers)
    # The requests, one at a time, each answered in turn (the server
    # knows which request an answer is for by its order): "F" with a
    # run's stdin, stdout, stderr and setup pipe: fork a child, answer "P"
    # with its pidfd; "W" with a child's pidfd once it has ended: reap it,
    # answer "X" with the kernel's record of its end (siginfo_t, then
    # struct rusage) as the kernel wrote it; "E" and why, when either
    # failed. The zygote keeps nothing of a run: no table of children,
    # pids or counters; the record passes through one buffer (`rec`),
    # zeroed once sent and never read into a Python object. A child
    # returns from here (the frames and all they held gone with them) to
    # run its program.
    req = bytearray(8)
    anc = socket.CMSG_SPACE(4 * 4)
    while True:
        n, ancdata, _flags, _addr = sock.recvmsg_into([req], anc)
        if not n:
            os._exit(0)  # the server went away
        fds = array.array("i")
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
        del ancdata
        op, req[0] = req[0], 0
        pidfd = -1
        try:
            if op == ord("F") and len(fds) == 4:
                pidfd = fork(list(fds))
                if pidfd is None:
                    break  # the child, confined: out of the loop
                socket.send_fds(sock, [b"P"], [pidfd])
            elif op == ord("W") and len(fds) == 1:
                try:
                    check("waitid", libc.syscall(SYS_waitid, P_PIDFD, fds[0], rec, WEXITED, ru))
                    sock.sendmsg([b"X", rec])
                finally:
                    ctypes.memset(rec, 0, ctypes.sizeof(rec))
            else:
                raise OSError(0, "unknown request %r with %d fds" % (op, len(fds)))
        except OSError as e:
            sock.sendall(b"E" + str(e).encode())
        if pidfd >= 0:
            os.close(pidfd)
        for f in fds:
            os.close(f)
        del fds
    # The child: nothing of the loop's is left to it but what the return
    # drops (the socket is let go of, its fd closed by confine already).
    sock.detach()
    del req


def _serve_one(sys, os):
    """The child's program, as a warm member runs it (warm.py's _boot)."""
    argv, env = _header(os)
    for k, v in env:
        os.environ[k] = v
    try:
        _files(os)
    except OSError as e:
        sys.stderr.write("stockade: writing the request's files: %s\n" % e)
        _finish(sys, os, 1)
    import importlib

    importlib.invalidate_caches()
    sys.orig_argv[1:] = argv[1:]
    d, source, filename = _main(sys, os, argv)
    code = 0
    try:
        _run(sys, os, d, source, filename)
    except SystemExit as e:
        code = e.code
    _finish(sys, os, code)


def _finish(sys, os, code):
    """End as the interpreter would: wait for threads, run atexit, flush,
    exit with `code` (SystemExit's)."""
    try:
        import threading

        threading._shutdown()
    except BaseException:
        pass
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:
        pass
    if code is None:
        code = 0
    elif not isinstance(code, int):
        try:
            sys.stderr.write(str(code) + "\n")
        except BaseException:
            pass
        code = 1
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:
            pass
    os._exit(code & 0xFF)


# Returns only in a forked child, confined.
_zygote(_sys, _os)
del _zygote
try:
    _serve_one(_sys, _os)
finally:
    _os._exit(1)
