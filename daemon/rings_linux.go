package daemon

import (
	"encoding/binary"
	"errors"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/uroce/uroce/proto"
	"github.com/uroce/uroce/stack"
)

// cqRing is a CQ's ring in memory shared with the client: the stack.CQSink
// of the client's CQ. Engines push completions (several at once when the
// CQ serves QPs of several engines) and publish at the end of a batch.
type cqRing struct {
	mu     sync.Mutex
	ring   proto.Ring
	prod   uint32 // next slot to write
	pub    uint32 // producer index the client sees
	ch     *channelObj
	events uint64
	wc     proto.WC
}

// Push implements stack.CQSink.
func (r *cqRing) Push(wc *stack.WC) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	// The consumer index is the client's: a value that is not between
	// what it saw and what it may see makes the ring count as full.
	if used := r.prod - r.ring.Consumer(); used >= r.ring.Len() {
		r.ring.AddOverrun()
		return false
	}
	r.wc = proto.WC{ID: wc.ID, Status: uint32(wc.Status), Opcode: uint32(wc.Opcode), VendorErr: wc.VendErr,
		ByteLen: wc.ByteLen, Imm: wc.Imm, QPN: wc.QPN, SrcQP: wc.SrcQP, Flags: uint32(wc.Flags), PKeyIndex: wc.PKeyIdx}
	if wc.Flags&stack.WCWithInv != 0 {
		r.wc.Imm = wc.InvRKey
	}
	r.wc.Put(r.ring.Slot(r.prod))
	r.prod++
	return true
}

// Publish implements stack.CQSink: the completions become visible, and a
// client waiting on the CQ's channel gets its event.
func (r *cqRing) Publish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pub == r.prod {
		return
	}
	r.ring.SetProducer(r.prod)
	r.pub = r.prod
	if r.ch != nil && r.ring.Flags() != 0 && r.ring.SwapFlags(0) != 0 {
		r.ring.AddEvent()
		r.events++
		signal(r.ch.efd)
	}
}

// pushNow adds a completion the poller produces (a request it refused)
// and publishes it.
func (r *cqRing) pushNow(wc *stack.WC) {
	r.Push(wc)
	r.Publish()
}

var one = func() []byte { b := make([]byte, 8); binary.NativeEndian.PutUint64(b, 1); return b }()

// signal adds one to an eventfd.
func signal(efd int) { unix.Write(efd, one) }

// setupQPRings creates the memfd of a QP's rings and the poller's
// scratch for them.
func (o *qpObj) setupRings(sendWR, recvWR int) (int, proto.CreateQPResp, error) {
	var r proto.CreateQPResp
	sqSlots, sqSize := proto.Slots(sendWR), proto.SendSlotBytes(o.maxSendSGE, o.maxInline)
	rqSlots, rqSize := 0, 0
	if o.hasRQ {
		rqSlots, rqSize = proto.Slots(recvWR), proto.RecvSlotBytes(o.maxRecvSGE)
	}
	sqBytes := (proto.RingBytes(sqSlots, sqSize) + 4095) &^ 4095
	total := sqBytes
	if o.hasRQ {
		total += (proto.RingBytes(rqSlots, rqSize) + 4095) &^ 4095
	}
	fd, mem, err := newRingMem("uroce-qp", total)
	if err != nil {
		return -1, r, err
	}
	o.mem = mem
	o.sq, _ = proto.NewRing(mem, sqSlots, sqSize)
	o.sq.Init()
	if o.hasRQ {
		o.rq, _ = proto.NewRing(mem[sqBytes:], rqSlots, rqSize)
		o.rq.Init()
	}
	o.scopies, o.swrs, o.ssges, o.sslot, o.sst = make([][]byte, pollBatch), make([]stack.SendWR, pollBatch),
		make([][]stack.SGE, pollBatch), make([]proto.SendSlot, pollBatch), make([]stack.WCStatus, pollBatch)
	for i := range o.scopies {
		o.scopies[i] = make([]byte, sqSize)
		o.ssges[i] = make([]stack.SGE, o.maxSendSGE)
	}
	if o.hasRQ {
		o.rcopies, o.rwrs, o.rsges, o.rst = make([][]byte, pollBatch), make([]stack.RecvWR, pollBatch),
			make([][]stack.SGE, pollBatch), make([]stack.WCStatus, pollBatch)
		for i := range o.rcopies {
			o.rcopies[i] = make([]byte, rqSize)
			o.rsges[i] = make([]stack.SGE, o.maxRecvSGE)
		}
	}
	r = proto.CreateQPResp{SQSlots: uint32(sqSlots), SQSlotBytes: uint32(sqSize), SQOffset: 0,
		RQSlots: uint32(rqSlots), RQSlotBytes: uint32(rqSize), RQOffset: uint32(sqBytes), RingBytes: uint32(total)}
	if !o.hasRQ {
		r.RQOffset = 0
	}
	return fd, r, nil
}

// The poller: the engines take the session's work requests from its
// rings themselves (stack.Poller), and a goroutine waits on the doorbell
// to wake them when they sleep.

// ringPoller is the session's stack.Poller.
type ringPoller struct{ ss *session }

// Poll implements stack.Poller: it posts what the rings hold. An engine
// that finds another engine polling the session goes on.
func (p ringPoller) Poll() bool {
	ss := p.ss
	if !ss.pollMu.TryLock() {
		return false
	}
	defer ss.pollMu.Unlock()
	if ss.stopPoll.Load() || ss.broken.Load() {
		return false
	}
	return ss.scan()
}

// Arm implements stack.Poller: the rings ask the client for the doorbell,
// and it reports whether requests came in before that.
func (p ringPoller) Arm() bool {
	ss := p.ss
	ss.pollMu.Lock()
	defer ss.pollMu.Unlock()
	if ss.stopPoll.Load() || ss.broken.Load() {
		return false
	}
	ss.setWakeup(proto.FlagNeedWakeup)
	return ss.scanPending()
}

// Disarm implements stack.Poller.
func (p ringPoller) Disarm() {
	ss := p.ss
	ss.pollMu.Lock()
	defer ss.pollMu.Unlock()
	if ss.stopPoll.Load() {
		return
	}
	ss.setWakeup(0)
}

// startPoller gives the device's engines the session's rings and starts
// the doorbell's goroutine (at Hello).
func (ss *session) startPoller() error {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return err
	}
	// The client gets a duplicate; the daemon reads through an
	// os.File, which the Go runtime polls.
	dup, err := unix.Dup(efd)
	if err != nil {
		unix.Close(efd)
		return err
	}
	unix.CloseOnExec(dup)
	ss.doorbell = os.NewFile(uintptr(efd), "doorbell")
	ss.dbSelf, ss.dbFD = efd, dup
	ss.poller = ringPoller{ss}
	ss.srv.cfg.Device.AddPoller(ss.poller)
	go ss.waitDoorbell()
	return nil
}

func (ss *session) stopPoller() {
	if ss.doorbell == nil {
		return
	}
	ss.stopPoll.Store(true)
	ss.srv.cfg.Device.RemovePoller(ss.poller)
	signal(ss.dbSelf)
	<-ss.pollDone
}

// waitDoorbell wakes the engines whenever the client rings the doorbell
// (it does when an engine armed the rings before sleeping), and ends the
// session of a client that broke the ring protocol.
func (ss *session) waitDoorbell() {
	defer close(ss.pollDone)
	var buf [8]byte
	for {
		_, err := ss.doorbell.Read(buf[:])
		if ss.broken.Load() {
			ss.conn.Close() // the control goroutine ends the session
			return
		}
		if err != nil || ss.stopPoll.Load() {
			return
		}
		ss.srv.cfg.Device.Wake()
	}
}

// addPolled gives the engines new rings (add puts them in the session's
// lists). They start asking for the doorbell, so that a client posting
// while every engine sleeps wakes one.
func (ss *session) addPolled(add func(), rings ...*proto.Ring) {
	ss.pollMu.Lock()
	for _, r := range rings {
		if r.Len() > 0 {
			r.SetFlags(proto.FlagNeedWakeup)
		}
	}
	add()
	ss.pollMu.Unlock()
	ss.srv.cfg.Device.Wake()
}

func (ss *session) setWakeup(f uint32) {
	for _, q := range *ss.qps.Load() {
		q.sq.SetFlags(f)
		if q.hasRQ {
			q.rq.SetFlags(f)
		}
	}
	for _, s := range *ss.srqs.Load() {
		s.ring.SetFlags(f)
	}
}

// scanPending reports whether a ring holds requests not yet taken.
// Requests taken and waiting for room in a send or receive queue do not
// count: the completions that make room wake the engines.
func (ss *session) scanPending() bool {
	for _, q := range *ss.qps.Load() {
		if q.sq.Producer() != q.sqCons || (q.hasRQ && q.rq.Producer() != q.rqCons) {
			return true
		}
	}
	for _, s := range *ss.srqs.Load() {
		if s.ring.Producer() != s.cons {
			return true
		}
	}
	return false
}

// scan posts what the rings hold and reports whether it posted anything.
// Requests waiting for room are posted first, when there is some.
func (ss *session) scan() (work bool) {
	for _, q := range *ss.qps.Load() {
		if ss.drainSend(q) {
			work = true
		}
		if q.hasRQ && ss.drainRecv(q) {
			work = true
		}
	}
	for _, s := range *ss.srqs.Load() {
		if ss.drainSRQ(s) {
			work = true
		}
	}
	return work
}

// lies ends the session of a client whose ring index is impossible.
func (ss *session) lies(what string) {
	if !ss.broken.Swap(true) {
		ss.srv.log.Warn("client ring index lies; ending the session", "session", ss.id, "pid", ss.pid, "ring", what)
		signal(ss.dbSelf) // its goroutine ends the session
	}
}

// wrOpcodes maps ibv_wr_opcode values to the stack's operations.
var wrOpcodes = [...]struct {
	op stack.Opcode
	ok bool
}{proto.WRWrite: {stack.OpWrite, true}, proto.WRWriteWithImm: {stack.OpWriteWithImm, true},
	proto.WRSend: {stack.OpSend, true}, proto.WRSendWithImm: {stack.OpSendWithImm, true},
	proto.WRRead: {stack.OpRead, true}, proto.WRCompareSwap: {stack.OpCompareSwap, true},
	proto.WRFetchAdd: {stack.OpFetchAdd, true}, proto.WRSendWithInv: {stack.OpSendWithInv, true},
	proto.WRFlush: {stack.OpFlush, true}, proto.WRAtomicWrite: {stack.OpAtomicWrite, true},
	proto.WRLocalInv: {stack.OpLocalInv, true}, proto.WRBindMW: {stack.OpBindMW, true}}

// drainSend takes the send ring's new requests and posts them. The
// slots are released (the consumer index stored) as soon as they are
// copied, before the requests are posted: a completion may come back
// before the poller would get to store it, and the client, seeing it,
// posts again at once. Requests the QP's send queue has no room for yet
// wait in the poller's copies (the backlog) and are posted first on
// the next scan.
func (ss *session) drainSend(q *qpObj) bool {
	if q.sn > 0 {
		done := ss.postSends(q, q.sb, q.sb+q.sn)
		q.sb += done
		q.sn -= done
		return done > 0
	}
	prod := q.sq.Producer()
	n := prod - q.sqCons
	if n == 0 {
		return false
	}
	if n > q.sq.Len() {
		ss.lies("send")
		return false
	}
	k := int(min(n, uint32(len(q.swrs))))
	for i := 0; i < k; i++ {
		copy(q.scopies[i], q.sq.Slot(q.sqCons+uint32(i)))
		q.sst[i] = ss.buildSend(q, i)
	}
	q.sqCons += uint32(k)
	q.sq.SetConsumer(q.sqCons)
	done := ss.postSends(q, 0, k)
	q.sb, q.sn = done, k-done
	return true
}

// postSends posts the built requests q.swrs[from:to], completing the
// refused ones with their error. It returns how many it is done with
// (fewer when the send queue is full).
func (ss *session) postSends(q *qpObj, from, to int) int {
	i := from
	for i < to {
		if q.sst[i] != stack.WCSuccess {
			q.refuse()
			q.sendCQ.ring.pushNow(&stack.WC{ID: q.swrs[i].ID, Status: q.sst[i], QPN: q.q.QPN()})
			i++
			continue
		}
		j := i
		for j < to && q.sst[j] == stack.WCSuccess {
			j++
		}
		m, err := q.q.PostSendBatch(q.swrs[i:j])
		i += m
		if err == nil {
			continue
		}
		if errors.Is(err, stack.ErrQueueFull) {
			return i - from
		}
		// Refused by the QP (its state, its attributes): an error
		// completion.
		q.refuse()
		q.sendCQ.ring.pushNow(&stack.WC{ID: q.swrs[i].ID, Status: stack.WCLocQPOpErr, QPN: q.q.QPN()})
		i++
	}
	return i - from
}

// refuse counts a send request refused from the ring, before its
// completion: the client no longer counts it as outstanding.
func (q *qpObj) refuse() {
	q.refused++
	q.sq.SetRefused(q.refused)
}

// buildSend turns slot copy i of q into q.swrs[i]; it returns the status
// of a request it refuses.
func (ss *session) buildSend(q *qpObj, i int) stack.WCStatus {
	c := q.scopies[i]
	s := &q.sslot[i]
	s.Get(c)
	wr := &q.swrs[i]
	*wr = stack.SendWR{ID: s.ID, Flags: stack.SendFlags(s.Flags & 0xf), Imm: s.Imm, InvRKey: s.Imm,
		Remote: stack.RemoteAddr{Addr: s.RemoteAddr, RKey: s.RKey}, CompareAdd: s.CompareAdd, Swap: s.Swap,
		RemoteQPN: s.RemoteQPN, RemoteQKey: s.RemoteQKey}
	if int(s.Opcode) >= len(wrOpcodes) || !wrOpcodes[s.Opcode].ok {
		return stack.WCLocQPOpErr
	}
	wr.Op = wrOpcodes[s.Opcode].op
	switch s.Opcode {
	case proto.WRLocalInv:
		wr.Flags &^= stack.SendInline
		return stack.WCSuccess
	case proto.WRBindMW:
		wr.Flags &^= stack.SendInline
		ss.bindWR(q, wr, s)
		return stack.WCSuccess
	}
	if s.Opcode == proto.WRFlush {
		if s.CompareAdd > 1<<32-1 {
			return stack.WCLocQPOpErr
		}
		wr.FlushType, wr.FlushLevel, wr.FlushLen = stack.FlushType(s.FlushType), stack.FlushLevel(s.FlushLevel), uint32(s.CompareAdd)
		wr.CompareAdd = 0
	}
	// ATOMIC_WRITE's 8 bytes of inline data need no max_inline.
	inlineMax := q.maxInline
	if s.Opcode == proto.WRAtomicWrite {
		inlineMax = max(inlineMax, 8)
	}
	if s.Flags&proto.SendInline != 0 && s.Opcode != proto.WRRead && s.Opcode != proto.WRCompareSwap && s.Opcode != proto.WRFetchAdd && s.Opcode != proto.WRFlush {
		if int(s.InlineLen) > inlineMax || proto.SendSlotHeader+int(s.InlineLen) > len(c) {
			return stack.WCLocQPOpErr
		}
		wr.Inline = c[proto.SendSlotHeader : proto.SendSlotHeader+int(s.InlineLen)]
	} else {
		wr.Flags &^= stack.SendInline
		if int(s.NumSGE) > q.maxSendSGE {
			return stack.WCLocQPOpErr
		}
		sg := q.ssges[i][:s.NumSGE]
		for j := range sg {
			a, l, k := proto.GetSGE(c, proto.SendSlotHeader, j)
			sg[j] = stack.SGE{Addr: a, Length: l, LKey: k}
		}
		wr.SG = sg
	}
	if q.typ == stack.UD {
		ss.mu.RLock()
		ah, ok := ss.objs[s.AH].(*ahObj)
		ss.mu.RUnlock()
		if !ok || ah.pd != q.pd {
			return stack.WCLocQPOpErr
		}
		wr.AH = ah.ah
	}
	return stack.WCSuccess
}

// bindWR fills in the window and the region of a BIND_MW slot
// (proto.SendSlot) from the session's handles. A handle that names
// nothing of the session leaves the window or the region nil: the stack
// completes the request with WCMWBindErr.
func (ss *session) bindWR(q *qpObj, wr *stack.SendWR, s *proto.SendSlot) {
	b := &wr.BindMW
	*b = stack.MWBindWR{RKey: s.RKey, MWBind: stack.MWBind{Addr: s.RemoteAddr, Length: s.CompareAdd,
		Access: stack.Access(s.RemoteQKey)}}
	wr.Remote, wr.CompareAdd, wr.RemoteQPN, wr.RemoteQKey = stack.RemoteAddr{}, 0, 0, 0
	ss.mu.RLock()
	if w, ok := ss.objs[s.AH].(*mwObj); ok {
		b.MW = w.mw
	}
	if m, ok := ss.objs[s.RemoteQPN].(*mrObj); ok {
		b.MR = m.mr
	}
	ss.mu.RUnlock()
}

// drainRecv takes the receive ring's new requests and posts them, as
// drainSend does.
func (ss *session) drainRecv(q *qpObj) bool {
	if q.rn > 0 {
		done := ss.postRecvs(q, q.rb, q.rb+q.rn)
		q.rb += done
		q.rn -= done
		q.rq.SetPosted(q.rqCons - uint32(q.rn))
		return done > 0
	}
	prod := q.rq.Producer()
	n := prod - q.rqCons
	if n == 0 {
		return false
	}
	if n > q.rq.Len() {
		ss.lies("receive")
		return false
	}
	k := int(min(n, uint32(len(q.rwrs))))
	for i := 0; i < k; i++ {
		c := q.rcopies[i]
		copy(c, q.rq.Slot(q.rqCons+uint32(i)))
		var s proto.RecvSlot
		s.Get(c)
		q.rwrs[i] = stack.RecvWR{ID: s.ID}
		if int(s.NumSGE) > q.maxRecvSGE {
			q.rst[i] = stack.WCLocQPOpErr
			continue
		}
		q.rst[i] = stack.WCSuccess
		sg := q.rsges[i][:s.NumSGE]
		for j := range sg {
			a, l, kk := proto.GetSGE(c, proto.RecvSlotHeader, j)
			sg[j] = stack.SGE{Addr: a, Length: l, LKey: kk}
		}
		q.rwrs[i].SG = sg
	}
	q.rqCons += uint32(k)
	q.rq.SetConsumer(q.rqCons)
	done := ss.postRecvs(q, 0, k)
	q.rb, q.rn = done, k-done
	q.rq.SetPosted(q.rqCons - uint32(q.rn))
	return true
}

// postRecvs posts q.rwrs[from:to], as postSends does sends.
func (ss *session) postRecvs(q *qpObj, from, to int) int {
	i := from
	for i < to {
		if q.rst[i] != stack.WCSuccess {
			q.recvCQ.ring.pushNow(&stack.WC{ID: q.rwrs[i].ID, Status: q.rst[i], Opcode: stack.WCRecv, QPN: q.q.QPN()})
			i++
			continue
		}
		j := i
		for j < to && q.rst[j] == stack.WCSuccess {
			j++
		}
		m, err := q.q.PostRecvBatch(q.rwrs[i:j])
		i += m
		if err == nil {
			continue
		}
		if errors.Is(err, stack.ErrQueueFull) {
			return i - from
		}
		q.recvCQ.ring.pushNow(&stack.WC{ID: q.rwrs[i].ID, Status: stack.WCLocQPOpErr, Opcode: stack.WCRecv, QPN: q.q.QPN()})
		i++
	}
	return i - from
}

// drainSRQ takes the SRQ ring's new receives and posts them, as
// drainSend does (a malformed one is dropped: an SRQ has no CQ).
func (ss *session) drainSRQ(o *srqObj) bool {
	if o.n == 0 {
		prod := o.ring.Producer()
		n := prod - o.cons
		if n == 0 {
			return false
		}
		if n > o.ring.Len() {
			ss.lies("srq")
			return false
		}
		k := int(min(n, uint32(len(o.wrs))))
		m := 0
		for i := 0; i < k; i++ {
			c := o.copies[m]
			copy(c, o.ring.Slot(o.cons+uint32(i)))
			var s proto.RecvSlot
			s.Get(c)
			if int(s.NumSGE) > o.maxSGE {
				continue
			}
			sg := o.sges[m][:s.NumSGE]
			for j := range sg {
				a, l, kk := proto.GetSGE(c, proto.RecvSlotHeader, j)
				sg[j] = stack.SGE{Addr: a, Length: l, LKey: kk}
			}
			o.wrs[m] = stack.RecvWR{ID: s.ID, SG: sg}
			m++
		}
		o.cons += uint32(k)
		o.ring.SetConsumer(o.cons)
		o.b, o.n = 0, m
	}
	posted := 0
	for o.n > 0 {
		if err := o.srq.PostRecv(&o.wrs[o.b]); err != nil && errors.Is(err, stack.ErrQueueFull) {
			break
		}
		o.b++
		o.n--
		posted++
	}
	if o.n == 0 {
		o.ring.SetPosted(o.cons)
	}
	return posted > 0
}
