#!/bin/sh
# VM lab script: `ppscope diagnose` (one instance per backend given, side by side, so they
# see the same packets) while iperf3 runs over virtio-net (vnet0 -> vnet1) and over a veth
# pair with XDP on the receiver (veth0 -> veth1); then the kernel's own counters for veth1,
# read while XDP is still attached and traffic has stopped (detaching XDP destroys veth's
# pools and their stats).
#
# Usage: diagnose-lab.sh SECONDS RUN...   (RUN: a backend, auto, fentry, kprobe or tracepoint;
#                                          or light: --detail light on the auto backends)
# Prints sections between @@name lines for the host-side test to read.
set -eu
. /lab/lib.sh
SECS=$1
shift

iperf3_servers ppb ppd

PIDS=""
for b in "$@"; do
    case "$b" in
    light) how="--detail light" ;;
    *) how="--backend $b" ;;
    esac
    # shellcheck disable=SC2086 # $how is two words on purpose
    ppscope diagnose --duration 10m --json $how >"/tmp/diag-$b.json" 2>"/tmp/diag-$b.err" &
    PIDS="$PIDS $!"
done
for b in "$@"; do
    wait_for "/tmp/diag-$b.err" "watching page_pools"
done

# The veth pools are born after ppscope attached: it sees their whole life.
start_xdp

ip netns exec ppa iperf3 -c 198.18.0.2 -t "$SECS" >/tmp/iperf-virtio.txt
ip netns exec ppc iperf3 -c 198.18.1.2 -t "$SECS" >/tmp/iperf-veth.txt
sleep 1
ip netns exec ppd ethtool -S veth1 >/tmp/ethtool-veth1.txt

for p in $PIDS; do kill -INT "$p"; done
for p in $PIDS; do wait "$p"; done
kill "$XDP"

echo "@@iperf-virtio"; tail -4 /tmp/iperf-virtio.txt
echo "@@iperf-veth"; tail -4 /tmp/iperf-veth.txt
for b in "$@"; do
    echo "@@diag-stderr-$b"; cat "/tmp/diag-$b.err"
    echo "@@diag-$b"; cat "/tmp/diag-$b.json"
done
echo "@@ethtool-veth1"; cat /tmp/ethtool-veth1.txt
# The kernel's page_pool stats as `nobody` with only the capabilities probing needs (no
# CAP_NET_ADMIN). In this namespace: moving vnet1 into ppb unregistered it here, and the
# kernel parks the pools of an unregistered netdev on this namespace's loopback.
echo "@@doctor-nobody"
if command -v setpriv >/dev/null; then
    as_nobody ppscope doctor --json 2>&1 || true
else
    echo "no setpriv in the lab"
fi
# Netlink answers per namespace: the pool parked here is not ppb's.
echo "@@doctor-ppb"
ip netns exec ppb ppscope doctor --json 2>&1 || true
echo "@@end"
