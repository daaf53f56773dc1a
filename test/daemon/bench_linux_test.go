package daemon_test

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkVeth runs perftest-style tools in-process and through the
// daemons on the same veth pair, in one run: first each tool opening the
// interface itself, then the daemons started on the two ends and the same
// tools on them with --daemon, then the stock perftest programs with the
// same arguments through uroce's libibverbs (`uroce run`; when the
// libraries were built). Each figure is what the tool's client prints;
// run it once:
//
//	go test -run '^$' -bench Veth -benchtime 1x -v ./test/daemon
func BenchmarkVeth(b *testing.B) {
	n := newNetDaemons(b, 9000, false)
	type tool struct {
		name string
		args []string
		unit string
	}
	tools := []tool{
		{"write64k", []string{"perf", "write", "-s", "65536", "-n", "20000", "--report_gbits"}, "Gbit/s"},
		{"write64B-rate", []string{"perf", "write", "-s", "64", "-n", "300000"}, "Mmsg/s"},
		{"write64B-lat", []string{"perf", "write", "--lat", "-s", "64", "-n", "20000"}, "µs-typical"},
	}
	paths := []string{"inprocess", "daemon"}
	if haveLib {
		paths = append(paths, "libibverbs")
	}
	for _, path := range paths {
		if path == "daemon" {
			n.Start(0)
			n.Start(1)
		}
		for k, tl := range tools {
			b.Run(tl.name+"/"+path, func(b *testing.B) {
				port := strconv.Itoa(18700 + k)
				srvArgs := append(append([]string{}, tl.args...), "-p", port)
				cliArgs := append(append([]string{}, tl.args...), "-p", port, n.IP[0].String())
				var srv, cli *run
				switch {
				case path == "libibverbs":
					// perf write [--lat] → ib_write_bw / ib_write_lat -d uroce0
					stock := func(args []string) []string {
						prog, rest := "ib_write_bw", args[2:]
						if rest[0] == "--lat" {
							prog, rest = "ib_write_lat", rest[1:]
						}
						return append([]string{prog, "-d", "uroce0", "-x", "1", "-F"}, rest...)
					}
					srv = n.stockTool(0, stock(srvArgs)...)
					time.Sleep(500 * time.Millisecond)
					cli = n.stockTool(1, stock(cliArgs)...)
				case path == "daemon":
					srv = n.launch(0, append(srvArgs, daemonFlag(n, 0))...)
					time.Sleep(300 * time.Millisecond)
					cli = n.launch(1, append(cliArgs, daemonFlag(n, 1))...)
				default:
					srv = n.launchRoot(0, append(srvArgs, "-d", n.Dev[0], "--xdp-mode", "generic")...)
					time.Sleep(500 * time.Millisecond)
					cli = n.launchRoot(1, append(cliArgs, "-d", n.Dev[1], "--xdp-mode", "generic")...)
				}
				for _, r := range []*run{cli, srv} {
					if err := r.wait(b, 5*time.Minute); err != nil {
						b.Fatalf("%v: %v\n%s", r.cmd.Args, err, r.out.String())
					}
				}
				v, err := figure(cli.out.String(), tl.unit)
				if err != nil {
					b.Fatalf("%v\n%s", err, cli.out.String())
				}
				b.ReportMetric(v, tl.unit)
			})
		}
	}
}

// launchRoot runs a uroce tool in namespace i as root (it opens the
// interface itself).
func (n *net2) launchRoot(i int, args ...string) *run {
	r := &run{cmd: exec.Command("ip", append([]string{"netns", "exec", n.NS[i].Name(), uroceBin}, args...)...)}
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	if err := r.cmd.Start(); err != nil {
		n.T.Fatal(err)
	}
	return r
}

// figure reads the result row of a perftest report: BW average (Gb/s),
// MsgRate (Mpps) or t_typical (µs).
func figure(out, unit string) (float64, error) {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.Contains(l, "#bytes") || i+1 >= len(lines) {
			continue
		}
		f := strings.Fields(lines[i+1])
		col := map[string]int{"Gbit/s": 3, "Mmsg/s": 4, "µs-typical": 4}[unit]
		if len(f) <= col {
			break
		}
		return strconv.ParseFloat(f[col], 64)
	}
	return 0, strconv.ErrSyntax
}
