#!/bin/sh
# VM lab script: doctor's view of the devmem and gve hooks (gve.ko is loaded without
# hardware, so its functions can be probed though they never run), then diagnose while
# /lab/devmem-dontneed calls setsockopt(SO_DEVMEM_DONTNEED) N times on a plain TCP socket.
#
# Usage: devmem-gve.sh N [BACKEND]
set -eu
. /lab/lib.sh
N=$1
BACKEND=${2:-auto}

echo "@@doctor"
ppscope doctor --json --backend "$BACKEND"

ppscope diagnose --duration 10m --json --backend "$BACKEND" >/tmp/diag.json 2>/tmp/diag.err &
DIAG=$!
wait_for /tmp/diag.err "watching page_pools"
echo "@@dontneed"
/lab/devmem-dontneed "$N"
kill -INT "$DIAG"
wait "$DIAG"
echo "@@diag"; cat /tmp/diag.json
echo "@@end"
