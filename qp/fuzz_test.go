package qp

import (
	"testing"

	"github.com/uroce/uroce/bth"
)

// FuzzReceive feeds arbitrary (well-formed at the wire level) packets to
// QPs of each type with work outstanding in both directions. Nothing may
// panic and the queue invariants must hold afterwards.
func FuzzReceive(f *testing.F) {
	// Seeds: an ACK, a NAK, a READ response, a WRITE, a READ request, an
	// atomic, a UD send, a FLUSH (its FETH from msn), an ATOMIC_WRITE.
	f.Add(uint8(0), uint8(bth.OpAck), uint32(0), false, uint64(0), uint32(0), uint32(0), uint8(0x1f), uint32(1), []byte{})
	f.Add(uint8(0), uint8(bth.OpAck), uint32(1), false, uint64(0), uint32(0), uint32(0), uint8(0x60), uint32(1), []byte{})
	f.Add(uint8(0), uint8(bth.OpReadRespFirst), uint32(1), false, uint64(0), uint32(0), uint32(0), uint8(0x1f), uint32(1), make([]byte, 256))
	f.Add(uint8(0), uint8(bth.OpWriteFirst), uint32(0), true, uint64(0x20000), uint32(2), uint32(600), uint8(0), uint32(0), make([]byte, 256))
	f.Add(uint8(0), uint8(bth.OpReadRequest), uint32(0), true, uint64(0x20000), uint32(2), uint32(4096), uint8(0), uint32(0), []byte{})
	f.Add(uint8(0), uint8(bth.OpCompareSwap), uint32(0), true, uint64(0x20000), uint32(2), uint32(0), uint8(0), uint32(0), []byte{})
	f.Add(uint8(2), uint8(bth.OpUDSendOnly), uint32(0), false, uint64(0), uint32(0), uint32(0), uint8(0), uint32(0x11111111), make([]byte, 100))
	f.Add(uint8(0), uint8(bth.OpFlush), uint32(0), true, uint64(0x20000), uint32(2), uint32(64), uint8(0), uint32(0x11), []byte{})
	f.Add(uint8(0), uint8(bth.OpAtomicWrite), uint32(0), true, uint64(0x20008), uint32(2), uint32(8), uint8(0), uint32(0), make([]byte, 8))
	f.Add(uint8(1), uint8(bth.OpSendMiddle.On(bth.TransportUC)), uint32(5), false, uint64(0), uint32(0), uint32(0), uint8(0), uint32(0), make([]byte, 256))
	f.Fuzz(func(t *testing.T, typ, op uint8, psn uint32, ack bool, va uint64, rkey, dmaLen uint32, syn uint8, msn uint32, payload []byte) {
		qt := Type(typ%3) + RC
		o := defaultConn()
		o.mtu = MTU256
		n := single(t, Caps{Type: qt}, o)
		buf, key := n.buf(8192, 0x20000, 1)
		_ = buf
		for i := uint64(0); i < 3; i++ {
			n.recv(t, i, 0x20000+1024*i, 1024, key)
		}
		if qt != UD {
			n.post(t, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SG: []SGE{{Addr: 0x20000, Length: 600, LKey: key}}})
			n.post(t, SendWR{ID: 2, Opcode: WRWrite, Flags: SendSignaled, SG: []SGE{{Addr: 0x20000, Length: 300, LKey: key}}})
			if qt == RC {
				n.post(t, SendWR{ID: 3, Opcode: WRRead, Flags: SendSignaled, SG: []SGE{{Addr: 0x20000, Length: 700, LKey: key}}})
				n.post(t, SendWR{ID: 4, Opcode: WRFetchAdd, Flags: SendSignaled, SG: []SGE{{Addr: 0x20000, Length: 8, LKey: key}}})
				n.post(t, SendWR{ID: 5, Opcode: WRAtomicWrite, Flags: SendSignaled, SG: []SGE{{Addr: 0x20000, Length: 8, LKey: key}}})
				n.post(t, SendWR{ID: 6, Opcode: WRFlush, Flags: SendSignaled, FlushType: FlushGlobal, FlushLevel: FlushMR})
			}
		}
		n.qp.Pump(0)
		n.out.take()
		h := hdr(bth.Opcode(op), bth.MakePSN(psn))
		h.BTH.AckReq = ack
		h.VA, h.RKey, h.DMALen = va, rkey, dmaLen
		h.AtomicVA, h.AtomicRKey = va, rkey
		h.Syndrome, h.MSN = bth.Syndrome(syn), msn
		h.FETH = msn
		h.QKey, h.SrcQP = msn, psn&bth.PSNMask
		if len(payload) > 4096 {
			payload = payload[:4096]
		}
		if !bth.Opcode(op).Valid() {
			return
		}
		frame := make([]byte, h.FrameLen(len(payload)))
		if _, err := bth.Encode(frame, h, payload); err != nil {
			return
		}
		var p bth.Packet
		if err := bth.Parse(frame, &p); err != nil {
			return
		}
		for i := 0; i < 2; i++ { // twice: the second one is a duplicate
			n.qp.Receive(0, &p)
			n.qp.Pump(0)
			if d, ok := n.qp.Deadline(); ok {
				n.qp.Tick(d)
				n.qp.Pump(d)
			}
		}
		q := n.qp
		sq := &q.sq
		if !(sq.head <= sq.next && sq.next <= sq.tail && q.curIdx >= sq.head && q.curIdx <= sq.next) {
			t.Fatalf("send queue counters head %d next %d tail %d cursor %d", sq.head, sq.next, sq.tail, q.curIdx)
		}
		if q.rdOut < 0 || q.resp.busy < 0 || q.resp.itail < q.resp.ihead {
			t.Fatalf("rdOut %d busy %d items %d..%d", q.rdOut, q.resp.busy, q.resp.ihead, q.resp.itail)
		}
		for _, p := range n.out.take() {
			if p.BTH().DestQP() != peerQPN && qt != UD {
				t.Fatalf("sent to qp %#x", p.BTH().DestQP())
			}
		}
	})
}
