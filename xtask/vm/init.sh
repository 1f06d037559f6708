#!/bin/sh
# /init of the ppscope VM lab (/bin/sh is dash; the other tools are busybox applets, plus the
# real ip, ethtool, iperf3). Built into the initramfs by `cargo xtask vm`.
# Kernel console and this script's own messages: ttyS0. The lab script's output: ttyS1,
# followed by the marker line the host waits for.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TERM=linux
umask 022

OUT=/dev/console
say() { echo "ppscope-vm: $*"; }
fail() {
	say "setup failed: $*"
	echo "PPSCOPE-VM-SETUP-FAILED $*" >"$OUT"
	poweroff -f
	exit 1
}

mount -t proc proc /proc || fail "mount proc"
mount -t sysfs sysfs /sys || fail "mount sysfs"
mount -t devtmpfs devtmpfs /dev 2>/dev/null || true
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts || true
mount -t tmpfs tmpfs /dev/shm || true
mount -t debugfs debugfs /sys/kernel/debug || fail "mount debugfs"
mount -t tracefs tracefs /sys/kernel/tracing || fail "mount tracefs"
mount -t bpf bpf /sys/fs/bpf || fail "mount bpffs"
mount -t tmpfs tmpfs /run || fail "mount /run"
mount -t tmpfs tmpfs /tmp || fail "mount /tmp"
mkdir -p /var /run/netns
[ -e /var/run ] || ln -s /run /var/run
hostname ppscope-vm
ulimit -l unlimited 2>/dev/null || true

. /lab/config.sh

if [ "$MODE" = run ]; then
	OUT=/dev/ttyS1
	[ -c "$OUT" ] || fail "no $OUT"
	stty -F "$OUT" raw -echo 2>/dev/null || true
fi

# Modules, already in dependency order (decompressed on the host).
for m in $MODULES; do
	insmod "/lib/modules/$(uname -r)/$m" || fail "insmod $m"
done

# Wait for the interface with a given MAC to appear; print its name.
ifname_by_mac() {
	i=0
	while [ $i -lt 100 ]; do
		for d in /sys/class/net/*; do
			[ "$(cat "$d/address" 2>/dev/null)" = "$1" ] && { basename "$d"; return 0; }
		done
		i=$((i + 1))
		sleep 0.1
	done
	return 1
}

ip link set lo up
for ns in ppa ppb ppc ppd; do
	ip netns add $ns || fail "netns add $ns"
	ip -n $ns link set lo up || fail "lo up in $ns"
done

if [ "$NICS" = 1 ]; then
	n=0
	for pair in "$MAC0 ppa 198.18.0.1/24" "$MAC1 ppb 198.18.0.2/24"; do
		set -- $pair
		dev=$(ifname_by_mac "$1") || fail "no NIC with MAC $1"
		ip link set "$dev" down
		ip link set "$dev" name vnet$n || fail "rename $dev"
		ip link set vnet$n netns "$2" || fail "move vnet$n to $2"
		ip -n "$2" addr add "$3" dev vnet$n || fail "address vnet$n"
		ip -n "$2" link set vnet$n up || fail "vnet$n up"
		n=$((n + 1))
	done
fi

# Wait (up to 5 s) for the links to report carrier, so scripts do not race link-up.
wait_up() {
	i=0
	while [ $i -lt 50 ]; do
		ip -n "$1" -o link show "$2" | grep -q "state UP" && return 0
		i=$((i + 1))
		sleep 0.1
	done
	say "warning: $2 in $1 has no carrier"
}

ip link add veth0 type veth peer name veth1 || fail "veth add"
ip link set veth0 netns ppc || fail "move veth0"
ip link set veth1 netns ppd || fail "move veth1"
ip -n ppc addr add 198.18.1.1/24 dev veth0 || fail "address veth0"
ip -n ppd addr add 198.18.1.2/24 dev veth1 || fail "address veth1"
ip -n ppc link set veth0 up || fail "veth0 up"
ip -n ppd link set veth1 up || fail "veth1 up"

if [ "$NICS" = 1 ]; then
	wait_up ppa vnet0
	wait_up ppb vnet1
fi
wait_up ppc veth0
wait_up ppd veth1

export PPSCOPE_VM=1
export PPSCOPE_VM_KERNEL="$(uname -r)"
cd /lab

if [ "$MODE" = shell ]; then
	say "lab ready (kernel $PPSCOPE_VM_KERNEL): netns ppa/ppb (vnet0/vnet1), ppc/ppd (veth0/veth1); exit to power off"
	# A path, not "sh": busybox would run its own ash, which prefers its applets (busybox ip).
	setsid cttyhack /usr/bin/dash -l
	poweroff -f
fi

. /lab/args.sh
echo "PPSCOPE-VM-START" >"$OUT"
sh /lab/script "$@" >"$OUT" 2>&1 </dev/null
status=$?
echo "PPSCOPE-VM-EXIT $status" >"$OUT"
poweroff -f
