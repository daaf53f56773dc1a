package stack

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/link/fault"
	"github.com/uroce/uroce/link/pipe"
)

// dropLink drops the transmitted frames for which drop returns true.
type dropLink struct {
	Link
	pkt  bth.Packet
	drop func(p *bth.Packet) bool
	out  [][]byte
}

func (l *dropLink) Transmit(frames [][]byte) int {
	l.out = l.out[:0]
	for _, f := range frames {
		if bth.Parse(f, &l.pkt) == nil && l.drop(&l.pkt) {
			continue
		}
		l.out = append(l.out, f)
	}
	if n := l.Link.Transmit(l.out); n < len(l.out) {
		return 0 // keep it simple: these tests never fill the pipe
	}
	return len(frames)
}

// TestReadResponseLossRecovers loses one response packet of a long READ.
// The requester must re-request the rest once and complete: the
// responses of the first request that follow the gap are all "implied
// NAKs" for the same loss, and must not each be charged to the retry
// counter (rdma_rxe ignores them while its retry is under way).
func TestReadResponseLossRecovers(t *testing.T) {
	clock := NewFakeClock(0)
	pa, pb := pipe.New(pipe.Config{MTU: 1500, Slots: 512})
	dropped := 0
	lb := &dropLink{Link: pb, drop: func(p *bth.Packet) bool {
		if p.Opcode() == bth.OpReadRespMiddle && dropped == 0 {
			dropped++
			return true
		}
		return false
	}}
	s := &simPair{clock: clock}
	s.a = openManual(t, pa, macA, []netip.Addr{ipA}, clock)
	s.b = openManual(t, lb, macB, []netip.Addr{ipB}, clock)
	A, B := newSide(t, s.a, 1<<16, 16), newSide(t, s.b, 1<<16, 16)
	qa, qb := A.qp(t, RC), B.qp(t, RC)
	connect(t, qa, qb, 1, 0, 0, AccessRemoteRead)
	fill(B.buf[:32768], 3)
	if err := qa.PostSend(&SendWR{ID: 1, Op: OpRead, Flags: SendSignaled, SG: []SGE{A.mr.SGE(0, 32768)},
		Remote: RemoteAddr{B.mr.Addr(), B.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	wc := pollN(t, s, A.cq, 1)[0]
	if wc.Status != 0 || !bytes.Equal(A.buf[:32768], B.buf[:32768]) {
		t.Fatalf("READ with one response lost: %v (retries charged: %d, implied NAKs %d)",
			wc.Status, qa.Counters().CompleterRetryErr, qa.Counters().ImpliedNakSeqErr)
	}
}

// TestAtomicAckLossRecovers loses the ACK of a FETCH_ADD twice while
// WRITEs follow it. After the first retry, the responder re-ACKs every
// duplicate WRITE; each such ACK implies the same lost atomic ACK, and
// must not be charged to the retry counter again.
func TestAtomicAckLossRecovers(t *testing.T) {
	clock := NewFakeClock(0)
	pa, pb := pipe.New(pipe.Config{MTU: 1500, Slots: 512})
	dropped := 0
	lb := &dropLink{Link: pb, drop: func(p *bth.Packet) bool {
		if p.Opcode() == bth.OpAtomicAck && dropped < 2 {
			dropped++
			return true
		}
		return false
	}}
	s := &simPair{clock: clock}
	s.a = openManual(t, pa, macA, []netip.Addr{ipA}, clock)
	s.b = openManual(t, lb, macB, []netip.Addr{ipB}, clock)
	A, B := newSide(t, s.a, 1<<16, 64), newSide(t, s.b, 1<<16, 64)
	qa, qb := A.qp(t, RC), B.qp(t, RC)
	connect(t, qa, qb, 1, 0, 0, AccessRemoteWrite|AccessRemoteAtomic)
	wrs := []SendWR{{ID: 1, Op: OpFetchAdd, Flags: SendSignaled, SG: []SGE{A.mr.SGE(0, 8)},
		Remote: RemoteAddr{B.mr.Addr(), B.mr.RKey()}, CompareAdd: 5}}
	for i := 0; i < 20; i++ {
		wrs = append(wrs, SendWR{ID: uint64(2 + i), Op: OpWrite, Flags: SendSignaled, SG: []SGE{A.mr.SGE(64, 64)},
			Remote: RemoteAddr{B.mr.Addr() + 4096, B.mr.RKey()}})
	}
	if _, err := qa.PostSendBatch(wrs); err != nil {
		t.Fatal(err)
	}
	for i, wc := range pollN(t, s, A.cq, len(wrs)) {
		if wc.Status != 0 || wc.ID != uint64(i+1) {
			t.Fatalf("completion %d: wr %d %v (retries charged: %d, implied NAKs %d)", i, wc.ID, wc.Status,
				qa.Counters().CompleterRetryErr, qa.Counters().ImpliedNakSeqErr)
		}
	}
}

// holdLink keeps transmitted frames while hold is set, until release.
type holdLink struct {
	Link
	hold bool
	held [][]byte
}

func (l *holdLink) Transmit(frames [][]byte) int {
	if l.hold {
		for _, f := range frames {
			l.held = append(l.held, bytes.Clone(f))
		}
		return len(frames)
	}
	return l.Link.Transmit(frames)
}

func (l *holdLink) release() {
	l.hold = false
	if n := l.Link.Transmit(l.held); n != len(l.held) {
		panic("pipe full")
	}
	l.held = nil
}

// TestNoRetransmitAfterAck: a go-back-N retransmission is cut short by the
// link (it is full); then an ACK arrives for everything. The requester
// must not go on resending packets of work requests it has retired: their
// buffers belong to the application again, and their queue slots to new
// requests.
func TestNoRetransmitAfterAck(t *testing.T) {
	clock := NewFakeClock(0)
	// The engine's batch (64 frames) and the pipe (16) hold fewer than
	// the 100 packets to resend; no send window holds them back.
	pa, pb := pipe.New(pipe.Config{MTU: 1500, Slots: 16})
	la, lb := &holdLink{Link: pa}, &holdLink{Link: pb, hold: true}
	s := &simPair{clock: clock}
	s.a = openManualWin(t, la, macA, []netip.Addr{ipA}, clock, -1)
	s.b = openManualWin(t, lb, macB, []netip.Addr{ipB}, clock, -1)
	A, B := newSide(t, s.a, 1<<20, 16), newSide(t, s.b, 1<<20, 16)
	qa, qb := A.qp(t, RC), B.qp(t, RC)
	connect(t, qa, qb, 1, 0, 0, AccessRemoteWrite)
	const size = 100 * 1024 // 100 packets at path MTU 1024
	if err := qa.PostSend(&SendWR{ID: 1, Op: OpWrite, Flags: SendSignaled, SG: []SGE{A.mr.SGE(0, size)},
		Remote: RemoteAddr{B.mr.Addr(), B.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	for s.a.Step() || s.b.Step() {
	}
	if qa.Counters().SentPkts != 100 || len(lb.held) == 0 {
		t.Fatalf("setup: %d packets sent, %d acks held", qa.Counters().SentPkts, len(lb.held))
	}
	// The ACK timer fires: go back to the first packet; 80 fit.
	d, ok := s.a.NextDeadline()
	if !ok {
		t.Fatal("no ack timer")
	}
	clock.Set(d)
	s.a.Step()
	if r := qa.Counters().RetransmittedPkts; r == 0 || r >= 100 {
		t.Fatalf("setup: %d packets retransmitted, want some but not all", r)
	}
	// Now the ACKs arrive: the WRITE is complete.
	lb.release()
	s.a.Step()
	wcs := make([]WC, 4)
	if n := A.cq.Poll(wcs); n != 1 || wcs[0].Status != 0 {
		t.Fatalf("write not completed by the ack: %d %+v", n, wcs[:n])
	}
	// Frames already built stay queued in the engine; the QP itself must
	// build no more.
	built := qa.Counters().SentPkts
	for s.b.Step() || s.a.Step() {
	}
	if n := qa.Counters().SentPkts - built; n != 0 {
		t.Errorf("%d packets of a completed request built after its ACK", n)
	}
}

// TestLossyWritesWithoutAckTimeout: with 5 % of the frames of both
// directions lost, a stream of 64 KiB WRITEs at path MTU 4096 recovers
// from every loss by NAKs and loss probes: the ACK timeout (4 ms here)
// never fires, and every byte arrives. By default the responder drops
// what follows a gap, as the IBTA says, and keeps none of it; with
// KeepPastGap it keeps it: little is sent twice, and its engine gets its
// buffers back.
func TestLossyWritesWithoutAckTimeout(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep=%v", keep), func(t *testing.T) { lossyWrites(t, keep) })
	}
}

func lossyWrites(t *testing.T, keep bool) {
	for _, seed := range []uint64{1, 2, 3} {
		s := newSimPairCfg(t, 9000, &fault.Config{Seed: seed, Drop: 0.05}, Config{KeepPastGap: keep})
		A, B := newSide(t, s.a, 4<<20, 256), newSide(t, s.b, 4<<20, 256)
		qa, qb := A.qp(t, RC), B.qp(t, RC)
		connect(t, qa, qb, 1, 0, 0, AccessRemoteWrite)
		fill(A.buf, byte(seed))
		const size, count = 64 << 10, 64
		for i := 0; i < count; i += 16 {
			var wrs []SendWR
			for k := i; k < i+16; k++ {
				off := uint64(k%64) * size
				wrs = append(wrs, SendWR{ID: uint64(k), Op: OpWrite, Flags: SendSignaled, SG: []SGE{A.mr.SGE(off, size)},
					Remote: RemoteAddr{B.mr.Addr() + off, B.mr.RKey()}})
			}
			if _, err := qa.PostSendBatch(wrs); err != nil {
				t.Fatal(err)
			}
			for j, wc := range pollN(t, s, A.cq, 16) {
				if wc.Status != 0 || wc.ID != uint64(i+j) {
					t.Fatalf("seed %d: completion %d: wr %d %v", seed, i+j, wc.ID, wc.Status)
				}
			}
		}
		if !bytes.Equal(A.buf, B.buf) {
			t.Fatalf("seed %d: data differs", seed)
		}
		ca, cb := qa.Counters(), s.b.Counters()
		t.Logf("seed %d: %d packets sent for %d, %d NAKs, %d loss probes, %d timeouts", seed, ca.SentPkts, count*16,
			ca.RcvdSeqErr, ca.LossProbes, ca.LocalAckTimeoutErr)
		if ca.LocalAckTimeoutErr != 0 || ca.RcvdSeqErr == 0 || cb.QP.PacketSeqErr == 0 {
			t.Errorf("seed %d: counters %+v", seed, ca)
		}
		st := &s.b.engines[0].stash
		if !keep {
			if st.n != 0 {
				t.Errorf("seed %d: %d stash buffers taken without KeepPastGap", seed, st.n)
			}
			continue
		}
		if ca.RetransmittedPkts > count*16/4 {
			t.Errorf("seed %d: %d packets sent again, want at most %d", seed, ca.RetransmittedPkts, count*16/4)
		}
		if st.n == 0 || len(st.free) != st.n {
			t.Errorf("seed %d: %d stash buffers, %d returned", seed, st.n, len(st.free))
		}
	}
}

// TestDestroyReturnsKeptRequests: requests a responder keeps past a gap
// hold buffers of its engine until they run, or until the QP goes.
func TestDestroyReturnsKeptRequests(t *testing.T) {
	clock := NewFakeClock(0)
	pa, pb := pipe.New(pipe.Config{MTU: 9000, Slots: 64})
	lost := false
	first := func(p *bth.Packet) bool { // lose the first request
		if lost || !p.Info.Request {
			return false
		}
		lost = true
		return true
	}
	da := openManualCfg(t, &dropLink{Link: pa, drop: first}, macA, []netip.Addr{ipA}, clock, Config{KeepPastGap: true})
	db := openManualCfg(t, pb, macB, []netip.Addr{ipB}, clock, Config{KeepPastGap: true})
	A, B := newSide(t, da, 1<<20, 64), newSide(t, db, 1<<20, 64)
	qa, qb := A.qp(t, RC), B.qp(t, RC)
	connect(t, qa, qb, 1, 0, 0, AccessRemoteWrite)
	for i := 0; i < 4; i++ { // four one-packet WRITEs; the first is lost
		if err := qa.PostSend(&SendWR{ID: uint64(i), Op: OpWrite, SG: []SGE{A.mr.SGE(0, 1000)},
			Remote: RemoteAddr{B.mr.Addr(), B.mr.RKey()}}); err != nil {
			t.Fatal(err)
		}
	}
	da.Step()
	db.Step()
	st := &db.engines[0].stash
	if st.n != 3 || len(st.free) != 0 {
		t.Fatalf("%d buffers, %d free; want 3 kept", st.n, len(st.free))
	}
	if err := qb.Destroy(); err != nil {
		t.Fatal(err)
	}
	if len(st.free) != 3 {
		t.Errorf("%d of 3 buffers returned", len(st.free))
	}
}
