// Package guestbed compares uroce with rdma_rxe on equal terms: both run
// inside the same pair of QEMU guests (package test/rxe), on the same
// emulated CPUs and virtio-net NICs, in one run. It has tests only.
//
// TestGuestBed boots two guests on one bridge, A (192.0.2.1) and B
// (192.0.2.2), with a static uroce binary added to their initramfs, and
// runs ib_write_bw and ib_read_bw with 64 KiB messages and ib_write_lat
// with 64-byte messages, A the client and B the server, in four pairings,
// in this order:
//
//	rxe↔rxe      the stock tools on rdma_rxe on both guests
//	uroce↔rxe    "uroce perf" on A's eth0 against the stock tool on B's rxe0
//	uroce↔uroce  "uroce perf" on both guests
//	rxe↔uroce    the stock tool on A's rxe0 against "uroce perf" on B
//
// uroce attaches to the guest's eth0 with generic XDP and AF_XDP (copy
// mode), after the guest has deleted its rxe0 from that interface: A does
// so before the second pairing, B before the third, and A adds its rxe0
// again before the fourth. Every step has its own TCP port, so a client
// can only ever meet the server of its own step.
//
// The test is opt-in: it skips unless UROCE_GUESTBED=1, and prints a table
// of the client's figures (BW average and peak, latency t_typical, t_avg
// and 99th percentile) with the ratios to rxe↔rxe. Under TCG the absolute
// figures say little; the ratios between pairings of one run are the
// result. See contrib/guestbed.sh.
package guestbed
