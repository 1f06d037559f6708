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
. /lab/lib.sh
SECS=$1
STEP=$2
BACKEND=$3

ip link set lo up
iperf3_servers ppb ppd
# --detail full: the check is page for page against the kernel's counters (the agent's
# default, light, takes no per-page count on a pool netlink does not list, as veth's).
start_agent --interval 1s --backend "$BACKEND" --detail full
# veth1's pools are born after the agent attached: its counters and the kernel's both start
# at zero.
start_xdp

# The scraper: one GET a second for the whole soak; every failure is counted.
(
    while :; do
        if scrape >/tmp/last.prom; then
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
    echo "rss_kib $(rss_kib "$AGENT")"
    scrape |
        grep -E '^ppscope_page_pool_(alloc|recycle)_total\{.*device="veth1"|^ppscope_(collection_errors_total|collections_total|map_entries|map_capacity) '
    ip netns exec ppd ethtool -S veth1 | grep rx_pp_
    n=$((n + 1))
    elapsed=$((elapsed + STEP))
done
kill "$SCRAPER"
echo "@@scrapes"
echo "ok $(grep -c ok /tmp/scrapes || true)"
echo "fail $(grep -c fail /tmp/scrapes || true)"
stop_agent_section
kill "$XDP"
echo "@@agent-err"; cat /tmp/agent.err
echo "@@end"
