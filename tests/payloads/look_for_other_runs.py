# A hostile run that looks for what other runs of the same pool left in
# its interpreter (tests/serve_fork_isolation.rs): the frames below its
# own, every object the collector knows of (the frozen ones too) and all
# they refer to, the modules, threads, environment, fds and its readable
# memory. Its stdin: a JSON object, "token" (the earlier runs' marker,
# spelled backwards: this program never holds it as it is), "status" (an
# earlier run's exit code), "pids" (other children's pids in the zygote's
# pid namespace: a count of forks, were it left in the zygote's memory). Its own argv holds the marker with "-mine"
# after it, the earlier runs' with another word. It prints one JSON
# object: "findings" (none expected) and "control" (where it found its own
# marker: the search finds what is there).
import gc, json, os, re, struct, sys, threading

given = json.loads(sys.stdin.read())
rev = given["token"]
# The marker as a pattern of one-character classes: compiling it never
# puts the marker's bytes side by side in memory.
cls = "".join("[%s]" % c for c in reversed(rev)) + "-([a-z]+)"
pat_s = re.compile(cls)
pat_b = re.compile(cls.encode())


def others(p, o):
    """Whether `o` holds the marker of another run than this one."""
    return any(m.group(1) not in ("mine", b"mine") for m in p.finditer(o))

del rev, cls
# The wait status the zygote got from the kernel for an exit code, and the
# start of the siginfo of that exit (SIGCHLD, CLD_EXITED, then the status
# at offset 24).
code = given["status"]
# Kept only in `given`, which the search passes by.
given["wait"] = code << 8
exit_rec = re.compile(
    re.escape(struct.pack("=iii", 17, 0, 1)) + b"[\\x00-\\xff]{12}" + re.escape(struct.pack("=i", code)),
    re.S,
)
del code


def classes(b):
    """A pattern of one-byte classes that matches `b`, without `b`'s
    bytes side by side in it."""
    return b"".join(b"[\\x%02x]" % c for c in b)


import ctypes

# An int object of one digit: its type and size as in memory, then the
# digit (a pid of the zygote's, were it left there).
one = int("77777")
head = ctypes.string_at(id(one) + 8, int.__basicsize__ - 8)
pid_pats = [re.compile(classes(head) + classes(struct.pack("=I", p))) for p in given["pids"]]
own_ints = {id(p) for p in given["pids"]}
del one, head
findings = []
control = []


def finding(what):
    if what not in findings:
        findings.append(what)


# 1. The frames below the program's own.
BOOKKEEPING = {"sock", "sel", "status", "ru", "ident", "pid", "pidfd", "fds", "msg", "key", "said", "probe_r"}
frames = []
f = sys._getframe().f_back
while f is not None:
    frames.append(f)
    if f.f_code.co_name in ("_zygote", "fork", "child", "confine"):
        finding("a frame of the zygote's: %s" % f.f_code.co_name)
    names = set(f.f_locals) & BOOKKEEPING
    if names:
        finding("frame %s holds %s" % (f.f_code.co_name, sorted(names)))
    f = f.f_back
del f

# 2. Every object reachable: the collector's (the frozen generation too),
# the frames' locals and globals, the modules, and all they refer to.
gc.unfreeze()
roots = gc.get_objects() + frames + [sys.modules, sys.__dict__, os.environ]
mine = {id(x) for x in (roots, frames, findings, control, given, BOOKKEEPING)}
seen = set(mine)
stack = list(roots)
objs = []
while stack:
    o = stack.pop()
    if id(o) in seen:
        continue
    seen.add(id(o))
    objs.append(o)
    try:
        if type(o).__name__ == "frame":
            stack.extend(o.f_locals.values())
        stack.extend(gc.get_referents(o))
    except Exception:
        pass
del stack, seen
BOOK_TYPES = {"struct_rusage", "waitid_result", "SelectorKey", "EpollSelector", "PollSelector", "SelectSelector"}
counters = {struct.pack("=Q", n) for n in range(1, 4096)}
for o in objs:
    t = type(o)
    name = t.__name__
    if name in BOOK_TYPES:
        finding("a %s object" % name)
    elif t is int and o == given["wait"]:
        finding("the int %d (an earlier run's wait status)" % o)
    elif t is str:
        if others(pat_s, o):
            finding("a str with an earlier run's marker")
    elif t is bytes or t is bytearray:
        if others(pat_b, o):
            finding("%s with an earlier run's marker" % name)
        if exit_rec.search(o):
            finding("%s with an earlier run's exit record" % name)
        if len(o) <= 64 and (o[:8] in counters or o[1:9] in counters) and len(o) in (8, 9):
            finding("%s %r (a request number?)" % (name, bytes(o)))
    elif name == "socket" and getattr(o, "fileno", lambda: -1)() != -1:
        finding("a socket object on fd %d" % o.fileno())
    elif isinstance(o, ctypes._SimpleCData.__mro__[1]) and ctypes.sizeof(o) >= 12:
        raw = ctypes.string_at(ctypes.addressof(o), ctypes.sizeof(o))
        if exit_rec.search(raw):
            finding("a ctypes buffer with an earlier run's exit record")
        del raw
# The int objects alive (a pid's value may be a constant of a module's).
live_ints = {id(o) for o in objs if type(o) is int}
del objs, o

# 3. Threads, environment, fds.
if len(threading.enumerate()) != 1:
    finding("threads: %r" % threading.enumerate())
for k, v in os.environ.items():
    if k.startswith("STOCKADE") or others(pat_s, k + "=" + v):
        finding("environment: %s" % k)
# Every fd open but 0-2 (the run's); listdir's own is closed again by now.
for fd in sorted(int(x) for x in os.listdir("/proc/self/fd")):
    try:
        if fd > 2:
            finding("fd %d: %s" % (fd, os.readlink("/proc/self/fd/%d" % fd)))
    except OSError:
        pass
for a in sys.argv + sys.orig_argv:
    if others(pat_s, a):
        finding("argv holds an earlier run's marker")

# 4. Readable memory, as bytes: the marker and an exit record.
with open("/proc/self/maps") as m, open("/proc/self/mem", "rb", 0) as mem:
    for line in m:
        a, perms = line.split()[:2]
        if "r" not in perms or "[vvar" in line or "[vsyscall" in line:
            continue
        lo, hi = (int(x, 16) for x in a.split("-"))
        try:
            mem.seek(lo)
            chunk = mem.read(hi - lo)
        except OSError:
            continue
        if others(pat_b, chunk):
            finding("memory at %x holds an earlier run's marker" % lo)
        if pat_b.search(chunk) and "memory" not in control:
            control.append("memory")
        if exit_rec.search(chunk):
            finding("memory at %x holds an earlier run's exit record" % lo)
        for p in pid_pats:
            for m in p.finditer(chunk):
                # An int freed, not one alive (its own from its stdin,
                # a module's constant).
                if lo + m.start() - 8 not in own_ints | live_ints:
                    finding("memory at %x holds an int: another child's pid" % (lo + m.start()))
        del chunk

if any(pat_s.search(a) for a in sys.argv):
    control.append("argv")
print(json.dumps({"findings": findings, "control": control}))
