#!/bin/sh
# VM lab script: a quiet host. `ppscope diagnose --backend kprobe` while vnet0 pings vnet1 now
# and then, so the CPUs are idle between packets and each NAPI poll runs in a softirq on the
# idle task (pid 0), where a kprobe's entry and return must still pair up. The report carries
# each pool's own page_pool stats from the kernel over the same window (`kernel.stats`).
#
# Usage: quiet-lab.sh PINGS
# Prints sections between @@name lines for the host-side test to read.
set -eu
. /lab/lib.sh
PINGS=$1

ppscope diagnose --duration 10m --json --backend kprobe >/tmp/diag.json 2>/tmp/diag.err &
DIAG=$!
wait_for /tmp/diag.err "watching page_pools"

ip netns exec ppa ping -q -c "$PINGS" -i 0.05 198.18.0.2 >/tmp/ping.txt
sleep 1

kill -INT "$DIAG"
wait "$DIAG"

echo "@@ping"; tail -2 /tmp/ping.txt
echo "@@diag-stderr"; cat /tmp/diag.err
echo "@@diag"; cat /tmp/diag.json
echo "@@end"
