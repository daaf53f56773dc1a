package stack

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/uroce/uroce/link/fault"
	"github.com/uroce/uroce/link/pipe"
)

// simPair is two Manual devices on one fake clock joined by a pipe.
type simPair struct {
	clock  *FakeClock
	a, b   *Device
	fa, fb *fault.Link // nil without faults
	trace  []string
}

func newSimPair(t testing.TB, mtu int, faults *fault.Config) *simPair {
	return newSimPairWin(t, mtu, faults, 0)
}

func newSimPairWin(t testing.TB, mtu int, faults *fault.Config, window int) *simPair {
	return newSimPairCfg(t, mtu, faults, Config{SendWindow: window})
}

// newSimPairCfg is newSimPair with the devices' other settings from cfg
// (SendWindow, KeepPastGap).
func newSimPairCfg(t testing.TB, mtu int, faults *fault.Config, cfg Config) *simPair {
	t.Helper()
	s := &simPair{clock: NewFakeClock(time.Second)}
	pa, pb := pipe.New(pipe.Config{MTU: mtu, Slots: 512})
	var la, lb Link = pa, pb
	if faults != nil {
		fa, fb := *faults, *faults
		fa.Clock, fb.Clock = s.clock, s.clock
		fb.Seed = faults.Seed ^ 0x5555
		s.fa, s.fb = fault.Wrap(pa, fa), fault.Wrap(pb, fb)
		la, lb = s.fa, s.fb
	}
	if traceOn() {
		la = &traceLink{Link: la, name: "A", clock: s.clock, log: &s.trace}
		lb = &traceLink{Link: lb, name: "B", clock: s.clock, log: &s.trace}
	}
	s.a = openManualCfg(t, la, macA, []netip.Addr{ipA, ip6A}, s.clock, cfg)
	s.b = openManualCfg(t, lb, macB, []netip.Addr{ipB, ip6B}, s.clock, cfg)
	return s
}

// run steps both devices until done returns true, moving the clock by a
// microsecond per busy step and to the next deadline when both are idle.
func (s *simPair) run(t testing.TB, done func() bool) {
	t.Helper()
	for i := 0; i < 50_000_000; i++ {
		if done() {
			return
		}
		wa, wb := s.a.Step(), s.b.Step()
		if wa || wb {
			s.clock.Advance(time.Microsecond)
			continue
		}
		da, oka := s.a.NextDeadline()
		db, okb := s.b.NextDeadline()
		switch {
		case oka && okb:
			s.clock.Set(min(da, db))
		case oka:
			s.clock.Set(da)
		case okb:
			s.clock.Set(db)
		default:
			if done() {
				return
			}
			t.Fatalf("simulation stuck at %v: nothing to do and nothing due", s.clock.Now())
		}
		s.clock.Advance(time.Nanosecond)
	}
	t.Fatal("simulation does not finish")
}

// connect brings qa and qb (of devices da, db) to RTS, connected to each
// other, with GIDs of index gid.
func connect(t testing.TB, qa, qb *QP, gid int, psnA, psnB PSN, access Access) {
	t.Helper()
	connectRd(t, qa, qb, gid, psnA, psnB, access, 16)
}

// connectRd is connect with rd READ/atomic resources each way.
func connectRd(t testing.TB, qa, qb *QP, gid int, psnA, psnB PSN, access Access, rd uint8) {
	t.Helper()
	da, db := qa.dev, qb.dev
	for _, c := range []struct {
		q, peer *QP
		d       *Device
		rq, sq  PSN
	}{{qa, qb, db, psnB, psnA}, {qb, qa, da, psnA, psnB}} {
		dgid, _ := c.d.GID(gid)
		if err := c.q.ToInit(InitAttr{AccessFlags: access, QKey: 0x1234}); err != nil {
			t.Fatal(err)
		}
		if err := c.q.ToRTR(RTRAttr{DestQPN: c.peer.QPN(), AH: AHAttr{DGID: dgid, SGIDIndex: gid},
			RQPSN: c.rq, MaxDestRdAtomic: rd, MinRNRTimer: 1}); err != nil {
			t.Fatal(err)
		}
		if err := c.q.ToRTS(RTSAttr{SQPSN: c.sq, Timeout: 10, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: rd}); err != nil {
			t.Fatal(err)
		}
	}
}

// udReady brings UD QP q to RTS with Q_Key qkey and first send PSN sqpsn.
func udReady(t testing.TB, q *QP, qkey uint32, sqpsn PSN) {
	t.Helper()
	for _, err := range []error{q.ToInit(InitAttr{QKey: qkey}), q.ToRTR(RTRAttr{}), q.ToRTS(RTSAttr{SQPSN: sqpsn})} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// side is one device's objects for a test.
type side struct {
	pd  *PD
	cq  *CQ
	buf []byte
	mr  *MR
}

func newSide(t testing.TB, d *Device, size, cqn int) *side {
	t.Helper()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(cqn)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, size)
	mr, err := pd.RegisterMR(buf, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	return &side{pd: pd, cq: cq, buf: buf, mr: mr}
}

func (s *side) qp(t testing.TB, typ QPType) *QP {
	t.Helper()
	q, err := s.pd.CreateQP(QPInit{Type: typ, SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// pollN polls cq until it holds n completions.
func pollN(t testing.TB, s *simPair, cq *CQ, n int) []WC {
	t.Helper()
	var got []WC
	wcs := make([]WC, 16)
	s.run(t, func() bool {
		for k := cq.Poll(wcs); k > 0; k = cq.Poll(wcs) {
			got = append(got, wcs[:k]...)
		}
		return len(got) >= n
	})
	return got
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

func TestRCAllOperations(t *testing.T) {
	for _, gid := range []int{1, 2} { // IPv4, IPv6
		s := newSimPair(t, 9000, nil)
		A, B := newSide(t, s.a, 1<<20, 64), newSide(t, s.b, 1<<20, 64)
		qa, qb := A.qp(t, RC), B.qp(t, RC)
		if qa.QPN() != 0x11 || qb.QPN() != 0x11 {
			t.Fatalf("first qpns %#x %#x, want 0x11", qa.QPN(), qb.QPN())
		}
		connect(t, qa, qb, gid, 0xfffff0, 100, AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)

		// SEND with immediate, 3 SGEs, 20000 bytes: 5 packets.
		fill(A.buf[:20000], 1)
		if err := qb.PostRecv(&RecvWR{ID: 50, SG: []SGE{B.mr.SGE(0, 30000)}}); err != nil {
			t.Fatal(err)
		}
		err := qa.PostSend(&SendWR{ID: 1, Op: OpSendWithImm, Flags: SendSignaled, Imm: 0xabcdef01,
			SG: []SGE{A.mr.SGE(0, 5000), A.mr.SGE(5000, 5000), A.mr.SGE(10000, 10000)}})
		if err != nil {
			t.Fatal(err)
		}
		wcA, wcB := pollN(t, s, A.cq, 1), pollN(t, s, B.cq, 1)
		if wcA[0].ID != 1 || wcA[0].Status != 0 || wcB[0].ID != 50 || wcB[0].ByteLen != 20000 || wcB[0].Imm != 0xabcdef01 {
			t.Fatalf("send: %+v / %+v", wcA[0], wcB[0])
		}
		if !bytes.Equal(B.buf[:20000], A.buf[:20000]) {
			t.Fatal("send data differs")
		}
		// WRITE 100000 bytes at an offset, then READ them back elsewhere.
		fill(A.buf[100000:200000], 9)
		err = qa.PostSend(&SendWR{ID: 2, Op: OpWrite, Flags: SendSignaled, SG: []SGE{A.mr.SGE(100000, 100000)},
			Remote: RemoteAddr{B.mr.Addr() + 300000, B.mr.RKey()}})
		if err != nil {
			t.Fatal(err)
		}
		err = qa.PostSend(&SendWR{ID: 3, Op: OpRead, Flags: SendSignaled, SG: []SGE{A.mr.SGE(500000, 100000)},
			Remote: RemoteAddr{B.mr.Addr() + 300000, B.mr.RKey()}})
		if err != nil {
			t.Fatal(err)
		}
		binary.LittleEndian.PutUint64(B.buf[800000:], 41)
		for i, wr := range []SendWR{
			{ID: 4, Op: OpFetchAdd, CompareAdd: 1, SG: []SGE{A.mr.SGE(900000, 8)}},
			{ID: 5, Op: OpCompareSwap, CompareAdd: 42, Swap: 7, SG: []SGE{A.mr.SGE(900008, 8)}},
			{ID: 6, Op: OpCompareSwap, CompareAdd: 42, Swap: 9, SG: []SGE{A.mr.SGE(900016, 8)}},
		} {
			wr.Flags = SendSignaled
			wr.Remote = RemoteAddr{B.mr.Addr() + 800000, B.mr.RKey()}
			if err := qa.PostSend(&wr); err != nil {
				t.Fatal(i, err)
			}
		}
		wcs := pollN(t, s, A.cq, 5)
		for i, wc := range wcs {
			if wc.ID != uint64(i+2) || wc.Status != 0 {
				t.Fatalf("completion %d: %+v", i, wc)
			}
		}
		if !bytes.Equal(B.buf[300000:400000], A.buf[100000:200000]) || !bytes.Equal(A.buf[500000:600000], A.buf[100000:200000]) {
			t.Fatal("write or read data differs")
		}
		// Atomics operate on the host-order 64-bit value at the address.
		r := func(off int) uint64 { return binary.LittleEndian.Uint64(A.buf[off:]) }
		if r(900000) != 41 || r(900008) != 42 || r(900016) != 7 || binary.LittleEndian.Uint64(B.buf[800000:]) != 7 {
			t.Fatalf("atomics: fetch %d, cas %d, cas %d, final %d", r(900000), r(900008), r(900016), binary.LittleEndian.Uint64(B.buf[800000:]))
		}
		c := s.a.Counters()
		if c.RcvICRCErr != 0 || c.RcvUnknownQPN != 0 || c.SentPkts == 0 {
			t.Errorf("counters: %+v", c)
		}
	}
}

func TestUDAndUC(t *testing.T) {
	s := newSimPair(t, 1500, nil)
	A, B := newSide(t, s.a, 1<<16, 64), newSide(t, s.b, 1<<16, 64)
	ua, ub := A.qp(t, UD), B.qp(t, UD)
	for _, q := range []*QP{ua, ub} {
		udReady(t, q, 0x11, 5)
	}
	ah, err := A.pd.CreateAH(AHAttr{DGID: ipB, SGIDIndex: 1})
	if err != nil {
		t.Fatal(err)
	}
	fill(A.buf[:1000], 3)
	ub.PostRecv(&RecvWR{ID: 9, SG: []SGE{B.mr.SGE(0, 2000)}})
	if err := ua.PostSend(&SendWR{ID: 1, Op: OpSend, Flags: SendSignaled, SG: []SGE{A.mr.SGE(0, 1000)},
		AH: ah, RemoteQPN: ub.QPN(), RemoteQKey: 0x11}); err != nil {
		t.Fatal(err)
	}
	if err := ua.PostSend(&SendWR{ID: 2, Op: OpSend, SG: []SGE{A.mr.SGE(0, 1000)}, RemoteQPN: ub.QPN()}); !errors.Is(err, ErrInvalidWR) {
		t.Errorf("ud send without ah: %v", err)
	}
	wa, wb := pollN(t, s, A.cq, 1), pollN(t, s, B.cq, 1)
	if wa[0].Status != 0 || wb[0].ByteLen != 1040 || wb[0].SrcQP != ua.QPN() || !bytes.Equal(B.buf[40:1040], A.buf[:1000]) {
		t.Fatalf("ud: %+v %+v", wa[0], wb[0])
	}
	if !bytes.Equal(B.buf[20+12:20+16], ipA.AsSlice()) {
		t.Error("GRH slot does not hold the IPv4 header")
	}
	// UC WRITE with immediate.
	ca, cb := A.qp(t, UC), B.qp(t, UC)
	connect(t, ca, cb, 1, 1, 2, AccessRemoteWrite)
	cb.PostRecv(&RecvWR{ID: 10})
	fill(A.buf[2000:6000], 5)
	if err := ca.PostSend(&SendWR{ID: 3, Op: OpWriteWithImm, Flags: SendSignaled, Imm: 77, SG: []SGE{A.mr.SGE(2000, 4000)},
		Remote: RemoteAddr{B.mr.Addr() + 10000, B.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	wa, wb = pollN(t, s, A.cq, 1), pollN(t, s, B.cq, 1)
	if wa[0].Status != 0 || wb[0].Imm != 77 || !bytes.Equal(B.buf[10000:14000], A.buf[2000:6000]) {
		t.Fatalf("uc: %+v %+v", wa[0], wb[0])
	}
}

// TestManyQPs connects 10,000 RC QP pairs on two devices and runs a WRITE
// on every one of them.
func TestManyQPs(t *testing.T) {
	t.Logf("%.0f bytes of heap per idle qp", idleQPHeap(t, 10000, 1, 1))
}
