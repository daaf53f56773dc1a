package xdp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/uroce/uroce/bpf"
	"github.com/uroce/uroce/internal/netns"
	"github.com/uroce/uroce/internal/netns/netnstest"
)

// vethEnd is one end of a test veth pair with the steering program
// attached and, once opened, AF_XDP sockets registered.
type vethEnd struct {
	ns      *netns.Namespace
	dev     string
	ifindex int
	mac     net.HardwareAddr
	ip      net.IP
	prog    *bpf.Program
}

// newVeth builds a veth pair in two private namespaces and attaches the
// steering program to both ends in mode.
func newVeth(t testing.TB, mtu, queues int, mode bpf.Mode) (a, b *vethEnd) {
	t.Helper()
	netnstest.RequireAFXDP(t)
	p := netnstest.NewPair(t, netns.PairConfig{Prefix: "uroce-xdp", MTU: mtu, Queues: queues})
	a = &vethEnd{ns: p.A, dev: p.DevA, ifindex: p.IndexA, mac: p.MACA, ip: p.AddrA[0].Addr().AsSlice()}
	b = &vethEnd{ns: p.B, dev: p.DevB, ifindex: p.IndexB, mac: p.MACB, ip: p.AddrB[0].Addr().AsSlice()}
	for _, e := range []*vethEnd{a, b} {
		prog, err := bpf.Load()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { prog.Close() })
		if err := e.ns.Do(func() error { return prog.Attach(e.ifindex, mode) }); err != nil {
			t.Fatal(err)
		}
		e.prog = prog
	}
	return a, b
}

// open opens a socket on queue q of the end and registers it.
func (e *vethEnd) open(t testing.TB, cfg Config) *Socket {
	t.Helper()
	cfg.Interface = e.dev
	var s *Socket
	err := e.ns.Do(func() error {
		var err error
		s, err = Open(cfg)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := e.prog.Register(cfg.Queue, s.FD()); err != nil {
		t.Fatal(err)
	}
	return s
}

// roceFrame builds an Ethernet/IPv4/UDP frame to port 4791 of total size
// n from src to dst, with seq in the first payload bytes and a pattern
// after.
func roceFrame(src, dst *vethEnd, n int, seq uint32) []byte {
	f := make([]byte, n)
	copy(f[0:], dst.mac)
	copy(f[6:], src.mac)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:34]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(n-14))
	binary.BigEndian.PutUint16(ip[6:], 0x4000)
	copy(ip[12:], src.ip.To4())
	copy(ip[16:], dst.ip.To4())
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	sum = sum>>16 + sum&0xffff
	sum += sum >> 16
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	udp := f[34:42]
	binary.BigEndian.PutUint16(udp[0:], 49152)
	binary.BigEndian.PutUint16(udp[2:], bpf.RoCEv2Port)
	binary.BigEndian.PutUint16(udp[4:], uint16(n-34))
	binary.BigEndian.PutUint32(f[42:], seq)
	for i := 46; i < n; i++ {
		f[i] = byte(i) ^ byte(seq)
	}
	return f
}

// exchange sends frames from tx and checks that rx receives exactly them, in
// order.
func exchange(t *testing.T, tx, rx *Socket, frames [][]byte) {
	t.Helper()
	got := 0
	sent := 0
	batch := make([][]byte, 64)
	deadline := time.Now().Add(10 * time.Second)
	for got < len(frames) {
		if time.Now().After(deadline) {
			st, _ := rx.Stats()
			t.Fatalf("received %d of %d frames; receiver stats %+v", got, len(frames), st)
		}
		if sent < len(frames) {
			sent += tx.Transmit(frames[sent:min(len(frames), sent+32)])
		}
		tx.Complete()
		if err := rx.Wait(10 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		n := rx.Receive(batch)
		for _, f := range batch[:n] {
			if got >= len(frames) || !bytes.Equal(f, frames[got]) {
				t.Fatalf("frame %d: got %d bytes (seq %d), want %d bytes", got, len(f), binary.BigEndian.Uint32(f[42:]), len(frames[got]))
			}
			got++
		}
		rx.Release()
	}
	for i := 0; tx.Pending() > 0 && i < 1000; i++ {
		tx.Complete()
		time.Sleep(time.Millisecond)
	}
	if tx.Pending() != 0 {
		t.Errorf("%d transmit chunks never completed", tx.Pending())
	}
}

func TestVethTraffic(t *testing.T) {
	for _, mode := range []bpf.Mode{bpf.Native, bpf.Generic} {
		for _, mtu := range []int{1500, 9000} {
			t.Run(fmt.Sprintf("%v/mtu%d", mode, mtu), func(t *testing.T) {
				a, b := newVeth(t, mtu, 1, mode)
				cfg := Config{Frames: 512, RingSize: 256, Mode: Copy, NeedWakeup: mtu == 9000, MultiBuffer: mtu == 9000}
				sa, sb := a.open(t, cfg), b.open(t, cfg)
				if sa.ZeroCopy() || sb.ZeroCopy() {
					t.Error("copy mode reported as zero-copy")
				}
				sizes := []int{60, 64, 1514}
				if mtu == 9000 {
					sizes = append(sizes, 4170, 9014)
				}
				for _, dir := range []struct {
					name       string
					from, to   *vethEnd
					sock, peer *Socket
				}{{"a-to-b", a, b, sa, sb}, {"b-to-a", b, a, sb, sa}} {
					var frames [][]byte
					for i := 0; i < 100; i++ {
						frames = append(frames, roceFrame(dir.from, dir.to, sizes[i%len(sizes)], uint32(i)))
					}
					exchange(t, dir.sock, dir.peer, frames)
				}
				st, err := sb.Stats()
				if err != nil {
					t.Fatal(err)
				}
				if st.RxFrames != 100 || st.TxFrames != 100 || st.RxDropped != 0 || st.RxInvalidDescs != 0 || st.TxInvalidDescs != 0 {
					t.Errorf("stats %+v", st)
				}
				if mtu == 9000 && (st.RxMultiBuffer == 0 || st.TxMultiBuffer == 0) {
					t.Errorf("no multi-buffer frames at MTU 9000: %+v", st)
				}
				if st.Wakeups == 0 {
					t.Errorf("copy-mode transmit never woke the kernel: %+v", st)
				}
			})
		}
	}
}

// Veth has no zero-copy: Auto falls back to copy mode, ZeroCopy fails.
func TestVethBindModes(t *testing.T) {
	a, _ := newVeth(t, 1500, 1, bpf.Native)
	s := a.open(t, Config{Frames: 64, RingSize: 32, Mode: Auto})
	if st, err := s.Stats(); s.ZeroCopy() || err != nil || st.ZeroCopy {
		t.Errorf("zero-copy on veth (stats %+v, %v)", st, err)
	}
	s.Close()
	err := a.ns.Do(func() error {
		s, err := Open(Config{Interface: a.dev, Frames: 64, RingSize: 32, Mode: ZeroCopy})
		if err == nil {
			s.Close()
		}
		return err
	})
	if !errors.Is(err, ErrNoZeroCopy) {
		t.Errorf("ZeroCopy on veth: %v, want ErrNoZeroCopy", err)
	}
}

// Close releases everything: the same queue is bound again in the same
// process, many times, and traffic flows through the new socket.
func TestVethCloseReopen(t *testing.T) {
	a, b := newVeth(t, 1500, 1, bpf.Native)
	sa := a.open(t, Config{Frames: 64, RingSize: 32})
	cfg := Config{Frames: 64, RingSize: 32, NeedWakeup: true}
	for i := 0; i < 5; i++ {
		sb := b.open(t, cfg)
		if i == 0 {
			// While it is open the queue is busy (this takes
			// Open's retry time to report).
			err := b.ns.Do(func() error {
				s, err := Open(Config{Interface: b.dev, Frames: 64, RingSize: 32})
				if err == nil {
					s.Close()
				}
				return err
			})
			if !errors.Is(err, ErrQueueBusy) {
				t.Fatalf("second socket on a busy queue: %v, want ErrQueueBusy", err)
			}
		}
		exchange(t, sa, sb, [][]byte{roceFrame(a, b, 100, uint32(i)), roceFrame(a, b, 1000, uint32(i))})
		if err := sb.Close(); err != nil {
			t.Fatal(err)
		}
		if err := sb.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		if sb.FD() != -1 || sb.Receive(make([][]byte, 1)) != 0 || sb.Transmit([][]byte{{1}}) != 0 {
			t.Error("closed socket still usable")
		}
		if err := sb.Wait(0); !errors.Is(err, ErrClosed) {
			t.Errorf("Wait after Close: %v", err)
		}
	}
}

func TestVethOpenErrors(t *testing.T) {
	a, _ := newVeth(t, 1500, 1, bpf.Generic)
	open := func(cfg Config) error {
		return a.ns.Do(func() error {
			s, err := Open(cfg)
			if err == nil {
				s.Close()
			}
			return err
		})
	}
	if err := open(Config{Interface: "uroce-none0"}); !errors.Is(err, ErrNoInterface) {
		t.Errorf("missing interface: %v", err)
	}
	if err := open(Config{Interface: a.dev, Queue: 3}); !errors.Is(err, ErrNoQueue) {
		t.Errorf("missing queue: %v", err)
	}
	if err := open(Config{Interface: a.dev, RingSize: 1000}); err == nil {
		t.Error("ring size 1000 accepted")
	}
	if err := open(Config{Interface: a.dev, Frames: 1}); err == nil {
		t.Error("1 frame accepted")
	}
	if err := open(Config{}); !errors.Is(err, ErrNoInterface) {
		t.Errorf("no interface: %v", err)
	}
	// By index works too.
	if err := open(Config{Ifindex: a.ifindex, Frames: 16, RingSize: 8}); err != nil {
		t.Errorf("open by index: %v", err)
	}
}

// The kernel's counters come through: a receiver that never releases runs
// out of fill ring entries and the kernel drops.
func TestVethKernelStats(t *testing.T) {
	a, b := newVeth(t, 1500, 1, bpf.Native)
	sa := a.open(t, Config{Frames: 128, RingSize: 64})
	sb := b.open(t, Config{Frames: 16, RingSize: 8}) // 8 receive chunks
	var frames [][]byte
	for i := 0; i < 20; i++ {
		frames = append(frames, roceFrame(a, b, 200, uint32(i)))
	}
	for sent := 0; sent < len(frames); {
		sent += sa.Transmit(frames[sent:])
		sa.Complete()
	}
	for i := 0; sa.Pending() > 0 && i < 1000; i++ {
		sa.Complete()
		time.Sleep(time.Millisecond)
	}
	st, err := sb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.RxDropped+st.RxFillRingEmptyDescs == 0 {
		t.Errorf("no drops counted with 8 receive chunks and 20 frames: %+v", st)
	}
	batch := make([][]byte, 32)
	if n := sb.Receive(batch); n != 8 {
		t.Errorf("Receive = %d, want the 8 frames that fit", n)
	}
}

// One socket per queue: frames sent on queue 1 arrive on the peer's queue 1
// and its socket, those on queue 0 on queue 0.
func TestVethMultiQueue(t *testing.T) {
	a, b := newVeth(t, 1500, 2, bpf.Native)
	cfg := Config{Frames: 64, RingSize: 32, NeedWakeup: true}
	var sa, sb [2]*Socket
	for q := 0; q < 2; q++ {
		cfg.Queue = q
		sa[q], sb[q] = a.open(t, cfg), b.open(t, cfg)
	}
	for q := 0; q < 2; q++ {
		exchange(t, sa[q], sb[q], [][]byte{roceFrame(a, b, 100+q, uint32(q))})
	}
	batch := make([][]byte, 4)
	for q := 0; q < 2; q++ {
		if n := sb[q].Receive(batch); n != 0 {
			t.Errorf("queue %d received %d stray frames", q, n)
		}
	}
}

// Non-RoCE traffic keeps going through the kernel while sockets are bound.
func TestVethCoexistence(t *testing.T) {
	a, b := newVeth(t, 1500, 1, bpf.Native)
	sa, sb := a.open(t, Config{Frames: 64, RingSize: 32}), b.open(t, Config{Frames: 64, RingSize: 32})
	var srv *net.UDPConn
	err := b.ns.Do(func() error {
		var err error
		srv, err = net.ListenUDP("udp4", &net.UDPAddr{IP: b.ip, Port: 4792})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var cli *net.UDPConn
	err = a.ns.Do(func() error {
		var err error
		cli, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: b.ip, Port: 4792})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Write([]byte("kernel")); err != nil { // needs ARP through the kernel too
		t.Fatal(err)
	}
	srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 16)
	n, err := srv.Read(buf)
	if err != nil || string(buf[:n]) != "kernel" {
		t.Fatalf("kernel UDP: %q, %v", buf[:n], err)
	}
	exchange(t, sa, sb, [][]byte{roceFrame(a, b, 128, 1)})
	if n := sa.Receive(make([][]byte, 4)); n != 0 {
		t.Errorf("%d non-RoCE frames reached the socket", n)
	}
}

// Steady-state Receive, Release, Transmit and Complete on real sockets do
// not allocate.
func TestVethAllocs(t *testing.T) {
	a, b := newVeth(t, 9000, 1, bpf.Native)
	cfg := Config{Frames: 512, RingSize: 256, NeedWakeup: true, MultiBuffer: true}
	sa, sb := a.open(t, cfg), b.open(t, cfg)
	out := [][]byte{roceFrame(a, b, 64, 1), roceFrame(a, b, 4170, 2)}
	batch := make([][]byte, 16)
	lost := 0
	step := func() {
		if sa.Transmit(out) != 2 {
			lost++
		}
		sa.Complete()
		n := sb.Receive(batch)
		sb.Release()
		if n == 0 {
			lost++
		}
	}
	step()
	if allocs := testing.AllocsPerRun(200, step); allocs != 0 {
		t.Errorf("%v allocations per round", allocs)
	}
	if lost > 10 {
		t.Errorf("%d rounds without traffic: the loop did not exercise the data path", lost)
	}
}

// Wait blocks until a frame arrives, then Receive finds it.
func TestVethWait(t *testing.T) {
	a, b := newVeth(t, 1500, 1, bpf.Native)
	sa, sb := a.open(t, Config{Frames: 64, RingSize: 32}), b.open(t, Config{Frames: 64, RingSize: 32, NeedWakeup: true})
	if err := sb.Wait(0); err != nil {
		t.Fatal(err)
	}
	if n := sb.Receive(make([][]byte, 4)); n != 0 {
		t.Fatalf("Receive = %d before anything was sent", n)
	}
	woke := make(chan error, 1)
	go func() { woke <- sb.Wait(-1) }() // sb belongs to this goroutine until it returns
	f := roceFrame(a, b, 300, 7)
	for sa.Transmit([][]byte{f}) != 1 {
		sa.Complete()
	}
	select {
	case err := <-woke:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after a frame was sent")
	}
	batch := make([][]byte, 4)
	if n := sb.Receive(batch); n != 1 || !bytes.Equal(batch[0], f) {
		t.Fatalf("Receive after Wait = %d", n)
	}
}

// Sockets opened with kernel busy polling carry traffic, and BusyPoll's
// recvfrom drives the queue: frames arrive whether or not a softirq ran.
func TestVethBusyPoll(t *testing.T) {
	a, b := newVeth(t, 1500, 1, bpf.Native)
	cfg := Config{Frames: 512, RingSize: 256, Mode: Copy, NeedWakeup: true, BusyPoll: 20 * time.Microsecond}
	sa, sb := a.open(t, cfg), b.open(t, cfg)
	if sb.Config().BusyPollBudget != 64 {
		t.Errorf("budget %d, want the default 64", sb.Config().BusyPollBudget)
	}
	var frames [][]byte
	for i := 0; i < 100; i++ {
		frames = append(frames, roceFrame(a, b, 200+i, uint32(i)))
	}
	w0 := sb.counters().Wakeups
	sb.BusyPoll()
	if st := sb.counters(); st.Wakeups != w0+1 || st.WakeupErrors != 0 {
		t.Errorf("BusyPoll: %d wake-ups (%d errors), want one more than %d and none", st.Wakeups, st.WakeupErrors, w0)
	}
	exchange(t, sa, sb, frames)

	for _, bad := range []Config{{BusyPoll: -1}, {BusyPoll: 2 * time.Second}, {BusyPollBudget: -1}} {
		bad.Interface = a.dev
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
