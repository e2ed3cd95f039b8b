#!/bin/sh
# `stockade bwrap` where user namespaces are refused (a plain `docker run`),
# run inside the test image (busybox sh) by xtask/src/docker_bwrap.rs beside
# controls outside stockade. Prints `key=value` lines; outcomes
# (`--stockade-report FILE`) as `<name>_outcome=<json>`.
set -u
S=/stockade
PY=/usr/bin/python3.11
D=/tmp/bwfb-$$
ROOT="--ro-bind /usr /usr --ro-bind /bin /bin --ro-bind-try /lib /lib --ro-bind-try /lib64 /lib64 --dev /dev --proc /proc"
echo "whoami=$(id -u):$(id -g)"
mkdir -p $D/in $D/ro
chmod 0777 $D $D/in $D/ro
echo readable > $D/ro/f
echo canary > $D/secret
chmod 0644 $D/secret

# Control: the real bwrap cannot start here.
if [ -x /usr/bin/bwrap ]; then
    /usr/bin/bwrap $ROOT /bin/true 2> $D/real.err
    echo "real_rc=$?"
    sed 's/^/real_err=/' $D/real.err
fi
# Control: outside stockade the secret is readable.
echo "control_secret=$(cat $D/secret)"

# 1. The run without namespaces: only the binds are reachable.
SCRIPT="cat $D/ro/f; echo w > $D/in/w && echo wrote-in; { echo w > $D/ro/w; } 2>/dev/null || echo ro-refused;
cat $D/secret 2>/dev/null || echo secret-refused; ls /proc/1 >/dev/null 2>&1 || echo proc-refused"
$S bwrap $ROOT --ro-bind $D/ro $D/ro --bind $D/in $D/in --stockade-report $D/run.json \
    -- /bin/sh -c "$SCRIPT" > $D/run.out 2> $D/run.err < /dev/null
echo "run_rc=$?"
sed 's/^/run_out=/' $D/run.out
sed 's/^/run_err=/' $D/run.err
echo "run_outcome=$(cat $D/run.json)"
[ -f $D/in/w ] && echo "host_in_w=yes"
[ -f $D/ro/w ] && echo "host_ro_w=yes"

# 2. --unshare-user makes the namespace mandatory: bwrap's own failure.
$S bwrap --unshare-user $ROOT /bin/true 2> $D/mand.err < /dev/null
echo "mand_rc=$?"
sed 's/^/mand_err=/' $D/mand.err

# 3. A bind elsewhere than its source cannot be built: refused.
$S bwrap $ROOT --bind $D/in /work /bin/true 2> $D/refuse.err < /dev/null
echo "refuse_rc=$?"
sed 's/^/refuse_err=/' $D/refuse.err

# 4. --stockade-memory: a hog ends and the report says memory_limit.
$S bwrap $ROOT --stockade-memory 64m --stockade-report $D/mem.json \
    -- $PY -I -c 'x = []
while len(x) < 1024: x.append(bytearray(1 << 20))
print("survived")' > $D/mem.out 2> /dev/null < /dev/null
echo "mem_rc=$?"
sed 's/^/mem_out=/' $D/mem.out
echo "mem_outcome=$(cat $D/mem.json)"

rm -rf $D
echo "bwrapfb=done"
