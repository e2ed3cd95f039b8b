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

# cpu_quota [RUNG]: half a CPU for 2 s of wall time uses about 1 s of CPU.
# A ratio, not a timing: used/wall < 0.8 (unlimited it is ~1.0), and > 0.2
# so a payload that did not spin cannot pass; with RUNG, that rung held it.
cpu_quota() {
    out=$(st run --report - --cpus 0.5 -- /usr/bin/spin 2 2>&1)
    wall=$(field wall_time_ms "$out")
    u=$(field user_time_ms "$out")
    s=$(field system_time_ms "$out")
    if [ -n "$wall" ] && [ -n "$u" ] && [ -n "$s" ] && status_is "$out" exited &&
        { [ -z "$1" ] || limit_has cpus "\"enforced_by\":\"$1\"" "$out"; } &&
        [ $(((u + s) * 10)) -lt $((wall * 8)) ] && [ $(((u + s) * 10)) -gt $((wall * 2)) ]; then
        pass "cpu_quota (cpu $((u + s)) ms of wall $wall ms)"
    else
        fail cpu_quota "cpu=$u+$s wall=$wall: $out"
    fi
}
