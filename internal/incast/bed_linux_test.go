package incast

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uroce/uroce/internal/netns"
	"github.com/uroce/uroce/internal/netns/netnstest"
)

// requireBed skips the test unless it runs as root with iproute2's ip, tc
// and bridge commands.
func requireBed(t *testing.T) {
	t.Helper()
	netnstest.RequireRoot(t)
	for _, tool := range []string{"tc", "bridge"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: needs the iproute2 %q command", tool)
		}
	}
}

// newBed builds a bed removed when the test ends. It skips the test
// without root, without iproute2, or when the kernel lacks what cfg asks
// for.
func newBed(t *testing.T, cfg Config) *Bed {
	t.Helper()
	requireBed(t)
	b, err := New(cfg)
	switch {
	case errors.Is(err, ErrUnsupported), errors.Is(err, netns.ErrNotRoot):
		t.Skipf("skipping: %v", err)
	case err != nil:
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// ECN codepoints in the IP TOS byte.
const (
	notECT = 0x00
	ect0   = 0x02
	ce     = 0x03
)

const (
	floodPort    = 9000
	floodPayload = 1472 // a 1500-byte IPv4 packet
	// floodBatch is the datagrams one write sends: the senders use UDP
	// segmentation offload (UDP_SEGMENT), so that shared CPUs still
	// overrun the bottleneck. The qdisc splits each batch back into
	// datagrams before queueing them.
	floodBatch = 44
)

// flood sends kernel UDP datagrams with the given TOS from every sender to
// the receiver, as fast as each sender can for d, and reports what the
// receiver got from each (and how many arrived CE) with the bottleneck's
// counters over the run.
func flood(t *testing.T, b *Bed, tos int, d time.Duration) *Report {
	t.Helper()
	recvAddr := b.Receiver().Addr.Addr()
	var rc *net.UDPConn
	err := b.Receiver().NS.Do(func() error {
		var err error
		rc, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(recvAddr, floodPort)))
		if err != nil {
			return err
		}
		rc.SetReadBuffer(4 << 20)
		return setsockopt(rc, unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
	})
	if err != nil {
		t.Fatalf("receiver: %v", err)
	}
	defer rc.Close()

	// The receiver counts datagrams per source address, reading the TOS
	// byte of each from its IP_TOS control message.
	senders := b.Senders()
	index := map[netip.Addr]int{}
	flows := make([]Flow, len(senders))
	for i, s := range senders {
		index[s.Addr.Addr()] = i
		flows[i].Name = s.Name
	}
	var foreign int
	var recvWG sync.WaitGroup
	recvWG.Go(func() {
		buf := make([]byte, 2048)
		oob := make([]byte, unix.CmsgSpace(4))
		for {
			n, oobn, _, from, err := rc.ReadMsgUDPAddrPort(buf, oob)
			if err != nil {
				return // closed
			}
			i, ok := index[from.Addr().Unmap()]
			if !ok {
				foreign++
				continue
			}
			flows[i].Packets++
			flows[i].Bytes += uint64(n)
			if tos, ok := recvTOS(oob[:oobn]); ok && tos&3 == ce {
				flows[i].CE++
			}
		}
	})

	before, err := b.QueueStats()
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]*net.UDPConn, len(senders))
	for i, s := range senders {
		err := s.NS.Do(func() error {
			c, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(s.Addr.Addr(), 0)),
				net.UDPAddrFromAddrPort(netip.AddrPortFrom(recvAddr, floodPort)))
			if err != nil {
				return err
			}
			conns[i] = c
			if err := setsockopt(c, unix.IPPROTO_IP, unix.IP_TOS, tos); err != nil {
				return err
			}
			return setsockopt(c, unix.SOL_UDP, unix.UDP_SEGMENT, floodPayload)
		})
		if err != nil {
			for _, c := range conns[:i+1] {
				if c != nil {
					c.Close()
				}
			}
			t.Fatalf("sender %s: %v", s.Name, err)
		}
	}
	var sendWG sync.WaitGroup
	sent := make([]int, len(senders))
	start := time.Now()
	for i, c := range conns {
		sendWG.Go(func() {
			defer c.Close()
			payload := make([]byte, floodBatch*floodPayload)
			deadline := start.Add(d)
			for n := 0; n%4 != 0 || time.Now().Before(deadline); n++ {
				if _, err := c.Write(payload); err == nil {
					sent[i] += floodBatch
				}
			}
		})
	}
	sendWG.Wait()
	elapsed := time.Since(start)
	// Let the queue drain (Limit bytes at the bottleneck's rate) and
	// the receiver read what is on its way.
	time.Sleep(b.Config().DrainTime(b.Config().Limit) + 100*time.Millisecond)
	after, err := b.QueueStats()
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	recvWG.Wait()

	cfg := b.Config()
	r := &Report{
		Title:      "kernel UDP, TOS 0x" + strconv.FormatInt(int64(tos), 16),
		Bottleneck: cfg.Bottleneck,
		Marking:    cfg.Marking.Kind,
		Duration:   elapsed,
		Flows:      flows,
		Queue:      after.Delta(before),
	}
	var text strings.Builder
	r.WriteText(&text)
	t.Logf("sent %v datagrams, %d from elsewhere\n%s", sent, foreign, text.String())
	if c, err := b.stepCounters(); err == nil && cfg.Marking.Kind == Step {
		t.Logf("step marker (since the bed was built): %d packets, %d marked", c.Packets, c.Marked)
	}
	return r
}

// stepCounters returns the Step marker's counters (zero without one).
func (b *Bed) stepCounters() (stepCounters, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.step == nil {
		return stepCounters{}, nil
	}
	return b.step.counters()
}

func setsockopt(c *net.UDPConn, level, opt, value int) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), level, opt, value)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("setsockopt %d/%d: %w", level, opt, serr)
	}
	return nil
}

// recvTOS returns the TOS byte from the IP_TOS control message in oob.
func recvTOS(oob []byte) (byte, bool) {
	for len(oob) >= unix.SizeofCmsghdr {
		l := int(binary.NativeEndian.Uint64(oob[0:8]))
		level := int32(binary.NativeEndian.Uint32(oob[8:12]))
		typ := int32(binary.NativeEndian.Uint32(oob[12:16]))
		if l < unix.SizeofCmsghdr || l > len(oob) {
			return 0, false
		}
		if level == unix.IPPROTO_IP && typ == unix.IP_TOS && l > unix.SizeofCmsghdr {
			return oob[unix.SizeofCmsghdr], true
		}
		oob = oob[min(unix.CmsgSpace(l-unix.SizeofCmsghdr), len(oob)):]
	}
	return 0, false
}

// TestMarking floods a 500 Mbit/s bottleneck from two senders with kernel
// UDP, ECN-capable and not, under each marking discipline: marking ones
// must set CE on ECN-capable traffic and drop the rest; tail drop only
// drops. Every sender must get traffic through.
func TestMarking(t *testing.T) {
	const d = time.Second
	for _, kind := range []Kind{Step, RED, FQCoDel, TailDrop} {
		t.Run(kind.String(), func(t *testing.T) {
			b := newBed(t, Config{Senders: 2, Bottleneck: 500_000_000, Marking: Marking{Kind: kind}})
			for _, c := range b.Commands() {
				t.Log(c)
			}
			for _, tos := range []int{ect0, notECT} {
				if kind == TailDrop && tos == notECT {
					continue // nothing to tell apart from the ECN-capable run
				}
				r := flood(t, b, tos, d)
				var ceSeen uint64
				for _, f := range r.Flows {
					if f.Packets == 0 {
						t.Errorf("tos %#x: nothing arrived from %s", tos, f.Name)
					}
					ceSeen += f.CE
				}
				q := r.Queue
				// The flood keeps a queue past the marking
				// threshold; the bfifo kinds measure it as the
				// arrivals find it.
				if kind == Step || kind == TailDrop {
					cfg := b.Config()
					mean, ok := q.MeanBacklog()
					if !ok || mean < float64(cfg.Marking.Min) || mean > float64(cfg.Limit) {
						t.Errorf("tos %#x: %d arrivals found %.0f bytes on average (measured %v), want %d to %d",
							tos, q.Arrivals, mean, ok, cfg.Marking.Min, cfg.Limit)
					}
				}
				switch {
				case tos == ect0 && kind != TailDrop:
					if q.Marks == 0 {
						t.Errorf("tos %#x: the bottleneck marked nothing: %+v", tos, q)
					}
					if ceSeen == 0 {
						t.Errorf("tos %#x: no datagram arrived CE-marked", tos)
					}
				default:
					if q.Drops == 0 {
						t.Errorf("tos %#x: the bottleneck dropped nothing: %+v", tos, q)
					}
					if q.Marks != 0 || ceSeen != 0 {
						t.Errorf("tos %#x: %d marks counted, %d datagrams arrived CE; want none", tos, q.Marks, ceSeen)
					}
				}
			}
		})
	}
}

// bedNamespaces lists the namespaces under netns.Dir whose names start
// with prefix and carry this process's ID.
func bedNamespaces(t *testing.T, prefix string) []string {
	t.Helper()
	ents, err := os.ReadDir(netns.Dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	pid := "-" + strconv.Itoa(os.Getpid()) + "-"
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix+"-") && strings.Contains(e.Name(), pid) {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names
}

// TestCloseRemovesEverything checks that Close deletes every namespace of
// a bed, that it may be called twice, and that a bed can be built again
// afterwards.
func TestCloseRemovesEverything(t *testing.T) {
	const prefix = "uroce-incast-close"
	requireBed(t)
	if got := bedNamespaces(t, prefix); len(got) != 0 {
		t.Fatalf("namespaces before the test: %v", got)
	}
	for round := range 2 {
		// The second bed has the Step marker where the kernel can
		// run it: a BPF program and link to release too.
		cfg := Config{Senders: 2, Prefix: prefix}
		if round == 1 {
			cfg.Marking.Kind = Step
		}
		b, err := New(cfg)
		if errors.Is(err, ErrUnsupported) && cfg.Marking.Kind == Step {
			t.Logf("round %d without the Step marker: %v", round, err)
			cfg.Marking.Kind = TailDrop
			b, err = New(cfg)
		}
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		t.Cleanup(func() { b.Close() })
		names := []string{b.Switch().Name(), b.Receiver().NS.Name()}
		for _, s := range b.Senders() {
			names = append(names, s.NS.Name())
		}
		slices.Sort(names)
		if got := bedNamespaces(t, prefix); !slices.Equal(got, names) || len(got) != 4 {
			t.Errorf("round %d: namespaces %v, want the bed's %v", round, got, names)
		}
		if err := b.Close(); err != nil {
			t.Fatalf("round %d: close: %v", round, err)
		}
		if got := bedNamespaces(t, prefix); len(got) != 0 {
			t.Errorf("round %d: namespaces left after Close: %v", round, got)
		}
		if err := b.Close(); err != nil {
			t.Errorf("round %d: second close: %v", round, err)
		}
		if _, err := b.QueueStats(); err == nil {
			t.Errorf("round %d: QueueStats after Close succeeded", round)
		}
	}
}

// TestFailedNewRemovesEverything builds beds this kernel may not support
// (RED, fq_codel, netem delay): when New fails, nothing may be left.
func TestFailedNewRemovesEverything(t *testing.T) {
	const prefix = "uroce-incast-fail"
	requireBed(t)
	failed := 0
	for _, cfg := range []Config{
		{Marking: Marking{Kind: RED}},
		{Marking: Marking{Kind: FQCoDel}},
		{Delay: time.Millisecond},
	} {
		cfg.Prefix = prefix
		b, err := New(cfg)
		if err == nil {
			b.Close()
			continue
		}
		failed++
		t.Logf("%+v: %v", cfg, err)
		if !errors.Is(err, ErrUnsupported) {
			t.Errorf("error does not wrap ErrUnsupported: %v", err)
		}
		if got := bedNamespaces(t, prefix); len(got) != 0 {
			t.Errorf("namespaces left after a failed New: %v", got)
		}
	}
	if failed == 0 {
		t.Skip("skipping: this kernel supports every configuration tried, none failed")
	}
}

// TestTopology checks the addresses, names and static paths of a bed.
func TestTopology(t *testing.T) {
	b := newBed(t, Config{Senders: 3})
	if got := b.Receiver().Addr; got != ReceiverAddr {
		t.Errorf("receiver address %v, want %v", got, ReceiverAddr)
	}
	for i, s := range b.Senders() {
		want := netip.MustParsePrefix("192.0.2." + strconv.Itoa(11+i) + "/24")
		if s.Addr != want || s.Name != "s"+strconv.Itoa(i+1) || s.Port != SenderPort(i+1) || s.Dev != HostDev {
			t.Errorf("sender %d: %+v", i+1, s)
		}
		ifi, err := s.NS.Interface(HostDev)
		if err != nil {
			t.Fatal(err)
		}
		if ifi.Index != s.Index || ifi.HardwareAddr.String() != s.MAC.String() || ifi.MTU != 1500 {
			t.Errorf("sender %d: interface %+v, host %+v", i+1, ifi, s)
		}
	}
	// A datagram from the last sender reaches the receiver at once: no
	// ARP, no learning.
	var rc *net.UDPConn
	err := b.Receiver().NS.Do(func() error {
		var err error
		rc, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ReceiverAddr.Addr(), floodPort)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	s := b.Sender(3)
	err = s.NS.Do(func() error {
		c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(ReceiverAddr.Addr(), floodPort)))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("hello"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	rc.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 64)
	n, from, err := rc.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatal(err)
	}
	if string(buf[:n]) != "hello" || from.Addr() != s.Addr.Addr() {
		t.Errorf("got %q from %v, want \"hello\" from %v", buf[:n], from, s.Addr.Addr())
	}
	st, err := b.QueueStats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Packets != 1 || st.Qdisc != "bfifo" {
		t.Errorf("bottleneck after one datagram: %+v, want 1 packet through bfifo", st)
	}
}

// TestDelay checks that Config.Delay lengthens the round trip: a datagram
// echoed by the receiver comes back no sooner than Delay (netem delays
// every frame toward the senders).
func TestDelay(t *testing.T) {
	const delay = 20 * time.Millisecond
	b := newBed(t, Config{Senders: 1, Delay: delay})
	var rc *net.UDPConn
	err := b.Receiver().NS.Do(func() error {
		var err error
		rc, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ReceiverAddr.Addr(), floodPort)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		buf := make([]byte, 64)
		for {
			n, from, err := rc.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			rc.WriteToUDPAddrPort(buf[:n], from)
		}
	})
	defer rc.Close() // ends the echo goroutine before wg.Wait
	var c *net.UDPConn
	err = b.Sender(1).NS.Do(func() error {
		var err error
		c, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(ReceiverAddr.Addr(), floodPort)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 64)
	for range 3 {
		start := time.Now()
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(buf); err != nil {
			t.Fatal(err)
		}
		if rtt := time.Since(start); rtt < delay {
			t.Errorf("round trip %v, want at least the %v delay", rtt, delay)
		} else {
			t.Logf("round trip %v", rtt)
		}
	}
}
