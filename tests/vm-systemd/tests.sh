#!/bin/sh
# The systemd rung's tests, run as root by vmtest.service inside the VM of
# `cargo xtask vm-systemd-test` (systemd as PID 1, pure cgroup v2). Sets up
# uid 1000 with a running user manager (user@1000.service, its bus at
# /run/user/1000/bus), then runs stockade as that user from this service's
# cgroup, which the user does not own: only a scope of their systemd --user
# can hold its limits. One line per test: `VMTEST PASS systemd/NAME` or
# `VMTEST FAIL systemd/NAME: detail`; then `VMTEST DONE` and power-off.

S=/usr/local/bin/stockade
B=/usr/local/bin
T=/tmp/vmtest
U=/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service
mkdir -p $T && chmod 1777 $T

pass() { echo "VMTEST PASS systemd/$1"; }
fail() { echo "VMTEST FAIL systemd/$1: $(echo "$2" | tr '\n' ' ' | cut -c1-900)"; }
finish() {
    echo "VMTEST INFO finished $(cut -d' ' -f1 /proc/uptime) s after boot"
    echo "VMTEST DONE"
    systemctl poweroff -ff
    exit 0
}
# as_user CMD...: uid 1000 in this service's cgroup, with the user's runtime
# dir (stockade finds the user bus at $XDG_RUNTIME_DIR/bus).
as_user() {
    $B/runas 1000 1000 env -u DBUS_SESSION_BUS_ADDRESS HOME=/home/user \
        XDG_RUNTIME_DIR=/run/user/1000 "$@"
}
# Every run as the user gets a hard stop, so one hung run cannot eat the
# VM's budget.
st() { as_user timeout -s KILL 120 $S "$@"; }
# j REPORT FILTER: one value of a JSON report.
j() { jq -r "$2" "$1" 2>/dev/null; }
# What a run may leave behind: scopes in the cgroup tree, units in the
# user manager (active or failed), stockade processes (a D-Bus holder).
# Shell builtins only where it loops: a fork costs much under TCG.
scopes() { find $U -name 'stockade-*.scope' 2>/dev/null | tr '\n' ' '; }
units() { as_user systemctl --user list-units --no-legend --plain 'stockade-*' 2>&1 | tr '\n' ' '; }
procs_named() {
    for p in /proc/[0-9]*; do
        c=
        { read -r c <$p/comm; } 2>/dev/null
        [ "$c" = "$1" ] && printf '%s ' "${p#/proc/}"
    done
}
leftovers() { echo "$(scopes)$(units)$(procs_named stockade)"; }
# bg_run ARGS...: `stockade ARGS` as the user in the background; $job is
# timeout(1)'s pid (runas, env and timeout exec each other), whose child is
# the supervisor.
bg_run() {
    $B/runas 1000 1000 env -u DBUS_SESSION_BUS_ADDRESS HOME=/home/user \
        XDG_RUNTIME_DIR=/run/user/1000 timeout -s KILL 120 $S "$@" >/dev/null 2>&1 &
    job=$!
}
supervisor() {
    kids=
    { read -r kids </proc/$job/task/$job/children; } 2>/dev/null
    echo $kids
}
# in_scope: a `sleep` in a run cgroup inside a stockade scope of the user's
# manager; sets $sleeper to that cgroup.
in_scope() {
    for d in $U/*/stockade-*.scope/stockade/run-*; do
        [ -f $d/cgroup.procs ] || continue
        while read -r p; do
            c=
            { read -r c </proc/$p/comm; } 2>/dev/null
            if [ "$c" = sleep ]; then
                sleeper=$d
                return 0
            fi
        done <$d/cgroup.procs
    done
    return 1
}
# wait_for N CMD...: until CMD succeeds, at most N tenths of a second.
wait_for() {
    n=$1
    shift
    while [ $n -gt 0 ]; do
        "$@" && return 0
        sleep 0.1
        n=$((n - 1))
    done
    return 1
}

echo "VMTEST BOOT kernel $(uname -r), $(systemctl --version | head -n 1), cgroup2 controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
if [ "$(cat /proc/1/comm)" = systemd ]; then pass boot/pid1_is_systemd; else fail boot/pid1_is_systemd "$(cat /proc/1/comm)"; fi

# --- the user and their systemd --user (started as logind would at login)
echo 'user:x:1000:1000:user:/home/user:/bin/sh' >>/etc/passwd
echo 'user:x:1000:' >>/etc/group
echo 'user:*:20000:0:99999:7:::' >>/etc/shadow
mkdir -p /home/user && chown 1000:1000 /home/user
if ! out=$(systemctl start user@1000.service 2>&1); then
    fail user_manager_started "$out $(journalctl --no-pager -b -u user@1000.service | tail -n 20)"
    finish
fi
pass user_manager_started
# systemctl start returns once the manager is ready, its sockets listening.
if [ -S /run/user/1000/bus ]; then pass user_bus_listens; else fail user_bus_listens "$(ls -la /run/user/1000)"; fi
echo "VMTEST INFO tests run from $(cat /proc/self/cgroup) (owned by $(stat -c %U /sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup)))"

# --- each cgroup limit is held by the scope's run cgroup, and says why the
# rung above (a delegated base of our own) is not there
r=$T/limits.json
st run --report $r --memory 64m --pids-limit 64 --cpus 0.5 -- /usr/bin/true >/dev/null 2>$T/limits.err
by=$(j $r '[.limits.memory.enforced_by, .limits.pids.enforced_by, .limits.cpus.enforced_by] | join(" ")')
scope=$(j $r .layers.cgroup.detail.systemd_scope)
path=$(j $r .layers.cgroup.detail.path)
if [ "$(j $r .status)" = exited ] && [ "$by" = "cgroup_systemd cgroup_systemd cgroup_systemd" ]; then
    pass limits_enforced_by_the_systemd_rung
else
    fail limits_enforced_by_the_systemd_rung "$by: $(cat $r $T/limits.err)"
fi
case "$scope:$path" in
stockade-*.scope:$U/*/"$scope"/stockade/run-*) pass run_cgroup_is_inside_the_users_scope ;;
*) fail run_cgroup_is_inside_the_users_scope "scope=$scope path=$path" ;;
esac
if j $r .limits.memory.why | grep -q '^cgroup v2: no cgroup usable by uid 1000'; then
    pass outcome_says_why_not_cgroup_v2
else
    fail outcome_says_why_not_cgroup_v2 "$(j $r .limits.memory)"
fi

# --- while it runs: the payload is in the run cgroup inside an active
# scope of the user's manager; the supervisor is not
bg_run run --timeout 60s --memory 64m --pids-limit 64 -- /usr/bin/sleep 30
sleeper=
if wait_for 300 in_scope; then
    unit=$(echo "$sleeper" | sed -n 's|.*/\(stockade-[^/]*\.scope\)/.*|\1|p')
    sup=$(supervisor)
    state=$(as_user systemctl --user is-active "$unit" 2>&1)
    supcg=$(cut -d: -f3 /proc/$sup/cgroup 2>/dev/null)
    if [ "$state" = active ] && [ "$supcg" = /system.slice/vmtest.service ]; then
        pass payload_runs_in_an_active_scope
    else
        fail payload_runs_in_an_active_scope "unit $unit is $state; supervisor $sup in $supcg"
    fi
    kill -TERM $sup
else
    fail payload_runs_in_an_active_scope "no sleep in a stockade scope; have: $(scopes) $(units)"
    kill -KILL $job
fi
wait $job
left=$(leftovers)
if [ -z "$left" ]; then pass scope_gone_after_the_run; else fail scope_gone_after_the_run "$left"; fi

# --- memory: 64 MiB limit, the payload wants 256 MiB; the verdict comes
# from the controller's counters
r=$T/mem.json
st run --report $r --memory 64m -- $B/memhog 256 >/dev/null 2>&1
if [ "$(j $r .status)" = memory_limit ] && [ "$(j $r .limits.memory.verdict)" = counted ] &&
    [ "$(j $r .limits.memory.enforced_by)" = cgroup_systemd ] && ! grep -q survived $r; then
    pass memory_limit_counted
else
    fail memory_limit_counted "$(cat $r)"
fi

# --- pids: a fork bomb against 32 pids
r=$T/pids.json
st run --report $r --pids-limit 32 --timeout 60s -- $B/forkbomb >$T/pids.out 2>&1
if [ "$(j $r .status)" = pids_limit ] && [ "$(j $r .limits.pids.verdict)" = counted ] &&
    [ "$(j $r .limits.pids.enforced_by)" = cgroup_systemd ] && grep -q 'fork refused' $T/pids.out; then
    pass pids_limit_counted
else
    fail pids_limit_counted "$(cat $T/pids.out $r)"
fi

# --- cpu: half a CPU. spin burns 1 s of its own CPU time and says how much
# wall time that took, both measured inside it, so neither the jail's
# start-up nor a loaded host (TCG beside the test binaries) moves the ratio
# toward passing: held, at most about 0.5; unlimited and idle, about 1.
r=$T/cpu.json
st run --report $r --cpus 0.5 -- $B/spin 1 >/dev/null 2>$T/cpu.err
c=$(sed -n 's/^spin cpu_ms=\([0-9]*\) .*/\1/p' $T/cpu.err)
w=$(sed -n 's/^spin .*wall_ms=\([0-9]*\)$/\1/p' $T/cpu.err)
if [ "$(j $r .status)" = exited ] && [ "$(j $r .limits.cpus.enforced_by)" = cgroup_systemd ] &&
    [ -n "$c" ] && [ -n "$w" ] && [ "$c" -ge 1000 ] && [ $((c * 10)) -lt $((w * 7)) ]; then
    pass "cpu_quota (spin: cpu $c ms of wall $w ms)"
else
    fail cpu_quota "cpu=$c wall=$w: $(cat $T/cpu.err $r)"
fi

left=$(leftovers)
if [ -z "$left" ]; then pass nothing_left_after_limit_tests; else fail nothing_left_after_limit_tests "$left"; fi

# --- stockade check, as the user, names the rung
out=$(as_user $S check 2>&1)
echo "$out" | grep -E '^ +(cgroup|memory|cpus|pids) ' | sed 's/^ */VMTEST INFO check: /' | cut -c1-400
if echo "$out" | grep -Eq '^ +memory +cgroup_systemd' && echo "$out" | grep -Eq '^ +pids +cgroup_systemd' &&
    echo "$out" | grep -Eq '^ +cpus +cgroup_systemd' && echo "$out" | grep -Eq '^ +cgroup +available +a transient scope'; then
    pass check_names_the_systemd_rung
else
    fail check_names_the_systemd_rung "$out"
fi
as_user $S check --json >$T/check.json 2>&1
if [ "$(j $T/check.json '.limits.memory.enforced_by')" = cgroup_systemd ] &&
    [ "$(j $T/check.json '.layers.cgroup.available')" = true ] &&
    j $T/check.json .limits.memory.why | grep -q '^cgroup v2: '; then
    pass check_json_names_the_systemd_rung
else
    fail check_json_names_the_systemd_rung "$(cat $T/check.json)"
fi
left=$(leftovers)
if [ -z "$left" ]; then pass nothing_left_after_check; else fail nothing_left_after_check "$left"; fi

# --- many runs, some at once and hitting the limit, leave nothing behind
bad=0
why=""
i=0
while [ $i -lt 10 ]; do
    if ! st run --report $T/seq.$i.json --memory 64m --pids-limit 64 --cpus 1 -- /usr/bin/true >/dev/null 2>&1; then
        bad=$((bad + 1))
        why="$why [run $i: $(cut -c1-300 $T/seq.$i.json 2>/dev/null)]"
    fi
    i=$((i + 1))
done
i=0
while [ $i -lt 3 ]; do
    st run --report $T/conc.$i.json --memory 32m -- $B/memhog 128 >/dev/null 2>&1 &
    st run --report $T/concp.$i.json --memory 32m --pids-limit 16 -- /usr/bin/true >/dev/null 2>&1 &
    i=$((i + 1))
done
wait
i=0
while [ $i -lt 3 ]; do
    if [ "$(j $T/conc.$i.json .status)" != memory_limit ]; then
        bad=$((bad + 1))
        why="$why [memhog $i: $(cut -c1-300 $T/conc.$i.json 2>/dev/null)]"
    fi
    if [ "$(j $T/concp.$i.json .limits.pids.enforced_by)" != cgroup_systemd ]; then
        bad=$((bad + 1))
        why="$why [pids $i: $(j $T/concp.$i.json .limits.pids) $(j $T/concp.$i.json .error)]"
    fi
    i=$((i + 1))
done
left=$(leftovers)
if [ $bad = 0 ] && [ -z "$left" ]; then
    pass batch_16_runs_leave_nothing
else
    fail batch_16_runs_leave_nothing "$bad bad:$why; left: $left"
fi

# --- a supervisor killed mid-run: its holder and jail go with it, and the
# user's manager collects the scope
bg_run run --timeout 60s --memory 64m -- /usr/bin/sleep 30
sleeper=
if wait_for 300 in_scope && sup=$(supervisor) && [ -n "$sup" ]; then
    kill -KILL $sup
    wait $job
    gone() { [ -z "$(leftovers)" ] && [ -z "$(procs_named sleep)" ]; }
    if wait_for 300 gone; then
        pass scope_collected_after_supervisor_killed
    else
        fail scope_collected_after_supervisor_killed "left: $(leftovers) sleep: $(procs_named sleep)"
    fi
else
    fail scope_collected_after_supervisor_killed "no supervisor ($sup) or no sleep in a stockade scope; have: $(scopes) $(units)"
    kill -KILL $job
    wait $job
fi

# --- without the user's bus (their manager stopped, and the runtime dir
# with the bus's socket removed: both before systemctl returns), the ladder
# falls to the next rung and says why
systemctl stop user@1000.service user-runtime-dir@1000.service
r=$T/nobus.json
st run --report $r --memory 64m --pids-limit 64 -- /usr/bin/true >/dev/null 2>&1
if [ "$(j $r .status)" = exited ] && [ "$(j $r .limits.memory.enforced_by)" = rlimit_as ] &&
    [ "$(j $r .limits.pids.enforced_by)" = rlimit_nproc ] &&
    j $r .limits.memory.why | grep -q 'systemd: no user D-Bus to ask systemd for a delegated scope'; then
    pass no_user_bus_falls_to_rlimits_and_says_why
else
    fail no_user_bus_falls_to_rlimits_and_says_why "$(cat $r)"
fi
out=$(as_user $S check 2>&1)
if echo "$out" | grep -Eq '^ +memory +rlimit_as .*no user D-Bus'; then
    pass check_without_user_bus_says_why
else
    fail check_without_user_bus_says_why "$out"
fi

finish
