package interop

import (
	"fmt"
	"testing"
)

// The stock programs on uroce: Debian's ibverbs-utils and perftest on the
// host, unmodified, through uroce's libibverbs.so.1 and the daemon
// (`uroce run`), against the same programs on rdma_rxe.

// libDev is the device the daemon serves (uroce daemon's default name).
const libDev = "uroce0"

// libPP is ppStep with the stock ibv_TOOL_pingpong on uroce's side too.
func libPP(tool, args string, guestClient bool) step {
	s := ppStep(tool, args, guestClient)
	name := "lib-" + s.name
	s.name = name
	s.uroce = splitArgs(fmt.Sprintf("ibv_%s_pingpong -d %s -g 1 -c %s", tool, libDev, args))
	nqp := 1
	if q := flagValue(args, "-q"); q != "" {
		fmt.Sscan(q, &nqp)
	}
	s.check = func(t *testing.T, g, u string) { checkPingpong(t, name, tool, g, u, nqp) }
	return s
}

// libPerf is perfStep with the stock perftest program on uroce's side too.
// As the READ requester (ib_read_bw and ib_read_lat against the guest's
// server) uroce's side waits 537 ms for a response (-u 17) rather than
// perftest's 67 ms, as readLossBoth explains: the emulated guest, on a
// loaded machine, stalls longer than that now and then, and each stall
// costs one of the seven retries.
func libPerf(tool perfTool, args string, guestClient bool) step {
	s := perfStep(tool, args, guestClient)
	name := "lib-" + s.name
	s.name = name
	extra := ""
	if !guestClient && (tool == readBW || tool == readLat) {
		extra = " -u 17"
	}
	s.uroce = splitArgs(fmt.Sprintf("%s -d %s -x 1 -F %s%s", tool.stock, libDev, args, extra))
	s.check = func(t *testing.T, g, u string) { checkPerf(t, name, tool, guestClient, g, u) }
	return s
}

func libPPBoth(tool, args string) []step {
	return both(func(gc bool) step { return libPP(tool, args, gc) })
}

func libPerfBoth(tool perfTool, args string) []step {
	return both(func(gc bool) step { return libPerf(tool, args, gc) })
}

// flagValue returns the word after flag in args, or "".
func flagValue(args, flag string) string {
	w := splitArgs(args)
	for i := 0; i+1 < len(w); i++ {
		if w[i] == flag {
			return w[i+1]
		}
	}
	return ""
}

// TestLibverbs runs the stock pingpong and perftest programs through
// uroce's libibverbs against rdma_rxe, both ways, at path MTU 1024:
// every pingpong (also with completion events, -e), and the bandwidth
// and latency tools. Like TestDaemon it runs alone.
func TestLibverbs(t *testing.T) {
	g := group{mtu: 1500, pcap: "libverbs1024.pcap", daemon: true, stock: true, steps: concat(
		libPPBoth("rc", "-n 50 -s 4096"),
		libPPBoth("rc", "-e -n 20 -s 100"),
		libPPBoth("rc", "-N -n 20 -s 4096"), // the new post send API (ibv_wr_*) through uroce's library
		libPPBoth("uc", "-n 20 -s 4097"),
		libPPBoth("ud", "-n 20 -s 1000"),
		[]step{libPP("ud", "-e -n 10 -s 1", false)},
		libPPBoth("srq", "-n 40 -s 64 -q 4"),
		[]step{libPerf(writeBW, "-n 200 -s 65536", false), libPerf(writeBW, "-n 5 -s 1048576", true)},
		[]step{libPerf(readBW, "-n 20 -s 1048576", false), libPerf(readBW, "-n 100 -s 13", true)},
		libPerfBoth(sendBW, "-n 100 -s 4096"),
		libPerfBoth(atomicBW, "-n 200"),
		[]step{libPerf(writeLat, "-n 50 -s 2", false), libPerf(writeLat, "-n 20 -s 65537", true)},
		[]step{libPerf(readLat, "-n 20 -s 65536", false), libPerf(readLat, "-n 50 -s 1", true)},
		[]step{libPerf(sendLat, "-n 50 -s 5", false), libPerf(sendLat, "-n 20 -s 100000", true)},
	)}
	g.run(t)
}

// TestLibverbs4096 is TestLibverbs at path MTU 4096 (netdev MTU 9000).
func TestLibverbs4096(t *testing.T) {
	g := group{mtu: 9000, pcap: "libverbs4096.pcap", daemon: true, stock: true, steps: concat(
		libPPBoth("rc", "-m 4096 -n 5 -s 1048576"),
		libPPBoth("uc", "-m 4096 -n 20 -s 9000"),
		libPPBoth("ud", "-n 20 -s 4096"),
		[]step{libPP("srq", "-m 4096 -n 30 -s 4096 -q 3", true)},
		libPerfBoth(writeBW, "-n 10 -s 1048576"),
		libPerfBoth(readBW, "-n 10 -s 1048576"),
		libPerfBoth(sendBW, "-n 50 -s 65536"),
		[]step{libPerf(atomicBW, "-n 50", true)},
		[]step{libPerf(writeLat, "-n 50 -s 4097", false)},
		[]step{libPerf(readLat, "-n 50 -s 4096", true)},
		[]step{libPerf(sendLat, "-n 50 -s 4095", false)},
	)}
	g.run(t)
}
