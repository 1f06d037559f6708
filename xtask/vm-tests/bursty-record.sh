#!/bin/sh
# VM lab script: the seed's dynamics over virtio-net. A receiver in ppb that stalls then
# drains (process-context frees: every recycle goes to the ring in bursts) against a sender
# in ppa writing flat out, while `ppscope record` samples every 10 ms; then the recording's
# simulation and advice for vnet1, and the measured fast-path rate at this ring size.
#
# Usage: bursty-record.sh SECONDS STALL_MS DRAIN_MS [RESIZE_RX]
# RESIZE_RX: first `ethtool -G vnet1 rx RESIZE_RX` (virtio-net resizes its vring, at most to
# the size the device was created with, but keeps the page_pool it built at probe: ppscope
# should say so).
set -eu
. /lab/lib.sh
SECS=$1
STALL=$2
DRAIN=$3
RESIZE=${4:-0}
if [ "$RESIZE" -gt 0 ]; then
    ip netns exec ppb ethtool -G vnet1 rx "$RESIZE"
    echo "@@ring"; ip netns exec ppb ethtool -g vnet1
fi

# A recording (every 10 ms) and a live diagnose (every 100 ms: its 10 m window / 6000) side
# by side over the same traffic, each stopped by Ctrl-C when it ends: the VM test wants the
# same verdict and knob from both, not the same size.
ppscope record -o /tmp/lab.rec --duration 10m --interval 10ms 2>/tmp/rec.err &
REC=$!
ppscope diagnose --duration 10m --json --dev vnet1 >/tmp/live.json 2>/tmp/live.err &
LIVE=$!
wait_for /tmp/rec.err "recording page_pools"
wait_for /tmp/live.err "watching page_pools"
ip netns exec ppb /lab/bursty recv 198.18.0.2:5201 "$SECS" "$STALL" "$DRAIN" >/tmp/recv.txt &
RECV=$!
sleep 1
ip netns exec ppa /lab/bursty send 198.18.0.2:5201 "$SECS" >/tmp/send.txt || true
wait "$RECV" || true
kill -INT "$REC" "$LIVE"
wait "$REC"
wait "$LIVE"
echo "@@workload"; cat /tmp/recv.txt /tmp/send.txt
echo "@@samplers"; cat /tmp/rec.err /tmp/live.err
echo "@@live"; cat /tmp/live.json
echo "@@diagnose"; ppscope diagnose --replay /tmp/lab.rec --json --dev vnet1
echo "@@simulate"; ppscope simulate --replay /tmp/lab.rec --dev vnet1 --json
# The report a person attaches to a ticket, from the same recording (the host renders it).
# Its log line ("wrote the HTML report") stays out of the sections; a failure shows it.
ppscope diagnose --replay /tmp/lab.rec --dev vnet1 --interval 250ms --html /tmp/lab.html \
    >/dev/null 2>/tmp/html.err || { cat /tmp/html.err; exit 1; }
echo "@@html"; cat /tmp/lab.html
echo "@@end"
