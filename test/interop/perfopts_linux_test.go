package interop

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// TestPerftestOptions runs uroce perf's UD mode (-c UD), duration mode
// (-D) of ib_send_bw and the latency tools, bidirectional tests (-b),
// several QPs (-q), --report_gbits and -t/-Q both ways against the stock
// tools on rdma_rxe, at path MTU 1024.
func TestPerftestOptions(t *testing.T) {
	t.Parallel()
	g := group{mtu: 1500, pcap: "perfopts.pcap", steps: concat(
		// UD: the default size of ib_send_bw is cut to the MTU, both
		// sides saying so; an explicit size below it is kept.
		udBoth(sendBW, "-c UD -n 1000", " Max msg size in UD is MTU 1024\n Changing to this MTU\n"),
		udBoth(sendBW, "-c UD -n 500 -s 512", ""),
		udBoth(sendLat, "-c UD -n 200 -s 64", ""),
		// Duration mode.
		perfBoth(sendBW, "-D 2 -s 4096"),
		durLatBoth(writeLat, "-D 2 -s 64"),
		durLatBoth(readLat, "-D 2 -s 64"),
		durLatBoth(sendLat, "-D 2 -s 64"),
		// Bidirectional. uroce's READ requester waits 537 ms for a
		// response (-u 17) rather than perftest's 67 ms: the guest,
		// serving READs while it makes its own, answers a re-request
		// of the 1 MiB of READs in flight (16 of 64 KiB) more slowly
		// than that, so that every retry timed out again (see
		// readLossBoth).
		duplexBoth(writeBW, "-b -n 300 -s 65536"),
		duplexBoth(sendBW, "-b -n 1000 -s 4096"),
		duplexBoth(readBW, "-b -n 200 -s 65536", "-u", "17"),
		// More QPs than one, the units, the send queue depth and CQ
		// moderation.
		perfBoth(writeBW, "-q 2 -n 200 -s 4096"),
		// Two QPs' READs in flight take the guest longer than 67 ms to
		// answer when the machine is busy: uroce waits 537 ms (-u 17),
		// as for -b above.
		perfBoth(readBW, "-q 2 -n 50 -s 65536", "-u", "17"),
		perfBoth(sendBW, "-q 2 -n 200 -s 1024"),
		perfBoth(atomicBW, "-q 2 -n 200"),
		perfBoth(writeBW, "--report_gbits -n 200 -s 65536"),
		perfBoth(writeBW, "-t 32 -Q 4 -n 400 -s 1024"),
		perfBoth(readBW, "-w 0.5 -y 0.00001 -n 50 -s 65536"), // the verifier's limits, met
	)}
	g.run(t)
}

// udBoth is perfBoth over UD: both sides also say so, and print said
// (when not empty).
func udBoth(tool perfTool, args, said string) []step {
	return both(func(gc bool) step {
		s := perfStep(tool, args, gc)
		wants := []string{" Connection type : UD\t\t"}
		if said != "" {
			wants = append(wants, said)
		}
		return outputHas(s, wants, wants)
	})
}

// latDurLineRE is a latency tool's duration-mode result line.
var latDurLineRE = regexp.MustCompile(`(?m)^ (\d+) +(\d+) +(\d+\.\d\d|inf) +(\d+\.\d\d) *$`)

// durLatBoth is a latency tool in duration mode both ways: the sides that
// measure (both for ib_write_lat and ib_send_lat, the client for
// ib_read_lat) print the duration table with some iterations.
func durLatBoth(tool perfTool, args string) []step {
	return both(func(gc bool) step {
		s := perfStep(tool, args, gc)
		name := s.name
		s.check = func(t *testing.T, g, u string) {
			t.Helper()
			checkPerfAddrs(t, name, g, u)
			const header = " #bytes        #iterations       t_avg[usec]    tps average\n"
			sides := map[string]string{"guest": g, "uroce": u}
			if tool == readLat {
				// Only the client measures.
				delete(sides, "guest")
				if gc {
					sides = map[string]string{"guest": g}
				}
			}
			for who, out := range sides {
				if !strings.Contains(out, header) {
					t.Errorf("%s: %s printed no duration header", name, who)
				}
				m := latDurLineRE.FindAllStringSubmatch(out, -1)
				if len(m) != 1 || m[0][2] == "0" {
					t.Errorf("%s: %s's duration lines %q: want one with iterations", name, who, m)
					continue
				}
				recordFigure(t, fmt.Sprintf("%s/%s", name, who), fmt.Sprintf("%s iterations, t_avg %s us, %s tps", m[0][2], m[0][3], m[0][4]))
			}
		}
		return s
	})
}

// duplexBoth is a bandwidth tool with -b both ways: each side prints one
// line, its own iterations with both sides' rates summed, so that both
// print the same line.
func duplexBoth(tool perfTool, args string, uroceExtra ...string) []step {
	return both(func(gc bool) step {
		s := perfStep(tool, args, gc, uroceExtra...)
		name := s.name
		s.check = func(t *testing.T, g, u string) {
			t.Helper()
			checkPerfAddrs(t, name, g, u)
			gm, um := bwLineRE.FindAllStringSubmatch(g, -1), bwLineRE.FindAllStringSubmatch(u, -1)
			if len(gm) != 1 || len(um) != 1 {
				t.Errorf("%s: result lines: guest %q, uroce %q; want one each", name, gm, um)
				return
			}
			if gm[0][0] != um[0][0] {
				t.Errorf("%s: the sides' lines differ:\nguest %q\nuroce %q", name, gm[0][0], um[0][0])
			}
			recordFigure(t, fmt.Sprintf("%s/%s", name, um[0][1]), fmt.Sprintf("both directions: %s MB/s average, %s MB/s peak, %s Mpps", um[0][4], um[0][3], um[0][5]))
		}
		return outputHas(s, []string{" Bidirectional BW Test\n"}, []string{" Bidirectional BW Test\n"})
	})
}
