# Helpers shared by the VM lab scripts (xtask/vm-tests/*.sh). Every lab run ships this file
# as /lab/lib.sh (xtask/src/vm/initramfs.rs); a script sources it right after `set -eu`:
#     . /lab/lib.sh
# POSIX sh for the guest's dash, with busybox applets and the lab topology /init built (see
# xtask/vm/init.sh). Helper-local variables start with `_`, so a script's own loop counters
# survive a call.

# Where the lab's `ppscope agent` listens: what start_agent, scrape and `top --connect` use.
AGENT_ADDR=127.0.0.1:9464

# as_nobody COMMAND...: COMMAND as nobody with CAP_BPF and CAP_PERFMON only, what the systemd
# unit grants. setpriv is one of the lab's optional tools: `command -v setpriv` first.
as_nobody() {
    setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all,+bpf,+perfmon \
        --ambient-caps=-all,+bpf,+perfmon --bounding-set=-all,+bpf,+perfmon "$@"
}

# poll_until TENTHS COMMAND...: 0 once COMMAND succeeds; 1 after TENTHS tenths of a second.
poll_until() {
    _limit=$1
    shift
    _tries=0
    until "$@"; do
        _tries=$((_tries + 1))
        [ "$_tries" -lt "$_limit" ] || return 1
        sleep 0.1
    done
}

# poll_for FILE PATTERN [TENTHS]: background tools say "ready" with a log line, and the lab
# must not start traffic before. 0 once PATTERN shows in FILE; 1 after TENTHS tenths of a
# second (default 900: attaching takes tens of seconds under TCG).
poll_for() {
    poll_until "${3:-900}" grep -q "$2" "$1" 2>/dev/null
}

# wait_for FILE PATTERN: poll_for, or end the script saying what never came and showing the
# file (the tool's own error is usually in it), so a failed run explains itself.
wait_for() {
    poll_for "$1" "$2" && return 0
    echo "timed out waiting for '$2' in $1:"
    cat "$1"
    exit 1
}

# iperf3_servers NETNS...: an iperf3 server (daemon) in each namespace named, for the
# client runs: ppb is vnet1's side (198.18.0.2), ppd veth1's (198.18.1.2).
iperf3_servers() {
    for _ns in "$@"; do
        ip netns exec "$_ns" iperf3 -s -D
    done
}

# start_xdp: veth builds page_pools only while an XDP program is attached, so the lab's veth
# scenarios need one on veth1 (in ppd). Runs `ppscope lab xdp` in the background (pid in XDP,
# log in /tmp/xdp.log) and waits until it has attached; `kill "$XDP"` detaches it.
start_xdp() {
    ip netns exec ppd ppscope lab xdp veth1 >/tmp/xdp.log 2>&1 &
    XDP=$!
    wait_for /tmp/xdp.log attached
}

# start_agent [AGENT_ARGS...]: `ppscope agent` on AGENT_ADDR in the background (pid in AGENT,
# log in /tmp/agent.err), waiting until it serves and has collected once, so the first scrape
# finds figures: /metrics answers 503 until the first collection, which under TCG can come
# seconds after "agent serving". At most 60 s.
start_agent() {
    ppscope agent --listen "$AGENT_ADDR" "$@" 2>/tmp/agent.err &
    AGENT=$!
    wait_for /tmp/agent.err "agent serving"
    poll_until 600 agent_answers || {
        echo "the agent never answered /metrics:"
        cat /tmp/agent.err
        exit 1
    }
}

# agent_answers: whether /metrics answers with figures (not 503), output dropped.
agent_answers() {
    scrape >/dev/null 2>&1
}

# stop_agent: SIGTERM, as systemd stops it, and wait; returns the agent's exit status, which
# the tests check (a clean shutdown is 0).
stop_agent() {
    kill -TERM "$AGENT"
    wait "$AGENT"
}

# stop_agent_section: stop_agent, then its exit status as an `@@agent-exit` section (the
# status on the line after), as xtask's vm_reliability tests and soak report read it.
stop_agent_section() {
    if stop_agent; then _status=0; else _status=$?; fi
    echo "@@agent-exit"
    echo "$_status"
}

# scrape [PATH]: GET PATH (default /metrics) from the agent, body on stdout. The guest has
# no curl: busybox wget. (No -T: Debian busybox-static's wget segfaults on it.)
scrape() {
    busybox wget -q -O - "http://$AGENT_ADDR${1:-/metrics}"
}

# rss_kib PID: a process's resident memory (VmRSS, KiB), for the agent's growth checks.
rss_kib() {
    awk '/VmRSS/ {print $2}' "/proc/$1/status"
}
