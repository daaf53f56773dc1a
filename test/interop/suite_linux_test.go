package interop

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// both returns the step in both directions: rxe server and uroce client,
// then uroce server and rxe client.
func both(mk func(guestClient bool) step) []step {
	return []step{mk(false), mk(true)}
}

func ppBoth(tool, args string, extra ...string) []step {
	return both(func(gc bool) step { return ppStep(tool, args, gc, extra...) })
}

func perfBoth(tool perfTool, args string, extra ...string) []step {
	return both(func(gc bool) step { return perfStep(tool, args, gc, extra...) })
}

func concat(ss ...[]step) []step {
	var out []step
	for _, s := range ss {
		out = append(out, s...)
	}
	return out
}

// TestMTU1024 runs every tool both ways at path MTU 1024 (netdev 1500)
// without loss, with message sizes from 1 byte to 1 MiB, including sizes
// that need padding.
func TestMTU1024(t *testing.T) {
	t.Parallel()
	g := group{mtu: 1500, pcap: "mtu1024.pcap", steps: concat(
		ppBoth("rc", "-n 50 -s 4096"),
		ppBoth("rc", "-n 10 -s 1"),
		ppBoth("rc", "-N -n 20 -s 1000"), // the stock tool on rxe with the new post send API
		[]step{ppStep("rc", "-n 10 -s 13", false), ppStep("rc", "-n 3 -s 1048576", true)},
		ppBoth("uc", "-n 20 -s 4097"),
		[]step{ppStep("ud", "-n 20 -s 1024", false), ppStep("ud", "-n 20 -s 1", true)},
		ppBoth("srq", "-n 40 -s 64 -q 4"),
		[]step{perfStep(writeBW, "-n 200 -s 1", false), perfStep(writeBW, "-n 5 -s 1048576", true)},
		[]step{bigReadGS(readBW, "-n 20 -s 1048576"), perfStep(readBW, "-n 100 -s 13", true)},
		[]step{perfStep(sendBW, "-n 200 -s 3", false), perfStep(sendBW, "-n 5 -s 1048576", true)},
		perfBoth(atomicBW, "-n 200"),
		[]step{perfStep(writeLat, "-n 50 -s 2", false), perfStep(writeLat, "-n 20 -s 65537", true)},
		[]step{bigReadGS(readLat, "-n 20 -s 1048576"), perfStep(readLat, "-n 50 -s 1", true)},
		[]step{perfStep(sendLat, "-n 50 -s 5", false), perfStep(sendLat, "-n 20 -s 100000", true)},
		errorSteps(),
	)}
	g.run(t)
}

// expectNAKs checks that the step's capture shows NAKs with code (a
// bth NAK name) sent by from, and nothing else unexpected.
func expectNAKs(code, from string) func(t *testing.T, f *findings) {
	return func(t *testing.T, f *findings) {
		t.Helper()
		if f.naks[code+" from "+from] == 0 {
			t.Errorf("no %s NAK from %s in the capture: %s", code, from, f)
		}
		if n := len(f.by["rnr_nak"]); n > 0 {
			t.Errorf("unexpected RNR NAKs: %v", f.by["rnr_nak"])
		}
	}
}

// expectRNR checks that the step's capture shows RNR NAKs sent by from.
func expectRNR(from string) func(t *testing.T, f *findings) {
	return func(t *testing.T, f *findings) {
		t.Helper()
		if f.count("rnr_nak", from) == 0 {
			t.Errorf("no RNR NAK from %s in the capture: %s", from, f)
		}
	}
}

// outputHas wraps a step's check with lines both sides must print.
func outputHas(s step, guestWants, uroceWants []string) step {
	prev := s.check
	s.check = func(t *testing.T, g, u string) {
		t.Helper()
		for _, w := range guestWants {
			if !strings.Contains(g, w) {
				t.Errorf("step %s: the guest's output lacks %q", s.name, w)
			}
		}
		for _, w := range uroceWants {
			if !strings.Contains(u, w) {
				t.Errorf("step %s: uroce's output lacks %q", s.name, w)
			}
		}
		if prev != nil && s.guestExit == 0 && s.uroceExit == 0 {
			prev(t, g, u)
		}
	}
	return s
}

// errorSteps are the RNR and remote access error cases.
func errorSteps() []step {
	var out []step
	// A uroce receiver that posts its receives only 200 ms into the
	// run: the rxe sender meets RNR NAKs, retries (rnr_retry 7:
	// forever) and completes.
	s := perfStep(sendBW, "-n 200 -s 64", true, "--late-recv", "200ms")
	s.name = "rnr-uroce-receiver"
	s.capture = expectRNR(uroceAddr)
	out = append(out, s)
	// An rxe receiver with one receive posted at a time and a uroce
	// sender with rnr_retry 0: uroce's SEND fails with "RNR retry
	// counter exceeded" (13); the rxe server waits for messages that
	// never come until its timeout.
	s = perfStep(sendBW, "-n 200 -s 64 -r 1", false, "--rnr-retry", "0")
	s.uroce = removeArgs(s.uroce, "-r", "1")
	s.name = "rnr-rxe-receiver"
	s.uroceExit, s.guestExit, s.guestTimeout = 1, 124, 12*time.Second
	s.capture = expectRNR(guestAddr)
	out = append(out, outputHas(s, nil, []string{" Failed status 13: wr_id 0"}))
	// A uroce client writing with a bad R_Key: rxe NAKs with a remote
	// access error, uroce's WRITE completes with status 10; the rxe
	// server loses its client and fails.
	s = perfStep(writeBW, "-n 20 -s 64", false, "--bad-rkey")
	s.name = "badrkey-uroce-writer"
	s.uroceExit, s.guestExit = 1, 1
	s.capture = expectNAKs("remote_access_error", guestAddr)
	out = append(out, outputHas(s, []string{"Failed to exchange data between server and clients"}, []string{" Failed status 10: wr_id 0"}))
	// A uroce server advertising a bad R_Key: uroce NAKs the rxe
	// client's WRITEs and READs with a remote access error, and the
	// stock client reports status 10.
	for _, tool := range []perfTool{writeBW, readBW} {
		s = perfStep(tool, "-n 20 -s 64", true, "--bad-rkey")
		s.name = "badrkey-uroce-target-" + tool.ours
		s.uroceExit, s.guestExit = 1, 1
		s.capture = expectNAKs("remote_access_error", uroceAddr)
		out = append(out, outputHas(s, []string{" Completion with error at client\n Failed status 10: wr_id 0"}, nil))
	}
	return out
}

// removeArgs returns args without the first occurrence of the sequence rm.
func removeArgs(args []string, rm ...string) []string {
	for i := 0; i+len(rm) <= len(args); i++ {
		if strings.Join(args[i:i+len(rm)], "\x00") == strings.Join(rm, "\x00") {
			return append(append([]string(nil), args[:i]...), args[i+len(rm):]...)
		}
	}
	return args
}

// TestMTU4096 runs the tools both ways at path MTU 4096 (netdev 9000),
// with messages up to 1 MiB, a write_bw over every size (-a), post lists
// with inline data, UC QPs, ib_atomic_lat, and duration mode.
func TestMTU4096(t *testing.T) {
	t.Parallel()
	g := group{mtu: 9000, pcap: "mtu4096.pcap", steps: concat(
		ppBoth("rc", "-m 4096 -n 5 -s 1048576"),
		ppBoth("rc", "-m 4096 -n 20 -s 5001"),
		ppBoth("uc", "-m 4096 -n 20 -s 9000"),
		ppBoth("ud", "-n 20 -s 4096"),
		ppBoth("srq", "-m 4096 -n 30 -s 4096 -q 3"),
		perfBoth(writeBW, "-n 10 -s 1048576"),
		readLossBoth("-n 10 -s 1048576"),
		perfBoth(sendBW, "-n 50 -s 65536"),
		perfBoth(atomicBW, "-n 50"),
		[]step{perfStep(writeLat, "-n 5 -s 1048576", false), perfStep(writeLat, "-n 50 -s 4097", true)},
		[]step{perfStep(readLat, "-n 50 -s 4096", false), perfStep(readLat, "-n 5 -s 1048576", true)},
		[]step{perfStep(sendLat, "-n 5 -s 1048576", false), perfStep(sendLat, "-n 50 -s 4095", true)},
		[]step{perfStep(writeBW, "-a -n 5", false)},
		// Post lists and inline data (rdma_rxe's perftest disables
		// inline: "Device not recognized to implement inline feature").
		perfBoth(writeBW, "-n 800 -s 64 -l 8 -I 64"),
		perfBoth(sendBW, "-n 400 -s 200 -l 4 -I 220"),
		// UC QPs (-c UC).
		perfBoth(writeBW, "-c UC -n 300 -s 4096"),
		perfBoth(sendBW, "-c UC -n 300 -s 1000"),
		perfBoth(writeLat, "-c UC -n 100 -s 64"),
		perfBoth(sendLat, "-c UC -n 50 -s 3000"),
		perfBoth(atomicLat, "-n 200"),
		// Duration mode (-D).
		perfBoth(writeBW, "-D 3 -s 65536"),
		perfBoth(readBW, "-D 3 -s 65536"),
		perfBoth(atomicLat, "-n 100 -A CMP_AND_SWAP"),
	)}
	g.run(t)
}

// lossSteps are the reliable-transport steps of the loss tests: each
// completes, pingpong data is checked message by message and the atomic
// server (uroce) checks that every addition happened exactly once.
func lossSteps(extra ...string) []step {
	atomicGS := perfStep(atomicBW, "-n 300", false, extra...)
	atomicGC := perfStep(atomicBW, "-n 300", true, append([]string{"--verify"}, extra...)...)
	atomicGC = outputHas(atomicGC, nil, []string{"each exactly once"})
	return concat(
		ppBoth("rc", "-n 200 -s 4096", extra...),
		ppBoth("srq", "-n 100 -s 2000 -q 2", extra...),
		perfBoth(writeBW, "-n 300 -s 8192", extra...),
		readLossBoth("-n 300 -s 8192", extra...),
		readLossBoth("-n 5 -s 1048576", extra...),
		perfBoth(sendBW, "-n 300 -s 4096", extra...),
		[]step{atomicGS, atomicGC},
		perfBoth(writeLat, "-n 100 -s 1500", extra...),
		perfBoth(readLat, "-n 100 -s 3000", extra...),
		perfBoth(sendLat, "-n 100 -s 2500", extra...),
	)
}

// readLossBoth is ib_read_bw both ways, uroce's READ requester (the
// rxe-server step) waiting 537 ms for a response (-u 17) rather than
// perftest's 67 ms: the emulated guest, sharing two CPUs with the other
// groups, stalls longer than that now and then, and a requester that
// takes every stall for a loss runs out of retries (retry_cnt 7 means
// seven) on READs of 1 MiB that lose a packet every few dozen. rdma_rxe's
// requester, in the other step, retries forever.
func readLossBoth(args string, extra ...string) []step {
	return []step{perfStep(readBW, args, false, append([]string{"-u", "17"}, extra...)...), perfStep(readBW, args, true, extra...)}
}

// bigReadGS is the step of uroce's READ requester reading 1 MiB messages
// from the guest's server, waiting 537 ms for a response (-u 17), for the
// reason readLossBoth gives: each of the guest's stalls longer than
// perftest's 67 ms costs one of the seven retries, and a READ of 1 MiB
// spans a thousand responses. TestDaemon's failed once so, at perftest's
// timeout, on a loaded machine: eight ACK timeouts in a row, no response
// between them, within 1.2 s.
func bigReadGS(tool perfTool, args string) step {
	return perfStep(tool, args, false, "-u", "17")
}

// lossCapture accepts what loss brings (NAKs of PSN sequence errors,
// retransmissions) but no other NAK and no RNR NAK.
func lossCapture(t *testing.T, f *findings) {
	t.Helper()
	for code, n := range f.naks {
		if !strings.HasPrefix(code, "psn_sequence_error ") {
			t.Errorf("%d NAKs %q: %v", n, code, f.msgs)
		}
	}
	if len(f.by["rnr_nak"]) > 0 {
		t.Errorf("RNR NAKs: %v", f.by["rnr_nak"])
	}
}

// TestRxeLoss loses 3% of what the rxe guest sends (netem on its eth0):
// uroce recovers from lost requests, responses and ACKs, and rxe from
// lost ACKs and NAKs of uroce's.
func TestRxeLoss(t *testing.T) {
	t.Parallel()
	steps := lossSteps()
	for i := range steps {
		steps[i].capture = lossCapture
		n := steps[i].name
		// The stock side ends on a receive and leaves at once: the
		// ACK of uroce's last message may be lost with it.
		if strings.HasPrefix(n, "pp-rc-gc") || strings.HasPrefix(n, "pp-srq-") || strings.HasPrefix(n, "ib_write_lat-gs") {
			steps[i].peerMayLeave = true
		}
	}
	g := group{mtu: 1500, netem: "loss 3%", pcap: "rxe-loss.pcap", steps: steps}
	g.run(t)
}

// TestRxeReadLoss runs the READ tools both ways with 5% of the frames of
// both directions lost: netem on the rxe guest's eth0 and uroce's own
// fault injection. uroce's READ requester asks again for what is missing
// only, and its READ responder answers rxe's re-requests.
func TestRxeReadLoss(t *testing.T) {
	t.Parallel()
	drop := []string{"--drop", "0.05"}
	steps := concat(
		readLossBoth("-n 300 -s 8192", drop...),
		readLossBoth("-n 5 -s 1048576", drop...),
		perfBoth(readLat, "-n 100 -s 3000", drop...),
	)
	for i := range steps {
		steps[i].capture = lossCapture
		steps[i].name = "read5-" + steps[i].name
	}
	g := group{mtu: 1500, netem: "loss 5%", pcap: "rxe-read-loss.pcap", steps: steps}
	g.run(t)
}

// TestUroceLoss loses 3% of what uroce sends and duplicates and reorders
// 1% (uroce's fault injection): rxe handles the gaps, duplicates and
// reordering, and uroce recovers its own losses.
func TestUroceLoss(t *testing.T) {
	t.Parallel()
	steps := lossSteps("--drop", "0.03", "--dup", "0.01", "--reorder", "0.01")
	for i := range steps {
		steps[i].capture = lossCapture
	}
	g := group{mtu: 1500, pcap: "uroce-loss.pcap", steps: steps}
	g.run(t)
}

// TestDaemon runs uroce's tools as unprivileged clients of a uroce daemon
// on the host's interface, each step a new client process, against the
// stock tools on rdma_rxe: pingpong of every kind and perftest both ways.
// It runs alone, before the other groups: the daemon's polling takes CPU
// that the loss groups' emulated guests need to answer in time.
// TestDaemonTwoClients: two client processes on one daemon, each moving
// data with its own rdma_rxe server at the same time (two ib_write_bw
// servers on the guest); both finish with their messages, and the
// daemon's session handling keeps them apart.
func TestDaemonTwoClients(t *testing.T) {
	srv := "ib_write_bw -d rxe0 -x 1 -F -n 300 -s 65536"
	// Each server writes to its own file: their result lines, printed at
	// the same moment to one console, can otherwise share a line.
	st := step{name: "two-clients",
		guest:     fmt.Sprintf("sh -c '%s -p 18515 >s1.out 2>&1 & p=$!; %s -p 18516 >s2.out 2>&1; r=$?; wait $p; r2=$?; cat s1.out s2.out; exit $((r|r2))'", srv, srv),
		uroce:     splitArgs("perf write -F -n 300 -s 65536 -p 18515 --connect-wait=30s"),
		uroceAlso: splitArgs("perf write -F -n 300 -s 65536 -p 18516 --connect-wait=30s"),
		check: func(t *testing.T, g, u string) {
			if n := len(bwLineRE.FindAllString(u, -1)); n != 2 {
				t.Errorf("two clients: %d result lines, want 2:\n%s", n, u)
			}
			if n := len(bwLineRE.FindAllString(g, -1)); n != 2 {
				t.Errorf("two servers: %d result lines, want 2:\n%s", n, g)
			}
		}}
	g := group{mtu: 1500, pcap: "two-clients.pcap", daemon: true, steps: []step{st}}
	g.run(t)
}

func TestDaemon(t *testing.T) {
	g := group{mtu: 1500, pcap: "daemon.pcap", daemon: true, steps: concat(
		ppBoth("rc", "-n 50 -s 4096"),
		ppBoth("uc", "-n 20 -s 4097"),
		[]step{ppStep("ud", "-n 20 -s 1024", false), ppStep("ud", "-n 20 -s 1", true)},
		ppBoth("srq", "-n 40 -s 64 -q 4"),
		[]step{perfStep(writeBW, "-n 200 -s 65536", false), perfStep(writeBW, "-n 5 -s 1048576", true)},
		[]step{bigReadGS(readBW, "-n 20 -s 1048576"), perfStep(readBW, "-n 100 -s 13", true)},
		perfBoth(sendBW, "-n 100 -s 4096"),
		perfBoth(atomicBW, "-n 200"),
		[]step{perfStep(writeLat, "-n 50 -s 2", false), perfStep(writeLat, "-n 20 -s 65537", true)},
	)}
	g.run(t)
}
