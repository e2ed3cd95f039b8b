
# stockade serve's fork server (src/zygote.rs), appended to warm.py's
# definitions and run as `python3 -c THIS SOCK_FD MODULES` as the payload
# of a jail whose payload steps stopped short (Policy::zygote, jail::zygote):
# it still holds CAP_SYS_ADMIN, CAP_NET_ADMIN and CAP_SETPCAP in the jail's
# user namespace. This file applies no confinement step: the jail handed it
# stockade's confinement library (STOCKADE_ZYGOTE_LIB, a memfd: stockade-sys's
# `forked` steps, the same Rust code every jail runs) and its children's
# recipe (STOCKADE_ZYGOTE_FD); the library reads the recipe and does each
# step: the pid namespace of each child (before and after the fork), and in
# the child its stdio, session, namespaces, mounts, lo, capabilities,
# no_new_privs, Landlock, fds and seccomp, in the payload's order.
#
# The zygote imports MODULES, then serves the server on SOCK_FD: for each
# run, three fds (the child's stdin, stdout and stderr) and a fourth,
# the setup pipe (and, on cgroup v2, the child's run cgroup, which the
# child is forked into: clone3 CLONE_INTO_CGROUP, through the library). It never reads a
# request's program, stdin or files: those go to the child, after the
# fork, on its stdin; and it keeps no record of runs. The child, confined,
# says "k" on the setup pipe (or the failed step, and ends 125), reads its
# program as warm.py does, and runs it, from a frame of its own: it returns
# out of the zygote's, which hold nothing of other runs. Its init (pid 1 of
# its namespace) writes the payload's end and usage on the setup pipe; the
# kernel reaps the child (the zygote ignores SIGCHLD once ready).


def _zygote(sys, os):
    import array, ctypes, errno, socket

    sock_fd = int(sys.argv[1])
    handoff = os.environ.pop("STOCKADE_ZYGOTE_FD", None)
    lib_fd = os.environ.pop("STOCKADE_ZYGOTE_LIB", None)
    if handoff is None or lib_fd is None:
        sys.stderr.write("stockade: zygote: the jail handed nothing over (no user namespace?)\n")
        os._exit(1)
    try:
        lib = ctypes.CDLL("/proc/self/fd/%s" % lib_fd)
    except OSError as e:
        sys.stderr.write("stockade: zygote: loading stockade's confinement library: %s\n" % e)
        os._exit(1)
    os.close(int(lib_fd))
    # Reads the recipe, closes the hand-off, makes the zygote not dumpable.
    if lib.stockade_zygote_prepare(int(handoff)) != 0:
        os._exit(1)
    for m in filter(None, sys.argv[2].split(",")):
        __import__(m)
    # Once here, not in every child: from Python 3.12 on, the first
    # importlib.invalidate_caches() imports importlib.metadata (about 50 ms
    # of CPU and 2000 pages touched on a 16-CPU host, every run).
    import importlib

    importlib.invalidate_caches()

    sock = socket.socket(fileno=sock_fd)
    sock.set_inheritable(False)

    # A child born in its run cgroup (clone3 CLONE_INTO_CGROUP, through the
    # library) spares the server a move, which takes a host-wide lock. The
    # interpreter's own fork steps around it, as os.fork takes them, with
    # the interpreter's lock held throughout (PYFUNCTYPE: ctypes keeps it).
    # Without them (an interpreter that does not export them), or once the
    # kernel refused a child into its cgroup, os.fork and the server moves.
    try:
        api = ctypes.pythonapi
        steps = (api.PyOS_BeforeFork, api.PyOS_AfterFork_Parent, api.PyOS_AfterFork_Child)
        for f in steps:
            f.argtypes, f.restype = (), None
        fork_into = ctypes.PYFUNCTYPE(ctypes.c_int64, ctypes.c_int)(("stockade_zygote_fork_into", lib))
    except (AttributeError, OSError, ValueError):
        steps, fork_into = None, None

    def fork(fds, cg=-1):
        """A child confined (in it: None), or its pidfd and whether it was
        born in the run cgroup `cg` (in the zygote)."""
        nonlocal fork_into
        if lib.stockade_zygote_before_fork() != 0:
            raise OSError(0, "the child's pid namespace could not be made")
        try:
            pid = -1
            tried = cg >= 0 and fork_into is not None
            if tried:
                steps[0]()
                pid = fork_into(cg)
                steps[2 if pid == 0 else 1]()
                # Refused for what this host is (no clone3, a filter, the
                # cgroups' owners or namespaces): never again, said once.
                # Refused for this run (its cgroup's memory or pids limit,
                # ENOMEM or EAGAIN): this child only. Either way os.fork,
                # and the server moves the child.
                if pid < 0 and -pid in (errno.ENOSYS, errno.EPERM, errno.EACCES, errno.ENOENT, errno.EINVAL):
                    sys.stderr.write(
                        "stockade: zygote: a child into its run cgroup (clone3 CLONE_INTO_CGROUP): %s; "
                        "the server moves each child instead\n" % os.strerror(-pid)
                    )
                    fork_into = None
            # Born in the run cgroup: this child (pid 0), or the zygote's.
            placed = tried and pid >= 0
            if pid < 0:
                # The refused clone may have spent the pid namespace made for
                # it (the kernel gave its pid 1 and took it back: no process
                # can be born there any more): back to ours, and a new one.
                if tried and (lib.stockade_zygote_after_fork() != 0 or lib.stockade_zygote_before_fork() != 0):
                    raise OSError(0, "the child's pid namespace could not be made again")
                pid = os.fork()
        except BaseException:
            # A fork that failed may have spent the pid namespace made for
            # it: back to ours (the next fork makes a new one), or no more.
            if lib.stockade_zygote_after_fork() != 0:
                os._exit(70)
            raise
        if pid == 0:
            # The run cgroup's fd is not the child's (the library closed
            # it in a child born there; closerange raises nothing).
            if cg >= 0 and not placed:
                os.closerange(cg, cg + 1)
            # Confined, or ended (125) with the failed step on the pipe.
            lib.stockade_zygote_child(*fds)
            return None
        # Children after this one go to a namespace of their own again;
        # should that fail, nothing more may be forked.
        if lib.stockade_zygote_after_fork() != 0:
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
        return pidfd, placed

    # One child confined and ended before the zygote says it is ready: a
    # host where a step fails gets no fork server, not failing runs.
    null = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
    probe_r, probe_w = os.pipe()
    go_r, go_w = os.pipe()
    # The go a run's child gets once in its cgroup (sys::forked::Go): its
    # tmpfs sizes, here the recipe's.
    os.write(go_w, b"G" + bytes(16))
    os.close(go_w)
    pidfd = fork([go_r, null, null, probe_w, -1])
    if pidfd is None:
        os._exit(0)
    pidfd = pidfd[0]
    os.close(probe_w)
    os.close(go_r)
    said = b""
    while True:
        b = os.read(probe_r, 4096)
        if not b:
            break
        said += b
    os.close(probe_r)
    os.close(null)
    end = os.waitid(os.P_PIDFD, pidfd, os.WEXITED)
    os.close(pidfd)
    # "k" from the confined payload, then its init's record of its end
    # (sys::forked::End: "x", the wait status 0, its usage).
    if said[:6] != b"kx\0\0\0\0" or len(said) != 31 or end.si_code != os.CLD_EXITED or end.si_status != 0:
        sock.sendall(b"F" + said[1:].split(b"\n")[0])
        os._exit(1)
    del said, end, pidfd, null, probe_r, probe_w, go_r, go_w
    # Every object so far out of the collector's reach: a child's
    # collections then never write to the zygote's pages (each write is a
    # page copied).
    import gc

    gc.collect()
    gc.freeze()
    # Children are reaped by the kernel (their ends reach the server from
    # their init, on the setup pipe): nothing of them is left to wait for.
    import signal

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    # "R" and the records of the layers each child applies.
    if lib.stockade_zygote_ready(sock_fd) != 0:
        os._exit(1)
    # The requests, one at a time, each answered in turn (the server
    # knows which request an answer is for by its order): "F" with a
    # run's stdin, stdout, stderr and setup pipe (and, when the child is to
    # pass on its seccomp listener, the socket for it): fork a child,
    # answer "P" with its pidfd, or "E" and why; "C" with the same and the
    # child's run cgroup (its directory) last: a child born there, answered
    # "Pc" (or "P" when it could not be: the server moves it). The zygote
    # keeps nothing of a run:
    # no table of children, pids or counters. A child returns from here
    # (the frames and all they held gone with them) to run its program.
    req = bytearray(8)
    anc = socket.CMSG_SPACE(6 * 4)
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
            # "C": the same, with the run cgroup's directory last.
            cg = fds[-1] if op == ord("C") and len(fds) in (5, 6) else -1
            run = fds[:-1] if cg >= 0 else fds
            if (op == ord("F") or cg >= 0) and len(run) in (4, 5):
                forked = fork(list(run) + [-1] * (5 - len(run)), cg)
                if forked is None:
                    break  # the child, confined: out of the loop
                pidfd, placed = forked
                socket.send_fds(sock, [b"Pc" if placed else b"P"], [pidfd])
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
