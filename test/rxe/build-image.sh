#!/usr/bin/env bash
# build-image.sh: builds the QEMU guest image that runs a Linux rdma_rxe peer.
#
# The guest boots Debian's own kernel package (its rdma_rxe module) with an
# initramfs holding Debian's rdma-core, ibverbs-utils, perftest, rdmacm-utils,
# iproute2 (ip, tc, rdma) and tcpdump, copied from the host with their shared
# libraries. Its /init loads the modules, configures eth0 from the kernel
# command line, creates rxe0 on it, prints a READY line once the port is
# ACTIVE with its IPv4 GID, runs the script handed over through QEMU fw_cfg
# (opt/uroce/script), prints an EXIT line with the script's status and powers
# off. See README.md beside this file.
#
# Usage: build-image.sh [-f]        (-f rebuilds even when the cache is current)
# Environment:
#   KMETA             kernel package: a meta package (default linux-image-amd64,
#                     or linux-image-6.12-amd64) or a concrete linux-image-<kver>
#   UROCE_RXE_CACHE   cache directory (default $XDG_CACHE_HOME/uroce/rxe, or
#                     /var/cache/uroce/rxe without XDG_CACHE_HOME)
#   UROCE_RXE_NO_INSTALL=1  never apt-get install missing host packages
# Output: the image goes to <cache>/<kver>/{vmlinux,vmlinuz,initrd.cpio}; the
# last lines on stdout are UROCE_RXE_DIR=<dir> and UROCE_RXE_KVER=<kver>.
# Progress goes to stderr. Exit status 3 means the host cannot build the image
# (missing packages that cannot be installed, no package lists, no download);
# any other failure is a bug in the image or the builder.
set -euo pipefail
export LC_ALL=C

EX_UNAVAILABLE=3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
self="$here/$(basename "${BASH_SOURCE[0]}")"
force=0
[ "${1:-}" = "-f" ] && force=1

log() { echo "build-image: $*" >&2; }
unavailable() { log "cannot build: $*"; exit "$EX_UNAVAILABLE"; }
die() { log "error: $*"; exit 1; }

# --- host packages ---------------------------------------------------------
pkgs=$("$here/packages.sh")
missing=()
declare -A have=()
while read -r p st; do
	[ "$st" = "install ok installed" ] && have[$p]=1
done < <(dpkg-query -W -f='${Package} ${Status}\n' $pkgs 2>/dev/null || true)
for p in $pkgs; do
	[ -n "${have[$p]:-}" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ] || [ "${UROCE_RXE_NO_INSTALL:-}" = 1 ]; then
		unavailable "missing Debian packages: ${missing[*]}"
	fi
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y --no-install-recommends "${missing[@]}" >&2 ||
		{ apt-get update -qq >&2 && apt-get install -y --no-install-recommends "${missing[@]}" >&2; } ||
		unavailable "apt-get install ${missing[*]} failed"
fi

# --- which kernel ----------------------------------------------------------
kmeta=${KMETA:-linux-image-amd64}
case "$kmeta" in
linux-image-[a-z0-9]*) ;;
*) die "KMETA=$kmeta is not a linux-image-* package" ;;
esac
if [ -n "${UROCE_RXE_CACHE:-}" ]; then
	base=$UROCE_RXE_CACHE
elif [ -n "${XDG_CACHE_HOME:-}" ]; then
	base=$XDG_CACHE_HOME/uroce/rxe
else
	base=/var/cache/uroce/rxe
fi
mkdir -p "$base" || unavailable "cannot create $base"

# apt-cache takes most of a second per call here (no binary package cache),
# so the answer is kept until the package lists change.
lists_id() {
	stat -c '%n %Y %s' /var/lib/apt/lists/*Packages* 2>/dev/null | sha256sum | cut -c1-16
}
resolve() {
	local dep
	dep=$(apt-cache depends "$kmeta" 2>/dev/null |
		sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -n1)
	[ -n "$dep" ] || case "$kmeta" in
	linux-image-[0-9]*-amd64) dep=$kmeta ;; # a concrete kernel package
	esac
	[ -n "$dep" ] || return 0
	echo "$dep $(apt-cache show --no-all-versions "$dep" 2>/dev/null | sed -n 's/^Version: //p' | head -n1)"
}
memo=$base/.resolved-$kmeta
memo_id= kpkg= kversion=
if [ -r "$memo" ]; then
	read -r memo_id kpkg kversion <"$memo" || true
fi
if [ "${memo_id:-}" != "$(lists_id)" ] || [ -z "${kversion:-}" ]; then
	read -r kpkg kversion < <(resolve) || true
	if [ -z "${kversion:-}" ] && [ "$(id -u)" -eq 0 ]; then
		apt-get update -qq >&2 || true
		read -r kpkg kversion < <(resolve) || true
	fi
	[ -n "${kversion:-}" ] || unavailable "apt-cache cannot resolve $kmeta (no package lists, or no such package here)"
	echo "$(lists_id) $kpkg $kversion" >"$memo"
fi
kver=${kpkg#linux-image-}
out=$base/$kver

# The image depends on this script, the package list, the kernel package and
# the versions of the host packages whose files are copied into it.
key=$({
	sha256sum "$self" "$here/packages.sh" | cut -d' ' -f1
	echo "$kpkg $kversion"
	dpkg-query -W -f='${Package} ${Version}\n' $pkgs 2>/dev/null
} | sha256sum | cut -d' ' -f1)

emit() {
	echo "UROCE_RXE_DIR=$out"
	echo "UROCE_RXE_KVER=$kver"
}
current() {
	[ "$force" = 0 ] && [ -s "$out/vmlinux" ] && [ -s "$out/initrd.cpio" ] &&
		[ "$(cat "$out/stamp" 2>/dev/null)" = "$key" ]
}

# Several test binaries may build at once: one builder per cache directory.
exec 9>"$base/.lock"
flock 9
if current; then
	log "cached: $out ($kpkg $kversion)"
	emit
	exit 0
fi

start=$EPOCHREALTIME
log "building $out from $kpkg $kversion"
work=$(mktemp -d "$base/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT

# --- kernel package: download and unpack (nothing goes to /boot) -----------
debs=$base/debs
mkdir -p "$debs"
deb=$(ls "$debs/${kpkg}_"*.deb 2>/dev/null | grep -F "_${kversion//:/%3a}_" | head -n1 || true)
if [ -z "$deb" ]; then
	log "downloading $kpkg $kversion"
	(cd "$work" && apt-get download "$kpkg=$kversion" >&2) || unavailable "apt-get download $kpkg=$kversion failed"
	dl=$(ls "$work/${kpkg}_"*.deb | head -n1)
	# Keep one kernel package per kernel in the cache.
	rm -f "$debs/${kpkg}_"*.deb
	mv "$dl" "$debs/"
	deb=$debs/$(basename "$dl")
fi
kroot=$work/kernel
mkdir -p "$kroot"
dpkg-deb -x "$deb" "$kroot"
[ -d "$kroot/lib/modules/$kver" ] || die "$deb has no lib/modules/$kver"
vmlinuz=$kroot/boot/vmlinuz-$kver
[ -f "$vmlinuz" ] || die "$deb has no boot/vmlinuz-$kver"
config=$kroot/boot/config-$kver
for opt in CONFIG_RDMA_RXE CONFIG_INFINIBAND CONFIG_VIRTIO_NET CONFIG_NET_SCH_NETEM; do
	grep -Eq "^$opt=(m|y)$" "$config" || die "$kpkg lacks $opt"
done
for opt in CONFIG_DEVTMPFS CONFIG_PVH; do
	grep -Eq "^$opt=y$" "$config" || die "$kpkg lacks $opt=y"
done
# The package's postinst would run depmod; run it on the unpacked tree.
depmod -b "$kroot" "$kver"

# --- modules, in load order ------------------------------------------------
# Required: the NIC, fw_cfg (the script), the RDMA core and rxe, netem.
# Optional: what the RDMA CM tools use and what some kernels build as modules.
# crc32_generic matters: 6.1's rxe allocates the crypto "crc32" shash and
# nothing in the guest would load it on demand.
early="crc32_generic crc32_pclmul"
required="virtio_pci virtio_net qemu_fw_cfg ib_core ib_uverbs rdma_rxe sch_netem"
optional="af_packet udp_tunnel ip6_udp_tunnel ib_umad ib_cm iw_cm rdma_cm rdma_ucm"
mroot=$work/root
mdir=$mroot/usr/lib/modules/$kver
mkdir -p "$mdir"
order=()
add_module() { # $1 = module name, $2 = required|optional
	local deps line
	if ! deps=$(modprobe -d "$kroot" -S "$kver" --show-depends "$1" 2>/dev/null); then
		[ "$2" = required ] && die "module $1 not found in $kpkg"
		return 0
	fi
	while read -r line; do
		case "$line" in
		insmod\ *)
			line=${line#insmod }
			line=${line%% *} # drop module parameters, if any
			local m
			for m in "${order[@]}"; do [ "$m" = "$line" ] && continue 2; done
			order+=("$line")
			;;
		esac
	done <<<"$deps"
}
for m in $early; do add_module "$m" optional; done
for m in $required; do add_module "$m" required; done
for m in $optional; do add_module "$m" optional; done
: >"$mdir/load-order"
for path in "${order[@]}"; do
	name=$(basename "$path")
	case "$name" in
	*.ko) cp "$path" "$mdir/$name" ;;
	*.ko.xz) xz -dc "$path" >"$mdir/${name%.xz}"; name=${name%.xz} ;;
	*.ko.zst) zstd -qdc "$path" >"$mdir/${name%.zst}"; name=${name%.zst} ;;
	*.ko.gz) gzip -dc "$path" >"$mdir/${name%.gz}"; name=${name%.gz} ;;
	*) die "unknown module file $path" ;;
	esac
	echo "$name" >>"$mdir/load-order"
done
log "modules (${#order[@]}): $(tr '\n' ' ' <"$mdir/load-order")"

# --- user space: tools and their shared libraries ---------------------------
# The root keeps the host's merged-/usr layout, so ldd paths hold unchanged.
for d in usr/bin usr/sbin usr/lib usr/lib64 etc proc sys dev tmp run root mnt var/tmp; do
	mkdir -p "$mroot/$d"
done
ln -s usr/bin "$mroot/bin"
ln -s usr/sbin "$mroot/sbin"
ln -s usr/lib "$mroot/lib"
ln -s usr/lib64 "$mroot/lib64"

declare -A copied=()
copy_file() { # copy a host file (following symlinks) to the same path in the image
	local src=$1
	[ -n "${copied[$src]:-}" ] && return 0
	copied[$src]=1
	mkdir -p "$mroot$(dirname "$src")"
	cp -L "$src" "$mroot$src"
}
copy_elf() { # a host ELF file and everything ldd says it loads
	local f=$1 lib
	copy_file "$f"
	for lib in $(ldd "$f" 2>/dev/null | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p; s/^[[:space:]]*\(\/[^ ]*\) (.*/\1/p'); do
		copy_file "$lib"
	done
}
is_elf() { [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = '177ELF' ]; }

tools=()
for p in ibverbs-utils perftest rdmacm-utils; do
	for f in $(dpkg -L "$p" | grep -E '^/usr/s?bin/'); do
		[ -f "$f" ] && is_elf "$f" && tools+=("$f")
	done
done
for t in ip tc rdma tcpdump dash; do
	f=$(PATH=/usr/sbin:/usr/bin:/sbin:/bin command -v "$t") || die "host has no $t"
	tools+=("$(readlink -f "$f")")
done
for f in "${tools[@]}"; do copy_elf "$f"; done

multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
libdir=/usr/lib/$multiarch
# The rxe verbs provider is dlopen()ed, so ldd never names it.
rxe_provider=$(ls "$libdir"/libibverbs/librxe-rdmav*.so 2>/dev/null | head -n1)
[ -n "$rxe_provider" ] || die "no librxe provider in $libdir/libibverbs"
copy_elf "$rxe_provider"
mkdir -p "$mroot/etc/libibverbs.d"
cp /etc/libibverbs.d/rxe.driver "$mroot/etc/libibverbs.d/"
# glibc dlopen()s libgcc_s for pthread_exit/cancellation (rping needs it).
libgcc=$(ldconfig -p | sed -n 's/.*libgcc_s\.so\.1 (libc6,x86-64) => \(.*\)$/\1/p' | head -n1)
[ -n "$libgcc" ] || die "host has no libgcc_s.so.1"
copy_elf "$libgcc"
# tc loads its qdisc helpers and distribution tables at run time.
if [ -d "$libdir/tc" ]; then
	mkdir -p "$mroot$libdir/tc"
	cp -L "$libdir/tc/"*.dist "$mroot$libdir/tc/" 2>/dev/null || true
fi
for d in /usr/lib/tc /usr/share/iproute2 /etc/iproute2; do
	if [ -d "$d" ]; then
		mkdir -p "$mroot$(dirname "$d")"
		cp -rL "$d" "$mroot$d"
	fi
done
copy_file /etc/protocols
copy_file /etc/services

# busybox provides every other command; dash is the shell, because Debian's
# busybox sh runs its own applets (ip, tc) ahead of the real ones in $PATH.
cp -L "$(command -v busybox)" "$mroot/usr/bin/busybox"
for a in $(busybox --list); do
	case "$a" in sh | ash | init | linuxrc) continue ;; esac
	[ -e "$mroot/usr/bin/$a" ] || [ -e "$mroot/usr/sbin/$a" ] || ln -s busybox "$mroot/usr/bin/$a"
done
ln -sf dash "$mroot/usr/bin/sh"

cat >"$mroot/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
tcpdump:x:100:100:tcpdump:/nonexistent:/bin/false
EOF
cat >"$mroot/etc/group" <<'EOF'
root:x:0:
tcpdump:x:100:
EOF
echo "127.0.0.1 localhost" >"$mroot/etc/hosts"
echo "rxe" >"$mroot/etc/hostname"
echo "$kver" >"$mroot/etc/uroce-kver"
ldconfig -r "$mroot" 2>/dev/null || ldconfig -r "$mroot"

# Helpers for scripts run in the guest.
cat >"$mroot/usr/bin/retry" <<'EOF'
#!/bin/sh
# retry N CMD...: run CMD until it succeeds, at most N times, 0.2 s apart.
n=$1
shift
i=1
while :; do
	"$@" && exit 0
	rc=$?
	[ "$i" -ge "$n" ] && exit "$rc"
	i=$((i + 1))
	sleep 0.2
done
EOF
cat >"$mroot/usr/bin/rxe-info" <<'EOF'
#!/bin/sh
# rxe-info: the rxe0 port state, the netdev MTU and the first GID entries.
p=/sys/class/infiniband/rxe0/ports/1
read -r state <"$p/state"
read -r mtu </sys/class/net/eth0/mtu
echo "rxe0 port 1: state=$state eth0 mtu=$mtu"
i=0
while [ "$i" -lt 4 ]; do
	read -r gid <"$p/gids/$i" || break
	read -r typ <"$p/gid_attrs/types/$i" 2>/dev/null || typ=-
	[ "$gid" = 0000:0000:0000:0000:0000:0000:0000:0000 ] || echo "rxe0 gid $i $gid $typ"
	i=$((i + 1))
done
EOF
chmod +x "$mroot/usr/bin/retry" "$mroot/usr/bin/rxe-info"

# --- /init -----------------------------------------------------------------
cat >"$mroot/init" <<'EOF'
#!/bin/sh
# /init of the uroce rdma_rxe peer. Kernel command line:
#   uroce_name=NAME  uroce_ip=ADDR/PFX  [uroce_mtu=N]  [uroce_ipv6=1]  [uroce_shell=1]
# Serial console lines it prints (NAME from uroce_name):
#   UROCE-RXE[NAME]: READY ...    rxe0 is ACTIVE with its IPv4 GID
#   UROCE-RXE[NAME]: BEGIN        the script's output follows
#   UROCE-RXE[NAME]: EXIT rc=N    the script ended with status N
#   UROCE-RXE[NAME]: FAIL ...     the guest could not get ready
export PATH=/usr/sbin:/usr/bin HOME=/root TERM=dumb
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
exec </dev/console >/dev/console 2>&1

name=rxe ip= mtu= ipv6=0 shell=0
for w in $(cat /proc/cmdline); do
	case "$w" in
	uroce_name=*) name=${w#*=} ;;
	uroce_ip=*) ip=${w#*=} ;;
	uroce_mtu=*) mtu=${w#*=} ;;
	uroce_ipv6=*) ipv6=${w#*=} ;;
	uroce_shell=*) shell=${w#*=} ;;
	esac
done
tag="UROCE-RXE[$name]:"
off() {
	sync
	poweroff -f
	sleep 5
	echo o >/proc/sysrq-trigger
}
fail() {
	echo "$tag FAIL $*"
	dmesg | tail -n 20
	off
}

hostname "$name"
ip link set lo up
[ -n "$ip" ] || fail "no uroce_ip= on the kernel command line"
if [ "$ipv6" != 1 ]; then
	sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
fi
# eth0 comes up as soon as its driver is in, so that the kernel's link
# watcher (which may take a second) runs while the other modules load.
eth0_done=
eth0_up() {
	[ -z "$eth0_done" ] && [ -d /sys/class/net/eth0 ] || return 0
	eth0_done=1
	[ -z "$mtu" ] || ip link set eth0 mtu "$mtu" || fail "mtu $mtu"
	ip addr add "$ip" dev eth0 || fail "address $ip"
	ip link set eth0 up || fail "eth0 up"
}
kver=$(cat /etc/uroce-kver)
eth0_up
while read -r m; do
	insmod "/lib/modules/$kver/$m" || fail "insmod $m"
	[ "$m" != virtio_net.ko ] || eth0_up
done <"/lib/modules/$kver/load-order"
eth0_up
[ -n "$eth0_done" ] || fail "no eth0"
rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0"

port=/sys/class/infiniband/rxe0/ports/1
want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' $(echo "${ip%/*}" | tr . ' '))
# Ready means rxe0 ACTIVE with the IPv4 GID, and a queueing discipline on
# eth0: should the carrier have come after `ip link set eth0 up`, the kernel
# attaches it only when its link watcher runs (up to a second later), and
# until then eth0 drops what it is given to send. eth0's operstate lags the
# same way but does not matter.
i=0
while :; do
	state=$(cat "$port/state" 2>/dev/null)
	gid=$(cat "$port/gids/1" 2>/dev/null)
	case "$state" in *ACTIVE*) [ "$gid" = "$want" ] && break ;; esac
	i=$((i + 1))
	[ "$i" -lt 400 ] || fail "rxe0 not ready: state=$state gid1=$gid"
	sleep 0.05
done
while tc qdisc show dev eth0 | grep -q '^qdisc noop'; do
	i=$((i + 1))
	[ "$i" -lt 400 ] || fail "eth0 has no queueing discipline"
	sleep 0.05
done
rxe-info
read -r up _ </proc/uptime
echo "$tag READY rxe0 kernel=$kver ip=$ip mtu=$(cat /sys/class/net/eth0/mtu) uptime=$up"

if [ "$shell" = 1 ]; then
	setsid cttyhack /usr/bin/dash -i || /usr/bin/dash -i
	off
fi

# Only emergencies reach the console while the script runs, so its output
# stays clean between BEGIN and EXIT.
echo "1 4 1 7" >/proc/sys/kernel/printk
script=/sys/firmware/qemu_fw_cfg/by_name/opt/uroce/script/raw
if [ -r "$script" ]; then
	cat "$script" >/tmp/script
else
	echo 'ibv_devinfo -v' >/tmp/script
fi
echo "$tag BEGIN"
cd /tmp
sh /tmp/script </dev/null
rc=$?
echo "$tag EXIT rc=$rc"
off
EOF
chmod +x "$mroot/init"

# --- pack --------------------------------------------------------------------
mkdir -p "$work/out"
# Uncompressed: under TCG, gunzipping the 25 MB archive costs the guest
# about half a second of every boot.
(cd "$mroot" && find . -print0 | sort -z | cpio --null -o -H newc --quiet -R 0:0) >"$work/out/initrd.cpio"
cp "$vmlinuz" "$work/out/vmlinuz"

# The uncompressed ELF lets QEMU enter the kernel at its PVH entry point,
# which skips the real-mode setup and the in-guest decompression (about half
# the boot time under TCG). The bzImage setup header says where the
# compressed payload lies.
u8() { od -An -tu1 -j "$2" -N1 "$1" | tr -d ' '; }
u32() { od -An -tu4 -j "$2" -N4 "$1" | tr -d ' '; }
setup_sects=$(u8 "$vmlinuz" $((0x1f1)))
[ "$setup_sects" -ne 0 ] || setup_sects=4
poff=$(($(u32 "$vmlinuz" $((0x248))) + (setup_sects + 1) * 512))
plen=$(u32 "$vmlinuz" $((0x24c)))
magic=$(od -An -tx1 -j "$poff" -N6 "$vmlinuz" | tr -d ' ')
payload() { dd if="$vmlinuz" iflag=skip_bytes,count_bytes skip="$poff" count="$1" bs=1M status=none; }
case "$magic" in
fd377a585a00) payload "$plen" | xz -dc --single-stream >"$work/out/vmlinux" ;;
1f8b*) payload "$plen" | gzip -dc >"$work/out/vmlinux" 2>/dev/null || true ;;
28b52ffd*) payload $((plen - 4)) | zstd -qdc >"$work/out/vmlinux" ;;
*) die "unknown kernel payload compression (magic $magic)" ;;
esac
[ "$(head -c 4 "$work/out/vmlinux" | od -An -c | tr -d ' ')" = '177ELF' ] || die "extracted vmlinux is not an ELF file"

{
	echo "package $kpkg $kversion"
	echo "kver $kver"
	echo "modules $(tr '\n' ' ' <"$mdir/load-order")"
	echo "tools ${tools[*]##*/}"
} >"$work/out/manifest"

mkdir -p "$out"
rm -f "$out/stamp"
for f in vmlinux vmlinuz initrd.cpio manifest; do
	mv -f "$work/out/$f" "$out/$f"
done
echo "$key" >"$out/stamp"
log "done in $(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s: $out (initrd $(($(stat -c %s "$out/initrd.cpio") >> 20)) MiB, vmlinux $(($(stat -c %s "$out/vmlinux") >> 20)) MiB)"
emit
