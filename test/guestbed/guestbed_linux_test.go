package guestbed

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/uroce/uroce/test/rxe"
)

// Addresses of the two guests: A runs the clients, B the servers.
const (
	addrA = "192.0.2.1"
	addrB = "192.0.2.2"
)

// A tool is one perftest program and its message size.
type tool struct {
	name string // the stock program
	verb string // uroce perf's
	lat  bool
	size int
}

var tools = []tool{
	{"ib_write_bw", "write", false, 65536},
	{"ib_read_bw", "read", false, 65536},
	{"ib_write_lat", "write", true, 64},
}

// A pairing says what runs on each guest: rdma_rxe's stock tools or uroce.
type pairing struct {
	name           string
	uroceA, uroceB bool
}

var pairings = []pairing{
	{"rxe↔rxe", false, false},
	{"uroce↔rxe", true, false},
	{"uroce↔uroce", true, true},
	// Last, so that A's rxe0 coming back does not touch the others.
	{"rxe↔uroce", false, true},
}

// step is one tool run in one pairing.
type step struct {
	p    pairing
	t    tool
	port int
}

// key names the step in the scripts' markers, e.g. uroce-rxe-ib_read_bw.
func (s step) key() string { return strings.ReplaceAll(s.p.name, "↔", "-") + "-" + s.t.name }

const (
	beginMark = rxe.BeginMark
	endMark   = rxe.EndMark
)

// command returns the command line of one side of s: the client (with the
// server's address) or the server.
func (s step) command(uroce, client bool, iters int, xdpMode, extra string) string {
	n := strconv.Itoa(iters)
	sz := strconv.Itoa(s.t.size)
	port := strconv.Itoa(s.port)
	var c string
	if uroce {
		c = "uroce perf " + s.t.verb
		if s.t.lat {
			c += " --lat"
		}
		c += " -d eth0 --xdp-mode " + xdpMode + " -s " + sz + " -n " + n + " -p " + port
		if client {
			c += " --connect-wait 300s"
		}
		c += " --stats"
		if extra != "" {
			c += " " + extra
		}
	} else {
		c = s.t.name + " -d rxe0 -x 1 -F -s " + sz + " -n " + n + " -p " + port
	}
	if client {
		c += " " + addrB
	}
	return c
}

// script returns guest A's (client) or B's (server) script. A guest
// deletes its rxe0 before its first uroce step and adds it again before
// a stock step that follows one.
func script(steps []step, client bool, iters map[bool]int, xdpMode, extra string, timeout time.Duration) string {
	var b strings.Builder
	// The stock clients give up at once when the server is not listening
	// yet; uroce's retry themselves (--connect-wait).
	b.WriteString(rxe.TryFunc(1500, "0.2", `*"t connect to"*`))
	rxeUp := true
	to := int(timeout.Seconds())
	for _, s := range steps {
		uroce := s.p.uroceB
		if client {
			uroce = s.p.uroceA
		}
		switch {
		case uroce && rxeUp:
			// uroce takes eth0 over: rxe0 leaves it first.
			b.WriteString("rdma link delete rxe0 || echo 'rdma link delete rxe0 failed'\n")
			rxeUp = false
		case !uroce && !rxeUp:
			// rxe0 comes back once uroce has left eth0, ready when its
			// port is ACTIVE with the IPv4 GID again.
			b.WriteString(`rdma link add rxe0 type rxe netdev eth0 || echo 'rdma link add rxe0 failed'
i=0
until grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null && grep -q ':ffff:' /sys/class/infiniband/rxe0/ports/1/gids/1 2>/dev/null; do
	i=$((i+1)); [ $i -ge 200 ] && { echo 'rxe0 not ready'; break; }; sleep 0.05
done
`)
			rxeUp = true
		}
		cmd := s.command(uroce, client, iters[s.t.lat], xdpMode, extra)
		fmt.Fprintf(&b, "echo '%s%s'\n", beginMark, s.key())
		switch {
		case client && !uroce:
			fmt.Fprintf(&b, "try timeout %d %s\n", to, cmd)
		default:
			fmt.Fprintf(&b, "timeout %d %s 2>&1\n", to, cmd)
		}
		fmt.Fprintf(&b, "echo \"%s%s $?\"\n", endMark, s.key())
	}
	return b.String()
}

var (
	// #bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps]
	bwLineRE = regexp.MustCompile(`(?m)^[ \t]*(\d+)[ \t]+(\d+)[ \t]+(\d+\.\d+)[ \t]+(\d+\.\d+)[ \t]+(\d+\.\d+)[ \t]*$`)
	// #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9% [usec]
	latLineRE = regexp.MustCompile(`(?m)^[ \t]*(\d+)[ \t]+(\d+)[ \t]+(\d+\.\d+)[ \t]+(\d+\.\d+)[ \t]+(\d+\.\d+)[ \t]+(\d+\.\d+)[ \t]+(\S+)[ \t]+(\d+\.\d+)[ \t]+(\d+\.\d+)[ \t]*$`)
)

// figures are what a client printed: BW average and peak (MB/s), or
// latency t_typical, t_avg and the 99th percentile (µs).
type figures struct {
	ok                 bool
	avg, peak          float64
	typical, mean, p99 float64
}

func parse(t tool, out string) figures {
	f := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }
	if t.lat {
		m := latLineRE.FindStringSubmatch(out)
		if m == nil {
			return figures{}
		}
		return figures{ok: true, typical: f(m[5]), mean: f(m[6]), p99: f(m[8])}
	}
	m := bwLineRE.FindStringSubmatch(out)
	if m == nil {
		return figures{}
	}
	return figures{ok: true, peak: f(m[3]), avg: f(m[4])}
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

// TestGuestBed runs the four pairings in one pair of guests and prints
// the table (see the package documentation). Environment:
//
//	UROCE_GUESTBED=1            run at all
//	UROCE_GUESTBED_BIN          a static uroce binary to use instead of building one
//	UROCE_GUESTBED_ITERS        iterations of the bw tools (default 1000)
//	UROCE_GUESTBED_LAT_ITERS    iterations of ib_write_lat (default 1000)
//	UROCE_GUESTBED_XDP_MODE     uroce's --xdp-mode in the guests (default generic)
//	UROCE_GUESTBED_UROCE_FLAGS  more flags for every uroce perf command, e.g. "-u 17"
//	UROCE_GUESTBED_STEP_TIMEOUT seconds each step may take (default 300)
//	UROCE_GUESTBED_PCAP         capture the bridge into this file (costs the guests CPU)
//	UROCE_GUESTBED_NIC          more properties of the guests' virtio-net-pci devices, e.g.
//	                            "iommu_platform=on,disable-legacy=on" for AF_XDP zero-copy
//	UROCE_RXE_KERNEL            the guests' kernel: 6.1 (the default) or 6.12
func TestGuestBed(t *testing.T) {
	if os.Getenv("UROCE_GUESTBED") != "1" {
		t.Skip("skipping: set UROCE_GUESTBED=1 to compare uroce with rdma_rxe inside the guests")
	}
	iters := map[bool]int{false: envInt(t, "UROCE_GUESTBED_ITERS", 1000), true: envInt(t, "UROCE_GUESTBED_LAT_ITERS", 1000)}
	stepTimeout := time.Duration(envInt(t, "UROCE_GUESTBED_STEP_TIMEOUT", 300)) * time.Second
	xdpMode := os.Getenv("UROCE_GUESTBED_XDP_MODE")
	if xdpMode == "" {
		xdpMode = "generic"
	}
	extra := strings.Join(strings.Fields(os.Getenv("UROCE_GUESTBED_UROCE_FLAGS")), " ")
	if strings.ContainsAny(extra, "'\"`$;&|<>()\\") {
		t.Fatalf("UROCE_GUESTBED_UROCE_FLAGS=%q: no shell characters", extra)
	}
	nic := os.Getenv("UROCE_GUESTBED_NIC")
	n := rxe.NewNet(t, rxe.NetOptions{}) // skips when the host cannot run guests

	bin := os.Getenv("UROCE_GUESTBED_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "uroce")
		cmd := exec.Command("go", "build", "-ldflags=-s -w", "-o", bin, "github.com/uroce/uroce/cmd/uroce")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // static: independent of the guest's libraries
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building a static uroce: %v\n%s", err, out)
		}
	}

	if p := os.Getenv("UROCE_GUESTBED_PCAP"); p != "" {
		stop := n.Capture(t, p)
		defer func() { t.Logf("capture %s: %v", p, stop()) }()
	}
	var steps []step
	for _, p := range pairings {
		for _, tl := range tools {
			steps = append(steps, step{p: p, t: tl, port: 18515 + len(steps)})
		}
	}
	total := time.Duration(len(steps)+2) * stepTimeout
	ctx, cancel := context.WithTimeout(context.Background(), total)
	defer cancel()
	files := map[string]string{"/usr/bin/uroce": bin}
	start := time.Now()
	srv, err := n.StartPeer(ctx, rxe.PeerOptions{Name: "B", IP: addrB + "/24", Files: files, Timeout: total, NIC: nic,
		Script: script(steps, false, iters, xdpMode, extra, stepTimeout)})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := n.StartPeer(ctx, rxe.PeerOptions{Name: "A", IP: addrA + "/24", Files: files, Timeout: total, NIC: nic,
		Script: script(steps, true, iters, xdpMode, extra, stepTimeout)})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*rxe.Peer{srv, cli} {
		if err := p.Ready(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("guests ready after %v (kernel %s)", time.Since(start).Round(time.Millisecond), cli.Image.KVer)
	resA, errA := cli.Wait(ctx)
	resB, errB := srv.Wait(ctx)
	if errA != nil {
		t.Error(errA)
	}
	if errB != nil {
		t.Error(errB)
	}
	t.Logf("guests done after %v", time.Since(start).Round(time.Millisecond))

	got := map[string]figures{}
	for _, s := range steps {
		outA, codeA, okA := rxe.Section(resA.Output, s.key())
		outB, codeB, okB := rxe.Section(resB.Output, s.key())
		f := parse(s.t, outA)
		if !okA || !okB || codeA != 0 || codeB != 0 || !f.ok {
			t.Errorf("step %s: client exit %d (ended %v), server exit %d (ended %v), result line found %v\n--- A (%s):\n%s--- B (%s):\n%s",
				s.key(), codeA, okA, codeB, okB, f.ok, s.command(s.p.uroceA, true, iters[s.t.lat], xdpMode, extra), outA,
				s.command(s.p.uroceB, false, iters[s.t.lat], xdpMode, extra), outB)
			continue
		}
		if testing.Verbose() {
			t.Logf("step %s:\n--- A:\n%s--- B:\n%s", s.key(), outA, outB)
		}
		got[s.key()] = f
	}
	t.Logf("\n%s", table(steps, got, iters))
}

// table formats the figures as a Markdown table, with the ratio of each
// pairing to rxe↔rxe.
func table(steps []step, got map[string]figures, iters map[bool]int) string {
	var b strings.Builder
	b.WriteString("| pairing (A client ↔ B server) | test | figure | ratio to rxe↔rxe |\n|---|---|---|---|\n")
	for _, s := range steps {
		f, ok := got[s.key()]
		base, bok := got[step{p: pairings[0], t: s.t}.key()]
		test := fmt.Sprintf("%s -s %d -n %d", s.t.name, s.t.size, iters[s.t.lat])
		switch {
		case !ok:
			fmt.Fprintf(&b, "| %s | %s | failed | |\n", s.p.name, test)
		case s.t.lat:
			ratio := ""
			if bok && base.typical > 0 {
				ratio = fmt.Sprintf("%.2f ×", f.typical/base.typical)
			}
			fmt.Fprintf(&b, "| %s | %s | t_typical %.2f µs (t_avg %.2f, 99%% %.2f) | %s |\n", s.p.name, test, f.typical, f.mean, f.p99, ratio)
		default:
			ratio := ""
			if bok && base.avg > 0 {
				ratio = fmt.Sprintf("%.2f ×", f.avg/base.avg)
			}
			fmt.Fprintf(&b, "| %s | %s | BW average %.2f MB/s (peak %.2f) | %s |\n", s.p.name, test, f.avg, f.peak, ratio)
		}
	}
	return b.String()
}
