#!/bin/sh
# VM lab script for `cargo xtask bench`: what ppscope costs the workload, next to bpftrace and
# libbpf-tools funclatency, on the lab's emulated (TCG) CPUs. Prints lines the host parses:
#   floor-begin BACKEND / bench-probe's lines / floor-end BACKEND (FLOOR_ROUNDS windows each)
#   result WORKLOAD CONFIG ROUND MBIT_S CPU_PERCENT
#   tool-error CONFIG TEXT
#   startup TOOL MS
#   agent-vm still|moving|light-moving ROUND POOLS_MADE POOLS_PER_INTERVAL CPU_TICKS SECONDS RSS_KIB
#
# Usage: bench-vm.sh ROUNDS SECONDS PHASES CONFIGS [STARTUPS [FLOOR_ROUNDS [OURS_COPIES
#                    [AGENT_POOLS [AGENT_SECS]]]]]
#   PHASES: comma list of floor, workload, startup, agent
#   CONFIGS: comma list of none, fentry, kprobe, light, bpftrace, funclatency
#   STARTUPS: start-up measurements per tool (default 3; `cargo xtask bench` asks for 5)
#   FLOOR_ROUNDS: rounds of the floor phase (default ROUNDS; `cargo xtask bench` asks for
#   twice ROUNDS, ROUNDS with --quick)
#   OURS_COPIES: ppscope instances in each floor window (default 1; `cargo xtask bench` asks
#   for as many as the floor's copies): each loads its own programs, and the host takes their
#   mean, as it does the floor's
#   AGENT_POOLS, AGENT_SECS: the agent phase's veth pools (default 1000) and the seconds of
#   each of its windows (default 30)
# Needs /lab/bench-probe, /lab/bursty, /lab/ppscope.o (the eBPF object); bpftrace and
# funclatency where the configs name them.
set -u
. /lab/lib.sh
ROUNDS=$1
SECS=$2
PHASES=$3
CONFIGS=$(echo "$4" | tr , ' ')
STARTUPS=${5:-3}
FLOOR_ROUNDS=${6:-$ROUNDS}
OURS_COPIES=${7:-1}
AGENT_POOLS=${8:-1000}
AGENT_SECS=${9:-30}
OBJ=/lab/ppscope.o
BT_SCRIPT=/tmp/pp.bt
# No workload run may take more than this (a stuck one is a "nan" row, not a lost run). The
# tools `timeout` runs are named by path: busybox runs its own applets first (its `ip` has no
# netns).
LIMIT=$((SECS * 5 + 60))

has_phase() { case ",$PHASES," in *",$1,"*) return 0 ;; esac; return 1; }

# bpftrace doing ppscope's hot work: per-pool counts of allocations, fragment allocations,
# recycles and refills, and a slow-path latency histogram per pool.
cat >$BT_SCRIPT <<'BT'
kprobe:page_pool_alloc_netmems { @alloc[arg0] = count(); }
kprobe:page_pool_alloc_frag_netmem { @frag[arg0] = count(); }
kprobe:page_pool_put_unrefed_netmem { @put[arg0] = count(); }
kprobe:page_pool_refill_alloc_cache { @refill[arg0] = count(); }
kprobe:__page_pool_alloc_netmems_slow { @start[tid] = nsecs; @pool[tid] = arg0; }
kretprobe:__page_pool_alloc_netmems_slow /@start[tid]/ {
    @slow[@pool[tid]] = hist(nsecs - @start[tid]);
    delete(@start[tid]); delete(@pool[tid]);
}
BEGIN { printf("bpftrace-ready\n"); }
BT

iperf3_servers ppb ppd
# veth1 needs XDP for its page_pools; it stays for every configuration alike. Not
# start_xdp: a failure here is a tool-error line for the host's report, not a bare exit.
ip netns exec ppd ppscope lab xdp veth1 >/tmp/xdp.log 2>&1 &
XDP=$!
poll_for /tmp/xdp.log attached 1200 || { echo "tool-error xdp $(cat /tmp/xdp.log)"; exit 1; }

TOOL=""
CURRENT=""
FAILED=" "
# ppscope as a configuration runs it: `diagnose` for an hour, stopped when done. $! is its pid.
start_ppscope() { # config log
    case $1 in
        fentry) set -- "$2" --backend auto ;;
        kprobe) set -- "$2" --backend kprobe ;;
        light) set -- "$2" --detail light ;;
        *) echo "tool-error $1 not a ppscope config" >&2; return 1 ;;
    esac
    _log=$1
    shift
    ppscope diagnose --duration 1h --json "$@" >/dev/null 2>"$_log" &
}
start_tool() { # config -> 0 when running (or nothing to run)
    TOOL=""
    CURRENT=$1
    # A tool that could not start once is not retried every round (each try costs minutes).
    case "$FAILED" in *" $1 "*) return 1 ;; esac
    rm -f /tmp/tool.log
    case $1 in
        none) return 0 ;;
        fentry|kprobe|light) start_ppscope "$1" /tmp/tool.log
            TOOL=$!; pat="watching page_pools" ;;
        bpftrace) bpftrace $BT_SCRIPT >/tmp/tool.log 2>&1 &
            TOOL=$!; pat="bpftrace-ready" ;;
        funclatency) funclatency -d 3600 __page_pool_alloc_netmems_slow >/tmp/tool.log 2>&1 &
            TOOL=$!
            # Its "Tracing…" line sits in a stdio buffer until exit: wait for its programs
            # to be attached instead, a BPF link seen in its own fds (a program fd alone may
            # be libbpf's feature probe; the guest may have no bpftool: the lab copies it only
            # where the host has it).
            i=0
            until grep -qs '^link_type' /proc/"$TOOL"/fdinfo/*; do
                i=$((i + 1))
                if [ "$i" -gt 600 ] || ! kill -0 "$TOOL" 2>/dev/null; then
                    echo "tool-error funclatency $(tr '\n' ' ' </tmp/tool.log | cut -c1-300)"
                    FAILED="$FAILED$1 "
                    stop_pid "$TOOL" "$1"; TOOL=""
                    return 1
                fi
                sleep 0.1
            done
            sleep 1
            return 0 ;;
        *) echo "tool-error $1 unknown config"; return 1 ;;
    esac
    if ! poll_for /tmp/tool.log "$pat" 1200 || ! kill -0 "$TOOL" 2>/dev/null; then
        echo "tool-error $1 $(tr '\n' ' ' </tmp/tool.log | cut -c1-300)"
        FAILED="$FAILED$1 "
        stop_pid "$TOOL" "$1"
        TOOL=""
        return 1
    fi
}
# SIGINT, then SIGKILL if the tool is still there after 30 s: an unbounded `wait` on a tool
# that missed its SIGINT held a whole run until the lab's timeout (a full run lost at
# funclatency's second round, 2026-12-02). A background job of a shell without job control
# starts with SIGINT ignored, until the tool sets its own handler.
stop_pid() { # pid config
    kill -INT "$1" 2>/dev/null
    i=0
    # kill -0 also succeeds on a zombie: the state says whether it has exited.
    while grep -qs '^State:[[:space:]]*[^Z]' /proc/"$1"/status; do
        i=$((i + 1))
        if [ "$i" -gt 300 ]; then
            echo "tool-error $2 did not exit within 30 s of SIGINT: killed"
            kill -KILL "$1" 2>/dev/null
            break
        fi
        sleep 0.1
    done
    wait "$1" 2>/dev/null
}
stop_tool() {
    [ -n "$TOOL" ] || return 0
    stop_pid "$TOOL" "$CURRENT"
    TOOL=""
}

cpu_ticks() { # busy total
    awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t }' /proc/stat
}
ncpu=$(grep -c '^processor' /proc/cpuinfo)

# One workload run: prints "MBIT_S CPU_PERCENT" (CPU in % of one core, all CPUs summed).
run_workload() {
    set -- "$1" $(cpu_ticks)
    w=$1; b0=$2; t0=$3
    case $w in
        virtio) mbps=$(timeout "$LIMIT" /usr/sbin/ip netns exec ppa iperf3 -c 198.18.0.2 -t "$SECS" -f m 2>&1 |
            awk '/receiver/ { for (i = 1; i < NF; i++) if ($(i+1) == "Mbits/sec") print $i }') ;;
        veth) mbps=$(timeout "$LIMIT" /usr/sbin/ip netns exec ppc iperf3 -c 198.18.1.2 -t "$SECS" -f m 2>&1 |
            awk '/receiver/ { for (i = 1; i < NF; i++) if ($(i+1) == "Mbits/sec") print $i }') ;;
        bursty)
            timeout "$LIMIT" /usr/sbin/ip netns exec ppb /lab/bursty recv 198.18.0.2:5301 "$SECS" 150 100 >/tmp/recv.txt 2>&1 &
            rp=$!
            sleep 0.5
            timeout "$LIMIT" /usr/sbin/ip netns exec ppa /lab/bursty send 198.18.0.2:5301 "$SECS" >/dev/null 2>&1
            wait "$rp"
            mbps=$(awk -F= -v s="$SECS" '/bytes=/ { printf "%.1f", $2 * 8 / s / 1e6 }' /tmp/recv.txt) ;;
    esac
    set -- $(cpu_ticks)
    cpu=$(awk -v b="$(($1 - b0))" -v t="$(($2 - t0))" -v n="$ncpu" 'BEGIN { if (t > 0) printf "%.1f", 100 * n * b / t; else print "nan" }')
    echo "${mbps:-nan} $cpu"
}

if has_phase floor; then
    # light runs beside the fentry floors: its programs' time per page is set against the
    # empty fentry programs on the per-page functions it leaves alone, and against empty
    # programs on its own per-event hooks (what a program there costs at all). FLOOR_ROUNDS
    # windows per backend, the order turning each round: under TCG one window's ratio moved
    # by about ±0.25 from the next (more on the kprobe pair), within one boot as between
    # boots.
    r=1
    while [ "$r" -le "$FLOOR_ROUNDS" ]; do
    case $((r % 3)) in 1) order="fentry kprobe light" ;; 2) order="kprobe light fentry" ;; *) order="light fentry kprobe" ;; esac
    for b in $order; do
        echo "floor-begin $b"
        # light's floor: fentry's, and empty programs on light's own per-event hooks.
        floor=$b
        if start_tool "$b"; then
            # More instances of ppscope beside the first (OURS_COPIES in all): under TCG a
            # program's cost moves with where it was loaded, so ppscope's side is a mean of
            # loads as the floor is (one load a window moved a row by about ±0.25).
            copies=""
            k=2
            while [ "$k" -le "$OURS_COPIES" ]; do
                # A stale log's line would pass for this start's.
                rm -f /tmp/tool$k.log
                start_ppscope "$b" /tmp/tool$k.log
                pid=$!
                copies="$copies $pid"
                if ! poll_for /tmp/tool$k.log "watching page_pools" 1200 || ! kill -0 "$pid" 2>/dev/null; then
                    # Said once, not waited for in every window: the later ones run one.
                    echo "tool-error floor-copies-$b instance $k did not start, later windows run one: $(tr '\n' ' ' </tmp/tool$k.log | cut -c1-300)"
                    OURS_COPIES=1
                    break
                fi
                k=$((k + 1))
            done
            # The floor programs sit on the same functions as ppscope's, over the same packets.
            # The previous backend's file goes first: the background job truncates it only
            # when it starts, and its stale floor-ready would start the traffic too early.
            rm -f /tmp/floor.txt
            /lab/bench-probe floor $OBJ "$floor" $((2 * SECS + 4)) >/tmp/floor.txt 2>&1 &
            F=$!
            poll_for /tmp/floor.txt floor-ready 1200 || true
            timeout "$LIMIT" /usr/sbin/ip netns exec ppa iperf3 -c 198.18.0.2 -t "$SECS" >/dev/null 2>&1
            timeout "$LIMIT" /usr/sbin/ip netns exec ppc iperf3 -c 198.18.1.2 -t "$SECS" >/dev/null 2>&1
            wait "$F"
            cat /tmp/floor.txt
            for pid in $copies; do stop_pid "$pid" "$b"; done
            stop_tool
        fi
        echo "floor-end $b"
    done
    r=$((r + 1))
    done
fi

if has_phase workload; then
    r=1
    while [ "$r" -le "$ROUNDS" ]; do
        # Alternate: each round starts one configuration later, so no configuration always
        # runs first (warm caches) or last.
        set -- $CONFIGS
        i=1
        while [ "$i" -lt "$r" ]; do c=$1; shift; set -- "$@" "$c"; i=$((i + 1)); done
        for c in "$@"; do
            start_tool "$c" || continue
            for w in virtio veth bursty; do
                echo "result $w $c $r $(run_workload $w)"
            done
            stop_tool
        done
        r=$((r + 1))
    done
fi

# One start of a tool: "startup TOOL MS" when it said it was ready, else a tool-error line.
start_once() {
    tool=$1
    case $tool in
        ppscope-fentry) set -- "watching page_pools" ppscope diagnose --duration 1h --backend auto ;;
        ppscope-kprobe) set -- "watching page_pools" ppscope diagnose --duration 1h --backend kprobe ;;
        ppscope-light) set -- "watching page_pools" ppscope diagnose --duration 1h --detail light ;;
        bpftrace)
            command -v bpftrace >/dev/null || return 0
            # shellcheck disable=SC2086 # the script's path and its arguments
            set -- bpftrace-ready bpftrace $BT_SCRIPT ;;
        *) echo "tool-error startup-$tool no such tool in bench-vm.sh"; return 0 ;;
    esac
    /lab/bench-probe startup 120 "$@" 2>&1 |
        awk -v t="$tool" '/startup-ms/ { print "startup " t " " $2 } /bench-probe:/ { print "tool-error startup-" t " " $0 }'
}

if has_phase startup; then
    # One start of each first, not counted: a tool's first start reads its files into a cold
    # page cache (bpftrace's first took 3.0 s against 1.2 s after, loading its LLVM).
    for t in ppscope-fentry ppscope-kprobe ppscope-light bpftrace; do start_once "$t" >/dev/null; done
    # The tools take turns going first, as the workloads' configurations do: a start right
    # after another tool's may find the kernel still tearing that one's programs down.
    n=0
    while [ "$n" -lt "$STARTUPS" ]; do
        set -- ppscope-fentry ppscope-kprobe ppscope-light bpftrace
        i=0
        while [ "$i" -lt "$n" ]; do t=$1; shift; set -- "$@" "$t"; i=$((i + 1)); done
        n=$((n + 1))
        for t in "$@"; do start_once "$t"; done
    done
fi
# The agent on pools whose movement it sees every interval: AGENT_POOLS veth pairs, the
# receivers (pnN, XDP on each) here, the senders (pqN) in ppn, with an MTU of 3,000 so that a
# datagram of DATAGRAM bytes passes whole. bench-probe writes it in two parts: veth copies it
# into a pool page of its own, allocated and recycled page by page, which --detail full's
# allocation and recycle hooks count, so every pool's burst profile moves and the agent
# replays it at every ring size (its advice, every 5 s). (A small datagram takes a fragment of
# a page the pool reuses in place: only the fragment hook moves, and no pool is advised.)
# Windows alternate between no traffic (still: the agent knows the pools, nothing moves, and
# no pool has advice left: the window waits until the last moving window's samples have left
# the agent's one-minute advice window) and a packet to each pool every second (moving), the
# order turning each round, and /metrics is scraped every 15 s in each, as the host benchmark
# does. Last, one moving window
# of an agent at --detail light (its default) on the same pools: mode light-moving. CPU_TICKS
# are the agent's utime + stime over the window in USER_HZ ticks (100 a second: ticks per
# second are % of a core).

# pools_moved: of the snapshot (JSON) on stdin, the pools with a positive count among their
# allocations, recycles, and pages from and to the allocator (host.rs' pools_moved: an
# interval's snapshot also lists a pool that did not move while it has advice). The served
# keys are sorted: "pools" comes before "timeline", and in each pool "alloc" before "pages"
# and "recycle", flat objects of counts. Streamed, so a snapshot of 1,000 pools (megabytes)
# costs one pass.
pools_moved() {
    sed -e 's/\],"timeline":.*$//' -e 's/^.*"pools":\[//' |
        grep -oE '"(alloc|pages|recycle)":\{[^}]*\}' |
        awk '/^"alloc"/ { if (cur) moved++; cur = 0 } /:[1-9]/ { cur = 1 }
             END { if (cur) moved++; print moved + 0 }'
}

DATAGRAM=2600

# advised: how many pools of an interval's snapshot have advice.
advised() {
    scrape '/api/v1/snapshot?window=interval' | grep -o '"advice":{' | wc -l
}

# agent_ticks: the running agent's utime + stime (USER_HZ ticks); empty once it has exited.
agent_ticks() {
    awk '{ print $14 + $15 }' "/proc/$AGENT/stat" 2>/dev/null
}

# agent_gone WHEN: the agent has exited; a tool-error line with its last words, and the
# window's feed ($_feed) stopped.
agent_gone() {
    echo "tool-error agent-vm the agent exited $1: $(tr '\n' ' ' </tmp/agent.err | cut -c1-300)"
    [ -n "$_feed" ] && { kill "$_feed"; wait "$_feed" 2>/dev/null; }
}

# agent_window MODE ROUND: one measured window of the running agent ($AGENT).
agent_window() {
    _feed=""
    case $1 in *moving)
        ip netns exec ppn /lab/bench-probe udp-every 1 --bytes "$DATAGRAM" $addrs >/dev/null 2>&1 &
        _feed=$!
    esac
    # Past the previous window's last moves (and their advice, which the next collection
    # computes) and into this one's.
    sleep 5
    if [ "$1" = still ]; then
        # Until no pool is advised (at most 5 min): under TCG a collection that advises 1,000
        # pools takes more than its second, so a minute of samples takes longer.
        _w=0
        while [ "$(advised)" -gt 0 ] && [ "$_w" -lt 60 ]; do sleep 5; _w=$((_w + 1)); done
    fi
    if ! kill -0 "$AGENT" 2>/dev/null; then
        agent_gone "before the $1 window of round $2"
        return 1
    fi
    ( while :; do scrape >/dev/null 2>&1; sleep 15; done ) &
    _scraper=$!
    _c0=$(agent_ticks); _t0=$(cut -d' ' -f1 /proc/uptime)
    sleep "$AGENT_SECS"
    _c1=$(agent_ticks); _t1=$(cut -d' ' -f1 /proc/uptime)
    kill "$_scraper"
    wait "$_scraper" 2>/dev/null
    if [ -z "$_c1" ]; then
        agent_gone "in the $1 window of round $2"
        return 1
    fi
    # The most pools whose counters moved in one interval, of three intervals.
    _most=0
    for _k in 1 2 3; do
        _n=$(scrape '/api/v1/snapshot?window=interval' | pools_moved)
        [ "$_n" -gt "$_most" ] && _most=$_n
        sleep 1.1
    done
    [ -n "$_feed" ] && { kill "$_feed"; wait "$_feed" 2>/dev/null; }
    echo "agent-vm $1 $2 $AGENT_POOLS $_most $((_c1 - _c0)) $(awk -v a="$_t0" -v b="$_t1" 'BEGIN { printf "%.2f", b - a }') $(rss_kib "$AGENT")"
}

# agent_up DETAIL: start the agent (pid in AGENT) and wait until it answers /metrics; on
# failure a tool-error line, the agent stopped, and 1 (start_agent would end the script).
agent_up() {
    # The previous agent's "agent serving" must not pass for this one's.
    rm -f /tmp/agent.err
    ppscope agent --listen "$AGENT_ADDR" --interval 1s --detail "$1" 2>/tmp/agent.err &
    AGENT=$!
    poll_for /tmp/agent.err "agent serving" && poll_until 600 agent_answers && return 0
    echo "tool-error agent-vm the agent (--detail $1) did not start: $(tr '\n' ' ' </tmp/agent.err | cut -c1-300)"
    kill "$AGENT" 2>/dev/null
    wait "$AGENT" 2>/dev/null
    return 1
}

if has_phase agent; then
    ulimit -n 65536
    ip netns add ppn
    ip -n ppn link set lo up
    # No traffic but the benchmark's on the pairs: IPv6 off on the new devices (its address
    # autoconfiguration sends for seconds after a link comes up, and moved the pools of a
    # still window), permanent neighbours (no ARP), as the host benchmark's lab does.
    v6_default=$(cat /proc/sys/net/ipv6/conf/default/disable_ipv6)
    echo 1 >/proc/sys/net/ipv6/conf/default/disable_ipv6
    ip netns exec ppn sh -c 'echo 1 >/proc/sys/net/ipv6/conf/default/disable_ipv6'
    awk -v n="$AGENT_POOLS" 'BEGIN { for (i = 0; i < n; i++) printf "link add pn%d mtu 3000 address 02:0a:00:00:%02x:%02x type veth peer name pq%d mtu 3000 address 02:0b:00:00:%02x:%02x netns ppn\n", i, int(i / 256), i % 256, i, int(i / 256), i % 256 }' >/tmp/pairs.b
    # Receivers 198.19.B.4k+2, senders 198.19.B.4k+1: a /30 per pair (the lab's 198.18.0.0/15).
    awk -v n="$AGENT_POOLS" 'BEGIN { for (i = 0; i < n; i++) printf "addr add 198.19.%d.%d/30 dev pn%d\nlink set pn%d up\nneigh add 198.19.%d.%d lladdr 02:0b:00:00:%02x:%02x dev pn%d nud permanent\n", int(i / 64), (i % 64) * 4 + 2, i, i, int(i / 64), (i % 64) * 4 + 1, int(i / 256), i % 256, i }' >/tmp/pn.b
    awk -v n="$AGENT_POOLS" 'BEGIN { for (i = 0; i < n; i++) printf "addr add 198.19.%d.%d/30 dev pq%d\nlink set pq%d up\nneigh add 198.19.%d.%d lladdr 02:0a:00:00:%02x:%02x dev pq%d nud permanent\n", int(i / 64), (i % 64) * 4 + 1, i, i, int(i / 64), (i % 64) * 4 + 2, int(i / 256), i % 256, i }' >/tmp/pq.b
    devs=$(awk -v n="$AGENT_POOLS" 'BEGIN { for (i = 0; i < n; i++) printf "pn%d ", i }')
    addrs=$(awk -v n="$AGENT_POOLS" 'BEGIN { for (i = 0; i < n; i++) printf "198.19.%d.%d ", int(i / 64), (i % 64) * 4 + 2 }')
    if ! { ip -batch /tmp/pairs.b && ip -batch /tmp/pn.b && ip -n ppn -batch /tmp/pq.b; } >/tmp/pairs.log 2>&1; then
        echo "tool-error agent-vm making $AGENT_POOLS veth pairs: $(tr '\n' ' ' </tmp/pairs.log | cut -c1-300)"
    else
        /lab/bench-probe xdp $OBJ $devs >/tmp/xdpn.log 2>&1 &
        XDPN=$!
        if ! poll_for /tmp/xdpn.log attached 3000; then
            echo "tool-error agent-vm xdp on $AGENT_POOLS devices: $(tr '\n' ' ' </tmp/xdpn.log | cut -c1-300)"
        elif agent_up full; then
            # A first packet through each pool once the agent watches: every pool allocates,
            # and the agent knows them all before the first still window (which waits until
            # that packet has left the advice window).
            ip netns exec ppn /lab/bench-probe udp --bytes "$DATAGRAM" $addrs >/dev/null 2>&1
            r=1
            while [ "$r" -le "$ROUNDS" ]; do
                case $((r % 2)) in 1) order="still moving" ;; *) order="moving still" ;; esac
                for mode in $order; do agent_window "$mode" "$r" || break 2; done
                r=$((r + 1))
            done
            stop_pid "$AGENT" agent-vm
            if agent_up light; then
                agent_window light-moving 1
                stop_pid "$AGENT" agent-vm
            fi
        fi
        kill "$XDPN" 2>/dev/null
        wait "$XDPN" 2>/dev/null
    fi
    ip netns del ppn
    echo "$v6_default" >/proc/sys/net/ipv6/conf/default/disable_ipv6
fi

kill "$XDP"
echo "bench-done"
