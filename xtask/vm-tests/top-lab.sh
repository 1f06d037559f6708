#!/bin/sh
# VM lab script: `ppscope top` as a person would start it, one frame at a time (`--once`):
# live on this kernel while iperf3 runs over virtio-net (vnet0 -> vnet1), then through
# `--connect` reading a `ppscope agent` in the same guest.
#
# Usage: top-lab.sh SECONDS
# Prints sections between @@name lines for the host-side test to read.
set -eu
. /lab/lib.sh
SECS=$1

ip link set lo up
iperf3_servers ppb
start_agent --interval 1s
# Live: traffic starts once top has its baseline (attaching takes seconds under TCG).
ppscope top --once --interval "$((SECS + 3))s" --size 120x40 >/tmp/top.out 2>/tmp/top.err &
TOP=$!
wait_for /tmp/top.err "one frame of"
ip netns exec ppa iperf3 -c 198.18.0.2 -t "$SECS" >/dev/null
wait "$TOP" || { cat /tmp/top.err; exit 1; }
echo "@@live"; cat /tmp/top.out

# Through the agent: its last interval while traffic flows.
ip netns exec ppa iperf3 -c 198.18.0.2 -t "$SECS" >/dev/null &
IPERF=$!
sleep 3
echo "@@connect"
ppscope top --once --connect "http://$AGENT_ADDR" --interval 1s --size 100x30 2>/tmp/top-connect.err \
    || { cat /tmp/top-connect.err; exit 1; }
wait "$IPERF"
stop_agent || true
echo "@@end"
