#!/usr/bin/env bash
# libverbs/build.sh [DIR]: builds uroce's libibverbs.so.1 (libverbs/ibverbs),
# librdmacm.so.1 on top of it (libverbs/rdmacm) and the companions
# libmlx5.so.1 and libefa.so.1 (libverbs/companions) into DIR (default
# ./lib/uroce), each with its libX.so symlink. Programs use them with LD_LIBRARY_PATH=DIR, which is what
# `uroce run` sets. Needs gcc and Debian's rdma-core headers, nothing else.
set -euo pipefail
src=$(cd "$(dirname "$0")" && pwd)
out=${1:-./lib/uroce}
pkgs="gcc libc6-dev libibverbs-dev librdmacm-dev"

die() {
	echo "build.sh: $*" >&2
	exit 1
}

command -v gcc >/dev/null 2>&1 || die "gcc is needed: apt-get install -y --no-install-recommends $pkgs"
for h in errno.h:libc6-dev infiniband/verbs.h:libibverbs-dev infiniband/mlx5dv.h:libibverbs-dev \
	infiniband/efadv.h:libibverbs-dev rdma/rdma_cma.h:librdmacm-dev rdma/rsocket.h:librdmacm-dev; do
	echo "#include <${h%%:*}>" | gcc -E -x c - >/dev/null 2>&1 ||
		die "<${h%%:*}> is missing (package ${h#*:}): apt-get install -y --no-install-recommends $pkgs"
done

mkdir -p "$out"

# so NAME MAP SOURCE... [-- EXTRA FLAGS]: links $out/NAME.so.1 with the
# version script MAP (through a temporary file, so that programs running
# with the old library keep it), and the symlink NAME.so. The extra flags
# come after the sources, so that libraries among them are linked.
so() {
	local name=$1 map=$2 srcs=() tmp
	shift 2
	while [ $# -gt 0 ] && [ "$1" != -- ]; do srcs+=("$1"); shift; done
	[ $# -gt 0 ] && shift
	tmp=$(mktemp "$out/.$name.so.1.XXXXXX")
	if ! gcc -O2 -fPIC -shared -Wall -Werror -o "$tmp" "${srcs[@]}" "$@" \
		-Wl,--version-script="$map",-soname,"$name.so.1" -Wl,-z,now,-z,defs; then
		rm -f "$tmp"
		die "building $name.so.1 failed"
	fi
	chmod 755 "$tmp"
	mv -f "$tmp" "$out/$name.so.1"
	ln -sfn "$name.so.1" "$out/$name.so"
	built+=("$name.so.1")
}

built=()
ib=$src/ibverbs
cm=$src/rdmacm
shopt -s nullglob
ibsrcs=("$ib"/*.c)
if [ ${#ibsrcs[@]} -eq 0 ] || [ ! -f "$ib/libibverbs.map" ]; then
	echo "build.sh: skipping libibverbs.so.1 and librdmacm.so.1: no libverbs/ibverbs/*.c and libibverbs.map yet" >&2
else
	so libibverbs "$ib/libibverbs.map" "${ibsrcs[@]}" -- -I"$ib" -pthread
	# librdmacm speaks the daemon's CM requests through libibverbs'
	# sessions (uroce_call), and finds it beside itself.
	so librdmacm "$cm/librdmacm.map" "$cm"/*.c -- -I"$ib" -I"$cm" -pthread \
		-L"$out" -libverbs -Wl,-rpath,'$ORIGIN'
fi
so libmlx5 "$src/companions/mlx5.map" "$src/companions/mlx5.c"
so libefa "$src/companions/efa.map" "$src/companions/efa.c"
echo "build.sh: built ${built[*]} in $out"
