#!/bin/sh
# VM lab script: two agents side by side, one on kprobes and one on fentry, under iperf3 over
# virtio-net (vnet0 -> vnet1): first alone, then with another tool's kprobe programs busy in
# tasks on both CPUs (bpftrace on vfs_read and vfs_write while dd copies a byte at a time).
# A NAPI softirq that interrupted bpftrace's kprobe handler finds the CPU's kprobe busy: the
# kernel drops ppscope's kprobe hits and counts them per kprobe. It does not nest kprobe
# programs either: ppscope's, taken while bpftrace's program (or a BPF map system call, the
# agents' own reads) holds the CPU, are skipped and counted. fentry programs are skipped only
# where they would nest in themselves.
#
# Usage: skipped-runs.sh SECONDS
# Needs bpftrace in the guest (the host's, shipped with its libraries by the test).
# Prints sections between @@name lines for the host-side test to read.
set -eu
. /lab/lib.sh
SECS=$1

iperf3_servers ppb
start_agent --backend kprobe --detail full
ppscope agent --listen 127.0.0.1:9465 --backend fentry --detail full 2>/tmp/agent-fentry.err &
FENTRY=$!
wait_for /tmp/agent-fentry.err "agent serving"

ip netns exec ppa iperf3 -c 198.18.0.2 -t "$SECS" >/tmp/iperf-alone.txt
sleep 2
echo "@@kprobe-alone"; scrape | grep -E "^ppscope_(skipped_runs|kprobe_missed)_total" || true
# The kprobe agent's BPF link descriptors (aya's and the copies it reads the counts from).
# ls's errors are dropped: a descriptor that closes while ls lists them (a scrape's or a
# netlink socket) printed "No such file or directory" into the section, which then did not
# read as a number (a CI run, 2026-12-06).
links_held() { ls -l "/proc/$AGENT/fd" 2>/dev/null | grep -c "bpf_link" || true; }
echo "@@kprobe-links-alone"; links_held

bpftrace -e 'BEGIN { printf("bpftrace ready\n"); }
kprobe:vfs_read, kprobe:vfs_write { @calls[comm, cpu] = count(); @bytes = hist(arg2); }' \
    >/tmp/bpftrace.out 2>&1 &
BT=$!
wait_for /tmp/bpftrace.out "bpftrace ready"
DDS=""
for _ in 1 2; do
    dd if=/dev/zero of=/dev/null bs=1 count=1000000000 2>/dev/null &
    DDS="$DDS $!"
done

ip netns exec ppa iperf3 -c 198.18.0.2 -t "$SECS" >/tmp/iperf.txt
# A collection after the traffic.
sleep 2
echo "@@kprobe-metrics"; scrape
echo "@@kprobe-snapshot"; scrape /api/v1/snapshot; echo
echo "@@kprobe-links-end"; links_held
echo "@@fentry-metrics"; busybox wget -q -O - http://127.0.0.1:9465/metrics

for p in $DDS; do kill "$p"; done
kill -INT "$BT"
wait "$BT" || true
kill -TERM "$FENTRY"
wait "$FENTRY" || true
stop_agent || true
echo "@@kprobe-stderr"; cat /tmp/agent.err
echo "@@fentry-stderr"; cat /tmp/agent-fentry.err
echo "@@iperf"; tail -3 /tmp/iperf.txt
echo "@@end"
