#!/bin/sh
# VM lab script: a quiet host. `ppscope diagnose --backend kprobe` and `--detail light` (whose
# figures for the virtio pools are the kernel's own page_pool stats) side by side while
# vnet0 pings vnet1 now and then, so the CPUs are idle between packets and each NAPI poll
# runs in a softirq on the idle task (pid 0), where a kprobe's entry and return must still
# pair up.
#
# Usage: quiet-lab.sh PINGS
# Prints sections between @@name lines for the host-side test to read.
set -eu
. /lab/lib.sh
PINGS=$1

PIDS=""
for b in kprobe light; do
    case "$b" in
    light) how="--detail light" ;;
    *) how="--backend $b" ;;
    esac
    # shellcheck disable=SC2086 # $how is two words on purpose
    ppscope diagnose --duration 10m --json $how >"/tmp/diag-$b.json" 2>"/tmp/diag-$b.err" &
    PIDS="$PIDS $!"
done
for b in kprobe light; do
    wait_for "/tmp/diag-$b.err" "watching page_pools"
done

ip netns exec ppa ping -q -c "$PINGS" -i 0.05 198.18.0.2 >/tmp/ping.txt
sleep 1

for p in $PIDS; do kill -INT "$p"; done
for p in $PIDS; do wait "$p"; done

echo "@@ping"; tail -2 /tmp/ping.txt
for b in kprobe light; do
    echo "@@diag-stderr-$b"; cat "/tmp/diag-$b.err"
    echo "@@diag-$b"; cat "/tmp/diag-$b.json"
done
echo "@@end"
