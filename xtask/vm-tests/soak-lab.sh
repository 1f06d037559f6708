#!/bin/sh
# VM lab script (reliability soak): `ppscope agent` scraped every second while iperf3 runs
# over virtio-net (vnet0 -> vnet1) and veth+XDP (veth0 -> veth1), in steps of STEP seconds.
# After each step traffic pauses, and the agent's veth1 counters are printed next to the
# kernel's own (`ethtool -S veth1`, rx_pp_*) and the agent's RSS: drift, growth and lost
# scrapes show up step by step. Prints @@sections for xtask/tests/vm_reliability.rs and
# `cargo xtask soak`.
#
# Usage: soak-lab.sh SECONDS STEP BACKEND
set -eu
SECS=$1
STEP=$2
BACKEND=$3

wait_for() { # file pattern
    i=0
    until grep -q "$2" "$1" 2>/dev/null; do
        i=$((i + 1)); [ "$i" -lt 900 ] || { echo "timed out waiting for '$2' in $1"; cat "$1"; exit 1; }
        sleep 0.1
    done
}

ip link set lo up
ip netns exec ppb iperf3 -s -D
ip netns exec ppd iperf3 -s -D
ppscope agent --listen 127.0.0.1:9464 --interval 1s --backend "$BACKEND" 2>/tmp/agent.err &
AGENT=$!
wait_for /tmp/agent.err "agent serving"
# veth1's pools are born after the agent attached: its counters and the kernel's both start
# at zero.
ip netns exec ppd ppscope lab xdp veth1 >/tmp/xdp.log 2>&1 &
XDP=$!
wait_for /tmp/xdp.log attached

# The scraper: one GET a second for the whole soak; every failure is counted.
(
    while :; do
        # (No -T: Debian busybox-static's wget segfaults on it.)
        if busybox wget -q -O /tmp/last.prom http://127.0.0.1:9464/metrics; then
            echo ok >>/tmp/scrapes
        else
            echo fail >>/tmp/scrapes
        fi
        sleep 1
    done
) &
SCRAPER=$!

n=0
elapsed=0
while [ "$elapsed" -lt "$SECS" ]; do
    run=$((STEP - 3))
    ip netns exec ppa iperf3 -c 198.18.0.2 -t "$run" >/dev/null 2>&1 &
    V=$!
    ip netns exec ppc iperf3 -c 198.18.1.2 -t "$run" >/dev/null 2>&1 || true
    wait "$V" || true
    sleep 3 # traffic stopped; at least two collections since
    echo "@@check $n"
    echo "elapsed $((elapsed + STEP))"
    echo "rss_kib $(awk '/VmRSS/ {print $2}' "/proc/$AGENT/status")"
    busybox wget -q -O - http://127.0.0.1:9464/metrics |
        grep -E '^ppscope_page_pool_(alloc|recycle)_total\{.*device="veth1"|^ppscope_(collection_errors_total|collections_total|map_entries|map_capacity) '
    ip netns exec ppd ethtool -S veth1 | grep rx_pp_
    n=$((n + 1))
    elapsed=$((elapsed + STEP))
done
kill "$SCRAPER"
echo "@@scrapes"
echo "ok $(grep -c ok /tmp/scrapes || true)"
echo "fail $(grep -c fail /tmp/scrapes || true)"
kill -TERM "$AGENT"
if wait "$AGENT"; then echo "@@agent-exit"; echo 0; else echo "@@agent-exit"; echo $?; fi
kill "$XDP"
echo "@@agent-err"; cat /tmp/agent.err
echo "@@end"
