#!/bin/sh
# Issue 12's hostile programs against the fallback (user namespaces refused,
# as in a plain `docker run`), run inside the test image (busybox sh) by
# xtask/src/docker_fallback.rs, each beside a control outside stockade where
# the control is what lets the check fail. Prints `key=value` lines; outcomes
# (`--report -`) as `<name>_outcome=<json>`.
#
# Environment (docker run -e):
#   SECRET_TOKEN   part of the secret put on a command line outside the jail
set -u
PY=/usr/bin/python3.11
H="$PY -I /t/fallback.py"
S=/stockade
echo "whoami=$(id -u):$(id -g)"

# Wait up to 10 s for FILE to hold a line WORD.
await() {
    i=0
    while ! grep -qx "$2" "$1" 2>/dev/null && [ $i -lt 200 ]; do
        sleep 0.05
        i=$((i + 1))
    done
}

# 1. A flood of orphans: the run ends, promptly, with the payload's status.
# --pids-limit (RLIMIT_NPROC here, zombies included) only keeps an init that
# falls behind from taking the whole machine's pids (pid_max is shared).
t0=$($H now)
$S run --report - --timeout 15s --pids-limit 8192 --ro-bind /t -- $PY -I /t/fallback.py orphans \
    > /tmp/fb-orphans.json 2> /tmp/fb-orphans.err < /dev/null
echo "orphans_rc=$?"
echo "orphans_returned=$($H now)"
echo "orphans_started=$t0"
echo "orphans_outcome=$(cat /tmp/fb-orphans.json)"
sed 's/^/orphans_stderr=/' /tmp/fb-orphans.err

# 2. --tmp-size 8m against 40 MiB of dd. Control: the container's disk takes
# all 40 MiB outside stockade.
mkdir -p /tmp/fb-ctl
dd if=/dev/zero of=/tmp/fb-ctl/big bs=1M count=40 2> /dev/null
echo "tmp_control_kib=$(du -sk /tmp/fb-ctl | cut -f1)"
rm -rf /tmp/fb-ctl
$S run --report - --tmp-size 8m -- /bin/sh -c \
    'dd if=/dev/zero of=$TMPDIR/big bs=1M count=40; echo dd_rc=$?; echo size=$(stat -c %s $TMPDIR/big); echo kib=$(du -sk $TMPDIR | cut -f1)' \
    > /tmp/fb-tmp.json 2> /tmp/fb-tmp.err < /dev/null
echo "tmp_rc=$?"
echo "tmp_outcome=$(cat /tmp/fb-tmp.json)"

# 3. A listener on a 0777 unix socket outside the jail's binds. Control: a
# client outside stockade reaches it.
mkdir -p /tmp/fb-host
rm -f /tmp/fb-host/s /tmp/fb-host/ready
: > /tmp/fb-host/log
$H unix-listen /tmp/fb-host/s /tmp/fb-host/ready /tmp/fb-host/log &
LISTENER=$!
await /tmp/fb-host/ready ready
echo "unix_socket_mode=$(stat -c %a /tmp/fb-host/s 2>&1)"
CONNECT='import socket, sys
try:
    s = socket.socket(socket.AF_UNIX); s.settimeout(5); s.connect(sys.argv[1])
    s.recv(1)  # the listener has logged the connection by now
    print("connect=CONNECTED")
except OSError as e:
    print("connect=errno:%d" % e.errno)'
echo "unix_control_$($PY -I -c "$CONNECT" /tmp/fb-host/s)"
echo "unix_before=$(wc -l < /tmp/fb-host/log)"
$S run --report - -- $PY -I -c "$CONNECT" /tmp/fb-host/s \
    > /tmp/fb-unix.json 2> /dev/null < /dev/null
echo "unix_outcome=$(cat /tmp/fb-unix.json)"
echo "unix_after=$(wc -l < /tmp/fb-host/log)"
kill "$LISTENER" 2> /dev/null
# ...and a socket in the jail's own run directory still works.
$S run --report - --ro-bind /t -- $PY -I /t/fallback.py own-socket \
    > /tmp/fb-own.json 2> /dev/null < /dev/null
echo "own_outcome=$(cat /tmp/fb-own.json)"

# 4. Two jails at once: A runs 60 sleeps, B forks 20 children under
# --pids-limit 50.
if [ "$(id -u)" = 0 ]; then
    $S run --timeout 60s -- /bin/sh -c \
        'for i in $(seq 60); do sleep 100 & done; echo uid=$(id -u); echo started; wait' \
        > /tmp/fb-a.out 2> /dev/null < /dev/null &
    A=$!
    await /tmp/fb-a.out started
    AUID=$(sed -n 's/^uid=//p' /tmp/fb-a.out)
    echo "pids_a_uid=$AUID"
    # Controls: A's sixty are A's uid's, and a process of that uid held to
    # RLIMIT_NPROC 50 cannot fork.
    if [ -n "$AUID" ]; then
        echo "pids_a_count=$($H uid-count "$AUID")"
        $H nproc-control "$AUID" | sed 's/^/pids_/'
    fi
    $S run --report - --pids-limit 50 -- /bin/sh -c \
        'for i in $(seq 20); do sleep 0.1 & done; wait; echo forked-all; echo uid=$(id -u)' \
        > /tmp/fb-b.json 2> /tmp/fb-b.err < /dev/null
    echo "pids_b_rc=$?"
    echo "pids_outcome=$(cat /tmp/fb-b.json)"
    sed 's/^/pids_b_stderr=/' /tmp/fb-b.err
    kill "$A" 2> /dev/null
    wait "$A"
else
    # Not root: no other uid to give. A limit that whatever else runs as
    # this uid on the host stays under.
    LIM=$(ulimit -Hu)
    [ "$LIM" = unlimited ] && LIM=1000000
    $S run --report - --pids-limit "$LIM" -- /bin/sh -c 'echo uid=$(id -u)' \
        > /tmp/fb-b.json 2> /dev/null < /dev/null
    echo "pids_outcome=$(cat /tmp/fb-b.json)"
fi

# 5. A secret on a command line outside the jail. Control: readable outside.
SECRET="RTSECRET-$$-$SECRET_TOKEN"
/bin/sh -c 'sleep 60; :' "$SECRET" &
SP=$!
i=0
while ! tr '\0' ' ' < /proc/$SP/cmdline 2> /dev/null | grep -q "$SECRET" && [ $i -lt 200 ]; do
    sleep 0.05
    i=$((i + 1))
done
echo "proc_control=$(tr '\0' ' ' < /proc/$SP/cmdline 2>&1)"
PROBE='import os, sys
for p in ["/proc/%s/cmdline" % sys.argv[1], "/proc"]:
    try:
        print("py=" + (repr(open(p, "rb").read()) if p != "/proc" else "%d entries" % len(os.listdir(p))))
    except OSError as e:
        print("py=errno:%d" % e.errno)'
$S run --report - -- /bin/sh -c \
    "cat /proc/$SP/cmdline; r=\$?; echo; echo rc_cat=\$r; for f in /proc/[0-9]*/cmdline; do cat \"\$f\"; echo; done 2> /dev/null; $PY -I -c '$PROBE' $SP" \
    > /tmp/fb-proc.json 2> /dev/null < /dev/null
echo "proc_outcome=$(cat /tmp/fb-proc.json)"
kill "$SP" 2> /dev/null

# 6. kill -9 of the supervisor once the payload is running: nothing of the
# jail may remain, and its run directory goes too (by the next run at the
# latest).
# (A first line that names nothing: busybox grep -v -f of an empty file
# prints nothing.)
echo /nonexistent > /tmp/fb-dirs.before
ls -d /tmp/stockade-run-* >> /tmp/fb-dirs.before 2> /dev/null
$S run --timeout 60s -- /bin/sh -c 'echo ready; sleep 21 & sleep 21 & wait' \
    > /tmp/fb-kill.out 2> /dev/null < /dev/null &
K=$!
await /tmp/fb-kill.out ready
echo "kill_ready=$(cat /tmp/fb-kill.out)"
echo "kill_before=$($H survivors sleep 21)"
KDIR=$(ls -d /tmp/stockade-run-* 2> /dev/null | grep -vxF -f /tmp/fb-dirs.before | head -n 1)
echo "kill_rundir=$KDIR"
kill -9 "$K"
wait "$K"
for i in 1 2 3 4 5 6 7 8 9 10; do
    sleep 0.2
    echo "kill_after_$i=$($H survivors sleep 21)"
done
if [ -e "$KDIR" ]; then echo "kill_rundir_after_kill=present"; else echo "kill_rundir_after_kill=gone"; fi
$S run -- /bin/true > /dev/null 2>&1 < /dev/null
echo "kill_next_run=$?"
for d in $(ls -d /tmp/stockade-run-* 2> /dev/null); do
    echo "kill_rundirs_left=$d"
done

echo "fallback=done"
