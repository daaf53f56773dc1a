// Package interop checks uroce against real rdma_rxe peers running the stock
// rdma-core and perftest tools, unmodified, in QEMU guests (package
// test/rxe). It has tests only.
//
// Each test boots one guest on a private bridge and runs a script of stock
// tool invocations in it while the test runs the matching "uroce pingpong"
// and "uroce perf" commands on a veth of the same bridge (192.0.2.3), one
// step after the other: for a step where the guest is the server, the test
// waits for the guest to announce it and then starts uroce's client; where
// the guest is the client, uroce's server starts and the guest's client
// retries while the connection is refused. Both sides must exit as the
// step expects and print what the stock tools print, and the capture of
// the whole run must pass "uroce pcap verify".
//
// The groups of steps cover every tool in both directions at path MTU 1024
// (netdev 1500) and 4096 (netdev 9000), message sizes from 1 byte to
// 1 MiB, loss injected in the guest (netem) and in uroce (fault
// injection), an RNR case and a remote access error.
package interop
