#!/usr/bin/env bash
# queues.sh: uroce perf write between two network namespaces joined by a
# veth pair with Q queues each way (MTU 9000), one engine per queue on
# both ends; prints the client's result line and the AF_XDP counters of
# each queue. The namespaces (uroce-qa, uroce-qb) are deleted on exit.
#
#   sudo contrib/queues.sh 1 -s 65536 -D 3 -q 2
#   sudo contrib/queues.sh 2 -s 65536 -D 3 -q 2
#
# Every further argument goes to both uroce perf write commands. UROCE
# names the binary (default: built from this tree).
set -euo pipefail
cd "$(dirname "$0")/.."
q=${1:?usage: queues.sh QUEUES [uroce perf write flags]}
shift
uroce=${UROCE:-}
if [ -z "$uroce" ]; then
	uroce=$(mktemp -d)/uroce
	go build -o "$uroce" ./cmd/uroce
fi
ip netns add uroce-qa
ip netns add uroce-qb
server=
cleanup() {
	[ -z "$server" ] || kill "$server" 2>/dev/null || true
	ip netns del uroce-qa 2>/dev/null || true
	ip netns del uroce-qb 2>/dev/null || true
}
trap cleanup EXIT
ip link add uqa0 numtxqueues "$q" numrxqueues "$q" netns uroce-qa type veth \
	peer name uqb0 numtxqueues "$q" numrxqueues "$q" netns uroce-qb
for end in a b; do
	ip -n uroce-q$end link set lo up
	ip -n uroce-q$end link set uq${end}0 mtu 9000 up
done
ip -n uroce-qa addr add 192.0.2.1/24 dev uqa0
ip -n uroce-qb addr add 192.0.2.2/24 dev uqb0
ip netns exec uroce-qb "$uroce" perf write -d uqb0 "$@" >/dev/null 2>&1 &
server=$!
sleep 0.5
ip netns exec uroce-qa "$uroce" perf write -d uqa0 --stats "$@" 192.0.2.2 2>&1 |
	grep -E '^ *[0-9]+ +[0-9]+ |queue [0-9]+:|counters:'
wait "$server" || true
server=
