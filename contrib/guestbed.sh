#!/usr/bin/env bash
# guestbed.sh: uroce and rdma_rxe side by side inside the same two QEMU
# guests (TCG), in one run: rxe↔rxe, uroce↔rxe, uroce↔uroce and rxe↔uroce with
# ib_write_bw and ib_read_bw at 64 KiB and ib_write_lat at 64 B, and a
# Markdown table of the client's figures with their ratios to rxe↔rxe.
#
#   sudo contrib/guestbed.sh              # ~1000 iterations per tool
#   sudo ITERS=2000 LAT_ITERS=5000 contrib/guestbed.sh
#
# As root, on a Debian 12 host (the guest image is built and cached by
# test/rxe; see test/rxe/README.md). It runs TestGuestBed in test/guestbed;
# LOGDIR keeps the guests' serial logs and scripts. Under TCG the absolute
# figures mean little: compare the pairings of one run.
set -euo pipefail
cd "$(dirname "$0")/.."
export UROCE_GUESTBED=1
export UROCE_GUESTBED_ITERS=${ITERS:-1000}
export UROCE_GUESTBED_LAT_ITERS=${LAT_ITERS:-1000}
export UROCE_GUESTBED_XDP_MODE=${XDP_MODE:-generic}
[ -z "${LOGDIR:-}" ] || export UROCE_RXE_LOGDIR=$LOGDIR
exec go test -count=1 -timeout "${TIMEOUT:-40m}" -v -run '^TestGuestBed$' ./test/guestbed
