package stack_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/demo"
	"github.com/uroce/uroce/internal/netns"
	"github.com/uroce/uroce/internal/netns/netnstest"
	"github.com/uroce/uroce/link/fault"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/xdp"
)

// xdpStats is implemented by the links of an interface device.
type xdpStats interface {
	XDPStats() (xdp.Stats, error)
}

// vethDevices opens a device on each end of p, with faults on what each
// transmits when fc is not nil. It returns the raw AF_XDP links too.
func vethDevices(t testing.TB, p *netns.Pair, cfg stack.Config, fc *fault.Config) (a, b *stack.Device, la, lb []xdpStats) {
	t.Helper()
	wrap := func(links *[]xdpStats, seed uint64) func(int, stack.Link) stack.Link {
		return func(q int, l stack.Link) stack.Link {
			*links = append(*links, l.(xdpStats))
			if fc == nil {
				return l
			}
			c := *fc
			c.Seed = seed + uint64(q)
			return fault.Wrap(l, c)
		}
	}
	ca, cb := cfg, cfg
	ca.Interface, ca.WrapLink = p.DevA, wrap(&la, 1)
	cb.Interface, cb.WrapLink = p.DevB, wrap(&lb, 2)
	a, b = openIn(t, p.A, ca), openIn(t, p.B, cb)
	return a, b, la, lb
}

func sumStats(t *testing.T, links []xdpStats) xdp.Stats {
	t.Helper()
	var s xdp.Stats
	for _, l := range links {
		st, err := l.XDPStats()
		if err != nil {
			t.Fatal(err)
		}
		s.RxFrames += st.RxFrames
		s.RxMultiBuffer += st.RxMultiBuffer
		s.TxFrames += st.TxFrames
		s.TxMultiBuffer += st.TxMultiBuffer
	}
	return s
}

// TestVethOperations runs every operation of every transport between two
// devices on a veth pair: IPv4 and IPv6, MTU 1500 and 9000 (path MTU
// 4096: multi-buffer AF_XDP frames), with and without injected faults.
func TestVethOperations(t *testing.T) {
	netnstest.RequireAFXDP(t)
	faults := &fault.Config{Drop: 0.01, Dup: 0.01, Reorder: 0.01, Corrupt: 0.01}
	for _, mtu := range []int{1500, 9000} {
		for _, v6 := range []bool{false, true} {
			for _, fc := range []*fault.Config{nil, faults} {
				name := fmt.Sprintf("mtu%d/ipv6=%v/faults=%v", mtu, v6, fc != nil)
				t.Run(name, func(t *testing.T) {
					p := vethPair(t, mtu)
					a, b, la, lb := vethDevices(t, p, stack.Config{}, fc)
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					defer cancel()
					const n = 40
					res, err := demo.Exercise(ctx, a, b, demo.Workload{Size: 9000, Count: n, Latency: 5, IPv6: v6,
						Lossy: fc != nil, LossWait: 50 * time.Millisecond})
					if err != nil {
						t.Fatal(err)
					}
					for _, r := range res {
						if r.Messages+r.Lost != n {
							t.Errorf("%v: %d checked + %d lost of %d", r.Op, r.Messages, r.Lost, n)
						}
						if r.Lost > 0 && (fc == nil || r.Op != demo.UCWrite && r.Op != demo.UDSend) {
							t.Errorf("%v lost %d messages", r.Op, r.Lost)
						}
					}
					sa, sb := sumStats(t, la), sumStats(t, lb)
					if mtu == 9000 && (sa.TxMultiBuffer == 0 || sb.RxMultiBuffer == 0) {
						t.Errorf("no multi-buffer frames at mtu 9000: A sent %d, B received %d", sa.TxMultiBuffer, sb.RxMultiBuffer)
					}
					ca, cb := a.Counters(), b.Counters()
					if fc != nil && (ca.QP.RetransmittedPkts == 0 || cb.RcvICRCErr == 0) {
						t.Errorf("faults left no trace: A retransmitted %d, B icrc errors %d", ca.QP.RetransmittedPkts, cb.RcvICRCErr)
					}
					// A veth delivers what was sent, byte for byte: without
					// injected faults an ICRC error is a framing or ICRC bug.
					// Retransmissions may happen (a stalled engine makes a
					// loss probe fire) and are only reported.
					if fc == nil && (ca.RcvICRCErr != 0 || cb.RcvICRCErr != 0 || ca.RcvMalformed != 0 || cb.RcvMalformed != 0) {
						t.Errorf("without faults: icrc errors %d/%d, malformed %d/%d", ca.RcvICRCErr, cb.RcvICRCErr, ca.RcvMalformed, cb.RcvMalformed)
					}
					if fc == nil && ca.QP.RetransmittedPkts != 0 {
						t.Logf("without faults: %d packets retransmitted", ca.QP.RetransmittedPkts)
					}
				})
			}
		}
	}
}

// TestVethMultiQueue runs the workload on interfaces with three queues:
// QPs spread over three engines per device.
func TestVethMultiQueue(t *testing.T) {
	netnstest.RequireAFXDP(t)
	p := netnstest.NewPair(t, netns.PairConfig{Prefix: "ust", Queues: 3})
	a, b, _, _ := vethDevices(t, p, stack.Config{}, nil)
	if a.Query().NumQueues != 3 {
		t.Fatalf("%d queues", a.Query().NumQueues)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := demo.Exercise(ctx, a, b, demo.Workload{Size: 5000, Count: 30, Latency: -1}); err != nil {
		t.Fatal(err)
	}
}

// TestVethMultiQueuePlacement runs the workload on interfaces with two
// queues whose QP numbers differ by one between the ends: by QPN, every
// QP's frames would arrive on the other engine's queue; placed by their
// pair, next to none do (a frame may still come before its QP moved).
func TestVethMultiQueuePlacement(t *testing.T) {
	netnstest.RequireAFXDP(t)
	p := netnstest.NewPair(t, netns.PairConfig{Prefix: "ust", Queues: 2})
	a, b, _, _ := vethDevices(t, p, stack.Config{}, nil)
	takeQPNs(t, b, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := demo.Exercise(ctx, a, b, demo.Workload{Size: 65536, Count: 50, Latency: -1, Ops: []demo.Op{demo.RCWrite, demo.RCRead, demo.RCSend}}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []*stack.Device{a, b} {
		if c := d.Counters(); c.RcvSteered*10 > c.RcvdPkts {
			t.Errorf("%d frames of %d handed between engines", c.RcvSteered, c.RcvdPkts)
		}
	}
}

// takeQPNs creates n QPs on d that stay unused, so that d's next QP
// numbers are n ahead of another device's.
func takeQPNs(tb testing.TB, d *stack.Device, n int) {
	tb.Helper()
	if n == 0 {
		return
	}
	pd, err := d.AllocPD()
	if err != nil {
		tb.Fatal(err)
	}
	cq, err := d.CreateCQ(4)
	if err != nil {
		tb.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := pd.CreateQP(stack.QPInit{Type: stack.RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 1, MaxRecvWR: 1}); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkVethMultiQueue runs RC WRITE and READ of 64 KiB over a veth
// pair with two queues each way (MTU 9000), one QP at a time, with QP
// numbers alike at both ends and one apart; it reports Gbit/s and the
// frames handed between engines per message.
func BenchmarkVethMultiQueue(b *testing.B) {
	netnstest.RequireAFXDP(b)
	for _, offset := range []int{0, 1} {
		for _, op := range []demo.Op{demo.RCWrite, demo.RCRead} {
			b.Run(fmt.Sprintf("%v/qpn-offset-%d", strings.ReplaceAll(op.String(), " ", "_"), offset), func(b *testing.B) {
				p := netnstest.NewPair(b, netns.PairConfig{Prefix: "ust", Queues: 2, MTU: 9000})
				da, db, _, _ := vethDevices(b, p, stack.Config{}, nil)
				takeQPNs(b, db, offset)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				b.ResetTimer()
				r, err := demo.Exercise(ctx, da, db, demo.Workload{Size: 65536, Count: b.N, Latency: -1, Ops: []demo.Op{op}})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(r[0].Gbps(), "Gbit/s")
				b.ReportMetric(float64(da.Counters().RcvSteered+db.Counters().RcvSteered)/float64(b.N), "steered/op")
			})
		}
	}
}

// TestVethCoexistence checks that the kernel keeps the interface's other
// traffic while uroce runs RDMA on it: ICMP echo (IPv4 and IPv6), a TCP
// connection and UDP to another port work during an RC WRITE stream, and
// the RDMA data is intact.
func TestVethCoexistence(t *testing.T) {
	p := vethPair(t, 1500)
	a, b, _, _ := vethDevices(t, p, stack.Config{}, nil)

	// TCP server in B: echoes what it reads.
	var ln net.Listener
	if err := p.B.Do(func() (err error) { ln, err = net.Listen("tcp", "192.0.2.2:0"); return }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	var udp net.PacketConn
	if err := p.B.Do(func() (err error) { udp, err = net.ListenPacket("udp", "192.0.2.2:4792"); return }); err != nil {
		t.Fatal(err)
	}
	defer udp.Close()

	// RDMA in the background.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var rdmaErr error
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			_, err := demo.Exercise(ctx, a, b, demo.Workload{Size: 65536, Count: 100, Latency: -1, Ops: []demo.Op{demo.RCWrite, demo.RCRead}})
			if err != nil {
				rdmaErr = err
				return
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
		if rdmaErr != nil {
			t.Errorf("rdma during coexistence: %v", rdmaErr)
		}
	}()
	before := a.Counters().SentPkts

	for _, dst := range []string{"192.0.2.2", "2001:db8::2"} {
		if err := p.A.Do(func() error { return ping(netip.MustParseAddr(dst), 3) }); err != nil {
			t.Errorf("ping %s: %v", dst, err)
		}
	}
	var conn net.Conn
	if err := p.A.Do(func() (err error) { conn, err = net.Dial("tcp", ln.Addr().String()); return }); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	data := make([]byte, 4<<20)
	rand.Read(data)
	go conn.Write(data)
	back := make([]byte, len(data))
	if _, err := io.ReadFull(conn, back); err != nil {
		t.Fatalf("tcp echo: %v", err)
	}
	if !bytes.Equal(back, data) {
		t.Fatal("tcp echo differs")
	}
	var uc net.Conn
	if err := p.A.Do(func() (err error) { uc, err = net.Dial("udp", "192.0.2.2:4792"); return }); err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	udp.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 100)
	for i := 0; ; i++ {
		uc.Write([]byte("not roce"))
		udp.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if n, _, err := udp.ReadFrom(buf); err == nil && string(buf[:n]) == "not roce" {
			break
		} else if i == 10 {
			t.Fatalf("udp to port 4792: %v", err)
		}
	}
	if a.Counters().SentPkts == before {
		t.Error("no RDMA traffic ran during the test")
	}
}

// ping sends count ICMP echo requests to dst from the calling thread's
// network namespace and waits for each reply.
func ping(dst netip.Addr, count int) error {
	network, typ := "ip4:icmp", byte(8)
	if dst.Is6() {
		network, typ = "ip6:ipv6-icmp", 128
	}
	c, err := net.ListenPacket(network, "")
	if err != nil {
		return err
	}
	defer c.Close()
	id := uint16(time.Now().UnixNano())
	buf := make([]byte, 1500)
	for seq := uint16(1); seq <= uint16(count); seq++ {
		msg := make([]byte, 8+32)
		msg[0] = typ
		binary.BigEndian.PutUint16(msg[4:], id)
		binary.BigEndian.PutUint16(msg[6:], seq)
		copy(msg[8:], "uroce coexistence")
		if !dst.Is6() {
			binary.BigEndian.PutUint16(msg[2:], icmpChecksum(msg))
		}
		c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.WriteTo(msg, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
			return err
		}
		for {
			n, _, err := c.ReadFrom(buf)
			if err != nil {
				return fmt.Errorf("echo %d: %w", seq, err)
			}
			if n >= 8 && (buf[0] == 0 || buf[0] == 129) && binary.BigEndian.Uint16(buf[4:]) == id && binary.BigEndian.Uint16(buf[6:]) == seq {
				break
			}
		}
	}
	return nil
}

func icmpChecksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
