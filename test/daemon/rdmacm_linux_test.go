package daemon_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The stock RDMA CM programs of Debian's rdmacm-utils, unmodified, on
// both ends, each through its daemon's CM with uroce's librdmacm and
// libibverbs (`uroce run`), as user nobody.

// cmPair runs srv on end 0, then cli (the server's address appended
// when addr) on end 1, again while the client's output says it was
// refused (the server does not listen yet: one of refused's texts); it
// returns both.
func (n *net2) cmPair(t *testing.T, srv, cli []string, refused ...string) (s, c *run) {
	t.Helper()
	s = n.stockTool(0, srv...)
	wasRefused := func(out string) bool {
		for _, r := range refused {
			if strings.Contains(out, r) {
				return true
			}
		}
		return false
	}
	for tries := 0; ; tries++ {
		time.Sleep(300 * time.Millisecond)
		c = n.stockTool(1, cli...)
		err := c.wait(t, time.Minute)
		if err == nil || tries == 20 || !wasRefused(c.out.String()) {
			if err != nil {
				t.Errorf("%v: %v\n%s", cli, err, short(c.out.String()))
			}
			break
		}
	}
	if err := s.wait(t, time.Minute); err != nil {
		t.Errorf("%v (server): %v\n%s", srv, err, short(s.out.String()))
	}
	return s, c
}

var rpingLineRE = regexp.MustCompile(`(?m)^ping data: (.*)$`)

// rpingString is ping i of size bytes as rping's client writes it (the
// NUL left out): "rdma-ping-i: ", then letters 'A' to 'z' from the i-th
// on, wrapping.
func rpingString(i, size int) string {
	b := []byte(fmt.Sprintf("rdma-ping-%d: ", i))
	for c := byte(65 + i%58); len(b) < size-1; c++ {
		if c > 122 {
			c = 65
		}
		b = append(b, c)
	}
	return string(b)
}

// short is s cut to a readable length for a failure message.
func short(s string) string {
	if len(s) > 3000 {
		return s[:1500] + "\n[...]\n" + s[len(s)-1500:]
	}
	return s
}

// TestStockRDMACM: rping (RDMA READ and WRITE over a CM connection,
// each ping checked; also -q, QPs the program moves itself), ucmatose (two connections, SENDs both ways; with
// -m, migrated to new channels), cmtime (50 connections at once, a
// threaded server), udaddy (UD through SIDR), mckey (UD multicast), rdma_server
// and rdma_client (synchronous IDs, rdma_create_ep), rdma_xserver and
// rdma_xclient (RC, an inline SEND), perftest's -R, a
// connection to a port nobody listens on, and a listener whose daemon
// stops (DEVICE_REMOVAL).
func TestStockRDMACM(t *testing.T) {
	if !haveLib {
		t.Skip("skipping: " + libErr)
	}
	for _, tool := range []string{"rping", "ucmatose", "cmtime", "udaddy", "mckey", "rdma_server", "rdma_client"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: %s is not installed (Debian package rdmacm-utils)", tool)
		}
	}
	n := newNet(t, 1500)
	addr := n.IP[0].String()
	const refused = "REJECTED"

	// rping, and rping -q: QPs the program creates and moves itself
	// (rdma_init_qp_attr, CONNECT_RESPONSE, rdma_establish).
	t.Run("rping", func(t *testing.T) {
		for _, c := range []struct{ size, q string }{{"64", ""}, {"4000", ""}, {"100", "-q"}} {
			size := c.size
			sargs := []string{"rping", "-s", "-a", addr, "-p", "7201", "-C", "10", "-S", size, "-v", "-V"}
			cargs := []string{"rping", "-c", "-a", addr, "-p", "7201", "-C", "10", "-S", size, "-v", "-V"}
			if c.q != "" {
				sargs, cargs = append(sargs, c.q), append(cargs, c.q)
			}
			s, c := n.cmPair(t, sargs, cargs, refused)
			// stderr's line may land in the middle of stdout's.
			out := strings.Replace(c.out.String(), "client DISCONNECT EVENT...\n", "", 1)
			m := rpingLineRE.FindAllStringSubmatch(out, -1)
			if len(m) != 10 {
				t.Errorf("rping -S %s: %d pings, want 10:\n%s", size, len(m), short(out))
			}
			n, _ := strconv.Atoi(size)
			for i, l := range m {
				if want := rpingString(i, n); l[1] != want {
					t.Errorf("rping -S %s: ping %d: %.60q, want %.60q", size, i, l[1], want)
				}
			}
			if got := strings.Count(s.out.String(), "server ping data: rdma-ping-"); got != 10 {
				t.Errorf("rping -s -S %s: the server saw %d pings, want 10:\n%s", size, got, short(s.out.String()))
			}
			if !strings.Contains(s.out.String(), "server DISCONNECT EVENT...") {
				t.Errorf("rping -s: no disconnect seen:\n%s", short(s.out.String()))
			}
		}
	})

	t.Run("ucmatose", func(t *testing.T) {
		s, c := n.cmPair(t, []string{"ucmatose", "-p", "7202", "-c", "2", "-C", "10"},
			[]string{"ucmatose", "-s", addr, "-p", "7202", "-c", "2", "-C", "10"}, refused)
		for _, r := range []*run{s, c} {
			o := r.out.String()
			if !strings.Contains(o, "data transfers complete") || !strings.Contains(o, "return status 0") {
				t.Errorf("ucmatose: %s", o)
			}
		}
	})

	// -m: every ID moves to a new event channel before the disconnect.
	t.Run("ucmatose-migrate", func(t *testing.T) {
		s, c := n.cmPair(t, []string{"ucmatose", "-p", "7205", "-m"},
			[]string{"ucmatose", "-s", addr, "-p", "7205", "-m"}, refused)
		for _, r := range []*run{s, c} {
			o := r.out.String()
			if !strings.Contains(o, "migrating to new event channel") || !strings.Contains(o, "return status 0") {
				t.Errorf("ucmatose -m: %s", o)
			}
		}
	})

	// Many connections at once, the server's requests accepted and its
	// disconnections handled by threads of their own (it never exits).
	t.Run("cmtime", func(t *testing.T) {
		s := n.stockTool(0, "cmtime", "-p", "7207", "-c", "50")
		defer func() {
			s.cmd.Process.Kill()
			s.wait(t, time.Minute)
		}()
		var c *run
		for tries := 0; tries < 20; tries++ {
			time.Sleep(300 * time.Millisecond)
			c = n.stockTool(1, "cmtime", "-s", addr, "-p", "7207", "-c", "50")
			if err := c.wait(t, 2*time.Minute); err != nil {
				t.Fatalf("cmtime: %v\n%s", err, c.out.String())
			}
			if !strings.Contains(c.out.String(), "REJECTED") {
				break
			}
		}
		if o := c.out.String(); !regexp.MustCompile(`(?m)^destroy +: `).MatchString(o) || strings.Contains(o, "error") {
			t.Errorf("cmtime:\n%s", o)
		}
	})

	// UD: the QPN, Q_Key and address of the peer through SIDR.
	t.Run("udaddy", func(t *testing.T) {
		s, c := n.cmPair(t, []string{"udaddy", "-C", "10"}, []string{"udaddy", "-s", addr, "-C", "10"}, "UNREACHABLE")
		for _, r := range []*run{s, c} {
			o := r.out.String()
			if !strings.Contains(o, "data transfers complete") || !strings.Contains(o, "return status 0") {
				t.Errorf("udaddy: %s", o)
			}
		}
	})

	// UD multicast: mckey's receiver with two IDs, each with a QP, and
	// its sender, each through its daemon: rdma_resolve_addr to the
	// group, rdma_join_multicast_ex, the address handle, QPN and Q_Key
	// of MULTICAST_JOIN, ten SEND_WITH_IMMs to the group, which each of
	// the receiver's QPs receives, rdma_leave_multicast. stdbuf: a hang
	// shows what mckey printed.
	t.Run("mckey", func(t *testing.T) {
		const group = "239.0.2.78"
		s, c := n.cmPair(t, []string{"stdbuf", "-oL", "mckey", "-m", group, "-b", addr, "-c", "2"},
			[]string{"stdbuf", "-oL", "mckey", "-m", group, "-s", "-b", n.IP[1].String()})
		for _, x := range []struct {
			r     *run
			joins int
		}{{s, 2}, {c, 1}} {
			o := x.r.out.String()
			if strings.Count(o, "mckey: joined dgid: ::ffff:"+group+" ") != x.joins ||
				!strings.Contains(o, "data transfers complete") || strings.Contains(o, "fail") {
				t.Errorf("mckey: want %d joins and the transfers complete:\n%s", x.joins, o)
			}
		}
	})

	t.Run("rdma_server", func(t *testing.T) {
		s, c := n.cmPair(t, []string{"rdma_server", "-p", "7203"},
			[]string{"rdma_client", "-s", addr, "-p", "7203"}, "rdma_connect: Connection refused")
		if !strings.Contains(s.out.String(), "rdma_server: end 0") {
			t.Errorf("rdma_server: %s", s.out.String())
		}
		if !strings.Contains(c.out.String(), "rdma_client: end 0") {
			t.Errorf("rdma_client: %s", c.out.String())
		}
	})

	// rdma_xserver and rdma_xclient (RC): a SEND with IBV_SEND_INLINE on
	// a QP that asked for no inline data, as rdma_rxe and the RNICs
	// grant the SGEs' room.
	t.Run("rdma_xserver", func(t *testing.T) {
		if _, err := exec.LookPath("rdma_xserver"); err != nil {
			t.Skip("skipping: rdma_xserver is not installed (Debian package rdmacm-utils)")
		}
		s, c := n.cmPair(t, []string{"rdma_xserver", "-p", "7208"},
			[]string{"rdma_xclient", "-s", addr, "-p", "7208"}, "rdma_connect: Connection refused")
		if !strings.Contains(s.out.String(), "rdma_xserver: end 0") || !strings.Contains(c.out.String(), "rdma_xclient: end 0") {
			t.Errorf("rdma_xserver: %s\nrdma_xclient: %s", s.out.String(), c.out.String())
		}
	})

	// perftest's -R: its exchange and its test QPs over RDMA CM.
	t.Run("perftest", func(t *testing.T) {
		for _, args := range [][]string{
			{"ib_write_bw", "-n", "1000", "-s", "65536"},
			{"ib_read_lat", "-n", "500"},
			{"ib_send_bw", "-n", "1000", "-q", "2"},
		} {
			args := append([]string{args[0], "-R", "-d", "uroce0", "-x", "1", "-F", "-p", "7206"}, args[1:]...)
			// perftest's client is refused at its first connection
			// ("Unexpected CM event") or at a later one (a REJECTED
			// event, invalid service ID 8: nobody listened on the port
			// at that moment). Its retry of the later one reads the IDs
			// from an array it freed (perftest 4.5's fault); uroce's
			// librdmacm refuses them (TestCMHandles), so the client
			// ends with an error, and is run again.
			_, c := n.cmPair(t, args, append(append([]string{}, args...), addr), "Unexpected CM event",
				"RDMA_CM_EVENT_REJECTED; error: 8.")
			if !perfResultRE.MatchString(c.out.String()) {
				t.Errorf("%v: no result line:\n%s", args, c.out.String())
			}
		}
	})

	t.Run("nolistener", func(t *testing.T) {
		c := n.stockTool(1, "rping", "-c", "-a", addr, "-p", "7299", "-C", "1")
		err := c.wait(t, time.Minute)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 255 ||
			!strings.Contains(c.out.String(), "cma event RDMA_CM_EVENT_REJECTED, error 8") {
			t.Errorf("rping to a port nobody listens on: %v, want exit status 255 and REJECTED (8):\n%s", err, c.out.String())
		}
		c = n.stockTool(1, "rdma_client", "-s", addr, "-p", "7299")
		c.wait(t, time.Minute)
		if !strings.Contains(c.out.String(), "rdma_connect: Connection refused") {
			t.Errorf("rdma_client to a port nobody listens on:\n%s", c.out.String())
		}
	})

	// Last: it stops daemon 0.
	t.Run("removal", func(t *testing.T) {
		s := n.stockTool(0, "rping", "-s", "-a", addr, "-p", "7204", "-C", "1")
		time.Sleep(time.Second)
		if err := n.Stop(0); err != nil {
			t.Error(err)
		}
		err := s.wait(t, time.Minute)
		if err == nil || !strings.Contains(s.out.String(), "cma detected device removal!!!!") {
			t.Errorf("rping -s when the daemon stops: %v, want device removal reported:\n%s", err, s.out.String())
		}
	})
}

// TestCMTest runs libverbs/test/cm_test.c, the project's own check of
// the RDMA CM API (built with the system's gcc and headers, run through
// uroce's libraries): its server on daemon 0, its client on daemon 1.
func TestCMTest(t *testing.T) {
	if !haveLib {
		t.Skip("skipping: " + libErr)
	}
	bin := buildCTest(t, "cm_test")
	n := newNet(t, 1500)
	s := n.stockTool(0, bin, "-p", "18720")
	c := n.stockTool(1, bin, "-p", "18720", n.IP[0].String())
	cerr := c.wait(t, 2*time.Minute)
	serr := s.wait(t, time.Minute)
	for _, r := range []struct {
		who   string
		err   error
		out   string
		cases []string
	}{
		{"client", cerr, c.out.String(), []string{"local", "connect", "rejected", "sync", "mcast"}},
		{"server", serr, s.out.String(), []string{"connect", "rejected"}},
	} {
		if r.err != nil || strings.Contains(r.out, "FAIL") {
			t.Errorf("cm_test %s: %v\n%s", r.who, r.err, r.out)
			continue
		}
		for _, k := range r.cases {
			if !strings.Contains(r.out, "ok "+k+"\n") {
				t.Errorf("cm_test %s: no ok %s:\n%s", r.who, k, r.out)
			}
		}
	}
}

// buildCTest builds libverbs/test/NAME.c with the system's gcc and
// headers, in a directory user nobody can reach, and returns the binary.
func buildCTest(t *testing.T, name string) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("skipping: needs gcc")
	}
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	bin := filepath.Join(dir, name)
	if out, err := exec.Command("gcc", "-O2", "-Wall", "-Werror", "-o", bin, "../../libverbs/test/"+name+".c",
		"-lrdmacm", "-libverbs").CombinedOutput(); err != nil {
		t.Skipf("skipping: building %s: %v\n%s", name, err, out)
	}
	return bin
}

// TestCMHandles runs libverbs/test/handles_test.c: a destroyed ID and a
// pointer that never was one, passed to every call that takes an ID,
// are refused with EINVAL and never read through. perftest 4.5's -R
// client passes such a pointer when it retries a rejected connection;
// before, uroce's rdma_resolve_addr faulted on it.
func TestCMHandles(t *testing.T) {
	if !haveLib {
		t.Skip("skipping: " + libErr)
	}
	bin := buildCTest(t, "handles_test")
	n := newNet(t, 1500)
	c := n.stockTool(1, bin)
	err := c.wait(t, time.Minute)
	if err != nil || !strings.Contains(c.out.String(), "ok handles\n") {
		t.Errorf("handles_test: %v\n%s", err, c.out.String())
	}
}
