package daemon_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The stock programs of Debian's ibverbs-utils and perftest, unmodified,
// on both ends of the veth pair, each end through its own daemon and
// uroce's libibverbs (`uroce run`), as user nobody.

// stockTool runs PROGRAM ARGS on daemon i through `uroce run`.
func (n *net2) stockTool(i int, args ...string) *run {
	return n.launch(i, append([]string{"run", "--socket", n.Socket[i], "--"}, args...)...)
}

// stockPair runs a stock server on end 0 and its client on end 1, the
// client again while the server does not listen yet, and returns both.
func (n *net2) stockPair(t *testing.T, args ...string) (srv, cli *run) {
	t.Helper()
	srv = n.stockTool(0, args...)
	for tries := 0; ; tries++ {
		time.Sleep(200 * time.Millisecond)
		cli = n.stockTool(1, append(append([]string{}, args...), n.IP[0].String())...)
		err := cli.wait(t, 2*time.Minute)
		if err == nil || tries == 20 || !strings.Contains(cli.out.String(), "Couldn't connect to ") {
			if err != nil {
				t.Errorf("%v: %v\n%s", args, err, cli.out.String())
			}
			break
		}
	}
	if err := srv.wait(t, time.Minute); err != nil {
		t.Errorf("%v (server): %v\n%s", args, err, srv.out.String())
	}
	return srv, cli
}

var (
	ppResultRE   = regexp.MustCompile(`(?m)^(\d+) bytes in \d+\.\d\d seconds = \S+ Mbit/sec\n(\d+) iters in`)
	perfResultRE = regexp.MustCompile(`(?m)^ #bytes .*\n +(\d+) +(\d+) +\S+`)
)

// TestStockTools runs every pingpong (with and without completion
// events, with on-demand paging) and the perftest tools between two
// daemons, at path MTU 1024 and 4096, and checks what both ends report.
func TestStockTools(t *testing.T) {
	if !haveLib {
		t.Skip("skipping: " + libErr)
	}
	for _, mtu := range []int{1500, 9000} {
		t.Run(fmt.Sprint("mtu", mtu), func(t *testing.T) {
			n := newNet(t, mtu)
			m := "1024"
			if mtu == 9000 {
				m = "4096"
			}
			pp := [][]string{
				{"ibv_rc_pingpong", "-n", "200", "-s", "4096"},
				{"ibv_rc_pingpong", "-e", "-n", "100", "-s", "10000"},
				// -N: the ibv_wr_* API (ibv_create_qp_ex with send_ops_flags,
				// ibv_qp_to_qp_ex, ibv_wr_send and ibv_wr_set_sge).
				{"ibv_rc_pingpong", "-N", "-n", "200", "-s", "4096"},
				{"ibv_rc_pingpong", "-N", "-e", "-n", "100", "-s", "64"},
				{"ibv_uc_pingpong", "-n", "200", "-s", "4097"},
				{"ibv_ud_pingpong", "-n", "200", "-s", m},
				{"ibv_ud_pingpong", "-e", "-n", "100", "-s", "1"},
				{"ibv_srq_pingpong", "-n", "100", "-s", "64", "-q", "4"},
				{"ibv_srq_pingpong", "-e", "-n", "50", "-s", "2000", "-q", "2"},
				// On-demand paging: -o registers the buffer with
				// IBV_ACCESS_ON_DEMAND, -O the implicit region, -P
				// prefetches it with ibv_advise_mr.
				{"ibv_rc_pingpong", "-o", "-n", "100", "-s", "4096"},
				{"ibv_rc_pingpong", "-O", "-P", "-n", "100", "-s", "4096"},
			}
			for _, args := range pp {
				args := append([]string{args[0], "-d", "uroce0", "-g", "1", "-c", "-m", m}, args[1:]...)
				if args[0] == "ibv_ud_pingpong" { // no -m: the UD path MTU is the port's
					args = append(args[:6], args[8:]...)
				}
				srv, cli := n.stockPair(t, args...)
				for _, r := range []*run{srv, cli} {
					mm := ppResultRE.FindStringSubmatch(r.out.String())
					iters := args[len(args)-1]
					for i, a := range args {
						if a == "-n" {
							iters = args[i+1]
						}
					}
					if mm == nil || mm[2] != iters {
						t.Errorf("%v: no result of %s iterations:\n%s", args, iters, r.out.String())
					}
				}
			}
			// perftest takes the ibv_wr_* API only for the mlx5 and EFA
			// parts it knows by vendor_part_id: on uroce it reports
			// "ibv_wr* API : OFF" and posts with ibv_post_send.
			perf := [][]string{
				{"ib_write_bw", "-n", "2000", "-s", "65536"},
				{"ib_write_bw", "-a", "-n", "50"},
				{"ib_read_bw", "-n", "1000", "-s", "65536"},
				// 128 READs asked for at once, of up to 8 MiB: the READ
				// window keeps the responses to what the receiving
				// daemon takes (without it: retry exceeded).
				{"ib_read_bw", "-a", "-n", "200"},
				{"ib_send_bw", "-n", "1000", "-s", "65536"},
				{"ib_send_bw", "-c", "UD", "-n", "1000", "-s", m},
				{"ib_atomic_bw", "-n", "2000"},
				{"ib_write_lat", "-n", "500", "-s", "64"},
				{"ib_read_lat", "-n", "500", "-s", "64"},
				{"ib_send_lat", "-n", "500", "-s", "64"},
				{"ib_write_bw", "-n", "200", "-s", "1048576", "-q", "2"},
				{"ib_write_bw", "--odp", "-n", "500", "-s", "65536"},
				{"ib_read_bw", "--odp", "-n", "500", "-s", "65536"},
			}
			for _, args := range perf {
				args := append([]string{args[0], "-d", "uroce0", "-x", "1", "-F", "-m", m}, args[1:]...)
				_, cli := n.stockPair(t, args...)
				if !perfResultRE.MatchString(cli.out.String()) {
					t.Errorf("%v: no result line:\n%s", args, cli.out.String())
				}
			}
			for i := range 2 {
				st := n.stat(i)
				for deadline := time.Now().Add(10 * time.Second); len(st.QPs) != 0 && time.Now().Before(deadline); {
					time.Sleep(50 * time.Millisecond) // the last programs' sessions end
					st = n.stat(i)
				}
				if len(st.QPs) != 0 {
					t.Errorf("daemon %d keeps %d QPs of programs that ended", i, len(st.QPs))
				}
				for _, c := range []string{"rcv_icrc_err", "rcv_malformed"} {
					if v := st.Device.Counters[c]; v != 0 {
						t.Errorf("daemon %d: %s %d", i, c, v)
					}
				}
			}
		})
	}
}

// TestStockLoopback runs stock programs with both ends on one daemon, as
// on one host with rdma_rxe: the device loops back what it sends to its
// own address (verbs, perftest, and the RDMA CM: rping), and multicast
// to a group one of its QPs joined (mckey's sender and receiver).
func TestStockLoopback(t *testing.T) {
	if !haveLib {
		t.Skip("skipping: " + libErr)
	}
	n := newNet(t, 1500)
	addr := n.IP[0].String()
	for _, c := range []struct {
		srv, cli []string
		want     *regexp.Regexp
	}{
		{[]string{"ibv_rc_pingpong", "-g", "1", "-c", "-n", "200", "-s", "4096"}, nil, ppResultRE},
		{[]string{"ibv_ud_pingpong", "-g", "1", "-c", "-n", "200", "-s", "1024"}, nil, ppResultRE},
		{[]string{"ib_write_bw", "-d", "uroce0", "-x", "1", "-F", "-n", "1000", "-s", "65536"}, nil, perfResultRE},
		{[]string{"ib_read_bw", "-d", "uroce0", "-x", "1", "-F", "-n", "1000", "-s", "65536"}, nil, perfResultRE},
		{[]string{"rping", "-s", "-a", addr, "-p", "7301", "-C", "10", "-S", "100", "-v", "-V"},
			[]string{"rping", "-c", "-a", addr, "-p", "7301", "-C", "10", "-S", "100", "-v", "-V"}, rpingLineRE},
		{[]string{"stdbuf", "-oL", "mckey", "-m", "239.0.2.79", "-b", addr},
			[]string{"stdbuf", "-oL", "mckey", "-m", "239.0.2.79", "-s", "-b", addr}, regexp.MustCompile(`data transfers complete`)},
	} {
		cli := c.cli
		if cli == nil {
			cli = append(append([]string{}, c.srv...), addr)
		}
		s := n.stockTool(0, c.srv...)
		var r *run
		for tries := 0; tries < 20; tries++ {
			time.Sleep(300 * time.Millisecond)
			r = n.stockTool(0, cli...)
			err := r.wait(t, time.Minute)
			o := r.out.String()
			if err == nil || !(strings.Contains(o, "Couldn't connect") || strings.Contains(o, "REJECTED") ||
				strings.Contains(o, "UNREACHABLE")) {
				if err != nil {
					t.Errorf("%v: %v\n%s", cli, err, short(o))
				}
				break
			}
		}
		if err := s.wait(t, time.Minute); err != nil {
			t.Errorf("%v (server): %v\n%s", c.srv, err, short(s.out.String()))
		}
		if !c.want.MatchString(r.out.String()) {
			t.Errorf("%v: no result:\n%s", cli, short(r.out.String()))
		}
	}
	st := n.stat(0)
	if v := st.Device.Counters["loopback_pkts"]; v == 0 {
		t.Errorf("loopback_pkts %d", v)
	}
}
