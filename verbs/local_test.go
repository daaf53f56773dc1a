package verbs_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/uroce/uroce/link/pipe"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
)

var (
	macA = [6]byte{0x02, 0, 0, 0, 0, 0x0a}
	macB = [6]byte{0x02, 0, 0, 0, 0, 0x0b}
	ipA  = netip.MustParseAddr("192.0.2.1")
	ipB  = netip.MustParseAddr("192.0.2.2")
)

// gidIndex is the index of the devices' IPv4 GID (0 is the link-local
// one).
const gidIndex = 1

// openPair opens two running stack devices joined by an in-memory pipe
// of IP MTU mtu and returns their verbs, closed when the test ends.
func openPair(t testing.TB, mtu int) (a, b verbs.Device) {
	t.Helper()
	pa, pb := pipe.New(pipe.Config{MTU: mtu, Slots: 256})
	nb := stack.StaticNeighbors{ipA: macA, ipB: macB}
	open := func(l stack.Link, mac [6]byte, ip netip.Addr) verbs.Device {
		d, err := stack.Open(context.Background(), stack.Config{Link: l, MAC: mac, Addrs: []netip.Addr{ip}, Neighbors: nb})
		if err != nil {
			t.Fatal(err)
		}
		v := verbs.Local(d)
		t.Cleanup(func() { v.Close() })
		return v
	}
	return open(pa, macA, ipA), open(pb, macB, ipB)
}

const allAccess = stack.AccessLocalWrite | stack.AccessRemoteWrite | stack.AccessRemoteRead | stack.AccessRemoteAtomic

// side is one device's objects for a test.
type side struct {
	dev verbs.Device
	pd  verbs.PD
	cq  verbs.CQ
	buf []byte
	mr  verbs.MR
}

func newSide(t testing.TB, d verbs.Device, size int) *side {
	t.Helper()
	s := &side{dev: d}
	var err error
	if s.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if s.cq, err = d.CreateCQ(256); err != nil {
		t.Fatal(err)
	}
	if s.buf, err = d.AllocBuffer(size); err != nil {
		t.Fatal(err)
	}
	if s.mr, err = s.pd.RegisterMR(s.buf, allAccess); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *side) qp(t testing.TB, typ verbs.QPType, srq verbs.SRQ) verbs.QP {
	t.Helper()
	q, err := s.pd.CreateQP(verbs.QPInit{Type: typ, SendCQ: s.cq, RecvCQ: s.cq, SRQ: srq,
		MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// connect brings RC or UC QPs qa (of device da) and qb (of db) to RTS,
// connected to each other.
func connect(t testing.TB, qa, qb verbs.QP, da, db verbs.Device) {
	t.Helper()
	for _, c := range []struct {
		q, peer verbs.QP
		peerDev verbs.Device
		rq, sq  verbs.PSN
	}{{qa, qb, db, 200, 100}, {qb, qa, da, 100, 200}} {
		dgid, err := c.peerDev.GID(gidIndex)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.q.ToInit(verbs.InitAttr{AccessFlags: stack.AccessRemoteWrite | stack.AccessRemoteRead | stack.AccessRemoteAtomic}); err != nil {
			t.Fatal(err)
		}
		if err := c.q.ToRTR(verbs.RTRAttr{DestQPN: c.peer.QPN(), AH: verbs.AHAttr{DGID: dgid, SGIDIndex: gidIndex},
			RQPSN: c.rq, MaxDestRdAtomic: 4, MinRNRTimer: 1}); err != nil {
			t.Fatal(err)
		}
		if err := c.q.ToRTS(verbs.RTSAttr{SQPSN: c.sq, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4}); err != nil {
			t.Fatal(err)
		}
		if st := c.q.State(); st != stack.StateRTS {
			t.Fatalf("qp %#x in %v after ToRTS", c.q.QPN(), st)
		}
	}
}

// pollN waits for n completions on cq and takes no more.
func pollN(t testing.TB, cq verbs.CQ, n int) []verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []verbs.WC
	wcs := make([]verbs.WC, 16)
	for len(got) < n {
		if k := cq.Poll(wcs[:min(len(wcs), n-len(got))]); k > 0 {
			got = append(got, wcs[:k]...)
			continue
		}
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("%d of %d completions: %v", len(got), n, err)
		}
	}
	return got
}

// checkWC fails unless wc succeeded with the given ID and opcode.
func checkWC(t testing.TB, what string, wc verbs.WC, id uint64, op stack.WCOpcode) {
	t.Helper()
	if wc.Status != stack.WCSuccess || wc.ID != id || wc.Opcode != op {
		t.Fatalf("%s: completion %+v, want success of wr %d, opcode %v", what, wc, id, op)
	}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

// TestRCOperations runs every RC operation through the verbs of two
// local devices: SEND/RECV, WRITE with immediate, READ and both atomics.
func TestRCOperations(t *testing.T) {
	da, db := openPair(t, 1500)
	A, B := newSide(t, da, 1<<16), newSide(t, db, 1<<16)
	qa, qb := A.qp(t, stack.RC, nil), B.qp(t, stack.RC, nil)
	connect(t, qa, qb, da, db)
	if qa.Type() != stack.RC {
		t.Errorf("type %v", qa.Type())
	}

	// SEND with immediate, two SGEs, three packets.
	fill(A.buf[:4000], 1)
	if err := qb.PostRecv(&verbs.RecvWR{ID: 50, SG: []verbs.SGE{B.mr.SGE(0, 8000)}}); err != nil {
		t.Fatal(err)
	}
	err := qa.PostSend(&verbs.SendWR{ID: 1, Op: stack.OpSendWithImm, Flags: stack.SendSignaled, Imm: 0xabcdef01,
		SG: []verbs.SGE{A.mr.SGE(0, 1000), A.mr.SGE(1000, 3000)}})
	if err != nil {
		t.Fatal(err)
	}
	checkWC(t, "send", pollN(t, A.cq, 1)[0], 1, stack.WCSend)
	wc := pollN(t, B.cq, 1)[0]
	checkWC(t, "recv", wc, 50, stack.WCRecv)
	if wc.ByteLen != 4000 || wc.Imm != 0xabcdef01 || wc.Flags&stack.WCWithImm == 0 || wc.QPN != qb.QPN() {
		t.Errorf("recv completion %+v", wc)
	}
	if !bytes.Equal(B.buf[:4000], A.buf[:4000]) {
		t.Error("send: data differs")
	}

	// WRITE with immediate: the data lands, the immediate consumes a
	// receive.
	fill(A.buf[10000:15000], 9)
	if err := qb.PostRecv(&verbs.RecvWR{ID: 51}); err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(&verbs.SendWR{ID: 2, Op: stack.OpWriteWithImm, Flags: stack.SendSignaled, Imm: 77,
		SG: []verbs.SGE{A.mr.SGE(10000, 5000)}, Remote: verbs.RemoteAddr{Addr: B.mr.Addr() + 20000, RKey: B.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	checkWC(t, "write", pollN(t, A.cq, 1)[0], 2, stack.WCRDMAWrite)
	wc = pollN(t, B.cq, 1)[0]
	checkWC(t, "write imm", wc, 51, stack.WCRecvRDMAImm)
	if wc.Imm != 77 || wc.ByteLen != 5000 {
		t.Errorf("write imm completion %+v", wc)
	}
	if !bytes.Equal(B.buf[20000:25000], A.buf[10000:15000]) {
		t.Error("write: data differs")
	}

	// READ it back elsewhere.
	if err := qa.PostSend(&verbs.SendWR{ID: 3, Op: stack.OpRead, Flags: stack.SendSignaled,
		SG: []verbs.SGE{A.mr.SGE(30000, 5000)}, Remote: verbs.RemoteAddr{Addr: B.mr.Addr() + 20000, RKey: B.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	wc = pollN(t, A.cq, 1)[0]
	checkWC(t, "read", wc, 3, stack.WCRDMARead)
	if wc.ByteLen != 5000 || !bytes.Equal(A.buf[30000:35000], A.buf[10000:15000]) {
		t.Errorf("read: %d bytes, data equal %v", wc.ByteLen, bytes.Equal(A.buf[30000:35000], A.buf[10000:15000]))
	}

	// FETCH_ADD, then CMP_SWAP that matches and one that does not.
	binary.LittleEndian.PutUint64(B.buf[40000:], 41)
	remote := verbs.RemoteAddr{Addr: B.mr.Addr() + 40000, RKey: B.mr.RKey()}
	for _, wr := range []verbs.SendWR{
		{ID: 4, Op: stack.OpFetchAdd, CompareAdd: 1, SG: []verbs.SGE{A.mr.SGE(40000, 8)}},
		{ID: 5, Op: stack.OpCompareSwap, CompareAdd: 42, Swap: 7, SG: []verbs.SGE{A.mr.SGE(40008, 8)}},
		{ID: 6, Op: stack.OpCompareSwap, CompareAdd: 42, Swap: 9, SG: []verbs.SGE{A.mr.SGE(40016, 8)}},
	} {
		wr.Flags, wr.Remote = stack.SendSignaled, remote
		if err := qa.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	wcs := pollN(t, A.cq, 3)
	checkWC(t, "fetch_add", wcs[0], 4, stack.WCFetchAdd)
	checkWC(t, "cmp_swap", wcs[1], 5, stack.WCCompSwap)
	checkWC(t, "cmp_swap", wcs[2], 6, stack.WCCompSwap)
	r := func(b []byte, off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
	if r(A.buf, 40000) != 41 || r(A.buf, 40008) != 42 || r(A.buf, 40016) != 7 || r(B.buf, 40000) != 7 {
		t.Errorf("atomics: fetched %d, %d, %d; final %d; want 41, 42, 7; 7",
			r(A.buf, 40000), r(A.buf, 40008), r(A.buf, 40016), r(B.buf, 40000))
	}
	if c := da.Counters(); c.SentPkts == 0 || c.RcvdPkts == 0 {
		t.Errorf("counters: %+v", c)
	}
}

// TestSRQ: two QPs of one device take their receives from one SRQ; a
// QP on an SRQ refuses receives of its own.
func TestSRQ(t *testing.T) {
	da, db := openPair(t, 1500)
	A, B := newSide(t, da, 1<<16), newSide(t, db, 1<<16)
	srq, err := B.pd.CreateSRQ(verbs.SRQInit{MaxWR: 16, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	var qas, qbs []verbs.QP
	for i := 0; i < 2; i++ {
		qa, qb := A.qp(t, stack.RC, nil), B.qp(t, stack.RC, srq)
		connect(t, qa, qb, da, db)
		qas, qbs = append(qas, qa), append(qbs, qb)
	}
	if err := qbs[0].PostRecv(&verbs.RecvWR{ID: 1}); !errors.Is(err, stack.ErrInvalidArg) {
		t.Errorf("receive posted to a qp on an srq: %v", err)
	}
	for i := 0; i < 2; i++ {
		if err := srq.PostRecv(&verbs.RecvWR{ID: uint64(100 + i), SG: []verbs.SGE{B.mr.SGE(uint64(i)*1000, 1000)}}); err != nil {
			t.Fatal(err)
		}
	}
	fill(A.buf[:2000], 3)
	for i, q := range qas {
		if err := q.PostSend(&verbs.SendWR{ID: uint64(i), Op: stack.OpSend, Flags: stack.SendSignaled,
			SG: []verbs.SGE{A.mr.SGE(uint64(i)*1000, 1000)}}); err != nil {
			t.Fatal(err)
		}
		// One at a time, so that receive 100+i takes message i.
		checkWC(t, "send", pollN(t, A.cq, 1)[0], uint64(i), stack.WCSend)
		wc := pollN(t, B.cq, 1)[0]
		checkWC(t, "srq recv", wc, uint64(100+i), stack.WCRecv)
		if wc.QPN != qbs[i].QPN() || wc.ByteLen != 1000 {
			t.Errorf("srq recv %d: %+v, want qpn %#x", i, wc, qbs[i].QPN())
		}
	}
	if !bytes.Equal(B.buf[:2000], A.buf[:2000]) {
		t.Error("srq: data differs")
	}
	if err := srq.Destroy(); !errors.Is(err, stack.ErrBusy) {
		t.Errorf("destroy of an srq in use: %v", err)
	}
	for _, q := range qbs {
		if err := q.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.Destroy(); err != nil {
		t.Error(err)
	}
}

// TestUD sends a UD message through an address handle.
func TestUD(t *testing.T) {
	da, db := openPair(t, 1500)
	A, B := newSide(t, da, 1<<16), newSide(t, db, 1<<16)
	ua, ub := A.qp(t, stack.UD, nil), B.qp(t, stack.UD, nil)
	for _, q := range []verbs.QP{ua, ub} {
		if err := q.ToInit(verbs.InitAttr{QKey: 0x11}); err != nil {
			t.Fatal(err)
		}
		if err := q.ToRTR(verbs.RTRAttr{}); err != nil {
			t.Fatal(err)
		}
		if err := q.ToRTS(verbs.RTSAttr{SQPSN: 5}); err != nil {
			t.Fatal(err)
		}
	}
	dgid, _ := db.GID(gidIndex)
	ah, err := A.pd.CreateAH(verbs.AHAttr{DGID: dgid, SGIDIndex: gidIndex})
	if err != nil {
		t.Fatal(err)
	}
	if got := ah.Attr(); got.DMAC != macB || got.DGID != dgid {
		t.Errorf("ah attributes %+v, want the resolved mac %x", got, macB)
	}
	fill(A.buf[:1000], 5)
	if err := ub.PostRecv(&verbs.RecvWR{ID: 9, SG: []verbs.SGE{B.mr.SGE(0, 2000)}}); err != nil {
		t.Fatal(err)
	}
	if err := ua.PostSend(&verbs.SendWR{ID: 1, Op: stack.OpSend, Flags: stack.SendSignaled, SG: []verbs.SGE{A.mr.SGE(0, 1000)},
		AH: ah, RemoteQPN: ub.QPN(), RemoteQKey: 0x11}); err != nil {
		t.Fatal(err)
	}
	if err := ua.PostSend(&verbs.SendWR{ID: 2, Op: stack.OpSend, SG: []verbs.SGE{A.mr.SGE(0, 1000)}, RemoteQPN: ub.QPN()}); !errors.Is(err, stack.ErrInvalidWR) {
		t.Errorf("ud send without an address handle: %v", err)
	}
	checkWC(t, "ud send", pollN(t, A.cq, 1)[0], 1, stack.WCSend)
	wc := pollN(t, B.cq, 1)[0]
	checkWC(t, "ud recv", wc, 9, stack.WCRecv)
	if wc.ByteLen != 1040 || wc.SrcQP != ua.QPN() || wc.Flags&stack.WCWithGRH == 0 {
		t.Errorf("ud recv completion %+v", wc)
	}
	if !bytes.Equal(B.buf[40:1040], A.buf[:1000]) {
		t.Error("ud: data differs")
	}
	if err := ah.Destroy(); err != nil {
		t.Error(err)
	}
}

// TestBatches posts receives and sends in batches.
func TestBatches(t *testing.T) {
	da, db := openPair(t, 1500)
	A, B := newSide(t, da, 1<<16), newSide(t, db, 1<<16)
	qa, qb := A.qp(t, stack.RC, nil), B.qp(t, stack.RC, nil)
	connect(t, qa, qb, da, db)
	const n = 8
	recvs := make([]verbs.RecvWR, n)
	sends := make([]verbs.SendWR, n)
	for i := range n {
		recvs[i] = verbs.RecvWR{ID: uint64(100 + i), SG: []verbs.SGE{B.mr.SGE(uint64(i)*1000, 1000)}}
		sends[i] = verbs.SendWR{ID: uint64(i), Op: stack.OpSend, Flags: stack.SendSignaled, SG: []verbs.SGE{A.mr.SGE(uint64(i)*1000, 500+uint32(i))}}
	}
	// One WRITE in the middle, to another place.
	sends[3] = verbs.SendWR{ID: 3, Op: stack.OpWrite, Flags: stack.SendSignaled, SG: []verbs.SGE{A.mr.SGE(3000, 777)},
		Remote: verbs.RemoteAddr{Addr: B.mr.Addr() + 50000, RKey: B.mr.RKey()}}
	fill(A.buf[:n*1000], 11)
	if k, err := qb.PostRecvBatch(recvs); k != n || err != nil {
		t.Fatalf("post recv batch: %d, %v", k, err)
	}
	if k, err := qa.PostSendBatch(sends); k != n || err != nil {
		t.Fatalf("post send batch: %d, %v", k, err)
	}
	for i, wc := range pollN(t, A.cq, n) {
		op := stack.WCSend
		if i == 3 {
			op = stack.WCRDMAWrite
		}
		checkWC(t, "batch send", wc, uint64(i), op)
	}
	for i, wc := range pollN(t, B.cq, n-1) {
		m := i
		if i >= 3 {
			m++
		}
		checkWC(t, "batch recv", wc, uint64(100+i), stack.WCRecv)
		if wc.ByteLen != 500+uint32(m) || !bytes.Equal(B.buf[i*1000:i*1000+500+m], A.buf[m*1000:m*1000+500+m]) {
			t.Errorf("recv %d: %d bytes or data differ", i, wc.ByteLen)
		}
	}
	if !bytes.Equal(B.buf[50000:50777], A.buf[3000:3777]) {
		t.Error("batch write: data differs")
	}
	// An error in the middle: the first requests are posted, the one
	// that fails is reported, the rest are not tried.
	bad := []verbs.SendWR{sends[0], sends[1], sends[2], sends[3]}
	bad[0].Flags, bad[1].Flags = 0, 0
	bad[1].SG = []verbs.SGE{A.mr.SGE(0, 8), A.mr.SGE(8, 8), A.mr.SGE(16, 8)} // MaxSendSGE is 2
	if k, err := qa.PostSendBatch(bad); k != 1 || !errors.Is(err, stack.ErrTooManySGE) {
		t.Errorf("batch with too many sges in wr 1: %d, %v", k, err)
	}
}

// TestConcurrentBatches: goroutines posting batches to one QP at once
// share its conversion buffer safely; every request completes once.
func TestConcurrentBatches(t *testing.T) {
	da, db := openPair(t, 1500)
	A, B := newSide(t, da, 1<<16), newSide(t, db, 1<<16)
	qa, qb := A.qp(t, stack.RC, nil), B.qp(t, stack.RC, nil)
	connect(t, qa, qb, da, db)
	const workers, batches, size = 4, 50, 4
	fill(A.buf[:workers*1000], 13)
	slots := make(chan struct{}, 48) // requests in flight, below MaxSendWR
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			wrs := make([]verbs.SendWR, size)
			for i := range wrs {
				wrs[i] = verbs.SendWR{ID: uint64(w), Op: stack.OpWrite, Flags: stack.SendSignaled,
					SG:     []verbs.SGE{A.mr.SGE(uint64(w)*1000+uint64(i)*250, 250)},
					Remote: verbs.RemoteAddr{Addr: B.mr.Addr() + uint64(w)*1000 + uint64(i)*250, RKey: B.mr.RKey()}}
			}
			for range batches {
				for range size {
					slots <- struct{}{}
				}
				if n, err := qa.PostSendBatch(wrs); n != size || err != nil {
					errs <- fmt.Errorf("worker %d: %d posted: %v", w, n, err)
					return
				}
			}
			errs <- nil
		}()
	}
	per := make([]int, workers)
	for range workers * batches * size {
		wc := pollN(t, A.cq, 1)[0]
		if wc.Status != stack.WCSuccess || wc.ID >= workers {
			t.Fatalf("completion %+v", wc)
		}
		per[wc.ID]++
		<-slots
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for w, n := range per {
		if n != batches*size {
			t.Errorf("worker %d: %d completions, want %d", w, n, batches*size)
		}
	}
	if !bytes.Equal(B.buf[:workers*1000], A.buf[:workers*1000]) {
		t.Error("data differs")
	}
}

// TestNoAllocs: the adapters add no allocation per work request or
// completion.
func TestNoAllocs(t *testing.T) {
	da, db := openPair(t, 1500)
	A, B := newSide(t, da, 1<<16), newSide(t, db, 1<<16)
	qa, qb := A.qp(t, stack.RC, nil), B.qp(t, stack.RC, nil)
	connect(t, qa, qb, da, db)
	wcs := make([]verbs.WC, 16)
	// waitOne spins until cq gives one completion.
	waitOne := func(cq verbs.CQ) {
		for {
			if n := cq.Poll(wcs); n > 0 {
				if n != 1 || wcs[0].Status != stack.WCSuccess {
					t.Fatalf("completions %+v", wcs[:n])
				}
				return
			}
			runtime.Gosched()
		}
	}
	write := &verbs.SendWR{ID: 1, Op: stack.OpWrite, Flags: stack.SendSignaled, SG: []verbs.SGE{A.mr.SGE(0, 64)},
		Remote: verbs.RemoteAddr{Addr: B.mr.Addr(), RKey: B.mr.RKey()}}
	send := &verbs.SendWR{ID: 2, Op: stack.OpSend, Flags: stack.SendSignaled, SG: []verbs.SGE{A.mr.SGE(0, 64)}}
	recv := &verbs.RecvWR{ID: 3, SG: []verbs.SGE{B.mr.SGE(0, 64)}}
	batch := []verbs.SendWR{*write, *write, *write, *write}
	for i := range batch[:3] {
		batch[i].Flags = 0
	}
	recvs := []verbs.RecvWR{*recv}
	for _, c := range []struct {
		name  string
		round func()
	}{
		{"PostSend+Poll", func() {
			if err := qa.PostSend(write); err != nil {
				t.Fatal(err)
			}
			waitOne(A.cq)
		}},
		{"PostSendBatch+Poll", func() {
			if _, err := qa.PostSendBatch(batch); err != nil {
				t.Fatal(err)
			}
			waitOne(A.cq)
		}},
		{"PostRecv+PostSend+Poll", func() {
			if err := qb.PostRecv(recv); err != nil {
				t.Fatal(err)
			}
			if err := qa.PostSend(send); err != nil {
				t.Fatal(err)
			}
			waitOne(A.cq)
			waitOne(B.cq)
		}},
		{"PostRecvBatch+PostSend+Poll", func() {
			if _, err := qb.PostRecvBatch(recvs); err != nil {
				t.Fatal(err)
			}
			if err := qa.PostSend(send); err != nil {
				t.Fatal(err)
			}
			waitOne(A.cq)
			waitOne(B.cq)
		}},
		{"Poll empty", func() { A.cq.Poll(wcs) }},
	} {
		for range 50 { // warm up: buffers, timers, the batch buffer
			c.round()
		}
		if n := testing.AllocsPerRun(500, c.round); n != 0 {
			t.Errorf("%s: %v allocations per round", c.name, n)
		} else {
			t.Logf("%s: %v allocations per round", c.name, n)
		}
	}
}

// Objects of another implementation of the interfaces.
type (
	fakeCQ  struct{}
	fakeSRQ struct{}
	fakeAH  struct{}
)

func (fakeCQ) Poll([]verbs.WC) int           { return 0 }
func (fakeCQ) Wait(context.Context) error    { return nil }
func (fakeCQ) Resize(int) error              { return nil }
func (fakeCQ) Destroy() error                { return nil }
func (fakeSRQ) PostRecv(*verbs.RecvWR) error { return nil }
func (fakeSRQ) Destroy() error               { return nil }
func (fakeSRQ) Resize(int) error             { return nil }
func (fakeAH) Attr() verbs.AHAttr            { return verbs.AHAttr{} }
func (fakeAH) Destroy() error                { return nil }

// TestForeignObjects: a CQ, SRQ or AH that is not Local's is refused
// with ErrInvalidArg; the requests of a batch before a foreign AH are
// posted.
func TestForeignObjects(t *testing.T) {
	da, db := openPair(t, 1500)
	A, B := newSide(t, da, 1<<16), newSide(t, db, 1<<16)
	for name, init := range map[string]verbs.QPInit{
		"send cq": {Type: stack.RC, SendCQ: fakeCQ{}, RecvCQ: A.cq, MaxSendWR: 4, MaxRecvWR: 4},
		"recv cq": {Type: stack.RC, SendCQ: A.cq, RecvCQ: &fakeCQ{}, MaxSendWR: 4, MaxRecvWR: 4},
		"srq":     {Type: stack.RC, SendCQ: A.cq, RecvCQ: A.cq, SRQ: fakeSRQ{}, MaxSendWR: 4},
	} {
		if _, err := A.pd.CreateQP(init); !errors.Is(err, stack.ErrInvalidArg) || !strings.Contains(err.Error(), "not a local one") {
			t.Errorf("qp with a foreign %s: %v", name, err)
		}
	}
	// A CQ of another local device is the stack's to refuse.
	if _, err := A.pd.CreateQP(verbs.QPInit{Type: stack.RC, SendCQ: B.cq, RecvCQ: A.cq, MaxSendWR: 4, MaxRecvWR: 4}); !errors.Is(err, stack.ErrInvalidArg) {
		t.Errorf("qp with a cq of another device: %v", err)
	}
	if _, err := A.pd.CreateQP(verbs.QPInit{Type: stack.RC, MaxSendWR: 4, MaxRecvWR: 4}); !errors.Is(err, stack.ErrInvalidArg) {
		t.Errorf("qp without cqs: %v", err)
	}

	ua, ub := A.qp(t, stack.UD, nil), B.qp(t, stack.UD, nil)
	for _, q := range []verbs.QP{ua, ub} {
		if err := q.ToInit(verbs.InitAttr{QKey: 0x11}); err != nil {
			t.Fatal(err)
		}
		if err := q.ToRTR(verbs.RTRAttr{}); err != nil {
			t.Fatal(err)
		}
		if err := q.ToRTS(verbs.RTSAttr{}); err != nil {
			t.Fatal(err)
		}
	}
	dgid, _ := db.GID(gidIndex)
	ah, err := A.pd.CreateAH(verbs.AHAttr{DGID: dgid, SGIDIndex: gidIndex})
	if err != nil {
		t.Fatal(err)
	}
	wr := verbs.SendWR{ID: 1, Op: stack.OpSend, Flags: stack.SendSignaled, SG: []verbs.SGE{A.mr.SGE(0, 100)},
		AH: fakeAH{}, RemoteQPN: ub.QPN(), RemoteQKey: 0x11}
	if err := ua.PostSend(&wr); !errors.Is(err, stack.ErrInvalidArg) {
		t.Errorf("send with a foreign ah: %v", err)
	}
	good := wr
	good.AH = ah
	for i := 0; i < 2; i++ {
		if err := ub.PostRecv(&verbs.RecvWR{ID: uint64(10 + i), SG: []verbs.SGE{B.mr.SGE(uint64(i)*1000, 1000)}}); err != nil {
			t.Fatal(err)
		}
	}
	batch := []verbs.SendWR{good, wr, good}
	batch[0].ID, batch[2].ID = 7, 8
	n, err := ua.PostSendBatch(batch)
	if n != 1 || !errors.Is(err, stack.ErrInvalidArg) || !strings.Contains(err.Error(), "wr 1") {
		t.Fatalf("batch with a foreign ah in wr 1: %d, %v", n, err)
	}
	checkWC(t, "ud send", pollN(t, A.cq, 1)[0], 7, stack.WCSend)
	checkWC(t, "ud recv", pollN(t, B.cq, 1)[0], 10, stack.WCRecv)
	time.Sleep(20 * time.Millisecond)
	if k := A.cq.Poll(make([]verbs.WC, 4)); k != 0 {
		t.Errorf("%d more completions: the request after the failed one was posted", k)
	}
}

// TestDevice: buffers, the stack objects under the adapters, errors
// passed through, and Close closing the stack device.
func TestDevice(t *testing.T) {
	da, db := openPair(t, 1500)
	sd, ok := verbs.StackDevice(da)
	if !ok || sd.Query().Name != da.Query().Name || len(sd.GIDs()) != len(da.GIDs()) {
		t.Fatalf("StackDevice: %v, %v", sd, ok)
	}
	if _, ok := verbs.StackDevice(nil); ok {
		t.Error("StackDevice(nil) reports a device")
	}
	if g, err := da.GID(gidIndex); err != nil || g != netip.AddrFrom16(ipA.As16()) {
		t.Errorf("gid %d: %v, %v", gidIndex, g, err)
	}
	if _, err := da.GID(99); !errors.Is(err, stack.ErrInvalidArg) {
		t.Errorf("gid 99: %v", err)
	}
	if _, err := da.CreateCQ(0); !errors.Is(err, stack.ErrInvalidArg) {
		t.Errorf("cq of 0 entries: %v", err)
	}
	if _, err := da.AllocBuffer(0); !errors.Is(err, stack.ErrInvalidArg) {
		t.Errorf("alloc buffer of 0 bytes: %v", err)
	}
	if err := da.FreeBuffer(nil); !errors.Is(err, stack.ErrInvalidArg) {
		t.Errorf("free of no buffer: %v", err)
	}
	A := newSide(t, da, 4096)
	q := A.qp(t, stack.RC, nil)
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"pd", ok2(verbs.StackPD(A.pd))},
		{"mr", ok2(verbs.StackMR(A.mr))},
		{"cq", ok2(verbs.StackCQ(A.cq))},
		{"qp", ok2(verbs.StackQP(q))},
	} {
		if !c.ok {
			t.Errorf("Stack%s of a local one fails", strings.ToUpper(c.name))
		}
	}
	if _, ok := verbs.StackCQ(fakeCQ{}); ok {
		t.Error("StackCQ of a foreign cq succeeds")
	}
	if sq, _ := verbs.StackQP(q); sq.QPN() != q.QPN() {
		t.Error("StackQP gives another qp")
	}
	if sm, _ := verbs.StackMR(A.mr); sm.LKey() != A.mr.LKey() || A.mr.Len() != 4096 || &A.mr.Bytes()[0] != &A.buf[0] {
		t.Error("StackMR gives another region")
	}
	// Errors come from the stack as they are.
	if err := q.PostSend(&verbs.SendWR{Op: stack.OpSend}); !errors.Is(err, stack.ErrInvalidState) {
		t.Errorf("send on a qp in reset: %v", err)
	}
	if err := A.pd.Dealloc(); !errors.Is(err, stack.ErrBusy) {
		t.Errorf("dealloc of a pd in use: %v", err)
	}
	if err := q.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := A.mr.Deregister(); err != nil {
		t.Fatal(err)
	}
	if err := da.FreeBuffer(A.buf); err != nil {
		t.Error(err)
	}
	if err := A.cq.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := A.pd.Dealloc(); err != nil {
		t.Fatal(err)
	}

	if err := da.Close(); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := sd.AllocPD(); !errors.Is(err, stack.ErrClosed) {
		t.Errorf("the stack device is open after Close: %v", err)
	}
	if _, err := da.AllocPD(); !errors.Is(err, stack.ErrClosed) {
		t.Errorf("alloc pd after Close: %v", err)
	}
	if _, err := da.AllocBuffer(10); !errors.Is(err, stack.ErrClosed) {
		t.Errorf("alloc buffer after Close: %v", err)
	}
	checkNoEngines(t)
}

func ok2[T any](_ T, ok bool) bool { return ok }

// checkNoEngines fails if engine goroutines of the stack are still
// alive: every device of the test binary was closed.
func checkNoEngines(t testing.TB) {
	t.Helper()
	var buf []byte
	for i := 0; i < 200; i++ {
		buf = make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		if !bytes.Contains(buf, []byte("uroce/stack.(*engine).run")) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("engine goroutines left after Close:\n%s", buf)
}

type fakeMW struct{}

func (fakeMW) RKey() uint32       { return 0 }
func (fakeMW) Type() verbs.MWType { return stack.MWType1 }
func (fakeMW) Dealloc() error     { return nil }

// TestMW: Local's windows are the stack's. A type 1 window bound with
// QP.BindMW and a type 2 window with an OpBindMW request give a peer a
// READ; a window of another implementation is refused.
func TestMW(t *testing.T) {
	da, db := openPair(t, 1500)
	A, B := newSide(t, da, 1<<16), newSide(t, db, 1<<16)
	qa, qb := A.qp(t, stack.RC, nil), B.qp(t, stack.RC, nil)
	connect(t, qa, qb, da, db)
	region, err := B.pd.RegisterMR(make([]byte, 4096), stack.AccessLocalWrite|stack.AccessMWBind)
	if err != nil {
		t.Fatal(err)
	}
	fill(region.Bytes(), 9)
	mw1, err := B.pd.AllocMW(stack.MWType1)
	if err != nil {
		t.Fatal(err)
	}
	mw2, err := B.pd.AllocMW(stack.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	bind := verbs.MWBind{MR: region, Addr: region.Addr(), Length: 4096, Access: stack.AccessRemoteRead}
	if err := qb.BindMW(mw1, 1, stack.SendSignaled, bind); err != nil {
		t.Fatal(err)
	}
	checkWC(t, "type 1 bind", pollN(t, B.cq, 1)[0], 1, stack.WCBindMW)
	key2 := stack.IncRKey(mw2.RKey())
	if err := qb.PostSend(&verbs.SendWR{ID: 2, Op: stack.OpBindMW, Flags: stack.SendSignaled,
		BindMW: verbs.MWBindWR{MW: mw2, RKey: key2, MWBind: bind}}); err != nil {
		t.Fatal(err)
	}
	checkWC(t, "type 2 bind", pollN(t, B.cq, 1)[0], 2, stack.WCBindMW)
	if mw2.RKey() != key2 || mw1.Type() != stack.MWType1 {
		t.Fatalf("r_key %#x, want %#x; type %d", mw2.RKey(), key2, mw1.Type())
	}
	for i, key := range []uint32{mw1.RKey(), key2} {
		if err := qa.PostSend(&verbs.SendWR{ID: uint64(3 + i), Op: stack.OpRead, Flags: stack.SendSignaled,
			SG: []verbs.SGE{A.mr.SGE(0, 64)}, Remote: verbs.RemoteAddr{Addr: region.Addr() + 64, RKey: key}}); err != nil {
			t.Fatal(err)
		}
		checkWC(t, "read through a window", pollN(t, A.cq, 1)[0], uint64(3+i), stack.WCRDMARead)
		if !bytes.Equal(A.buf[:64], region.Bytes()[64:128]) {
			t.Fatal("data read through a window differs")
		}
	}
	if err := qb.BindMW(fakeMW{}, 5, 0, bind); !errors.Is(err, stack.ErrInvalidArg) {
		t.Errorf("BindMW of a foreign window: %v", err)
	}
	if err := qb.PostSend(&verbs.SendWR{ID: 6, Op: stack.OpBindMW, BindMW: verbs.MWBindWR{MW: fakeMW{}, MWBind: bind}}); !errors.Is(err, stack.ErrInvalidArg) ||
		!strings.Contains(err.Error(), "window") {
		t.Errorf("OpBindMW of a foreign window: %v", err)
	}
	for _, w := range []verbs.MW{mw1, mw2} {
		if err := w.Dealloc(); err != nil {
			t.Fatal(err)
		}
	}
}
