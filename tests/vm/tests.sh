#!/bin/sh
# The cgroup tests, run inside the VM by init.sh: `tests.sh root` as root,
# `tests.sh user` as uid 1000 in a delegated subtree. One line per test:
# `VMTEST PASS who/name` or `VMTEST FAIL who/name: detail`.
#
# What each test needs (besides the cgroup module):
#   runs_true, batch_sequential_*            the jail itself
#   report_exited                            --report - (the JSON outcome)
#   cgroup_layer_applied                     the outcome's layers.cgroup
#   payload_runs_inside_run_cgroup           the supervisor creating the run cgroup
#   jail_sees_only_its_own_cgroup            clone3 CLONE_INTO_CGROUP (with CLONE_NEWCGROUP)
#   memory_limit, batch_concurrent_memory    memory.max + status memory_limit (oom_kill)
#   oom_group_takes_the_payload_too          memory.oom.group (limits.memory.oom_killed)
#   pids_limit                               pids.max + status pids_limit (pids.events max)
#   cpu_quota                                cpu.max (ratio of CPU time to wall time)
#   timeout                                  --timeout (status timeout)
#   output_limit                             --max-output (status output_limit)
#   stale_cgroup_removed_after_crash         cleanup_stale() at start
#   no_leftover_*                            RunCgroup::remove after every run
#   python_profile_runs                      python discovery, the VM's python3 stdlib
#   fork_*                                   stockade serve --warm-fork: the zygote
#                                            (the VM's python3 and its stdlib), a run
#                                            cgroup per forked child from the request's
#                                            own limits, each child born in it inside
#                                            the zygote's cgroup (cgroup::Nest), the move
#                                            when the clone is refused, /metrics' pool
#                                            and stage counters

who=$1
case $who in
root) P=/sys/fs/cgroup/stockade ;;
*) P=/sys/fs/cgroup/deleg/stockade ;;
esac
T=/tmp/vmtest-$who
mkdir -p $T

. /usr/share/vmtest/lib.sh
leftovers() { ls -d $P/run-* 2>/dev/null | tr '\n' ' '; }
# The stockade process of a background `st` started as $1: busybox timeout
# execs the command itself (its watchdog is a child); a timeout(1) that forks
# has stockade as its child.
stockade_of() {
    if [ "$(cat /proc/$1/comm 2>/dev/null)" = stockade ]; then
        echo $1
    else
        for p in $(pidof stockade); do [ "$(cut -d' ' -f4 /proc/$p/stat)" = "$1" ] && echo $p; done
    fi
}
# await_stockade_of PID: stockade_of PID once that process has started
# (at most 30 s of tries; a slow VM may take more than a moment to exec it).
await_stockade_of() {
    n=0
    while [ $n -lt 300 ] && kill -0 $1 2>/dev/null; do
        s=$(stockade_of $1)
        [ -n "$s" ] && echo $s && return 0
        sleep 0.1
        n=$((n + 1))
    done
    stockade_of $1
}

echo "VMTEST INFO $who: uid $(id -u), cgroup $(cat /proc/self/cgroup)"

# --- the jail runs at all
out=$(st run -- /usr/bin/true 2>&1)
rc=$?
if [ $rc = 0 ]; then pass runs_true; else fail runs_true "exit $rc: $out"; fi

out=$(st run -- /usr/bin/echo hello-from-jail 2>&1)
if [ "$out" = hello-from-jail ]; then pass runs_echo; else fail runs_echo "$out"; fi

# --- the JSON outcome (a run cgroup is made when a cgroup limit is asked for)
out=$(st run --report - --pids-limit 1000 -- /usr/bin/true 2>&1)
if status_is "$out" exited; then pass report_exited; else fail report_exited "$out"; fi
if echo "$out" | grep -q '"cgroup":{"state":"applied"'; then
    pass cgroup_layer_applied
else
    fail cgroup_layer_applied "$out"
fi

# --- the payload lives in a run cgroup below $P, the supervisor does not
st run --timeout 60s --pids-limit 1000 -- /usr/bin/sleep 30 >/dev/null 2>&1 &
spid=$!
sup=$(await_stockade_of $spid)
found=
i=0
while [ $i -lt 100 ] && [ -z "$found" ]; do
    for d in $P/run-*; do
        [ -f "$d/cgroup.procs" ] || continue
        comms=$(for p in $(cat $d/cgroup.procs); do cat /proc/$p/comm 2>/dev/null; done | tr '\n' ' ')
        if echo " $comms" | grep -q ' sleep ' && ! grep -qx "$sup" $d/cgroup.procs; then
            found="$d: $comms"
        fi
    done
    [ -n "$found" ] || sleep 0.1
    i=$((i + 1))
done
# SIGTERM to stockade is forwarded to the jail; the run ends normally.
kill -TERM $sup 2>/dev/null
wait $spid
if [ -n "$found" ]; then
    pass payload_runs_inside_run_cgroup
else
    fail payload_runs_inside_run_cgroup "no run-* cgroup under $P held the payload (have: $(leftovers))"
fi

# --- the jail's cgroup namespace is rooted at its run cgroup: it sees itself
# as / and nothing above (with payload_runs_inside_run_cgroup: CLONE_INTO_CGROUP
# happened before the namespace was made)
out=$(st run --pids-limit 1000 -- /usr/bin/cat /proc/self/cgroup 2>&1)
if [ "$out" = "0::/" ]; then pass jail_sees_only_its_own_cgroup; else fail jail_sees_only_its_own_cgroup "$out"; fi

# --- memory: 64 MiB limit, the payload wants 256 MiB
out=$(st run --report - --memory 64m -- /usr/bin/memhog 256 2>&1)
if status_is "$out" memory_limit && ! echo "$out" | grep -q survived; then
    if limit_has memory '"payload":true' "$out" && [ "$(field signal "$out")" = 9 ]; then
        pass memory_limit
    else
        fail memory_limit "no oom_killed naming the payload, or not signal 9: $out"
    fi
else
    fail memory_limit "$out"
fi

# --- a child OOM-killed under a payload that then exits 0: memory.oom.group
# takes the whole run, the payload too, and the outcome says so (signal 9,
# oom_killed naming the payload): never memory_limit beside an exit of 0
out=$(st run --report - --memory 64m -- /bin/sh -c '/usr/bin/memhog 256; exit 0' 2>&1)
if status_is "$out" memory_limit && [ "$(field signal "$out")" = 9 ] &&
    limit_has memory '"payload":true' "$out"; then
    pass oom_group_takes_the_payload_too
else
    fail oom_group_takes_the_payload_too "$out"
fi

# --- pids: a fork bomb against 32 pids; the VM keeps working afterwards
pids_limit
out=$(st run -- /usr/bin/echo alive 2>&1)
if [ "$out" = alive ]; then pass runs_after_fork_bomb; else fail runs_after_fork_bomb "$out"; fi

# --- cpu: half a CPU, judged by spin's own ratio (see lib.sh)
cpu_quota

# --- wall-clock deadline
out=$(st run --report - --timeout 1s -- /usr/bin/sleep 100 2>&1)
if status_is "$out" timeout; then pass timeout; else fail timeout "$out"; fi

# --- output cap: 64 MiB offered, 1 MiB allowed
bytes=$(st run --report $T/out.json --max-output 1m -- /usr/bin/spew 64 2>/dev/null | wc -c)
rep=$(cat $T/out.json 2>&1)
if status_is "$rep" output_limit && [ "$bytes" -le 2097152 ]; then
    pass output_limit
else
    fail output_limit "stdout $bytes bytes: $rep"
fi

left=$(leftovers)
if [ -z "$left" ]; then pass no_leftover_after_limit_tests; else fail no_leftover_after_limit_tests "$left"; fi

# --- a crashed supervisor's cgroup is removed by the next start
st run --timeout 60s --pids-limit 1000 -- /usr/bin/sleep 30 >/dev/null 2>&1 &
spid=$!
sup=$(await_stockade_of $spid)
stale=
i=0
while [ $i -lt 100 ] && [ -z "$stale" ]; do
    for d in $P/run-$sup-*; do
        [ -d "$d" ] && [ -n "$(cat $d/cgroup.procs)" ] && stale=$d
    done
    [ -n "$stale" ] || sleep 0.1
    i=$((i + 1))
done
[ -n "$sup" ] && kill -KILL $sup
wait $spid 2>/dev/null
st run --pids-limit 1000 -- /usr/bin/true >/dev/null 2>&1
if [ -n "$stale" ] && [ ! -d "$stale" ]; then
    pass stale_cgroup_removed_after_crash
else
    fail stale_cgroup_removed_after_crash "stale=$stale sup=$sup left: $(leftovers)"
fi

# --- many runs leave nothing behind (issue item 9, scaled down for a TCG VM:
# 50 sequential and 20 concurrent, 10 of them hitting the memory limit)
bad=0
i=0
while [ $i -lt 50 ]; do
    st run --memory 64m --pids-limit 64 --cpus 1 -- /usr/bin/true >/dev/null 2>&1 || bad=$((bad + 1))
    i=$((i + 1))
done
left=$(leftovers)
if [ $bad = 0 ] && [ -z "$left" ]; then
    pass batch_sequential_50
else
    fail batch_sequential_50 "$bad failed; left: $left"
fi

i=0
while [ $i -lt 10 ]; do
    st run --report $T/mem.$i.json --memory 32m -- /usr/bin/memhog 128 >/dev/null 2>&1 &
    st run --memory 32m --pids-limit 16 -- /usr/bin/true >/dev/null 2>&1 &
    i=$((i + 1))
done
wait
bad=
i=0
while [ $i -lt 10 ]; do
    status_is "$(cat $T/mem.$i.json 2>&1)" memory_limit || bad="$bad $i:$(cat $T/mem.$i.json 2>&1 | cut -c1-120)"
    i=$((i + 1))
done
left=$(leftovers)
if [ -z "$bad" ] && [ -z "$left" ]; then
    pass batch_concurrent_20_memory
else
    fail batch_concurrent_20_memory "not memory_limit:$bad; left: $left"
fi

# --- the fork server: `stockade serve --warm python=1 --warm-fork`, its
# zygote the VM's python3 (the host's, with its stdlib: xtask/src/vm.rs),
# each run a child forked into a run cgroup of its own. Over TCP on lo
# (busybox wget, the client, speaks no unix socket). Its runs are hits
# (applied.pool, stockade_pool_hits_total, no stockade_pool_misses_total)
# and forked (the fork_run stage, not a member), their own limits below
# the server's included, and those limits hold; nothing is left behind.
# The fork server: src/zygote.rs, src/serve/zygote.py.
if [ -x /usr/bin/python3 ]; then
    started=$(cut -d. -f1 /proc/uptime)
    # The python profile, cold: its interpreter found (src/host/python.rs)
    # and run with its stdlib, a zip, and ctypes (lib-dynload, libffi).
    out=$(st run --profile python -- python3 -c 'import ctypes, json, sys
print(json.dumps(sys.path[1]), ctypes.sizeof(ctypes.c_void_p))' 2>&1)
    if echo "$out" | grep -q '^"/usr/lib/python3[0-9]*\.zip" 8$'; then
        pass python_profile_runs
    else
        fail python_profile_runs "$out"
    fi

    case $who in
    root) port=8701 ;;
    *) port=8702 ;;
    esac
    tok=vmtest-token-of-$who-0123456789
    echo $tok >$T/token
    url=http://127.0.0.1:$port
    # api PATH [JSON]: the answer's body (POST with JSON), or wget's complaint
    api() {
        if [ -n "$2" ]; then
            wget -q -O - --header "Authorization: Bearer $tok" \
                --header 'Content-Type: application/json' --post-data "$2" "$url$1" 2>&1
        else
            wget -q -O - --header "Authorization: Bearer $tok" "$url$1" 2>&1
        fi
    }
    # metric NAME: its value in /metrics, summed over its label sets (0 if absent)
    metric() { api /metrics | grep "^$1[ {]" | awk '{ n += $2 } END { print n + 0 }'; }
    # stage_runs STAGE: runs that went through a warm run's stage
    stage_runs() { metric "stockade_stage_runs_total{stage=\"$1\"}"; }
    hit() { echo "$1" | grep -q '"pool":{"hit":true}'; }
    # brief JSON: what a FAIL line needs of an answer, not its layers (one
    # pattern: busybox grep -o prints the matches of the last -e alone)
    brief() {
        echo "$1" | grep -o -E '"(status|exit_code|signal)":("[a-z_]*"|[0-9a-z]*)|"pool":\{[^}]*\}|"(memory|pids|timeout)":\{[^}]*\}|"(stdout|stderr)":\{"data":"[^"]*"|"error":"[^"]*"' | tr '\n' ' '
    }
    # runs_left: the server's run cgroups (a forked child's is in its
    # zygote's, beside the zygote's leaf), each with whether a process is
    # in it (cgroup.events: its own or below)
    runs_left() { for d in $P/run-* $P/run-*/run-*; do [ -d "$d" ] && echo "${d#$P/}:$(grep -c '^populated 1' $d/cgroup.events)"; done | tr '\n' ' '; }

    timeout -s KILL 600 $S serve --listen 127.0.0.1:$port --token-file $T/token \
        --profiles python --warm python=1 --warm-fork >$T/serve.log 2>&1 &
    serve=$!
    ready=
    i=0
    while [ $i -lt 300 ] && [ -z "$ready" ] && kill -0 $serve 2>/dev/null; do
        wget -q -O - $url/readyz 2>/dev/null | grep -q '"pools_warm":true' && ready=1
        [ -n "$ready" ] || sleep 0.5
        i=$((i + 1))
    done
    sup=$(stockade_of $serve)
    if [ -n "$ready" ] && ! grep -q 'warm-fork: no' $T/serve.log; then
        pass "fork_server_ready (after $((i / 2)) s)"
    else
        fail fork_server_ready "ready=$ready: $(tail -n 20 $T/serve.log)"
    fi

    # A forked run answers: its stdin, pid 2 of its own pid namespace.
    out=$(api /v1/runs '{"profile":"python","argv":["python3","-c","import os, sys\nprint(sys.stdin.read(), os.getpid())"],"stdin":"from-stdin"}')
    if status_is "$out" exited && [ "$(field exit_code "$out")" = 0 ] &&
        echo "$out" | grep -q '"stdout":{"data":"from-stdin 2\\n"' && hit "$out" &&
        [ "$(stage_runs fork_run)" = 1 ]; then
        pass fork_run_answers
    else
        fail fork_run_answers "fork_run=$(stage_runs fork_run): $(brief "$out")"
    fi

    # Its own limits (below the server's 512m and 256): still a hit; the
    # memory hog ends memory_limit at 64 MiB.
    out=$(api /v1/runs '{"profile":"python","argv":["python3","-c","b = []\nwhile True:\n    b.append(bytearray(8 << 20))"],"limits":{"memory":"64m","pids":16}}')
    if status_is "$out" memory_limit && hit "$out" && limit_has memory '"limit":67108864' "$out" &&
        limit_has memory '"hit":true' "$out" && limit_has pids '"limit":16' "$out"; then
        pass fork_memory_limit_own
    else
        fail fork_memory_limit_own "$(brief "$out")"
    fi

    # A fork bomb held by its own pids limit of 16: its init and payload
    # count, so at most 14 forks.
    out=$(api /v1/runs '{"profile":"python","argv":["python3","-c","import os, time\nn = 0\nwhile True:\n    try:\n        if os.fork() == 0:\n            time.sleep(30)\n            os._exit(0)\n        n += 1\n    except OSError:\n        break\nprint(n)\nraise SystemExit(1)"],"limits":{"pids":16}}')
    n=$(echo "$out" | sed -n 's/.*"stdout":{"data":"\([0-9]*\)\\n".*/\1/p')
    if status_is "$out" pids_limit && hit "$out" && limit_has pids '"limit":16' "$out" &&
        limit_has pids '"hit":true' "$out" && [ -n "$n" ] && [ "$n" -le 14 ]; then
        pass "fork_pids_limit_own ($n forks)"
    else
        fail fork_pids_limit_own "forks=$n: $(brief "$out")"
    fi

    out=$(api /v1/runs '{"profile":"python","argv":["python3","-c","import time\ntime.sleep(600)"],"limits":{"timeout":"2s"}}')
    if status_is "$out" timeout && hit "$out"; then pass fork_timeout; else fail fork_timeout "$(brief "$out")"; fi

    # Its cgroup namespace is rooted at its run cgroup: it sees no other.
    out=$(api /v1/runs '{"profile":"python","argv":["python3","-c","print(open(\"/proc/self/cgroup\").read().strip())"]}')
    if status_is "$out" exited && echo "$out" | grep -q '"stdout":{"data":"0::/\\n"' && hit "$out"; then
        pass fork_child_cgroup_namespace_is_its_run
    else
        fail fork_child_cgroup_namespace_is_its_run "$(brief "$out")"
    fi

    # Each child born in its run cgroup (clone3 CLONE_INTO_CGROUP from the
    # zygote), in the zygote's cgroup: none moved (no run went through
    # fork_cgroup_move, which a move takes a host-wide lock for). The
    # zygote's jail in the leaf `zygote` with the template's limits (the
    # server's 512m and 256), its cgroup above with none.
    moved=$(stage_runs fork_cgroup_move)
    born=$(stage_runs fork_zygote)
    z=$(ls -d $P/run-*/zygote 2>/dev/null | head -n 1)
    nested=$(ls -d $P/run-*/run-* 2>/dev/null | wc -l)
    if [ "$moved" = 0 ] && [ "$born" -ge 5 ] && [ "$nested" -ge 1 ] && [ -n "$z" ] &&
        [ "$(cat $z/memory.max)" = 536870912 ] && [ "$(cat $z/pids.max)" = 256 ] &&
        [ "$(cat ${z%/zygote}/memory.max)" = max ] && [ -n "$(cat $z/cgroup.procs)" ] &&
        [ -z "$(cat ${z%/zygote}/cgroup.procs)" ]; then
        pass "fork_children_born_in_their_cgroups ($born forked)"
    else
        fail fork_children_born_in_their_cgroups "moved=$moved born=$born nested=$nested leaf=$z $(cat $z/memory.max $z/pids.max 2>&1 | tr '\n' ' '): $(grep note $T/serve.log)"
    fi

    # Warm, not cold: every run a hit and forked, no miss.
    hits=$(metric 'stockade_pool_hits_total{profile="python"}')
    misses=$(metric stockade_pool_misses_total)
    forked=$(stage_runs fork_run)
    if [ "$hits" = 5 ] && [ "$misses" = 0 ] && [ "$forked" = 5 ]; then
        pass fork_runs_all_warm
    else
        fail fork_runs_all_warm "hits=$hits misses=$misses fork_run=$forked: $(api /metrics | grep -e '^stockade_pool_' -e '^stockade_stage_runs')"
    fi

    # A clone into the run cgroup refused (root: the nest's cgroup.procs
    # taken back from the jail's uid, so the kernel says EACCES to the
    # zygote): the zygote says so once and forks as before, the server
    # moves each child, and the runs still answer warm.
    if [ $who = root ]; then
        chown 0 ${z%/zygote}/cgroup.procs
        a=$(api /v1/runs '{"profile":"python","argv":["python3","-c","print(1)"]}')
        b=$(api /v1/runs '{"profile":"python","argv":["python3","-c","print(2)"]}')
        moved=$(stage_runs fork_cgroup_move)
        if echo "$a" | grep -q '"stdout":{"data":"1\\n"' && echo "$b" | grep -q '"stdout":{"data":"2\\n"' &&
            hit "$b" && [ "$moved" -ge 1 ] &&
            [ "$(grep -c 'the server moves each child instead' $T/serve.log)" = 1 ]; then
            pass "fork_clone_refused_falls_back_to_a_move ($moved moved)"
        else
            fail fork_clone_refused_falls_back_to_a_move "moved=$moved; the log: $(grep -v '^$' $T/serve.log | tail -n 6 | tr '\n' '|') $(brief "$a") $(brief "$b")"
        fi
    fi

    # After the runs: the zygote's cgroup and the child forked ahead's,
    # each holding its process; no run's (they are removed as runs end,
    # the fork bomb's sleepers with theirs).
    i=0
    while [ $i -lt 50 ]; do
        left=$(runs_left)
        n=$(echo "$left" | wc -w)
        [ "$n" -le 2 ] && ! echo "$left" | grep -q ':0 ' && break
        sleep 0.2
        i=$((i + 1))
    done
    if [ "$n" -le 2 ] && ! echo "$left" | grep -q ':0 '; then
        pass "fork_no_run_cgroup_left_after_runs ($left)"
    else
        fail fork_no_run_cgroup_left_after_runs "$left"
    fi

    # SIGTERM: the server ends (0), and with it the zygote; nothing is left.
    kill -TERM $sup 2>/dev/null
    wait $serve
    rc=$?
    left=$(runs_left)
    if [ $rc = 0 ] && [ -z "$left" ] && [ -z "$(pidof python3)" ]; then
        pass fork_no_run_cgroup_left_after_serve
    else
        fail fork_no_run_cgroup_left_after_serve "exit $rc; left: $left; python3: $(pidof python3); $(tail -n 5 $T/serve.log)"
    fi
    echo "VMTEST INFO $who: the python tests took $(($(cut -d. -f1 /proc/uptime) - started)) s"
else
    echo "VMTEST INFO $who: no python3 in the VM (the host had none): the fork server not tested"
fi
