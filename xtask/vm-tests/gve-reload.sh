#!/bin/sh
# VM lab script: `ppscope agent` keeps its gve hooks across `rmmod gve` / `insmod gve`: the
# hooks go when the module goes and come back when it returns, with one log line each.
#
# Usage: gve-reload.sh BACKEND
set -eu
. /lab/lib.sh
BACKEND=$1

hooks() { scrape | grep '^ppscope_hook_attached{hook="gve_' || true; }

ip link set lo up
GVE=$(find /usr/lib/modules -name 'gve.ko*' | head -n 1)
start_agent --interval 1s --backend "$BACKEND"
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
stop_agent || true
echo "@@agent-err"; cat /tmp/agent.err
echo "@@end"
