#!/bin/sh
# VM lab script: `ppscope diagnose` while iperf3 runs over virtio-net (vnet0 -> vnet1) and
# over a veth pair with XDP on the receiver (veth0 -> veth1), then the kernel's own page_pool
# counters for veth1, read while XDP is still attached and traffic has stopped (detaching XDP
# destroys veth's pools and their stats).
#
# Usage: diagnose-lab.sh [auto|kprobe|tracepoint] [iperf seconds]
# Prints sections between @@name lines for the host-side test to read.
set -eu
BACKEND=${1:-auto}
SECS=${2:-4}

wait_for() { # file pattern
    i=0
    until grep -q "$2" "$1" 2>/dev/null; do
        i=$((i + 1))
        if [ "$i" -gt 900 ]; then
            echo "timed out waiting for '$2' in $1:"; cat "$1"; exit 1
        fi
        sleep 0.1
    done
}

ip netns exec ppb iperf3 -s -D
ip netns exec ppd iperf3 -s -D

ppscope diagnose --duration 10m --json --backend "$BACKEND" >/tmp/diag.json 2>/tmp/diag.err &
DIAG=$!
wait_for /tmp/diag.err "watching page_pools"

# The veth pools are born after ppscope attached: it sees their whole life.
ip netns exec ppd ppscope lab xdp veth1 >/tmp/xdp.log 2>&1 &
XDP=$!
wait_for /tmp/xdp.log attached

ip netns exec ppa iperf3 -c 198.18.0.2 -t "$SECS" >/tmp/iperf-virtio.txt
ip netns exec ppc iperf3 -c 198.18.1.2 -t "$SECS" >/tmp/iperf-veth.txt
sleep 1
ip netns exec ppd ethtool -S veth1 >/tmp/ethtool-veth1.txt

kill -INT "$DIAG"
wait "$DIAG"
kill "$XDP"

echo "@@iperf-virtio"; tail -4 /tmp/iperf-virtio.txt
echo "@@iperf-veth"; tail -4 /tmp/iperf-veth.txt
echo "@@diag-stderr"; cat /tmp/diag.err
echo "@@diag"; cat /tmp/diag.json
echo "@@ethtool-veth1"; cat /tmp/ethtool-veth1.txt
echo "@@end"
