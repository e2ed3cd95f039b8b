#!/bin/sh
# One Docker test configuration, run inside the test image (busybox sh) by
# xtask/src/docker.rs. Prints `key=value` lines; the xtask asserts on them.
#
#   case.sh [STOCKADE_RUN_FLAG...]
#
# Environment (set with docker run -e):
#   CANARY_TOKEN        content of the canary written to /secret/canary
#   STOCKADE_TEST_ENV   a variable stockade must not pass to the payload
#   WITH_BWRAP          1: also run Debian's bwrap and print what it says
set -u
PY=/usr/bin/python3.11

# Outside stockade: the canary is readable and the port is reachable, so a
# refusal inside the jail is the jail's doing.
printf 'canary-%s\n' "$CANARY_TOKEN" > /secret/canary
chmod 0644 /secret/canary
echo "control_read=$(cat /secret/canary)"
echo "whoami=$(id -u):$(id -g)"
echo "control_seccomp_filters=$(grep '^Seccomp_filters:' /proc/self/status | tr -dc 0-9)"

rm -f /tmp/listener.port /tmp/listener.log
: > /tmp/listener.log
$PY -I /t/listener.py /tmp/listener.port /tmp/listener.log &
LISTENER=$!
i=0
while [ ! -s /tmp/listener.port ] && [ $i -lt 100 ]; do
    sleep 0.05
    i=$((i + 1))
done
PORT=$(cat /tmp/listener.port 2>/dev/null || echo 0)
echo "port=$PORT"
echo "control_$($PY -I /t/payload.py --connect-only "$PORT")"
echo "control_$($PY -I /t/payload.py --unshare-only)"
echo "accepted_before=$(wc -l < /tmp/listener.log)"

# The run under test. stdout is the JSON outcome (one line; the payload's
# stdout is captured inside it); stderr holds only stockade's lines.
/stockade run --report - "$@" --ro-bind /t -- $PY -I /t/payload.py "$PORT" \
    > /tmp/outcome.json 2> /tmp/stockade.err < /dev/null
echo "stockade_rc=$?"
echo "outcome=$(cat /tmp/outcome.json)"
sed 's/^/stockade_stderr=/' /tmp/stockade.err
echo "outside_files=$(ls -A /outside | tr '\n' ' ')"
echo "accepted_after=$(wc -l < /tmp/listener.log)"
kill "$LISTENER" 2>/dev/null

# Fail closed: a run that requires user namespaces.
/stockade run --require userns -- /bin/true > /tmp/req.out 2> /tmp/req.err < /dev/null
echo "require_rc=$?"
sed 's/^/require_stderr=/' /tmp/req.err

if [ "${WITH_BWRAP:-0}" = 1 ]; then
    # The comparison: Debian's bubblewrap, as an evaluator would call it.
    if [ -x /usr/bin/bwrap ]; then
        /usr/bin/bwrap --ro-bind / / --dev /dev --proc /proc --unshare-all \
            --die-with-parent -- /bin/true > /tmp/bwrap.out 2>&1 < /dev/null
        echo "bwrap_rc=$?"
        sed 's/^/bwrap_output=/' /tmp/bwrap.out
        /usr/bin/bwrap --version > /tmp/bwrap.out 2>&1
        sed 's/^/bwrap_version=/' /tmp/bwrap.out
    else
        echo "bwrap_rc=missing"
    fi
fi
echo "case=done"
