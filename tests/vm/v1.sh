#!/bin/sh
# The cgroup v1 tests, run as root by init.sh in the second boot, where the
# memory, pids and cpu,cpuacct controllers are mounted as cgroup v1
# hierarchies and no cgroup2 hierarchy is mounted at all (as on RHEL 8 or
# Amazon Linux 2 with systemd.unified_cgroup_hierarchy=0). Each limit is
# held by a per-run v1 group and each verdict is counted by the v1
# controller, however the payload allocated and ended. One line per test:
# `VMTEST PASS v1/name` or `VMTEST FAIL v1/name: detail`.
#
# The payloads are issue 18's: a Python list, one 512 MiB bytearray, a
# 1 GiB perl string, C malloc+memset (tests/payloads/mem_malloc.c), a tmpfs
# file written past the limit; python3 and perl are the host's, copied into
# the initramfs with their libraries (a line says so when the host had none).

who=v1
C=/sys/fs/cgroup
T=/tmp/vmtest-v1
mkdir -p $T

. /usr/share/vmtest/lib.sh
leftovers() { ls -d $C/memory/stockade/run-* $C/pids/stockade/run-* $C/cpu,cpuacct/stockade/run-* 2>/dev/null | tr '\n' ' '; }

echo "VMTEST INFO v1: uid $(id -u), cgroup $(cat /proc/self/cgroup | tr '\n' ' ')"

# memory_limit_counted NAME STOCKADE-ARGS...: the run ends memory_limit,
# held by the v1 rung with a counted verdict and hit, never past the limit.
memory_limit_counted() {
    name=$1
    shift
    out=$(st run --report - --timeout 100s --memory 64m "$@" 2>&1)
    peak=$(field peak_memory_bytes "$out")
    if status_is "$out" memory_limit &&
        limit_has memory '"enforced_by":"cgroup_v1"' "$out" &&
        limit_has memory '"hit":true' "$out" &&
        limit_has memory '"verdict":"counted"' "$out" &&
        [ -n "$peak" ] && [ "$peak" -le 67108864 ]; then
        pass "memory_limit/$name"
    else
        fail "memory_limit/$name" "$out"
    fi
}

if [ -x /usr/bin/python3 ]; then
    memory_limit_counted python_list -- python3 -I -S -c 'a = []
while True:
    a.append(bytearray(1 << 20))'
    memory_limit_counted python_bytearray_512m -- python3 -I -S -c 'b = bytearray(512 << 20)
b[::4096] = b"x" * ((512 << 20) // 4096)'
else
    echo "VMTEST INFO v1: no python3 in the VM (the host had none): python payloads not run"
fi
if [ -x /usr/bin/perl ]; then
    memory_limit_counted perl_string_1g -- perl -e '$x = "a" x (1 << 30); print STDERR length($x)'
else
    echo "VMTEST INFO v1: no perl in the VM (the host had none): the perl payload not run"
fi
memory_limit_counted c_malloc_memset -- /usr/bin/mem_malloc
memory_limit_counted tmpfs_file --tmp-size 512m -- sh -c 'head -c 300000000 /dev/zero > /tmp/f'

# --- a child OOM-killed under a payload that then exits 0: the v1 OOM
# killer takes the largest process (memhog), sh exits 0: the status is the
# payload's own, and the limit's report says it was hit and what was killed
out=$(st run --report - --memory 64m -- /bin/sh -c '/usr/bin/memhog 256; exit 0' 2>&1)
if status_is "$out" exited && [ "$(field exit_code "$out")" = 0 ] &&
    limit_has memory '"hit":true' "$out" && limit_has memory '"payload":false' "$out"; then
    pass child_oom_killed_payload_exits_0
else
    fail child_oom_killed_payload_exits_0 "$out"
fi

# --- under the limit, the payload's own exit code stands: 48 MiB touched
# (CPython zeroes a bytearray with memset: every page of it is charged),
# then os._exit(3). The interpreter adds about 3 MiB: a peak near 51 MiB,
# well under 64 (a 60 MiB bytearray peaked at 63 MiB and was now and then
# OOM-killed).
if [ -x /usr/bin/python3 ]; then
    out=$(st run --report - --memory 64m -- python3 -I -S -c 'import os
b = bytearray(48 << 20)
b[::4096] = b"x" * ((48 << 20) // 4096)
os._exit(3)' 2>&1)
    if status_is "$out" exited && [ "$(field exit_code "$out")" = 3 ] &&
        limit_has memory '"enforced_by":"cgroup_v1"' "$out" &&
        limit_has memory '"hit":false' "$out"; then
        pass under_the_limit_keeps_exit_3
    else
        fail under_the_limit_keeps_exit_3 "$out"
    fi
fi

# --- pids: a fork bomb whose parent stays alive until its forks are refused
pids_limit cgroup_v1

# --- cpu: as the v2 test judges it (see lib.sh), held by the v1 rung
cpu_quota cgroup_v1

# --- nothing is left in any v1 hierarchy (the runs above, and 20 more)
i=0
bad=0
while [ $i -lt 20 ]; do
    st run --memory 32m --pids-limit 16 --cpus 1 -- /usr/bin/true >/dev/null 2>&1 || bad=$((bad + 1))
    i=$((i + 1))
done
left=$(leftovers)
if [ $bad = 0 ] && [ -z "$left" ] && [ -d $C/memory/stockade ] && [ -d $C/pids/stockade ]; then
    pass no_leftover_in_any_v1_hierarchy
else
    fail no_leftover_in_any_v1_hierarchy "$bad failed; left: $left; $(ls $C/memory $C/pids 2>&1 | tr '\n' ' ')"
fi
