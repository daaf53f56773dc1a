package stack_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/netns"
	"github.com/uroce/uroce/internal/netns/netnstest"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/xdp"
)

// vethPair returns two namespaces joined by a veth pair of the given MTU,
// with the default documentation addresses (192.0.2.1/24, 2001:db8::1/64
// in A; .2 and ::2 in B).
func vethPair(t *testing.T, mtu int) *netns.Pair {
	t.Helper()
	netnstest.RequireAFXDP(t)
	return netnstest.NewPair(t, netns.PairConfig{Prefix: "ust", MTU: mtu})
}

// openIn opens a device on dev inside namespace ns; it is closed when the
// test ends (before the namespace is deleted).
func openIn(t testing.TB, ns *netns.Namespace, cfg stack.Config) *stack.Device {
	t.Helper()
	d, err := tryOpenIn(ns, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	})
	return d
}

func tryOpenIn(ns *netns.Namespace, cfg stack.Config) (*stack.Device, error) {
	var d *stack.Device
	err := ns.Do(func() error {
		var err error
		d, err = stack.Open(context.Background(), cfg)
		return err
	})
	return d, err
}

func TestInterfaceAttributes(t *testing.T) {
	for _, c := range []struct {
		mtu  int
		want stack.MTU
	}{{1500, stack.MTU1024}, {9000, stack.MTU4096}} {
		p := vethPair(t, c.mtu)
		d := openIn(t, p.A, stack.Config{Interface: p.DevA})
		attr := d.Query()
		if attr.LinkMTU != c.mtu || attr.ActiveMTU != c.want {
			t.Errorf("mtu %d: link mtu %d, active %v; want %v", c.mtu, attr.LinkMTU, attr.ActiveMTU, c.want)
		}
		if attr.NumQueues != 1 || attr.Name != "uroce_"+p.DevA {
			t.Errorf("queues %d, name %q", attr.NumQueues, attr.Name)
		}
		mac := d.MAC()
		if !bytes.Equal(mac[:], p.MACA) {
			t.Errorf("mac %x, want %v", mac, p.MACA)
		}
		var ll [16]byte
		ll[0], ll[1] = 0xfe, 0x80
		copy(ll[8:], []byte{mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]})
		want := []netip.Addr{
			netip.AddrFrom16(ll),
			netip.MustParseAddr("::ffff:192.0.2.1"),
			netip.MustParseAddr("2001:db8::1"),
		}
		gids := d.GIDs()
		if len(gids) != len(want) {
			t.Fatalf("gids %v, want %v", gids, want)
		}
		for i := range want {
			if gids[i] != want[i] {
				t.Errorf("gid %d = %v, want %v", i, gids[i], want[i])
			}
		}
	}
}

func TestInterfaceQueues(t *testing.T) {
	netnstest.RequireAFXDP(t)
	p := netnstest.NewPair(t, netns.PairConfig{Prefix: "ust", Queues: 3})
	d := openIn(t, p.A, stack.Config{Interface: p.DevA})
	if n := d.Query().NumQueues; n != 3 {
		t.Errorf("%d queues, want 3", n)
	}
	d2 := openIn(t, p.B, stack.Config{Interface: p.DevB, Queues: 2})
	if n := d2.Query().NumQueues; n != 2 {
		t.Errorf("%d queues, want 2", n)
	}
}

func TestInterfaceErrors(t *testing.T) {
	p := vethPair(t, 1500)
	if _, err := tryOpenIn(p.A, stack.Config{Interface: "nosuch0"}); !errors.Is(err, xdp.ErrNoInterface) {
		t.Errorf("missing interface: %v", err)
	} else {
		t.Log(err)
	}
	if _, err := tryOpenIn(p.A, stack.Config{Interface: "lo"}); !errors.Is(err, stack.ErrUnsupported) {
		t.Errorf("loopback: %v", err)
	}
	if _, err := tryOpenIn(p.A, stack.Config{Interface: p.DevA, XDPMode: "fast"}); !errors.Is(err, stack.ErrInvalidArg) {
		t.Errorf("bad xdp mode: %v", err)
	}
	if _, err := tryOpenIn(p.A, stack.Config{Interface: p.DevA, XDPBind: "fast"}); !errors.Is(err, stack.ErrInvalidArg) {
		t.Errorf("bad xdp bind mode: %v", err)
	}
	// Veth has no AF_XDP zero-copy: demanding it fails with a reason.
	if _, err := tryOpenIn(p.A, stack.Config{Interface: p.DevA, XDPBind: "zerocopy"}); !errors.Is(err, xdp.ErrNoZeroCopy) ||
		!strings.Contains(err.Error(), "cannot bind AF_XDP zero-copy") || !strings.Contains(err.Error(), "bind auto or copy") {
		t.Errorf("zero-copy on veth: %v, want ErrNoZeroCopy and what to do", err)
	} else {
		t.Log(err)
	}
	if _, err := tryOpenIn(p.A, stack.Config{Interface: p.DevA, MTU: 9000}); !errors.Is(err, stack.ErrInvalidArg) {
		t.Errorf("mtu above the interface's: %v", err)
	}
	if err := p.A.IP("link", "set", "dev", p.DevA, "down"); err != nil {
		t.Fatal(err)
	}
	if _, err := tryOpenIn(p.A, stack.Config{Interface: p.DevA}); !errors.Is(err, stack.ErrInvalidArg) {
		t.Errorf("interface down: %v", err)
	} else {
		t.Log(err)
	}
	if err := p.A.SetUp(p.DevA); err != nil {
		t.Fatal(err)
	}
	// The interface is free again after the failures: nothing leaked.
	openIn(t, p.A, stack.Config{Interface: p.DevA})
	// A second device on the same interface is refused: the XDP program
	// is not replaced.
	if d, err := tryOpenIn(p.A, stack.Config{Interface: p.DevA}); err == nil {
		d.Close()
		t.Error("second open on the same interface succeeded")
	} else {
		t.Log(err)
	}
}

// TestXDPBindCopy opens both ends with their AF_XDP sockets bound in copy
// mode, as asked, and moves data; the counters say how they are bound.
func TestXDPBindCopy(t *testing.T) {
	p := vethPair(t, 1500)
	a, b, la, lb := vethDevices(t, p, stack.Config{XDPBind: "copy"}, nil)
	rcWriteOnce(t, a, b, 1, 4096)
	for _, l := range append(la, lb...) {
		st, err := l.XDPStats()
		if err != nil {
			t.Fatal(err)
		}
		if st.ZeroCopy || st.TxFrames == 0 {
			t.Errorf("stats %+v: want copy mode, frames sent", st)
		}
	}
}

// TestReopen closes a device and opens one on the same interface in the
// same process, several times, with traffic in between.
func TestReopen(t *testing.T) {
	p := vethPair(t, 1500)
	for i := 0; i < 3; i++ {
		a, err := tryOpenIn(p.A, stack.Config{Interface: p.DevA})
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		b, err := tryOpenIn(p.B, stack.Config{Interface: p.DevB})
		if err != nil {
			a.Close()
			t.Fatalf("open %d: %v", i, err)
		}
		rcWriteOnce(t, a, b, 1, 4096)
		if err := a.Close(); err != nil {
			t.Error(err)
		}
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	}
}

func TestNeighbourResolution(t *testing.T) {
	p := vethPair(t, 1500)
	a := openIn(t, p.A, stack.Config{Interface: p.DevA, ResolveTimeout: 1500 * time.Millisecond})
	pd, err := a.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	// The peer by ARP and ND; ourselves without (looped back).
	for _, ip := range []string{"192.0.2.2", "::ffff:192.0.2.2", "2001:db8::2", "192.0.2.1", "::ffff:192.0.2.1"} {
		ah, err := pd.CreateAH(stack.AHAttr{DGID: netip.MustParseAddr(ip), SGIDIndex: a.GIDIndex(localFor(ip))})
		if err != nil {
			t.Errorf("%s: %v", ip, err)
			continue
		}
		want := p.MACB
		if strings.HasSuffix(ip, ".1") {
			want = p.MACA
		}
		if mac := ah.Attr().DMAC; !bytes.Equal(mac[:], want) {
			t.Errorf("%s resolved to %x, want %v", ip, mac, want)
		}
	}
	// The failures take up to the resolve timeout each: try them at once.
	cases := []struct {
		ip   string
		want error
	}{
		{"192.0.2.77", stack.ErrNoNeighbor},   // nobody: no ARP answer
		{"2001:db8::77", stack.ErrNoNeighbor}, // nobody: no ND answer
		{"198.51.100.9", stack.ErrNoNeighbor}, // not on the link
	}
	errs := make([]error, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = pd.CreateAH(stack.AHAttr{DGID: netip.MustParseAddr(c.ip), SGIDIndex: a.GIDIndex(localFor(c.ip))})
		}()
	}
	wg.Wait()
	for i, c := range cases {
		if !errors.Is(errs[i], c.want) {
			t.Errorf("%s: %v, want %v", c.ip, errs[i], c.want)
			continue
		}
		t.Logf("%s: %v", c.ip, errs[i])
	}
}

// localFor returns A's address of the family of ip.
func localFor(ip string) netip.Addr {
	if netip.MustParseAddr(ip).Unmap().Is4() {
		return netip.MustParseAddr("192.0.2.1")
	}
	return netip.MustParseAddr("2001:db8::1")
}

// TestOpenNotRoot checks the error without privileges: as root, the test
// runs itself again as user nobody inside a test namespace.
func TestOpenNotRoot(t *testing.T) {
	if dev := os.Getenv("UROCE_TEST_NOTROOT_IFACE"); dev != "" {
		if os.Geteuid() == 0 {
			t.Fatal("still root")
		}
		_, err := stack.Open(context.Background(), stack.Config{Interface: dev})
		if !errors.Is(err, xdp.ErrPermission) || !strings.Contains(err.Error(), "run uroce as root") {
			t.Fatalf("open as nobody: %v", err)
		}
		t.Log(err)
		return
	}
	p := vethPair(t, 1500)
	// The test binary's own directory is private to root.
	dir, err := os.MkdirTemp("", "uroce-notroot")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "stack.test")
	data, err := os.ReadFile(os.Args[0])
	if err == nil {
		err = os.WriteFile(bin, data, 0o755)
	}
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestOpenNotRoot$", "-test.v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "UROCE_TEST_NOTROOT_IFACE="+p.DevA)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var out []byte
	// Started from a thread inside the namespace, the child lives there.
	err = p.A.Do(func() error {
		var err error
		out, err = cmd.CombinedOutput()
		return err
	})
	if err != nil || !strings.Contains(string(out), "--- PASS: TestOpenNotRoot") {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestInterfaceHeld: an interface that already has an XDP program is
// refused, naming the program and the process that holds it (here, this
// one: its first device on the interface).
func TestInterfaceHeld(t *testing.T) {
	p := vethPair(t, 1500)
	openIn(t, p.A, stack.Config{Interface: p.DevA})
	_, err := tryOpenIn(p.A, stack.Config{Interface: p.DevA})
	if err == nil {
		t.Fatal("a second device on the same interface opened")
	}
	comm, _ := os.ReadFile("/proc/self/comm")
	want := fmt.Sprintf("held by pid %d (%s)", os.Getpid(), strings.TrimSpace(string(comm)))
	if msg := err.Error(); !strings.Contains(msg, "already has an XDP program") || !strings.Contains(msg, want) ||
		!strings.Contains(msg, "XDP program ") {
		t.Errorf("error %q does not say %q", msg, want)
	} else {
		t.Log(msg)
	}
}
