_base = dict(globals())
import sys as _sys, os as _os

# stockade serve's warm-pool bootstrap (src/serve/warm.rs): run as
# `python3 -c THIS READY_FD MODULES`, in a fresh jail of its own. It imports
# MODULES, says so on READY_FD, then waits for its one program as a header
# on fd 0 (read with os.read, exactly its length: what follows on fd 0 is
# the program's stdin, left unread), and runs it as `python3 -c CODE ARGS`
# or `python3 FILE ARGS` would. It serves one program; the jail ends with it.


def _ready(sys, os):
    fd = int(sys.argv[1])
    for m in filter(None, sys.argv[2].split(",")):
        __import__(m)
    # Before the request, not after it: from Python 3.12 on, the first
    # importlib.invalidate_caches() imports importlib.metadata (about 50 ms
    # of CPU on a 16-CPU host).
    import importlib

    importlib.invalidate_caches()
    os.write(fd, b"r")
    os.close(fd)


def _header(os):
    """argv and the variables to set, from fd 0."""

    def exactly(n):
        b = b""
        while len(b) < n:
            c = os.read(0, n - len(b))
            if not c:
                os._exit(0)  # the server went away before the hand-over
            b += c
        return b

    n = int(exactly(8), 16)
    fields = [os.fsdecode(f) for f in exactly(n).split(b"\0")]
    nargv = int(fields[0])
    env = [kv.partition("=") for kv in fields[1 + nargv :]]
    return fields[1 : 1 + nargv], [(k, v) for k, _, v in env]


def _files(os):
    """The request's files, after the header on fd 0, written into the
    workdir (the cwd): a count, then each path and content, each as 8 hex
    digits of length and the bytes, and a mode byte (x: executable).
    Parents are made here; nothing is followed."""

    def exactly(n):
        b = b""
        while len(b) < n:
            c = os.read(0, n - len(b))
            if not c:
                os._exit(0)
            b += c
        return b

    for _ in range(int(exactly(8), 16)):
        path = os.fsdecode(exactly(int(exactly(8), 16)))
        data = exactly(int(exactly(8), 16))
        mode = 0o755 if exactly(1) == b"x" else 0o644
        d = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            parts = path.split("/")
            for p in parts[:-1]:
                try:
                    os.mkdir(p, 0o755, dir_fd=d)
                except FileExistsError:
                    pass
                n = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=d)
                os.close(d)
                d = n
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(parts[-1], flags, mode, dir_fd=d)
        finally:
            os.close(d)
        try:
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)


def _main(sys, os, argv):
    """The fresh __main__'s namespace, the source and its file name."""
    main = type(sys)("__main__")
    d = main.__dict__
    if argv[1] == "-c":
        d.update(_base)
        sys.argv[:] = ["-c"] + argv[3:]
        source, filename = argv[2], "<string>"
    else:
        path = os.path.abspath(argv[1])
        sys.argv[:] = argv[1:]
        sys.path[0] = os.path.dirname(path)
        try:
            with open(path, "rb") as f:
                source = f.read()
        except OSError as e:
            sys.stderr.write(
                "%s: can't open file %r: [Errno %d] %s\n"
                % (sys.orig_argv[0], path, e.errno, e.strerror)
            )
            sys.exit(2)
        import importlib.machinery as im

        d.update(
            __name__="__main__",
            __doc__=None,
            __package__=None,
            __spec__=None,
            __annotations__={},
            __builtins__=_base["__builtins__"],
            __file__=path,
            __cached__=None,
            __loader__=im.SourceFileLoader("__main__", path),
        )
        filename = path
    sys.modules["__main__"] = main
    return d, source, filename


def _run(sys, os, d, source, filename):
    try:
        code = compile(source, filename, "exec")
    except SyntaxError as e:
        sys.excepthook(type(e), e.with_traceback(None), None)
        sys.exit(1)
    del source
    try:
        exec(code, d)
    except SystemExit:
        raise
    except BaseException as e:
        # As an uncaught exception ends `python3 -c`: the traceback from
        # the program's own frames, exit status 1 (SIGINT's death for
        # KeyboardInterrupt).
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code is not code:
            tb = tb.tb_next
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        if isinstance(e, KeyboardInterrupt):
            import signal

            sys.stdout.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        sys.exit(1)


def _boot(sys, os):
    _ready(sys, os)
    # The cwd is where a cold run starts too (the payload's chdir).
    argv, env = _header(os)
    _files(os)
    for k, v in env:
        os.environ[k] = v
    import importlib

    # The directory listings cached while importing are stale now.
    importlib.invalidate_caches()
    sys.orig_argv[1:] = argv[1:]
    d, source, filename = _main(sys, os, argv)
    _run(sys, os, d, source, filename)


_boot(_sys, _os)
