#!/bin/sh
# Sourced by tests.sh and v1.sh: the line writers, outcome readers and the
# tests both boots run. `$who` names the lines: `VMTEST PASS $who/name` or
# `VMTEST FAIL $who/name: detail`.

S=/usr/bin/stockade

pass() { echo "VMTEST PASS $who/$1"; }
fail() { echo "VMTEST FAIL $who/$1: $(echo "$2" | tr '\n' ' ' | cut -c1-600)"; }
# field NAME JSON: the first numeric value of "NAME":N
field() { echo "$2" | sed -n "s/.*\"$1\":\([0-9][0-9]*\).*/\1/p" | head -n 1; }
# limit_has LIMIT TEXT JSON: TEXT inside the outcome's limits.LIMIT
limit_has() { echo "$3" | grep -q "\"$1\":{[^}]*$2"; }
status_is() { echo "$1" | grep -q "\"status\":\"$2\""; }
# Every run gets a hard stop, so one hung run cannot eat the VM's budget.
st() { timeout -s KILL 120 $S "$@"; }

# pids_limit [RUNG]: a fork bomb whose parent stays alive until its forks
# are refused, against 32 pids; with RUNG, that rung held the limit and
# says it was hit.
pids_limit() {
    out=$(st run --report - --pids-limit 32 --timeout 60s -- /usr/bin/forkbomb 2>&1)
    if status_is "$out" pids_limit && echo "$out" | grep -q 'fork refused' &&
        { [ -z "$1" ] || { limit_has pids "\"enforced_by\":\"$1\"" "$out" &&
            limit_has pids '"hit":true' "$out"; }; }; then
        pass pids_limit
    else
        fail pids_limit "$out"
    fi
}

# spun NAME TEXT: the number after NAME= in spin's own line
spun() { echo "$2" | sed -n "s/.*spin .*$1=\([0-9][0-9]*\).*/\1/p" | head -n 1; }

# cpu_quota [RUNG]: half a CPU. spin burns 1 s of its own CPU time and says
# how much wall time that took, both measured inside it, so neither the
# jail's start-up nor a loaded host moves the ratio toward passing. Held, it
# is at most about 0.5; unlimited on an idle machine, about 1: the test asks
# for under 0.7, and for the whole second spun; with RUNG, that rung held it.
cpu_quota() {
    out=$(st run --report - --cpus 0.5 -- /usr/bin/spin 1 2>&1)
    c=$(spun cpu_ms "$out")
    w=$(spun wall_ms "$out")
    if [ -n "$c" ] && [ -n "$w" ] && status_is "$out" exited &&
        { [ -z "$1" ] || limit_has cpus "\"enforced_by\":\"$1\"" "$out"; } &&
        [ "$c" -ge 1000 ] && [ $((c * 10)) -lt $((w * 7)) ]; then
        pass "cpu_quota (spin: cpu $c ms of wall $w ms)"
    else
        fail cpu_quota "cpu=$c wall=$w: $out"
    fi
}
