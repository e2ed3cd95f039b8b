"""Helpers for tests/docker/fallback.sh (issue 12, under a plain `docker run`).

Usage: python3 -I fallback.py COMMAND [ARGS...]

  orphans             in the jail: 32 forkers, each forking a child and
                      exiting for 2 s; the payload exits 0 when they are done.
                      Prints `end=EPOCH` (when the forkers stop) and, from the
                      last process of each chain, `chain=FORKS`.
  now                 the time, as seconds since the epoch.
  unix-listen PATH READY LOG
                      outside: a listener on a 0777 unix socket at PATH; writes
                      READY once listening, one LOG line per connection,
                      then one byte to the client.
  own-socket          in the jail: a listener and a client on a socket in
                      $TMPDIR (the run directory), blocking and non-blocking,
                      and on an abstract one. Prints `own_socket=in`,
                      `own_nonblocking=in`, `own_abstract=in` or the errno's
                      name.
  nproc-control UID   outside, as root: a process of uid UID with
                      RLIMIT_NPROC 50 forks 20 children. Prints
                      `nproc_control=forked:N` or `nproc_control=forked:N:ERRNO`.
  uid-count UID       outside: how many live processes have real uid UID.
  survivors WORD...   outside: live processes (not zombies) whose command
                      line holds the words WORD... (joined by spaces).
"""

import errno
import os
import select
import socket
import sys
import time


def name(e):
    return errno.errorcode.get(e.errno, str(e.errno)) if e.errno else type(e).__name__


def orphans():
    end = time.time() + 2
    print(f"end={end:.3f}", flush=True)
    for _ in range(32):
        try:
            if os.fork() != 0:
                continue
        except OSError:
            break
        # A forker: fork a child and exit, again and again; each exit
        # leaves an orphan for the jail's init to reap.
        n = 0
        while time.time() < end:
            try:
                if os.fork() != 0:
                    os._exit(0)
            except OSError:
                time.sleep(0.001)
                continue
            n += 1
        os.write(1, f"chain={n}\n".encode())
        os._exit(0)
    time.sleep(max(0.0, end - time.time()))
    print("payload=done", flush=True)
    os._exit(0)


def unix_listen(path, ready, log):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    os.chmod(path, 0o777)
    s.listen(8)
    with open(ready, "w") as f:
        f.write("ready\n")
    while True:
        c, _ = s.accept()
        with open(log, "a") as f:
            f.write("accepted\n")
        # The client waits for this byte: the line is written by now.
        try:
            c.sendall(b"1")
        except OSError:
            pass
        c.close()


def own_socket():
    def pair(path, nonblocking=False):
        srv = socket.socket(socket.AF_UNIX)
        srv.bind(path)
        srv.listen(1)
        c = socket.socket(socket.AF_UNIX)
        if nonblocking:
            # As asyncio connects: non-blocking, then wait until writable.
            c.setblocking(False)
            try:
                c.connect(path)
            except BlockingIOError:
                select.select([], [c], [], 10)
                e = c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if e:
                    raise OSError(e, os.strerror(e))
            c.setblocking(True)
        else:
            c.connect(path)
        c.send(b"in")
        a, _ = srv.accept()
        return a.recv(2).decode()

    tmp = os.environ["TMPDIR"]
    for key, f in [
        ("own_socket", lambda: pair(os.path.join(tmp, "own.sock"))),
        ("own_nonblocking", lambda: pair(os.path.join(tmp, "nb.sock"), True)),
        ("own_abstract", lambda: pair("\0stockade-own-%d" % os.getpid())),
    ]:
        try:
            value = f()
        except OSError as e:
            value = name(e)
        print(f"{key}={value}", flush=True)


def nproc_control(uid):
    import resource

    pid = os.fork()
    if pid == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        resource.setrlimit(resource.RLIMIT_NPROC, (50, 50))
        n, why = 0, ""
        for _ in range(20):
            try:
                c = os.fork()
            except OSError as e:
                why = ":" + name(e)
                break
            if c == 0:
                time.sleep(0.5)
                os._exit(0)
            n += 1
        print(f"nproc_control=forked:{n}{why}", flush=True)
        os._exit(0)
    os.waitpid(pid, 0)


def live():
    """(pid, uid, command line) of each live process but this one."""
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open(f"/proc/{d}/status") as f:
                st = dict(l.split(":", 1) for l in f if ":" in l)
            if st["State"].split()[0] == "Z":
                continue
            uid = int(st["Uid"].split()[0])
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, KeyError, ValueError):
            continue
        yield int(d), uid, cmd


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "orphans":
        orphans()
    elif cmd == "now":
        print(f"{time.time():.3f}")
    elif cmd == "unix-listen":
        unix_listen(*args)
    elif cmd == "own-socket":
        own_socket()
    elif cmd == "nproc-control":
        nproc_control(int(args[0]))
    elif cmd == "uid-count":
        print(sum(1 for _, u, _ in live() if u == int(args[0])))
    elif cmd == "survivors":
        word = " ".join(args)
        print(" ".join(str(p) for p, _, c in live() if word in c) or "none")
    else:
        sys.exit(f"fallback.py: unknown command {cmd!r}")


main()
