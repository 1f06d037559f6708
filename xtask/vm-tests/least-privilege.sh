#!/bin/sh
# VM lab script: `ppscope doctor --json` as nobody with CAP_BPF and CAP_PERFMON only (what the
# systemd unit grants), tracefs and debugfs made root-only (mode 0700, as many distributions
# ship them): under the auto backend, and under --backend kprobe at the kernel's own
# perf_event_paranoid (Debian's 3) and at 2.
set -eu
. /lab/lib.sh
for d in /sys/kernel/tracing /sys/kernel/debug; do
    if [ -d "$d" ]; then chmod 700 "$d"; fi
done
command -v setpriv >/dev/null || { echo "no setpriv in the guest"; exit 1; }
echo "@@paranoid"
cat /proc/sys/kernel/perf_event_paranoid
# doctor exits 1 when no page_pool hook attaches (the kprobe run at 3): its report is the point.
# Its sentence goes to stderr, kept apart.
echo "@@auto"
as_nobody ppscope doctor --json 2>/tmp/auto.err || true
echo "@@kprobe"
as_nobody ppscope doctor --json --backend kprobe 2>/tmp/kprobe.err || true
echo "@@kprobe-refusal"
cat /tmp/kprobe.err
OLD=$(cat /proc/sys/kernel/perf_event_paranoid)
echo 2 >/proc/sys/kernel/perf_event_paranoid
echo "@@kprobe2"
as_nobody ppscope doctor --json --backend kprobe 2>/tmp/kprobe2.err || true
echo "$OLD" >/proc/sys/kernel/perf_event_paranoid
# What the runs said on stderr, for a failure's message.
echo "@@auto-err"
cat /tmp/auto.err
echo "@@kprobe2-err"
cat /tmp/kprobe2.err
echo "@@end"
