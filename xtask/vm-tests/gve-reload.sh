#!/bin/sh
# VM lab script: `ppscope agent` keeps its gve hooks across `rmmod gve` / `insmod gve`: the
# hooks go when the module goes and come back when it returns, with one log line each.
#
# Usage: gve-reload.sh BACKEND
set -eu
BACKEND=$1

wait_for() { # file pattern
    i=0
    until grep -q "$2" "$1" 2>/dev/null; do
        i=$((i + 1)); [ "$i" -lt 900 ] || { cat "$1"; exit 1; }
        sleep 0.1
    done
}
hooks() {
    busybox wget -q -O - http://127.0.0.1:9464/metrics | grep '^ppscope_hook_attached{hook="gve_' || true
}

ip link set lo up
GVE=$(find /usr/lib/modules -name 'gve.ko*' | head -n 1)
ppscope agent --listen 127.0.0.1:9464 --interval 1s --backend "$BACKEND" 2>/tmp/agent.err &
AGENT=$!
wait_for /tmp/agent.err "agent serving"
sleep 2
echo "@@loaded"; hooks
rmmod gve
wait_for /tmp/agent.err "gve unloaded"
sleep 2
echo "@@unloaded"; hooks
insmod "$GVE"
wait_for /tmp/agent.err "gve loaded"
sleep 2
echo "@@reloaded"; hooks
rmmod gve
insmod "$GVE"
sleep 3
echo "@@twice"; hooks
kill -TERM "$AGENT"
wait "$AGENT" || true
echo "@@agent-err"; cat /tmp/agent.err
echo "@@end"
