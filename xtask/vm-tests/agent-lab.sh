#!/bin/sh
# VM lab script: `ppscope agent` and a live `ppscope diagnose` side by side while iperf3 runs
# over a veth pair with XDP on the receiver; the pool is born after both attached, so both
# see its whole life. Then the agent's /metrics (busybox wget) and the diagnose JSON.
#
# Usage: agent-lab.sh BACKEND SECONDS
set -eu
BACKEND=$1
SECS=$2

wait_for() { # file pattern
    i=0
    until grep -q "$2" "$1" 2>/dev/null; do
        i=$((i + 1)); [ "$i" -lt 900 ] || { cat "$1"; exit 1; }
        sleep 0.1
    done
}

ip link set lo up
ip netns exec ppd iperf3 -s -D
ppscope agent --listen 127.0.0.1:9464 --interval 1s --backend "$BACKEND" 2>/tmp/agent.err &
AGENT=$!
ppscope diagnose --duration 10m --json --backend "$BACKEND" --dev veth1 >/tmp/diag.json 2>/tmp/diag.err &
DIAG=$!
wait_for /tmp/agent.err "agent serving"
wait_for /tmp/diag.err "watching page_pools"

ip netns exec ppd ppscope lab xdp veth1 >/tmp/xdp.log 2>&1 &
XDP=$!
wait_for /tmp/xdp.log attached
ip netns exec ppc iperf3 -c 198.18.1.2 -t "$SECS" >/dev/null
/lab/devmem-dontneed 9 >/dev/null
sleep 3 # two collections after the traffic stopped
kill -INT "$DIAG"
wait "$DIAG"
echo "@@metrics"; busybox wget -q -O - http://127.0.0.1:9464/metrics
echo "@@diag"; cat /tmp/diag.json
kill -TERM "$AGENT"
wait "$AGENT" && echo "@@agent-exit 0" || echo "@@agent-exit $?"
kill "$XDP"
echo "@@end"
