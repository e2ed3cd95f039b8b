#!/usr/bin/busybox sh
# pid 1 of the test VM: mount the pseudo file systems and a pure cgroup v2
# hierarchy, delegate a subtree to uid 1000, run tests.sh as root and as that
# user, print VMTEST DONE and power off. Booted with `stockade_vm=v1` on the
# kernel command line it mounts the memory, pids and cpu,cpuacct controllers
# as cgroup v1 hierarchies instead (no cgroup2 at all) and runs v1.sh as
# root. Output goes to the serial console, which `cargo xtask vm-test` reads.
# Booted with `stockade_vm=bench` it runs `xtask bench serve` instead
# (`cargo xtask vm-bench`).

export PATH=/usr/bin
# The initramfs is rootfs, which pivot_root(2) refuses to move (EINVAL), and
# the jail pivots. So stage 1 copies the files into a tmpfs and switch_root's
# into it; stage 2 is the real init.
if [ "$1" != stage2 ]; then
    /usr/bin/busybox mkdir -p /newroot
    /usr/bin/busybox mount -t tmpfs -o mode=755 tmpfs /newroot
    for f in /*; do
        [ "$f" = /newroot ] || /usr/bin/busybox cp -a "$f" /newroot/
    done
    exec /usr/bin/busybox switch_root /newroot /init stage2
fi
/usr/bin/busybox --install -s /usr/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs -o mode=1777 tmpfs /tmp
hostname vmtest
# tests.sh talks to `stockade serve` over TCP on lo (busybox wget).
ip link set lo up
exec </dev/null

C=/sys/fs/cgroup
check() { # check NAME CONDITION-COMMAND...
    name=$1
    shift
    if "$@" >/dev/null 2>&1; then
        echo "VMTEST PASS $name"
    else
        echo "VMTEST FAIL $name: $* is false"
    fi
}

if grep -qw stockade_vm=v1 /proc/cmdline; then
    # cgroup v1: one hierarchy per controller (cpu and cpuacct together),
    # as systemd.unified_cgroup_hierarchy=0 mounts them.
    mount -t tmpfs -o mode=755 cgroup $C
    for c in memory pids cpu,cpuacct; do
        mkdir $C/$c
        mount -t cgroup -o $c cgroup $C/$c
    done
    echo "VMTEST BOOT v1 kernel $(uname -r), $(nproc) cpus, up $(cut -d' ' -f1 /proc/uptime) s, hierarchies: $(grep -w cgroup /proc/mounts | cut -d' ' -f2,4 | tr '\n' ' ')"
    check v1boot/no_cgroup2 sh -c '! grep -qw cgroup2 /proc/mounts'
    # A child group of each (pids.max is not in a hierarchy's root).
    for f in memory/memory.limit_in_bytes memory/memory.oom_control pids/pids.max pids/pids.events cpu,cpuacct/cpu.cfs_quota_us cpu,cpuacct/cpuacct.usage; do
        mkdir -p "$C/${f%/*}/probe"
        check "v1boot/has_${f#*/}" test -e "$C/${f%/*}/probe/${f#*/}"
    done
    rmdir $C/*/probe
    sh /usr/share/vmtest/v1.sh
    check v1boot/still_works_after_all_tests sh -c 'echo alive | grep -q alive'
    echo "VMTEST DONE"
    sync
    poweroff -f
fi

mount -t cgroup2 -o nsdelegate cgroup2 $C
echo "VMTEST BOOT kernel $(uname -r), $(nproc) cpus, up $(cut -d' ' -f1 /proc/uptime) s, cgroup2 controllers: $(cat $C/cgroup.controllers)"

for c in memory cpu pids; do
    check "boot/cgroup2_has_$c" grep -qw "$c" $C/cgroup.controllers
done
check boot/cgroup_kill_exists test -e $C/init.scope/cgroup.kill -o -e "$(mkdir -p $C/probe && echo $C/probe/cgroup.kill)"
rmdir $C/probe 2>/dev/null

# Controllers for the children of the root; the root is exempt from the
# no-internal-processes rule, so this works with init inside it.
echo "+memory +cpu +pids" >$C/cgroup.subtree_control

# `cargo xtask vm-bench` (stockade_vm=bench): `xtask bench serve` as root,
# from a stand-in workspace (it looks for Cargo.toml and xtask/), each
# line of its output on the console as VMTEST BENCH.
if grep -qw stockade_vm=bench /proc/cmdline; then
    mkdir -p /tmp/bench/xtask && : >/tmp/bench/Cargo.toml && cd /tmp/bench
    echo "VMTEST BOOT bench: kernel $(uname -r), $(nproc) cpus, cgroup2 controllers: $(cat $C/cgroup.controllers)"
    # shellcheck disable=SC2046
    if xtask bench serve --binary /usr/bin/stockade $(cat /usr/share/vmtest/bench-args) >/tmp/bench.out 2>&1; then
        result=PASS
    else
        result=FAIL
    fi
    sed 's/^/VMTEST BENCH /' /tmp/bench.out
    echo "VMTEST $result bench_serve_ran"
    echo "VMTEST DONE"
    sync
    poweroff -f
fi

# A delegated subtree for uid 1000, the way systemd's Delegate=yes does it:
# the directory and its cgroup.procs, cgroup.subtree_control, cgroup.threads
# belong to the user. The user's shell lives in deleg/session, so deleg itself
# holds no processes and stockade can create deleg/stockade/run-… there.
D=$C/deleg
mkdir $D $D/session
chown 1000:1000 $D $D/cgroup.procs $D/cgroup.subtree_control $D/cgroup.threads
check boot/deleg_has_memory grep -qw memory $D/cgroup.controllers

sh /usr/share/vmtest/tests.sh root
sh -c "echo \$\$ >$D/session/cgroup.procs && cd /home/user && HOME=/home/user exec /usr/bin/runas 1000 1000 sh /usr/share/vmtest/tests.sh user"

check vm/still_works_after_all_tests sh -c 'echo alive | grep -q alive'
echo "VMTEST DONE"
sync
poweroff -f
