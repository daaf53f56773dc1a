package stack

import (
	"context"
	"encoding/binary"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uroce/uroce/internal/netns"
	"github.com/uroce/uroce/internal/netns/netnstest"
	"github.com/uroce/uroce/xdp"
)

// xdpLinkPair opens Manual devices (no engine goroutines) on both ends of
// a veth pair of the given MTU and returns their AF_XDP links, to drive
// directly.
func xdpLinkPair(t testing.TB, mtu int) (a, b *xdpLink, macA, macB [6]byte) {
	t.Helper()
	netnstest.RequireAFXDP(t)
	p := netnstest.NewPair(t, netns.PairConfig{Prefix: "uxl", MTU: mtu})
	open := func(ns *netns.Namespace, dev string) *Device {
		var d *Device
		err := ns.Do(func() (err error) {
			d, err = Open(context.Background(), Config{Interface: dev, Manual: true})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	da, db := open(p.A, p.DevA), open(p.B, p.DevB)
	return da.engines[0].link.(*xdpLink), db.engines[0].link.(*xdpLink), da.MAC(), db.MAC()
}

// xdpTestFrame builds an Ethernet/IPv4/UDP frame to port 4791 of n bytes,
// which the XDP program hands to the AF_XDP socket (it checks no more).
func xdpTestFrame(dst, src [6]byte, n int, seq byte) []byte {
	f := make([]byte, n)
	copy(f[0:], dst[:])
	copy(f[6:], src[:])
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(n-14))
	copy(ip[12:], []byte{192, 0, 2, 1, 192, 0, 2, 2})
	udp := ip[20:]
	binary.BigEndian.PutUint16(udp[0:], 49152)
	binary.BigEndian.PutUint16(udp[2:], 4791)
	binary.BigEndian.PutUint16(udp[4:], uint16(n-34))
	for i := 42; i < n; i++ {
		f[i] = seq + byte(i)
	}
	return f
}

// xdpReceiveOne polls l until a frame arrives and returns a copy of it.
func xdpReceiveOne(t testing.TB, l *xdpLink, rx [][]byte) int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		if n := l.Receive(rx); n > 0 {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatal("no frame arrived")
		}
		l.Poll(10 * time.Millisecond)
	}
}

func TestXDPLinkFrames(t *testing.T) {
	for _, mtu := range []int{1500, 9000} {
		a, b, macA, macB := xdpLinkPair(t, mtu)
		rx := make([][]byte, 8)
		for _, n := range []int{60, 1000, mtu + 14, 4200, 8000} {
			if n > mtu+14 {
				continue
			}
			f := xdpTestFrame(macB, macA, n, byte(n))
			if got := a.Transmit([][]byte{f}); got != 1 {
				t.Fatalf("mtu %d: transmit took %d", mtu, got)
			}
			k := xdpReceiveOne(t, b, rx)
			if k != 1 || string(rx[0]) != string(f) {
				t.Errorf("mtu %d: %d-byte frame: got %d frames, first %d bytes", mtu, n, k, len(rx[0]))
			}
			b.Release()
		}
		// A frame longer than the MTU allows is taken and dropped.
		big := xdpTestFrame(macB, macA, mtu+100, 1)
		small := xdpTestFrame(macB, macA, 100, 2)
		if got := a.Transmit([][]byte{big, small}); got != 2 {
			t.Errorf("transmit of oversize + small took %d", got)
		}
		if k := xdpReceiveOne(t, b, rx); k != 1 || len(rx[0]) != 100 {
			t.Errorf("after an oversize frame: %d frames, %d bytes", k, len(rx[0]))
		}
		b.Release()
		st, err := a.XDPStats()
		if err != nil || st.TxRejected != 1 {
			t.Errorf("stats %+v, %v: want one rejected frame", st, err)
		}
	}
}

func TestXDPLinkWakeAndClose(t *testing.T) {
	a, _, _, _ := xdpLinkPair(t, 1500)
	done := make(chan struct{})
	go func() {
		a.Poll(-1)
		close(done)
	}()
	time.Sleep(10 * time.Millisecond)
	a.Wake()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Wake did not end Poll")
	}
	// Wake before Poll: the next Poll returns at once.
	a.Wake()
	a.Poll(-1)
	// Close ends a blocked Poll; later calls return at once.
	done = make(chan struct{})
	go func() {
		a.Poll(-1)
		close(done)
	}()
	time.Sleep(10 * time.Millisecond)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end Poll")
	}
	a.Poll(-1)
	a.Wake()
	if a.Receive(make([][]byte, 1)) != 0 || a.Transmit([][]byte{{1}}) != 1 {
		t.Error("calls after Close")
	}
	if _, err := a.XDPStats(); err == nil {
		t.Error("stats after close")
	}
	if err := a.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
}

// TestXDPLinkCloseWhileLent closes a link whose received frames are still
// held: the socket stays until they are released.
func TestXDPLinkCloseWhileLent(t *testing.T) {
	a, b, macA, macB := xdpLinkPair(t, 1500)
	f := xdpTestFrame(macB, macA, 200, 3)
	a.Transmit([][]byte{f})
	rx := make([][]byte, 4)
	xdpReceiveOne(t, b, rx)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if string(rx[0]) != string(f) { // still mapped
		t.Error("held frame changed")
	}
	b.Release()
	if b.sock != nil {
		t.Error("socket not closed by Release after Close")
	}
}

// busySocket is an AF_XDP socket on a device whose queue is full: what
// Transmit puts on the TX ring stays there until the kernel has been woken
// room times more.
type busySocket struct {
	efd    int // never readable: Poll has nothing to wait for but its timeout
	unsent int
	room   int
	kicks  int
	polls  int // BusyPoll calls
}

func (s *busySocket) Receive([][]byte) int { return 0 }
func (s *busySocket) Release()             {}
func (s *busySocket) Transmit(f [][]byte) int {
	s.unsent += len(f)
	return len(f)
}
func (s *busySocket) Complete() int {
	if s.unsent > 0 {
		if s.kicks++; s.kicks >= s.room {
			s.unsent = 0
		}
	}
	return 0
}
func (s *busySocket) Unsent() int               { return s.unsent }
func (s *busySocket) BusyPoll()                 { s.polls++ }
func (s *busySocket) FD() int                   { return s.efd }
func (s *busySocket) Stats() (xdp.Stats, error) { return xdp.Stats{}, nil }
func (s *busySocket) Close() error              { return unix.Close(s.efd) }

// TestXDPLinkBusyDevice: frames a busy device left on the TX ring are sent
// without waiting for a frame to arrive. Before, Poll slept until the next
// arrival or timer, and a READ responder on virtio-net left its responses
// on the ring until the requester's ACK timeout.
func TestXDPLinkBusyDevice(t *testing.T) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	s := &busySocket{efd: efd, room: 3}
	l, err := newXDPLink(s, 0, 1500)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f := xdpTestFrame([6]byte{2}, [6]byte{4}, 100, 1)
	if n := l.Transmit([][]byte{f, f, f, f}); n != 4 {
		t.Fatalf("Transmit took %d of 4", n)
	}
	done := make(chan struct{})
	var stop atomic.Bool
	go func() {
		defer close(done)
		for s.Unsent() > 0 && !stop.Load() {
			l.Poll(time.Hour) // as an idle engine with no timer due
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		stop.Store(true)
		l.Wake()
		<-done
		t.Fatalf("Poll slept with %d frames on the TX ring after %d wake-ups", s.unsent, s.kicks)
	}
	if s.kicks != s.room {
		t.Errorf("%d wake-ups, want %d", s.kicks, s.room)
	}

	// A spinning engine (busy polling) never sleeps in Poll: Poll(0),
	// which it calls on every idle turn, kicks too.
	s.kicks = 0
	l.Transmit([][]byte{f})
	for i := 0; i < s.room; i++ {
		l.Poll(0)
	}
	if s.unsent != 0 || s.kicks != s.room {
		t.Errorf("after %d calls of Poll(0): %d frames unsent, %d wake-ups", s.room, s.unsent, s.kicks)
	}
	// With nothing left to send, Poll(0) makes the socket's busy poll
	// (which does nothing unless it was opened for it).
	s.polls = 0
	l.Poll(0)
	if s.polls != 1 {
		t.Errorf("Poll(0) made %d busy polls, want 1", s.polls)
	}
}

func TestXDPLinkNoAllocs(t *testing.T) {
	for _, mtu := range []int{1500, 9000} {
		a, b, macA, macB := xdpLinkPair(t, mtu)
		frames := [][]byte{xdpTestFrame(macB, macA, 1000, 1), xdpTestFrame(macB, macA, mtu+14, 2)}
		rx := make([][]byte, 8)
		allocs := testing.AllocsPerRun(200, func() {
			a.Transmit(frames)
			got := 0
			for got < 2 {
				if n := b.Receive(rx[got:]); n > 0 {
					got += n
					b.Release()
					continue
				}
				b.Poll(time.Millisecond)
			}
			a.Wake()
			a.Poll(0)
		})
		if allocs != 0 {
			t.Errorf("mtu %d: %v allocations per round trip", mtu, allocs)
		}
	}
}

// BenchmarkXDPLink sends 64-frame batches from one link to the other and
// receives them: the frame rate of the AF_XDP link alone, with frames of
// the largest RoCE packets at path MTU 1024 and 4096.
func BenchmarkXDPLink(b *testing.B) {
	for _, c := range []struct {
		mtu, size int
	}{{1500, 1024 + 70}, {9000, 4096 + 74}} {
		b.Run(strconv.Itoa(c.size), func(b *testing.B) {
			la, lb, macA, macB := xdpLinkPair(b, c.mtu)
			batch := make([][]byte, 64)
			for i := range batch {
				batch[i] = xdpTestFrame(macB, macA, c.size, byte(i))
			}
			rx := make([][]byte, 64)
			lost := 0
			b.ReportAllocs()
			b.SetBytes(int64(c.size) * 64)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for sent := 0; sent < len(batch); {
					if sent += la.Transmit(batch[sent:]); sent < len(batch) {
						la.Poll(time.Millisecond)
					}
				}
				for got, idle := 0, 0; got < len(batch); {
					n := lb.Receive(rx)
					if n == 0 {
						if idle++; idle > 100 { // the rest was dropped on the way
							lost += len(batch) - got
							break
						}
						lb.Poll(time.Millisecond)
						continue
					}
					idle = 0
					got += n
					lb.Release()
				}
			}
			b.ReportMetric(float64(b.N*len(batch)-lost)/b.Elapsed().Seconds()/1e6, "Mframes/s")
			b.ReportMetric(float64(lost), "lost")
		})
	}
}

// The device's counters carry the AF_XDP sockets' (xsk_*), as uroce stat
// and the daemon's metrics show them.
func TestXDPLinkDeviceCounters(t *testing.T) {
	netnstest.RequireAFXDP(t)
	p := netnstest.NewPair(t, netns.PairConfig{Prefix: "uxc", MTU: 1500})
	var d *Device
	err := p.A.Do(func() (err error) {
		d, err = Open(context.Background(), Config{Interface: p.DevA, Manual: true})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	l := d.engines[0].link.(*xdpLink)
	mac := d.MAC()
	if n := l.Transmit([][]byte{xdpTestFrame(mac, mac, 1600, 1)}); n != 1 {
		t.Fatalf("transmit took %d", n)
	}
	c := d.Counters()
	if c.XSKTxRejected != 1 {
		t.Errorf("xsk_tx_rejected %d, want 1 (the oversize frame)", c.XSKTxRejected)
	}
	m := c.Map()
	for _, name := range []string{"xsk_rx_dropped", "xsk_rx_ring_full", "xsk_fill_ring_empty", "xsk_tx_ring_empty", "xsk_tx_busy", "xsk_tx_rejected"} {
		if _, ok := m[name]; !ok {
			t.Errorf("no counter %s", name)
		}
	}
	var back Counters
	if !back.Set("xsk_tx_rejected", 1) || back.XSKTxRejected != 1 {
		t.Error("Set does not know xsk_tx_rejected")
	}
}
