#!/bin/sh
# VM lab script: `ppscope agent` and a live `ppscope diagnose` side by side while iperf3 runs
# over a veth pair with XDP on the receiver; the pool is born after both attached, so both
# see its whole life. Then the agent's /metrics (busybox wget) and the diagnose JSON. The
# agent runs at --detail full (its default is light) to be compared page for page.
#
# Usage: agent-lab.sh BACKEND SECONDS
set -eu
. /lab/lib.sh
BACKEND=$1
SECS=$2

ip link set lo up
iperf3_servers ppd
ppscope diagnose --duration 10m --json --backend "$BACKEND" --dev veth1 >/tmp/diag.json 2>/tmp/diag.err &
DIAG=$!
start_agent --interval 1s --backend "$BACKEND" --detail full
wait_for /tmp/diag.err "watching page_pools"

start_xdp
ip netns exec ppc iperf3 -c 198.18.1.2 -t "$SECS" >/dev/null
/lab/devmem-dontneed 9 >/dev/null
sleep 3 # two collections after the traffic stopped
kill -INT "$DIAG"
wait "$DIAG"
echo "@@metrics"; scrape
echo "@@diag"; cat /tmp/diag.json
stop_agent && echo "@@agent-exit 0" || echo "@@agent-exit $?"
kill "$XDP"
echo "@@end"
