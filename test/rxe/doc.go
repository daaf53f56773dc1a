// Package rxe runs real Linux rdma_rxe peers for uroce's interoperability
// tests.
//
// Each peer is a QEMU guest (TCG) booted from Debian's own kernel package with
// Debian's rdma-core, ibverbs-utils, perftest, rdmacm-utils, iproute2 and
// tcpdump inside. The guest creates rxe0 on its virtio NIC, prints a READY
// line on its serial console once the port is ACTIVE with its IPv4 GID
// (::ffff:a.b.c.d at GID index 1), runs a shell script handed over through
// QEMU's fw_cfg, prints the script's exit status and powers off.
//
// The guest image is made by build-image.sh (embedded in this package) and
// cached between runs under a directory keyed by the kernel version; see
// BuildImage and README.md.
//
// A Net is a private network namespace with a bridge (STP off, MTU 9000, no
// uplink, IPv6 off, arp_ignore=1 and arp_announce=2). Guests join it through
// tap devices; uroce joins it through a veth pair made with AddHostVeth, whose
// free end stays in the namespace for uroce to attach to. Guests get
// 192.0.2.1, 192.0.2.2, ... and MAC 52:54:00:00:02:NN (NN the last octet);
// uroce uses 192.0.2.3 and up. Capture records the bridge with tcpdump.
//
// Everything is removed when the test ends: QEMU and tcpdump processes are
// killed by PID, then the namespace is deleted. Tests skip cleanly when the
// host cannot run peers (not root, no QEMU, image cannot be built).
//
//	n := rxe.NewNet(t, rxe.NetOptions{})
//	srv, err := n.StartPeer(ctx, rxe.PeerOptions{Script: "ibv_rc_pingpong -d rxe0 -g 1 -n 5 -s 64"})
//	...
//	res, err := srv.Wait(ctx) // res.Output, res.ExitCode
package rxe
