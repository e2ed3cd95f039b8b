"""What a hostile evaluator payload tries inside stockade, under Docker.

Usage: python3 -I payload.py PORT
Prints one `key=value` line per attempt; the value is `OK`/`LEAKED:…`/
`WROTE`/`CONNECTED` when the attempt worked, else the errno name. The
Docker test (xtask/src/docker.rs) reads these lines from the outcome's
captured stdout. Nothing goes to stderr, so stockade's stderr holds only
stockade's own lines.
"""

import errno
import os
import socket
import sys


def why(e):
    return errno.errorcode.get(e.errno, str(e.errno)) if e.errno else type(e).__name__


def attempt(key, fn):
    try:
        value = fn()
    except OSError as e:
        value = why(e)
    print(f"{key}={value}", flush=True)


def read_canary():
    with open("/secret/canary") as f:
        return "LEAKED:" + f.read().strip()


def write_outside():
    with open("/outside/pwned", "w") as f:
        f.write("pwned\n")
    return "WROTE"


def own_write():
    d = os.environ.get("HOME") or os.getcwd()
    p = os.path.join(d, "own-file")
    with open(p, "w") as f:
        f.write("ok\n")
    with open(p) as f:
        assert f.read() == "ok\n"
    os.unlink(p)
    return "OK:" + d


def connect(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(("127.0.0.1", port))
        # The listener's byte: its log line is written by now.
        s.recv(1)
    finally:
        s.close()
    return "CONNECTED"


def seccomp_filters():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Seccomp_filters:"):
                return line.split()[1]
    return "none"


def unshare_userns():
    # unshare(CLONE_NEWUSER) through libc: an unprivileged process may do
    # it unless a seccomp filter says no (stockade's allowlist does). Last
    # attempt: on success this process is in a new user namespace.
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(272, 0x10000000) != 0:  # SYS_unshare, CLONE_NEWUSER
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return "OK"


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--connect-only":
        attempt("connect", lambda: connect(int(sys.argv[2])))
        return
    if len(sys.argv) == 2 and sys.argv[1] == "--unshare-only":
        attempt("unshare_userns", unshare_userns)
        return
    port = int(sys.argv[1])
    print(f"uid={os.getuid()}", flush=True)
    attempt("read_canary", read_canary)
    attempt("write_outside", write_outside)
    attempt("connect", lambda: connect(port))
    attempt("own_write", own_write)
    probe = [k for k in os.environ if k.startswith("STOCKADE_TEST_")]
    print(f"env_probe={'present:' + ','.join(probe) if probe else 'absent'}", flush=True)
    attempt("seccomp_filters", seccomp_filters)
    attempt("unshare_userns", unshare_userns)
    print("payload=done", flush=True)


main()
