package qp

import (
	"bytes"
	"testing"
)

// pair builds two RC (or UC) QPs connected to each other.
func pair(t *testing.T, typ Type, oa, ob connOpts) (*node, *node) {
	t.Helper()
	a := newNode(t, Caps{Type: typ, QPN: 0x11})
	b := newNode(t, Caps{Type: typ, QPN: 0x12})
	connect(t, a.qp, addrA, addrB, 0x12, oa)
	connect(t, b.qp, addrB, addrA, 0x11, ob)
	return a, b
}

// exchange runs both QPs until neither sends anything.
func exchange(t *testing.T, now Time, a, b *node) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		a.qp.Pump(now)
		b.qp.Pump(now)
		pa, pb := a.out.take(), b.out.take()
		if len(pa) == 0 && len(pb) == 0 {
			return
		}
		deliver(now, b.qp, pa)
		deliver(now, a.qp, pb)
	}
	t.Fatal("exchange does not settle")
}

func TestSmokeRCSendWriteRead(t *testing.T) {
	a, b := pair(t, RC, defaultConn(), defaultConn())
	src := make([]byte, 10000)
	pattern(src, 3)
	lsrc := a.mem.reg(src, 0x1000, AccessLocalWrite)
	dst := make([]byte, 16384)
	ldst := b.mem.reg(dst, 0x9000, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
	if err := b.qp.PostRecv(&RecvWR{ID: 7, SG: []SGE{{Addr: 0x9000, Length: 16384, LKey: ldst}}}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(0, &SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled,
		SG: []SGE{{Addr: 0x1000, Length: 10000, LKey: lsrc}}}); err != nil {
		t.Fatal(err)
	}
	exchange(t, 0, a, b)
	if len(a.sink.send) != 1 || a.sink.send[0].Status != WCSuccess || a.sink.send[0].ID != 1 {
		t.Fatalf("send completions %+v", a.sink.send)
	}
	if len(b.sink.recv) != 1 || b.sink.recv[0].ByteLen != 10000 || b.sink.recv[0].ID != 7 {
		t.Fatalf("recv completions %+v", b.sink.recv)
	}
	if !bytes.Equal(dst[:10000], src) {
		t.Fatal("send data differs")
	}
	// READ it back into a fresh buffer.
	back := make([]byte, 10000)
	lback := a.mem.reg(back, 0x40000, AccessLocalWrite)
	if err := a.qp.PostSend(0, &SendWR{ID: 2, Opcode: WRRead, Flags: SendSignaled,
		SG: []SGE{{Addr: 0x40000, Length: 10000, LKey: lback}}, RemoteAddr: 0x9000, RKey: ldst}); err != nil {
		t.Fatal(err)
	}
	exchange(t, 0, a, b)
	if len(a.sink.send) != 2 || a.sink.send[1].Status != WCSuccess || a.sink.send[1].Opcode != WCRDMARead {
		t.Fatalf("read completions %+v", a.sink.send)
	}
	if !bytes.Equal(back, src) {
		t.Fatal("read data differs")
	}
}
