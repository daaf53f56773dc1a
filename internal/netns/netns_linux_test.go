package netns_test

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/netns"
	"github.com/uroce/uroce/internal/netns/netnstest"
)

func TestPairUDP(t *testing.T) {
	p := netnstest.NewPair(t, netns.PairConfig{Prefix: "uroce-nstest", MTU: 9000})
	if p.IndexA == 0 || p.IndexB == 0 || len(p.MACA) != 6 || len(p.MACB) != 6 {
		t.Fatalf("pair not filled in: %+v", p)
	}
	for _, ns := range []*netns.Namespace{p.A, p.B} {
		if _, err := os.Stat(ns.Path()); err != nil {
			t.Fatal(err)
		}
		for _, kv := range netns.TestSysctls {
			var got []byte
			err := ns.Do(func() error {
				var err error
				got, err = os.ReadFile("/proc/sys/" + strings.ReplaceAll(kv[0], ".", "/"))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(string(got)) != kv[1] {
				t.Errorf("%s: %s = %q, want %q", ns.Name(), kv[0], got, kv[1])
			}
		}
	}
	ifi, err := p.A.Interface(p.DevA)
	if err != nil {
		t.Fatal(err)
	}
	if ifi.MTU != 9000 {
		t.Errorf("MTU = %d, want 9000", ifi.MTU)
	}
	hosts, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		if bytes.Equal(h.HardwareAddr, p.MACA) || bytes.Equal(h.HardwareAddr, p.MACB) {
			t.Errorf("veth end %s is visible outside its namespace", h.Name)
		}
	}

	for i := range p.AddrA {
		a, b := p.AddrA[i].Addr(), p.AddrB[i].Addr()
		t.Run(a.String(), func(t *testing.T) {
			var srv *net.UDPConn
			err := p.A.Do(func() error {
				var err error
				srv, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 0)))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			var cli *net.UDPConn
			err = p.B.Do(func() error {
				var err error
				cli, err = net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(b, 0)),
					srv.LocalAddr().(*net.UDPAddr))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			if _, err := cli.Write([]byte("hello")); err != nil {
				t.Fatal(err)
			}
			srv.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 16)
			n, from, err := srv.ReadFromUDPAddrPort(buf)
			if err != nil {
				t.Fatal(err)
			}
			if string(buf[:n]) != "hello" || from.Addr().Unmap() != b {
				t.Errorf("got %q from %v, want \"hello\" from %v", buf[:n], from, b)
			}
		})
	}
}

func TestDeleteRemovesEverything(t *testing.T) {
	netnstest.RequireRoot(t)
	p, err := netns.NewPair(netns.PairConfig{Prefix: "uroce-nsdel", NoAddrs: true})
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := p.A.Path(), p.B.Path()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{pa, pb} {
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists after Close (%v)", path, err)
		}
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestRejectsForeignAddresses(t *testing.T) {
	ns := netnstest.New(t, "uroce-nsaddr")
	if err := ns.AddAddr("lo", netip.MustParsePrefix("10.1.2.3/8")); !errors.Is(err, netns.ErrAddress) {
		t.Errorf("AddAddr(10.1.2.3/8) = %v, want ErrAddress", err)
	}
	_, err := netns.NewPair(netns.PairConfig{AddrA: []netip.Prefix{netip.MustParsePrefix("172.16.0.1/24")}})
	if !errors.Is(err, netns.ErrAddress) {
		t.Errorf("NewPair with 172.16.0.1/24 = %v, want ErrAddress", err)
	}
}

func TestDoRestoresNamespace(t *testing.T) {
	ns := netnstest.New(t, "uroce-nsdo")
	self := func() string {
		s, err := os.Readlink("/proc/thread-self/ns/net")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var inside string
	outside := self()
	if err := ns.Do(func() error { inside = self(); return nil }); err != nil {
		t.Fatal(err)
	}
	if inside == outside {
		t.Errorf("Do ran in the caller's namespace %s", inside)
	}
	if got := self(); got != outside {
		t.Errorf("after Do the thread is in %s, want %s", got, outside)
	}
	want := errors.New("from fn")
	if err := ns.Do(func() error { return want }); err != want {
		t.Errorf("Do returned %v, want fn's error", err)
	}
	if err := netns.Do("uroce-no-such-namespace", func() error { return nil }); err == nil {
		t.Error("Do on a missing namespace succeeded")
	}
	if err := ns.Sysctl("kernel.hostname", "x"); err == nil {
		t.Error("Sysctl accepted a non-network key")
	}
}

func TestMultiQueueVeth(t *testing.T) {
	p := netnstest.NewPair(t, netns.PairConfig{Prefix: "uroce-nsmq", Queues: 4, NoAddrs: true})
	for _, e := range []struct {
		ns  *netns.Namespace
		dev string
	}{{p.A, p.DevA}, {p.B, p.DevB}} {
		n, err := e.ns.RxQueues(e.dev)
		if err != nil {
			t.Fatal(err)
		}
		if n != 4 {
			t.Errorf("%s has %d RX queues, want 4", e.dev, n)
		}
	}
}

func TestSingleQueueByDefault(t *testing.T) {
	p := netnstest.NewPair(t, netns.PairConfig{Prefix: "uroce-ns1q", NoAddrs: true})
	n, err := p.A.RxQueues(p.DevA)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%s has %d RX queues, want 1", p.DevA, n)
	}
}
