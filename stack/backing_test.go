package stack

import (
	"bytes"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

// fakeBacking is a Backing over a slice, at offsets from base, that
// counts its calls, can be made to fail, and fails the test when called
// after its region was deregistered.
type fakeBacking struct {
	t      testing.TB
	base   int64
	mem    []byte
	reads  atomic.Int64
	writes atomic.Int64
	fail   atomic.Bool // calls fail, as for a process that died
	gone   atomic.Bool // the region is deregistered: no call may come
	log    *eventLog   // WriteAt calls are recorded here, when set
}

var errFakeGone = errors.New("fake backing: memory gone")

func newFakeBacking(t testing.TB, base int64, n int) *fakeBacking {
	return &fakeBacking{t: t, base: base, mem: make([]byte, n)}
}

func (f *fakeBacking) at(p []byte, off int64) ([]byte, error) {
	if f.gone.Load() {
		f.t.Errorf("backing called at %#x after Deregister returned", off)
		return nil, errFakeGone
	}
	if f.fail.Load() {
		return nil, errFakeGone
	}
	o := off - f.base
	if o < 0 || o+int64(len(p)) > int64(len(f.mem)) {
		f.t.Errorf("backing called at %#x+%d, outside the region", off, len(p))
		return nil, errFakeGone
	}
	return f.mem[o : o+int64(len(p))], nil
}

func (f *fakeBacking) ReadAt(p []byte, off int64) (int, error) {
	f.reads.Add(1)
	b, err := f.at(p, off)
	if err != nil {
		return 0, err
	}
	return copy(p, b), nil
}

func (f *fakeBacking) WriteAt(p []byte, off int64) (int, error) {
	f.writes.Add(1)
	b, err := f.at(p, off)
	if err != nil {
		return 0, err
	}
	if f.log != nil {
		f.log.add("write")
	}
	return copy(b, p), nil
}

// eventLog records the order of events of a backing and a CQ sink.
type eventLog struct {
	mu sync.Mutex
	ev []string
}

func (l *eventLog) add(e string) {
	l.mu.Lock()
	l.ev = append(l.ev, e)
	l.mu.Unlock()
}

func (l *eventLog) events() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.ev...)
}

// orderSink is a listSink that records its Push and Publish calls.
type orderSink struct {
	listSink
	log *eventLog
}

func (s *orderSink) Push(wc *WC) bool {
	s.log.add("push")
	return s.listSink.Push(wc)
}

func (s *orderSink) Publish() {
	s.log.add("publish")
	s.listSink.Publish()
}

const (
	backedBase = 0x5550000  // the region's first byte in the backing
	backedIOVA = 0x7f000000 // and its virtual address
)

// backedSide is newSide with its region on a fakeBacking.
func backedSide(t testing.TB, d *Device, size, cqn int) (*side, *fakeBacking) {
	t.Helper()
	s := newSide(t, d, 4096, cqn)
	fb := newFakeBacking(t, backedBase, size)
	mr, err := s.pd.RegisterMRBacked(fb, backedBase, size, backedIOVA, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	if mr.Bytes() != nil || mr.Len() != size || mr.Addr() != backedIOVA {
		t.Fatalf("backed region: bytes %v, len %d, addr %#x", mr.Bytes() != nil, mr.Len(), mr.Addr())
	}
	s.buf, s.mr = fb.mem, mr
	return s, fb
}

// TestBackedRegion runs every operation between a region backed by a
// fakeBacking and a plain one, in both directions, then checks that a
// deregistered backed region is not reached any more.
func TestBackedRegion(t *testing.T) {
	s := newSimPair(t, 9000, nil)
	A := newSide(t, s.a, 1<<20, 64)
	B, fb := backedSide(t, s.b, 1<<20, 64)
	qa, qb := A.qp(t, RC), B.qp(t, RC)
	connect(t, qa, qb, 1, 10, 20, AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)
	one := func(q *QP, wr *SendWR) {
		t.Helper()
		wr.Flags |= SendSignaled
		if err := q.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
	ok := func(what string, wcs []WC) {
		t.Helper()
		for _, wc := range wcs {
			if wc.Status != WCSuccess {
				t.Fatalf("%s: %+v", what, wc)
			}
		}
	}

	// SEND into a RECV of the backed region (three SGEs), and back.
	fill(A.buf[:20000], 1)
	qb.PostRecv(&RecvWR{ID: 50, SG: []SGE{B.mr.SGE(0, 7000), B.mr.SGE(10000, 7000), B.mr.SGE(30000, 10000)}})
	one(qa, &SendWR{ID: 1, Op: OpSend, SG: []SGE{A.mr.SGE(0, 20000)}})
	ok("send to backed", append(pollN(t, s, A.cq, 1), pollN(t, s, B.cq, 1)...))
	if !bytes.Equal(B.buf[:7000], A.buf[:7000]) || !bytes.Equal(B.buf[10000:17000], A.buf[7000:14000]) ||
		!bytes.Equal(B.buf[30000:36000], A.buf[14000:20000]) {
		t.Fatal("send into the backed region: data differs")
	}
	fill(B.buf[40000:60000], 2)
	qa.PostRecv(&RecvWR{ID: 51, SG: []SGE{A.mr.SGE(100000, 30000)}})
	one(qb, &SendWR{ID: 2, Op: OpSend, SG: []SGE{B.mr.SGE(40000, 5000), B.mr.SGE(45000, 15000)}})
	ok("send from backed", append(pollN(t, s, B.cq, 1), pollN(t, s, A.cq, 1)...))
	if !bytes.Equal(A.buf[100000:120000], B.buf[40000:60000]) {
		t.Fatal("send from the backed region: data differs")
	}

	// WRITE into it and READ it back; WRITE from it and READ into it.
	fill(A.buf[200000:300000], 3)
	one(qa, &SendWR{ID: 3, Op: OpWrite, SG: []SGE{A.mr.SGE(200000, 100000)}, Remote: RemoteAddr{B.mr.Addr() + 100000, B.mr.RKey()}})
	one(qa, &SendWR{ID: 4, Op: OpRead, SG: []SGE{A.mr.SGE(300000, 100000)}, Remote: RemoteAddr{B.mr.Addr() + 100000, B.mr.RKey()}})
	ok("write and read to backed", pollN(t, s, A.cq, 2))
	if !bytes.Equal(B.buf[100000:200000], A.buf[200000:300000]) || !bytes.Equal(A.buf[300000:400000], A.buf[200000:300000]) {
		t.Fatal("write or read of the backed region: data differs")
	}
	fill(B.buf[200000:250000], 4)
	fill(A.buf[500000:550000], 5)
	one(qb, &SendWR{ID: 5, Op: OpWrite, SG: []SGE{B.mr.SGE(200000, 50000)}, Remote: RemoteAddr{A.mr.Addr() + 400000, A.mr.RKey()}})
	one(qb, &SendWR{ID: 6, Op: OpRead, SG: []SGE{B.mr.SGE(300000, 50000)}, Remote: RemoteAddr{A.mr.Addr() + 500000, A.mr.RKey()}})
	ok("write and read from backed", pollN(t, s, B.cq, 2))
	if !bytes.Equal(A.buf[400000:450000], B.buf[200000:250000]) || !bytes.Equal(B.buf[300000:350000], A.buf[500000:550000]) {
		t.Fatal("write from or read into the backed region: data differs")
	}

	// Atomics on it, and atomics whose result lands in it.
	binary.LittleEndian.PutUint64(B.buf[800000:], 41)
	one(qa, &SendWR{ID: 7, Op: OpFetchAdd, CompareAdd: 1, SG: []SGE{A.mr.SGE(900000, 8)}, Remote: RemoteAddr{B.mr.Addr() + 800000, B.mr.RKey()}})
	one(qa, &SendWR{ID: 8, Op: OpCompareSwap, CompareAdd: 42, Swap: 7, SG: []SGE{A.mr.SGE(900008, 8)}, Remote: RemoteAddr{B.mr.Addr() + 800000, B.mr.RKey()}})
	ok("atomics on backed", pollN(t, s, A.cq, 2))
	if binary.LittleEndian.Uint64(A.buf[900000:]) != 41 || binary.LittleEndian.Uint64(A.buf[900008:]) != 42 ||
		binary.LittleEndian.Uint64(B.buf[800000:]) != 7 {
		t.Fatal("atomics on the backed region")
	}
	binary.LittleEndian.PutUint64(A.buf[800000:], 100)
	one(qb, &SendWR{ID: 9, Op: OpFetchAdd, CompareAdd: 5, SG: []SGE{B.mr.SGE(900000, 8)}, Remote: RemoteAddr{A.mr.Addr() + 800000, A.mr.RKey()}})
	ok("atomic into backed", pollN(t, s, B.cq, 1))
	if binary.LittleEndian.Uint64(B.buf[900000:]) != 100 || binary.LittleEndian.Uint64(A.buf[800000:]) != 105 {
		t.Fatal("atomic result in the backed region")
	}

	// A UC WRITE: no ACK follows it, nothing else goes out in its
	// batch, and still the data is written back within the batch.
	ua, ub := A.qp(t, UC), B.qp(t, UC)
	connect(t, ua, ub, 1, 70, 80, AccessRemoteWrite)
	fill(A.buf[700000:710000], 8)
	one(ua, &SendWR{ID: 15, Op: OpWrite, SG: []SGE{A.mr.SGE(700000, 10000)}, Remote: RemoteAddr{B.mr.Addr() + 500000, B.mr.RKey()}})
	ok("uc write", pollN(t, s, A.cq, 1))
	s.run(t, func() bool { return bytes.Equal(B.buf[500000:510000], A.buf[700000:710000]) })

	// Inline data from the backed region, read when posted.
	qa.PostRecv(&RecvWR{ID: 52, SG: []SGE{A.mr.SGE(600000, 100)}})
	fill(B.buf[60000:60064], 6)
	if err := qb.PostSend(&SendWR{ID: 10, Op: OpSend, Flags: SendSignaled | SendInline, SG: []SGE{B.mr.SGE(60000, 64)}}); err == nil {
		t.Fatal("inline send on a qp without inline room")
	}
	qi, qj := B.qpInline(t), A.qpInline(t)
	connect(t, qi, qj, 1, 30, 40, AccessRemoteWrite)
	qj.PostRecv(&RecvWR{ID: 53, SG: []SGE{A.mr.SGE(600000, 100)}})
	one(qi, &SendWR{ID: 11, Op: OpSend, Flags: SendInline, SG: []SGE{B.mr.SGE(60000, 64)}})
	fill(B.buf[60000:60064], 7) // after the post: the data was taken then
	ok("inline from backed", append(pollN(t, s, B.cq, 1), pollN(t, s, A.cq, 1)...))
	want := make([]byte, 64)
	fill(want, 6)
	if !bytes.Equal(A.buf[600000:600064], want) {
		t.Fatal("inline data from the backed region differs")
	}
	if c := s.b.Counters(); c.BackingErr != 0 || fb.reads.Load() == 0 || fb.writes.Load() == 0 {
		t.Fatalf("backing_err %d, %d reads, %d writes", c.BackingErr, fb.reads.Load(), fb.writes.Load())
	}
	t.Logf("%d reads, %d writes", fb.reads.Load(), fb.writes.Load())

	// A backing that fails is a bad key: a WRITE to it is a remote
	// access error.
	fb.fail.Store(true)
	one(qa, &SendWR{ID: 12, Op: OpWrite, SG: []SGE{A.mr.SGE(0, 5000)}, Remote: RemoteAddr{B.mr.Addr(), B.mr.RKey()}})
	if wc := pollN(t, s, A.cq, 1); wc[0].Status != WCRemAccessErr {
		t.Fatalf("write to a failing backing: %+v", wc[0])
	}
	if c := s.b.Counters(); c.BackingErr == 0 {
		t.Error("no backing_err counted")
	}
	fb.fail.Store(false)

	// Deregistered: requests naming it fail without reaching it (the
	// QPs above are in ERR after the errors: new ones).
	qk, ql := A.qp(t, RC), B.qp(t, RC)
	connect(t, qk, ql, 1, 50, 60, AccessRemoteWrite)
	if err := B.mr.Deregister(); err != nil {
		t.Fatal(err)
	}
	fb.gone.Store(true)
	one(qk, &SendWR{ID: 13, Op: OpWrite, SG: []SGE{A.mr.SGE(0, 5000)}, Remote: RemoteAddr{B.mr.Addr(), B.mr.RKey()}})
	if wc := pollN(t, s, A.cq, 1); wc[0].Status != WCRemAccessErr {
		t.Fatalf("write to a deregistered backed region: %+v", wc[0])
	}
	one(qi, &SendWR{ID: 14, Op: OpSend, Flags: SendInline, SG: []SGE{B.mr.SGE(60000, 64)}})
	if wc := pollN(t, s, B.cq, 1); wc[0].ID != 14 || wc[0].Status != WCLocProtErr {
		t.Fatalf("inline send from a deregistered backed region: %+v", wc[0])
	}
}

func (s *side) qpInline(t testing.TB) *QP {
	t.Helper()
	q, err := s.pd.CreateQP(QPInit{Type: RC, SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: 8, MaxRecvWR: 8, MaxInline: 128})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// TestBackedRegionRegister checks the arguments of RegisterMRBacked.
func TestBackedRegionRegister(t *testing.T) {
	s := newSimPair(t, 1500, nil)
	pd, _ := s.a.AllocPD()
	fb := newFakeBacking(t, 0, 100)
	for _, c := range []struct {
		b      Backing
		base   uint64
		n      int
		iova   uint64
		access Access
	}{
		{nil, 0, 100, 0x1000, 0},
		{fb, 0, 0, 0x1000, 0},
		{fb, 0, -1, 0x1000, 0},
		{fb, 1 << 63, 100, 0x1000, 0},
		{fb, 1<<63 - 50, 100, 0x1000, 0},
		{fb, 0, 100, ^uint64(0) - 10, 0},
		{fb, 0, 100, 0x1000, AccessRemoteWrite},
	} {
		if _, err := pd.RegisterMRBacked(c.b, c.base, c.n, c.iova, c.access); !errors.Is(err, ErrInvalidArg) {
			t.Errorf("RegisterMRBacked(%v, %#x, %d, %#x, %v): %v", c.b != nil, c.base, c.n, c.iova, c.access, err)
		}
	}
	mr, err := pd.RegisterMRBacked(fb, 0, 100, 0x1000, AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if mr.RKey() != 0 || !pd.mem.Check(mr.LKey(), 0x1000, 100, AccessLocalWrite, false) ||
		pd.mem.Check(mr.LKey(), 0x1001, 100, 0, false) {
		t.Errorf("rkey %#x, or bounds wrong", mr.RKey())
	}
	// The PD's own view gives no bytes of a backed region: only QPs
	// reach it, through their engines.
	if _, ok := pd.mem.Local(mr.LKey(), 0x1000, 8, 0); ok {
		t.Error("pdMemory.Local gave bytes of a backed region")
	}
	if err := mr.Deregister(); err != nil {
		t.Fatal(err)
	}
}

// TestBackedCompletionOrder checks that the completion of a RECV into a
// backed region, or of a READ into one, reaches the CQ sink only after
// the data was written back.
func TestBackedCompletionOrder(t *testing.T) {
	s := newSimPair(t, 9000, nil)
	log := &eventLog{}
	sink := &orderSink{listSink: listSink{max: 64}, log: log}
	cb, err := s.b.CreateCQWithSink(64, sink)
	if err != nil {
		t.Fatal(err)
	}
	A := newSide(t, s.a, 1<<16, 64)
	B, fb := backedSide(t, s.b, 1<<16, 64)
	fb.log = log
	qa := A.qp(t, RC)
	qb, err := B.pd.CreateQP(QPInit{Type: RC, SendCQ: cb, RecvCQ: cb, MaxSendWR: 8, MaxRecvWR: 8})
	if err != nil {
		t.Fatal(err)
	}
	connect(t, qa, qb, 1, 0, 0, AccessRemoteRead)
	k := 0
	for _, op := range []Opcode{OpSend, OpRead} {
		for _, n := range []uint32{100, 4096, 10000} { // one packet, exactly one, several
			fill(A.buf[:n], byte(k))
			clear(B.buf)
			log.mu.Lock()
			log.ev = log.ev[:0]
			log.mu.Unlock()
			if op == OpSend {
				qb.PostRecv(&RecvWR{ID: uint64(k), SG: []SGE{B.mr.SGE(0, 16384)}})
				err = qa.PostSend(&SendWR{ID: uint64(k), Op: OpSend, SG: []SGE{A.mr.SGE(0, n)}})
			} else {
				err = qb.PostSend(&SendWR{ID: uint64(k), Op: OpRead, Flags: SendSignaled, SG: []SGE{B.mr.SGE(0, n)},
					Remote: RemoteAddr{A.mr.Addr(), A.mr.RKey()}})
			}
			if err != nil {
				t.Fatal(err)
			}
			k++
			s.run(t, func() bool { return len(sink.got()) == k })
			ev := log.events()
			push := -1
			for i, e := range ev {
				if e == "push" {
					push = i
					break
				}
			}
			if push < 1 || ev[push-1] != "write" || push+1 >= len(ev) || ev[push+1] != "publish" {
				t.Fatalf("%v of %d: events %v", op, n, ev)
			}
			for _, e := range ev[push:] {
				if e == "write" {
					t.Fatalf("%v of %d: data written back after the completion was pushed: %v", op, n, ev)
				}
			}
			if wc := sink.got()[k-1]; wc.Status != WCSuccess || wc.ByteLen != n || !bytes.Equal(B.buf[:n], A.buf[:n]) {
				t.Fatalf("%v of %d: %+v, data equal %v", op, n, wc, bytes.Equal(B.buf[:n], A.buf[:n]))
			}
		}
	}
}

// TestBackedNoAllocs checks that traffic to and from a backed region
// allocates nothing per packet.
func TestBackedNoAllocs(t *testing.T) {
	s := newSimPair(t, 9000, nil)
	A := newSide(t, s.a, 1<<20, 256)
	B, _ := backedSide(t, s.b, 1<<20, 256)
	qa, qb := A.qp(t, RC), B.qp(t, RC)
	connect(t, qa, qb, 1, 0, 0, AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)
	wrs := []SendWR{
		{ID: 1, Op: OpWrite, Flags: SendSignaled, SG: []SGE{A.mr.SGE(0, 65536)}, Remote: RemoteAddr{B.mr.Addr(), B.mr.RKey()}},
		{ID: 2, Op: OpRead, Flags: SendSignaled, SG: []SGE{A.mr.SGE(65536, 65536)}, Remote: RemoteAddr{B.mr.Addr(), B.mr.RKey()}},
		{ID: 3, Op: OpSend, Flags: SendSignaled, SG: []SGE{A.mr.SGE(0, 10000)}},
		{ID: 4, Op: OpFetchAdd, Flags: SendSignaled, SG: []SGE{A.mr.SGE(200000, 8)}, Remote: RemoteAddr{B.mr.Addr() + 8192, B.mr.RKey()}, CompareAdd: 1},
	}
	bwr := SendWR{ID: 5, Op: OpWrite, Flags: SendSignaled, SG: []SGE{B.mr.SGE(400000, 65536)}, Remote: RemoteAddr{A.mr.Addr() + 400000, A.mr.RKey()}}
	rwr := RecvWR{ID: 9, SG: []SGE{B.mr.SGE(300000, 10000)}}
	wcs := make([]WC, 16)
	round := func() {
		qb.PostRecv(&rwr)
		qa.PostSendBatch(wrs)
		qb.PostSend(&bwr)
		got, gotB := 0, 0
		for got < len(wrs) || gotB < 2 {
			s.a.Step()
			s.b.Step()
			s.clock.Advance(1000)
			got += A.cq.Poll(wcs)
			gotB += B.cq.Poll(wcs)
		}
	}
	for i := 0; i < 20; i++ {
		round()
	}
	if allocs := testing.AllocsPerRun(100, round); allocs != 0 {
		t.Fatalf("%v allocations per round", allocs)
	}
}

// TestDeregisterStopsBacked deregisters a backed region while a WRITE
// into it, a READ from it or a SEND into it is under way, on running
// engines: once Deregister returns, its backing is not called again
// (the fake fails the test if it is).
func TestDeregisterStopsBacked(t *testing.T) {
	f := newFencePair(t)
	for round := 0; round < 15; round++ {
		qa, qb := f.qps(t)
		local, _ := f.mr(t, f.pa, 0x44)
		fb := newFakeBacking(t, backedBase, fenceSize)
		remote, err := f.pb.RegisterMRBacked(fb, backedBase, fenceSize, backedIOVA, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		wr := SendWR{ID: 1, Flags: SendSignaled, SG: []SGE{local.SGE(0, fenceSize)}, Remote: RemoteAddr{remote.Addr(), remote.RKey()}}
		switch round % 3 {
		case 0:
			wr.Op = OpWrite
		case 1:
			wr.Op = OpRead
		case 2:
			wr.Op = OpSend
			if err := qb.PostRecv(&RecvWR{ID: 7, SG: []SGE{remote.SGE(0, fenceSize)}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := qa.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
		pause(round)
		if err := remote.Deregister(); err != nil {
			t.Fatal(err)
		}
		fb.gone.Store(true)
		if wc := waitOne(t, f.ca); wc.Status != WCSuccess && wc.Status != WCRemAccessErr && wc.Status != WCRemOpErr {
			t.Fatalf("round %d: %v completed with %v", round, wr.Op, wc.Status)
		}
		qa.Destroy()
		qb.Destroy()
		local.Deregister()
		t.Logf("round %d (%v): %d reads, %d writes before Deregister", round, wr.Op, fb.reads.Load(), fb.writes.Load())
	}
}
