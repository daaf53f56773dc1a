package daemon_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uroce/uroce/daemon"
	"github.com/uroce/uroce/link/pipe"
	"github.com/uroce/uroce/proto"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
)

// raw is a client that speaks the protocol by hand, to send what no
// well-behaved client would.
type raw struct {
	t    *testing.T
	c    *net.UnixConn
	seq  uint32
	bell int
}

func dialRaw(t *testing.T, s *daemon.Server) *raw {
	t.Helper()
	c, err := net.Dial("unixpacket", s.Socket())
	if err != nil {
		t.Fatal(err)
	}
	r := &raw{t: t, c: c.(*net.UnixConn), bell: -1}
	t.Cleanup(func() { r.c.Close() })
	return r
}

// send sends a message as it is.
func (r *raw) send(msg []byte, fds ...int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err := r.c.WriteMsgUnix(msg, oob, nil)
	return err
}

// recv reads one message; closed reports a connection the daemon ended.
func (r *raw) recv() (h proto.Header, body []byte, fd int, closed bool) {
	r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, proto.MaxMessage)
	oob := make([]byte, unix.CmsgSpace(16))
	n, oobn, _, _, err := r.c.ReadMsgUnix(buf, oob)
	if err != nil || n == 0 {
		return h, nil, -1, true
	}
	fd = -1
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) > 0 {
		if fds, err := unix.ParseUnixRights(&msgs[0]); err == nil && len(fds) > 0 {
			fd = fds[0]
		}
	}
	h, body, err = proto.ParseHeader(buf[:n])
	if err != nil {
		r.t.Fatalf("daemon sent a malformed message: %v", err)
	}
	return h, body, fd, false
}

// call sends a request and returns its response's errno, body and fd.
func (r *raw) call(op proto.Op, body any, fds ...int) (syscall.Errno, []byte, int) {
	r.t.Helper()
	r.seq++
	msg, err := proto.Marshal(proto.Header{Op: op, Seq: r.seq}, body)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.send(msg, fds...); err != nil {
		r.t.Fatalf("%v: %v", op, err)
	}
	h, b, fd, closed := r.recv()
	if closed {
		r.t.Fatalf("%v: the daemon closed the connection", op)
	}
	if h.Seq != r.seq || h.Op != op {
		r.t.Fatalf("%v: answer %v #%d", op, h.Op, h.Seq)
	}
	return syscall.Errno(h.Err), b, fd
}

func (r *raw) hello() {
	r.t.Helper()
	if e, _, fd := r.call(proto.OpHello, &proto.Hello{Version: proto.Version}); e != 0 {
		r.t.Fatalf("hello: %v", e)
	} else {
		r.bell = fd
	}
}

func (r *raw) handle(op proto.Op, body any) (uint32, int) {
	r.t.Helper()
	e, b, fd := r.call(op, body)
	if e != 0 {
		r.t.Fatalf("%v: %v: %s", op, e, b)
	}
	return binary.LittleEndian.Uint32(b), fd
}

// closedSoon reports whether the daemon ends the connection within 10
// seconds (a read that times out is not an end).
func (r *raw) closedSoon() bool {
	r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, proto.MaxMessage)
	for {
		n, _, _, _, err := r.c.ReadMsgUnix(buf, nil)
		if err != nil {
			var ne net.Error
			return !(errors.As(err, &ne) && ne.Timeout())
		}
		if n == 0 {
			return true
		}
	}
}

// alive checks that a well-behaved client still gets its work done.
func alive(t *testing.T, p *pair) {
	t.Helper()
	A, B := newEnd(t, open(t, p.sa), 1<<16), newEnd(t, open(t, p.sb), 1<<16)
	ga, _ := A.dev.GID(1)
	gb, _ := B.dev.GID(1)
	qa, qb := A.qp(t, stack.RC), B.qp(t, stack.RC)
	connect(t, qa, qb, ga, gb)
	fill(A.buf, 7)
	if err := qa.PostSend(&verbs.SendWR{ID: 1, Op: stack.OpWrite, Flags: stack.SendSignaled, SG: []stack.SGE{A.mr.SGE(0, 1<<16)},
		Remote: stack.RemoteAddr{Addr: B.mr.Addr(), RKey: B.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitN(t, A.cq, 1); wc[0].Status != 0 {
		t.Fatalf("write after the hostile client: %+v", wc[0])
	}
}

func TestHostileGarbage(t *testing.T) {
	p := newPair(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200; i++ {
		r := dialRaw(t, p.sa)
		if i%2 == 1 {
			r.hello()
		}
		n := rng.IntN(200)
		msg := make([]byte, n)
		for k := range msg {
			msg[k] = byte(rng.Uint32())
		}
		if n >= proto.HeaderLen && rng.IntN(2) == 0 {
			// A plausible header on a garbage body.
			binary.LittleEndian.PutUint16(msg, uint16(1+rng.IntN(30)))
			binary.LittleEndian.PutUint32(msg[8:], uint32(n-proto.HeaderLen))
		}
		r.send(msg)
		r.c.Close()
	}
	alive(t, p)
}

func TestHostileRequests(t *testing.T) {
	p := newPair(t)
	// Anything before Hello ends the connection.
	r := dialRaw(t, p.sa)
	msg, _ := proto.Marshal(proto.Header{Op: proto.OpAllocPD, Seq: 1}, nil)
	r.send(msg)
	if !r.closedSoon() {
		t.Fatal("a request before hello was served")
	}

	r = dialRaw(t, p.sa)
	if e, _, _ := r.call(proto.OpHello, &proto.Hello{Version: 99}); e != unix.EPROTO {
		t.Fatalf("hello of version 99: %v", e)
	}
	r = dialRaw(t, p.sa)
	r.hello()
	if e, _, _ := r.call(proto.Op(77), nil); e != unix.EOPNOTSUPP {
		t.Fatalf("unknown op: %v", e)
	}
	pd, _ := r.handle(proto.OpAllocPD, nil)
	for _, c := range []struct {
		op   proto.Op
		body any
	}{
		{proto.OpDestroyQP, &proto.Handle{Handle: 999}},
		{proto.OpDestroyQP, &proto.Handle{Handle: pd}}, // a PD's handle as a QP's
		{proto.OpDeregMR, &proto.Handle{Handle: 0}},
		{proto.OpCreateCQ, &proto.CreateCQ{CQE: -1}},
		{proto.OpCreateCQ, &proto.CreateCQ{CQE: 1 << 30}},
		{proto.OpCreateCQ, &proto.CreateCQ{CQE: 4, Channel: pd}},
		{proto.OpResizeCQ, &proto.ResizeCQ{CQ: 999, CQE: 4}},
		{proto.OpResizeCQ, &proto.ResizeCQ{CQ: pd, CQE: 4}}, // a PD's handle as a CQ's
		{proto.OpResizeSRQ, &proto.ResizeSRQ{SRQ: 999, MaxWR: 4}},
		{proto.OpResizeSRQ, &proto.ResizeSRQ{SRQ: pd, MaxWR: 4}}, // a PD's handle as an SRQ's
		{proto.OpCreateQP, &proto.CreateQP{PD: pd, Type: proto.QPTypeRC, SendCQ: 4242, RecvCQ: 4242}},
		{proto.OpRegMR, &proto.RegMR{PD: pd, Kind: proto.MemShared, Length: 4096}}, // no memfd
		{proto.OpRegMR, &proto.RegMR{PD: pd, Kind: 9, Length: 4096}},
		{proto.OpModifyQP, &proto.ModifyQP{QP: pd}},
		{proto.OpQueryGID, &proto.IndexReq{Port: 1, Index: 1000}},
		{proto.OpQueryPort, &proto.PortReq{Port: 2}},
	} {
		if e, _, fd := r.call(c.op, c.body); e == 0 {
			t.Errorf("%v %+v accepted", c.op, c.body)
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}
	// A memfd that can shrink under the daemon is refused.
	fd, _ := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
	unix.Ftruncate(fd, 4096)
	if e, b, _ := r.call(proto.OpRegMR, &proto.RegMR{PD: pd, Kind: proto.MemShared, Length: 4096, IOVA: 0x1000}, fd); e != unix.EINVAL {
		t.Errorf("unsealed memfd: %v %s", e, b)
	}
	// Past the end of the memfd.
	sealed, _ := unix.MemfdCreate("sealed", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	unix.Ftruncate(sealed, 4096)
	unix.FcntlInt(uintptr(sealed), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK)
	if e, _, _ := r.call(proto.OpRegMR, &proto.RegMR{PD: pd, Kind: proto.MemShared, Length: 4096, Addr: 1, IOVA: 0x1000}, sealed); e != unix.EINVAL {
		t.Errorf("region past the memfd's end: %v", e)
	}
	// Descriptors sent with requests that take none are closed, not kept.
	if e, _, _ := r.call(proto.OpAllocPD, nil, sealed, sealed, sealed); e != 0 {
		t.Errorf("alloc pd with descriptors: %v", e)
	}
	unix.Close(fd)
	unix.Close(sealed)
	alive(t, p)
}

// rawQP builds a QP by hand and maps its rings and its CQ's.
type rawQP struct {
	r          *raw
	pd, cq, qp uint32
	qpn        uint32
	sq, rq, cr proto.Ring
	cons       uint32
}

func newRawQP(t *testing.T, r *raw) *rawQP {
	t.Helper()
	q := &rawQP{r: r}
	q.pd, _ = r.handle(proto.OpAllocPD, nil)
	e, b, fd := r.call(proto.OpCreateCQ, &proto.CreateCQ{CQE: 64})
	if e != 0 {
		t.Fatal(e)
	}
	var cr proto.CreateCQResp
	proto.Unmarshal(b, &cr)
	q.cq = cr.CQ
	cmem, err := unix.Mmap(fd, 0, int(cr.RingBytes), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	q.cr, _ = proto.NewRing(cmem, int(cr.Slots), proto.WCLen)
	e, b, fd = r.call(proto.OpCreateQP, &proto.CreateQP{PD: q.pd, Type: proto.QPTypeRC, SendCQ: q.cq, RecvCQ: q.cq,
		MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInline: 64})
	if e != 0 {
		t.Fatalf("create qp: %v %s", e, b)
	}
	var qr proto.CreateQPResp
	proto.Unmarshal(b, &qr)
	q.qp, q.qpn = qr.QP, qr.QPN
	mem, err := unix.Mmap(fd, 0, int(qr.RingBytes), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	q.sq, _ = proto.NewRing(mem[qr.SQOffset:], int(qr.SQSlots), int(qr.SQSlotBytes))
	q.rq, _ = proto.NewRing(mem[qr.RQOffset:], int(qr.RQSlots), int(qr.RQSlotBytes))
	t.Cleanup(func() { unix.Munmap(mem); unix.Munmap(cmem) })
	return q
}

// toRTS connects the QP to a peer (any QPN): enough to post.
func (q *rawQP) toRTS(t *testing.T, peer uint32, dgid [16]byte) {
	t.Helper()
	for _, m := range []proto.ModifyQP{
		{QP: q.qp, Mask: 1 | 1<<3 | 1<<4 | 1<<5, Attr: proto.QPAttr{State: 1, Port: 1, AccessFlags: 7}},
		{QP: q.qp, Mask: 1 | 1<<7 | 1<<8 | 1<<12 | 1<<15 | 1<<17 | 1<<20, Attr: proto.QPAttr{State: 2, PathMTU: 3,
			DestQPN: peer, MaxDestRdAtomic: 1, MinRNRTimer: 1, AH: proto.AHAttr{DGID: dgid, SGIDIndex: 1}}},
		{QP: q.qp, Mask: 1 | 1<<9 | 1<<10 | 1<<11 | 1<<13 | 1<<16, Attr: proto.QPAttr{State: 3, Timeout: 10, RetryCnt: 1, RNRRetry: 1, MaxRdAtomic: 1}},
	} {
		if e, b, _ := q.r.call(proto.OpModifyQP, &m); e != 0 {
			t.Fatalf("modify to %d: %v %s", m.Attr.State, e, b)
		}
	}
}

// post puts slot bytes in the send ring and rings.
func (q *rawQP) post(s proto.SendSlot, sges ...[3]uint64) {
	prod := q.sq.Producer()
	b := q.sq.Slot(prod)
	s.Put(b)
	for i, g := range sges {
		proto.PutSGE(b, proto.SendSlotHeader, i, g[0], uint32(g[1]), uint32(g[2]))
	}
	q.sq.SetProducer(prod + 1)
	unix.Write(q.r.bell, []byte{1, 0, 0, 0, 0, 0, 0, 0})
}

// wc waits for the next completion in the CQ ring.
func (q *rawQP) wc(t *testing.T) proto.WC {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for q.cr.Producer() == q.cons {
		if time.Now().After(deadline) {
			t.Fatal("no completion")
		}
		time.Sleep(time.Millisecond)
	}
	var w proto.WC
	w.Get(q.cr.Slot(q.cons))
	q.cons++
	q.cr.SetConsumer(q.cons)
	return w
}

func TestHostileRings(t *testing.T) {
	p := newPair(t)
	gid := func() [16]byte { g, _ := p.b.GID(1); return g.As16() }()
	r := dialRaw(t, p.sa)
	r.hello()
	q := newRawQP(t, r)
	q.toRTS(t, 0x999, gid)

	// Malformed requests complete with an error; nothing else happens.
	for i, s := range []proto.SendSlot{
		{ID: 1, Opcode: 200, Flags: proto.SendSignaled},
		{ID: 2, Opcode: proto.WRSend, Flags: proto.SendSignaled, NumSGE: 1000},
		{ID: 3, Opcode: proto.WRSend, Flags: proto.SendSignaled | proto.SendInline, InlineLen: 1 << 30},
	} {
		q.post(s)
		if w := q.wc(t); w.ID != s.ID || w.Status != uint32(stack.WCLocQPOpErr) {
			t.Errorf("malformed request %d: completion %+v", i, w)
		}
	}

	// Another client's key is refused: the other session's region is
	// not this session's memory.
	other := newEnd(t, open(t, p.sa), 4096)
	q.post(proto.SendSlot{ID: 4, Opcode: proto.WRSend, Flags: proto.SendSignaled, NumSGE: 1},
		[3]uint64{other.mr.Addr(), 64, uint64(other.mr.LKey())})
	if w := q.wc(t); w.ID != 4 || w.Status != uint32(stack.WCLocProtErr) {
		t.Errorf("another session's lkey: %+v", w)
	}

	// A ring index that lies ends the session.
	q.sq.SetProducer(q.sq.Producer() + 1000)
	unix.Write(r.bell, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	if !r.closedSoon() {
		t.Fatal("the session survived a lying ring index")
	}
	alive(t, p)
}

func TestLimits(t *testing.T) {
	la, _ := pipe.New(pipe.Config{MTU: 1500})
	d, err := stack.Open(context.Background(), stack.Config{Link: la, MAC: macA, Addrs: nil})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s, err := daemon.Listen(daemon.Config{Device: d, Socket: filepath.Join(t.TempDir(), "s"),
		Limits: daemon.Limits{QPs: 2, CQs: 1, MRs: 1, PDs: 2, SRQs: 1, AHs: 1, Channels: 2, MRBytes: 8192}})
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	defer s.Shutdown()
	dev := open(t, s)
	pd, _ := dev.AllocPD()
	pd2, _ := dev.AllocPD()
	if _, err := dev.AllocPD(); !errors.Is(err, stack.ErrNoResources) {
		t.Errorf("third pd: %v", err)
	}
	_ = pd2
	buf, _ := dev.AllocBuffer(16384)
	if _, err := pd.RegisterMR(buf, stack.AccessLocalWrite); !errors.Is(err, stack.ErrNoResources) {
		t.Errorf("16 KiB past a limit of 8 KiB: %v", err)
	}
	if _, err := pd.RegisterMR(buf[:4096], stack.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	cq, err := dev.CreateCQ(8)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := pd.CreateQP(verbs.QPInit{Type: stack.RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 4, MaxRecvWR: 4}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pd.CreateQP(verbs.QPInit{Type: stack.RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 4, MaxRecvWR: 4}); !errors.Is(err, stack.ErrNoResources) {
		t.Errorf("third qp: %v", err)
	} else if err != nil {
		t.Logf("as a client sees it: %v", err)
	}
}

// TestClientLeaves: whatever a client created goes with it, and the
// device keeps nothing of it.
func TestClientLeaves(t *testing.T) {
	p := newPair(t)
	for i := 0; i < 3; i++ {
		A, B := newEnd(t, open(t, p.sa), 1<<20), newEnd(t, open(t, p.sb), 1<<20)
		ga, _ := A.dev.GID(1)
		gb, _ := B.dev.GID(1)
		qa, qb := A.qp(t, stack.RC), B.qp(t, stack.RC)
		connect(t, qa, qb, ga, gb)
		// Work in flight when the client goes.
		for k := 0; k < 8; k++ {
			qa.PostSend(&verbs.SendWR{ID: uint64(k), Op: stack.OpWrite, SG: []stack.SGE{A.mr.SGE(0, 1<<20)},
				Remote: stack.RemoteAddr{Addr: B.mr.Addr(), RKey: B.mr.RKey()}})
		}
		A.dev.Close()
		B.dev.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		sa, sb := p.sa.Stats(0), p.sb.Stats(0)
		if len(sa.Sessions) == 0 && len(sb.Sessions) == 0 && len(sa.QPs) == 0 && len(sb.QPs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sessions left: %+v %+v", sa.Sessions, sb.Sessions)
		}
		time.Sleep(10 * time.Millisecond)
	}
	alive(t, p)
}

// TestClientThatNeverReads: a client that sends requests and never reads
// the answers stalls only itself: the daemon serves others meanwhile,
// and its session ends when it goes.
func TestClientThatNeverReads(t *testing.T) {
	p := newPair(t)
	r := dialRaw(t, p.sa)
	r.hello()
	id := p.sa.Stats(0).Sessions[0].ID
	msg, _ := proto.Marshal(proto.Header{Op: proto.OpQueryDevice, Seq: 9}, nil)
	r.c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	for i := 0; i < 100000; i++ {
		if err := r.send(msg); err != nil {
			break // its queue is full, or the daemon ended the session
		}
	}
	alive(t, p)
	r.c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		gone := true
		for _, se := range p.sa.Stats(0).Sessions {
			gone = gone && se.ID != id
		}
		if gone {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the session of a client that never read is still there after it left")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestHostileResizeCQ: a client whose CQ ring's consumer index lies has
// its resize refused (EINVAL), and its session goes on; a resize to a
// size that fits what waits succeeds with a new ring.
func TestHostileResizeCQ(t *testing.T) {
	p := newPair(t)
	r := dialRaw(t, p.sa)
	r.hello()
	q := newRawQP(t, r)
	q.cr.SetConsumer(1000) // 1000 consumed of none produced
	if e, _, fd := r.call(proto.OpResizeCQ, &proto.ResizeCQ{CQ: q.cq, CQE: 128}); e != unix.EINVAL {
		t.Errorf("resize with a lying consumer index: %v, want EINVAL", e)
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	q.cr.SetConsumer(0)
	e, b, fd := r.call(proto.OpResizeCQ, &proto.ResizeCQ{CQ: q.cq, CQE: 100})
	if e != 0 || fd < 0 {
		t.Fatalf("resize: %v", e)
	}
	unix.Close(fd)
	var cr proto.CreateCQResp
	proto.Unmarshal(b, &cr)
	if cr.CQ != q.cq || cr.CQE != 128 || cr.Slots != 128 {
		t.Errorf("resize to 100: %+v, want 128 slots", cr)
	}
	if e, _, _ := r.call(proto.OpDestroyQP, &proto.Handle{Handle: q.qp}); e != 0 {
		t.Fatalf("the session after the resizes: destroy qp: %v", e)
	}
}
