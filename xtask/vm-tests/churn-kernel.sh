#!/bin/sh
# VM lab script (reliability): kernel-side changes while `ppscope agent` is attached.
#   1. pool churn: veth1 down/up CYCLES times with XDP attached and UDP flowing (each down
#      destroys its page_pool, each up makes a new one);
#   2. link down/up of the virtio NIC vnet1 (its pool outlives it: virtio builds it at probe);
#   3. vnet1 renamed to vren1;
#   4. netns ppd deleted with veth1 and its pools inside.
# gve rmmod/insmod has its own script (gve-reload.sh). Prints @@sections for
# xtask/tests/vm_reliability.rs.
#
# Usage: churn-kernel.sh BACKEND CYCLES
set -eu
. /lab/lib.sh
BACKEND=$1
CYCLES=$2
GRACE=3
echo "@@grace"; echo "$GRACE"

# Sum of a metric's samples for one device (0 when none).
total() { scrape | grep "^$1{" | grep "device=\"$2\"" | awk '{s += $NF} END {print s + 0}'; }
# Pools with samples for one device in one scrape's text.
pools_in() {
    printf "%s\n" "$1" | grep "^ppscope_page_pool_pages_allocated_total{" | grep -c "device=\"$2\"" || true
}
# Pools with samples for one device ("unknown" when the agent did not answer: not 0).
series() {
    _metrics=$(scrape) || { echo unknown; return 0; }
    pools_in "$_metrics" "$1"
}
# A device's series in one scrape's text, histograms left out: what keeps its pools listed.
listing_in() {
    printf "%s\n" "$1" | grep "device=\"$2\"" | grep -v -e _bucket -e _sum -e _count || true
}
self() { scrape | grep -E "^ppscope_(map_entries|map_capacity|collection_errors_total|collections_total|pools) "; }

ip link set lo up
iperf3_servers ppb ppd
start_agent --interval 500ms --grace ${GRACE}s --backend "$BACKEND"
start_xdp
sleep 2

# 1. Churn.
ip netns exec ppc iperf3 -u -b 50M -t 100000 -c 198.18.1.2 >/dev/null 2>&1 &
FLOOD=$!
# The baseline once the agent's working set is there: its one-minute advice window (61
# samples, 30 s at 500 ms) full and its allocator warm. The agent gives its start-up memory
# back, so a baseline taken earlier would count the window filling as growth.
sleep 31
echo "@@rss-before"; rss_kib "$AGENT"
START=$(date +%s)
i=0
while [ "$i" -lt "$CYCLES" ]; do
    ip -n ppd link set veth1 down
    ip -n ppd link set veth1 up
    sleep 0.05
    i=$((i + 1))
done
END=$(date +%s)
sleep 1
echo "@@churn"; echo "cycles $CYCLES seconds $((END - START))"
echo "@@rss-churned"; rss_kib "$AGENT"
echo "@@self-churned"; self
echo "@@veth1-pages"; total ppscope_page_pool_pages_allocated_total veth1
kill "$FLOOD" 2>/dev/null || true

# 2. vnet1 down and up: the pool keeps counting afterwards.
ip netns exec ppa iperf3 -c 198.18.0.2 -t 2 >/dev/null
sleep 1
echo "@@vnet1-before"; total ppscope_page_pool_alloc_total vnet1
ip -n ppb link set vnet1 down
sleep 1
ip -n ppb link set vnet1 up
sleep 2
ip netns exec ppa iperf3 -c 198.18.0.2 -t 2 >/dev/null
sleep 1
echo "@@vnet1-after"; total ppscope_page_pool_alloc_total vnet1

# 3. Renamed: new traffic shows under the new name, after the grace none under the old one.
ip -n ppb link set vnet1 down
ip -n ppb link set vnet1 name vren1
ip -n ppb link set vren1 up
sleep 2
ip netns exec ppa iperf3 -c 198.18.0.2 -t 3 >/dev/null
# Right after the traffic (within the grace period, while the pool is still listed as moving)
# it must be under the new name; after the grace, nothing under the old one.
sleep 1
echo "@@renamed-new"; series vren1
echo "@@renamed-pages-new"; total ppscope_page_pool_alloc_total vren1
sleep $((GRACE + 2))
echo "@@renamed-old"; series vnet1

# 4. netns ppd deleted with veth1 inside. A namespace lives while any process is in it, so its
#    processes go first: the XDP holder (its exit detaches XDP, and veth1's pool is destroyed)
#    and the iperf3 server; then its name, and the namespace goes with veth1.
#    veth1 goes down and up first, for a new pool: traffic through a pool that already holds
#    its pages may cycle them through its alloc cache (TCP frees them in softirq on the NAPI's
#    CPU), which --detail light does not see, and a pool that does not move for the grace
#    period leaves the metrics (a CI run saw no series before); a new pool's first pages come
#    from the slow path, which light counts, at the traffic's start: the look is taken while
#    the traffic runs, well within the grace.
ip -n ppd link set veth1 down
ip -n ppd link set veth1 up
sleep 1
ip netns exec ppc iperf3 -c 198.18.1.2 -t 3 >/dev/null &
CLIENT=$!
sleep 2
echo "@@ns-before"; series veth1
wait "$CLIENT"
for pid in $(ip netns pids ppd); do kill "$pid" 2>/dev/null || true; done
wait "$XDP" 2>/dev/null || true
ip netns del ppd
# The kernel destroys a pool only once its last pages have come home, and retries every
# second until then (each retry is a teardown attempt: the pool rightly stays listed, with its
# inflight pages), so no fixed wait is right: wait until it has left (at most a minute), keep
# what the agent showed of it while listed, then check it stays gone. Seen gone after 5 s.
GONE=none
LISTED=""
T0=$(date +%s)
# Both figures come from one scrape: a pool that leaves between two scrapes would otherwise be
# counted as listed with a detail that no longer holds it (a CI run saw that).
while [ $(($(date +%s) - T0)) -lt 60 ]; do
    sleep 1
    METRICS=$(scrape) || { LISTED="(the agent did not answer at $(($(date +%s) - T0)) s)"; continue; }
    if [ "$(pools_in "$METRICS" veth1)" = 0 ]; then GONE=$(($(date +%s) - T0)); break; fi
    LISTED=$(listing_in "$METRICS" veth1)
done
echo "@@ns-gone-after"; echo "$GONE"
echo "@@ns-listed"; echo "$LISTED"
sleep $((GRACE * 2 + 1))
echo "@@ns-later"; series veth1

echo "@@healthz"; scrape /healthz || echo down
echo "@@self-end"; self
echo "@@rss-end"; rss_kib "$AGENT"
stop_agent_section
echo "@@agent-err"; cat /tmp/agent.err
echo "@@end"
