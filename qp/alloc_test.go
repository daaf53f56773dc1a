package qp

import (
	"testing"

	"github.com/uroce/uroce/bth"
)

// ringOut encodes packets into preallocated frame buffers: an Output
// that never allocates.
type ringOut struct {
	bufs [][]byte
	lens []int
	n    int
}

func newRingOut(frames int) *ringOut {
	o := &ringOut{bufs: make([][]byte, frames), lens: make([]int, frames)}
	for i := range o.bufs {
		o.bufs[i] = make([]byte, 4096+256)
	}
	return o
}

func (o *ringOut) Send(h *bth.Headers, payload []byte) bool {
	if o.n == len(o.bufs) {
		return false
	}
	k, err := bth.Encode(o.bufs[o.n], h, payload)
	if err != nil {
		panic(err)
	}
	o.lens[o.n] = k
	o.n++
	return true
}

// countSink counts completions and keeps the last one.
type countSink struct {
	send, recv, bad int
	last            WC
}

func (s *countSink) Complete(wc *WC, recv bool) {
	if wc.Status != WCSuccess {
		s.bad++
	}
	if recv {
		s.recv++
	} else {
		s.send++
	}
	s.last = *wc
}

// wire connects two QPs through ringOuts, parsing into reused packets.
type wire struct {
	a, b       *QP
	outA, outB *ringOut
	pkts       []bth.Packet
}

// run moves frames both ways until both sides are quiet.
func (w *wire) run(now Time) {
	for {
		w.a.Pump(now)
		w.b.Pump(now)
		if w.outA.n == 0 && w.outB.n == 0 {
			return
		}
		w.move(w.outA, w.b, now)
		w.move(w.outB, w.a, now)
	}
}

func (w *wire) move(o *ringOut, to *QP, now Time) {
	n := o.n
	o.n = 0
	for i := 0; i < n; i++ {
		p := &w.pkts[i]
		if err := bth.Parse(o.bufs[i][:o.lens[i]], p); err != nil {
			panic(err)
		}
		to.Receive(now, p)
	}
}

func newWire(t testing.TB, typ Type, mtu MTU, mem *fakeMem, sa, sb *countSink) *wire {
	w := &wire{outA: newRingOut(64), outB: newRingOut(64), pkts: make([]bth.Packet, 64)}
	var err error
	caps := Caps{Type: typ, MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2, PortMTU: mtu}
	caps.QPN = 0x11
	if w.a, err = New(caps, Env{Mem: mem, Out: w.outA, Sink: sa}); err != nil {
		t.Fatal(err)
	}
	caps.QPN = 0x12
	if w.b, err = New(caps, Env{Mem: mem, Out: w.outB, Sink: sb}); err != nil {
		t.Fatal(err)
	}
	o := defaultConn()
	o.mtu = mtu
	tt, ok := t.(*testing.T)
	if !ok {
		tt = &testing.T{}
	}
	connect(tt, w.a, addrA, addrB, 0x12, o)
	connect(tt, w.b, addrB, addrA, 0x11, o)
	return w
}

func TestZeroAllocsRC(t *testing.T) {
	mem := &fakeMem{}
	src := make([]byte, 64<<10)
	dst := make([]byte, 64<<10)
	ks := mem.reg(src, 0x100000, AccessLocalWrite)
	kd := mem.reg(dst, 0x200000, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)
	sa, sb := &countSink{}, &countSink{}
	w := newWire(t, RC, MTU4096, mem, sa, sb)
	sg := [2]SGE{{Addr: 0x100000, Length: 32 << 10, LKey: ks}, {Addr: 0x100000 + 32<<10, Length: 32 << 10, LKey: ks}}
	rsg := [1]SGE{{Addr: 0x200000, Length: 64 << 10, LKey: kd}}
	atom := [1]SGE{{Addr: 0x100000, Length: 8, LKey: ks}}
	write := SendWR{ID: 1, Opcode: WRWrite, Flags: SendSignaled, RemoteAddr: 0x200000, RKey: kd}
	send := SendWR{ID: 2, Opcode: WRSendWithImm, Flags: SendSignaled, Imm: 5}
	read := SendWR{ID: 3, Opcode: WRRead, Flags: SendSignaled, RemoteAddr: 0x200000, RKey: kd}
	fa := SendWR{ID: 4, Opcode: WRFetchAdd, Flags: SendSignaled, RemoteAddr: 0x200000, RKey: kd, CompareAdd: 1}
	recv := RecvWR{ID: 9}
	var now Time
	round := func() {
		now++
		write.SG, send.SG, read.SG, fa.SG, recv.SG = sg[:], sg[:1], sg[:], atom[:], rsg[:]
		if err := w.b.PostRecv(&recv); err != nil {
			panic(err)
		}
		for _, wr := range []*SendWR{&write, &send, &read, &fa} {
			if err := w.a.PostSend(now, wr); err != nil {
				panic(err)
			}
		}
		w.run(now)
	}
	round() // warm up
	allocs := testing.AllocsPerRun(200, round)
	if allocs != 0 {
		t.Errorf("%.1f allocations per round (64 KiB WRITE, 32 KiB SEND, 64 KiB READ, FETCH_ADD)", allocs)
	}
	if sa.bad+sb.bad != 0 || sa.send != 4*202 || sb.recv != 202 {
		t.Fatalf("completions: %+v %+v", sa, sb)
	}
}

func TestZeroAllocsUD(t *testing.T) {
	mem := &fakeMem{}
	buf := make([]byte, 8192)
	k := mem.reg(buf, 0x100000, AccessLocalWrite)
	sa, sb := &countSink{}, &countSink{}
	w := newWire(t, UD, MTU1024, mem, sa, sb)
	ah := &AddressVector{Path: pathTo(addrA, addrB)}
	sg := [1]SGE{{Addr: 0x100000, Length: 1000, LKey: k}}
	rsg := [1]SGE{{Addr: 0x100000 + 4096, Length: 2048, LKey: k}}
	send := SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, AH: ah, RemoteQPN: 0x12, RemoteQKey: 0x11111111}
	recv := RecvWR{ID: 2}
	round := func() {
		send.SG, recv.SG = sg[:], rsg[:]
		if err := w.b.PostRecv(&recv); err != nil {
			panic(err)
		}
		if err := w.a.PostSend(0, &send); err != nil {
			panic(err)
		}
		w.run(0)
	}
	round()
	if allocs := testing.AllocsPerRun(200, round); allocs != 0 {
		t.Errorf("%.1f allocations per UD message", allocs)
	}
	if sa.bad+sb.bad != 0 || sb.recv != 202 || sb.last.ByteLen != 1040 {
		t.Fatalf("completions: %+v %+v", sa, sb)
	}
}

// BenchmarkRCWrite64K measures the transport alone (no ICRC check on
// receive) for 64 KiB WRITEs at 4 KiB MTU.
func BenchmarkRCWrite64K(b *testing.B) {
	mem := &fakeMem{}
	src := make([]byte, 64<<10)
	dst := make([]byte, 64<<10)
	ks := mem.reg(src, 0x100000, 0)
	kd := mem.reg(dst, 0x200000, AccessRemoteWrite)
	sa, sb := &countSink{}, &countSink{}
	w := newWire(b, RC, MTU4096, mem, sa, sb)
	sg := [1]SGE{{Addr: 0x100000, Length: 64 << 10, LKey: ks}}
	wr := SendWR{ID: 1, Opcode: WRWrite, Flags: SendSignaled, RemoteAddr: 0x200000, RKey: kd}
	b.ReportAllocs()
	b.SetBytes(64 << 10)
	sent0 := w.a.Counters().SentPkts + w.b.Counters().SentPkts
	for i := 0; i < b.N; i++ {
		wr.SG = sg[:]
		if err := w.a.PostSend(0, &wr); err != nil {
			b.Fatal(err)
		}
		w.run(0)
	}
	// Packets both ways, as the QPs counted them: requests and ACKs.
	pkts := w.a.Counters().SentPkts + w.b.Counters().SentPkts - sent0
	b.ReportMetric(float64(pkts)/b.Elapsed().Seconds()/1e6, "Mpkt/s")
	b.ReportMetric(float64(pkts)/float64(b.N), "pkts/op")
}
