package qp

import (
	"errors"
	"fmt"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/dcqcn"
)

// QP is a queue pair: its send queue with the requester and completer,
// its receive queue (or SRQ) with the responder, and the state machine.
// It is not safe for concurrent use; see the package documentation.
type QP struct {
	caps  Caps
	typ   Type
	qpn   uint32
	mem   Memory
	out   Output
	sink  CompletionSink
	ctr   *Counters
	stash Stash
	local LocalOps
	state State
	attr  Attr
	mtu   int      // path MTU in bytes (UD: the port MTU)
	pkey  uint16   // P_Key sent in every BTH and required on receive
	path  bth.L2L3 // RC/UC path with the UDP source port resolved
	hdr   bth.Headers
	ipid  uint16
	np    dcqcn.NP // congestion notification (congestion.go) ...
	cc    ccState  // ... and reaction
	wc    WC
	// scratch gathers a packet's payload spanning several SGEs. It is
	// allocated on first use.
	scratch []byte

	// Send queue, requester and completer (requester.go, completer.go).
	sq       sendQueue
	nextPSN  bth.PSN // first PSN of the next request to start
	compPSN  bth.PSN // oldest PSN not yet acknowledged
	sentHigh bth.PSN // one past the highest PSN ever transmitted
	curIdx   uint64  // transmit cursor: WQE counter ...
	curPkt   uint32  // ... and packet (PSN offset) within it
	rdOut    int     // READ/atomic requests holding a max_rd_atomic credit (rd.held)
	readWin  uint64  // the READ window (Caps.ReadWindow), 0: none
	rd       rdState // READs and atomics whose responses were lost (completer.go)
	cred     credits // the responder's end-to-end credits (credit.go)
	win      window  // the send window and the A bit's spacing (requester.go)
	forceAck bool    // the next packet asks for an ACK (loss probe)
	ackTimer timer   // the local ACK timeout
	rnr      rnrWait
	rec      recovery    // retry counters and the go-back under way
	gentle   gentleState // the gentle go-back after a NAK
	rtt      rttState    // round-trip time (completer.go)
	probe    probeState  // the tail-loss probe (completer.go)

	// Receive queue and responder (responder.go, ud.go).
	rq   recvQueue
	srq  *SRQ
	ePSN bth.PSN
	resp responder
}

// New creates a QP in the RESET state. The work queues are allocated
// here with the sizes of caps; nothing is allocated per packet later.
func New(caps Caps, env Env) (*QP, error) {
	switch caps.Type {
	case RC, UC, UD:
	default:
		return nil, fmt.Errorf("create qp: type %d: %w", caps.Type, ErrInvalidAttr)
	}
	if env.Mem == nil || env.Out == nil || env.Sink == nil {
		return nil, errors.New("create qp: env needs Mem, Out and Sink")
	}
	// QPN 0 (SMI) does not exist on RoCE; QPN 1 (GSI) is a UD QP.
	if caps.QPN > bth.PSNMask || caps.QPN == 0 || (caps.QPN == 1 && caps.Type != UD) {
		return nil, fmt.Errorf("create qp: qpn %#x: %w", caps.QPN, ErrInvalidAttr)
	}
	const maxWR, maxSGE, maxInline = 1 << 16, 64, 4096
	if caps.MaxSendWR < 0 || caps.MaxSendWR > maxWR || caps.MaxRecvWR < 0 || caps.MaxRecvWR > maxWR {
		return nil, fmt.Errorf("create qp: max_send_wr %d, max_recv_wr %d (limit %d): %w",
			caps.MaxSendWR, caps.MaxRecvWR, maxWR, ErrInvalidAttr)
	}
	if caps.MaxSendSGE < 0 || caps.MaxSendSGE > maxSGE || caps.MaxRecvSGE < 0 || caps.MaxRecvSGE > maxSGE {
		return nil, fmt.Errorf("create qp: max sge %d/%d (limit %d): %w",
			caps.MaxSendSGE, caps.MaxRecvSGE, maxSGE, ErrInvalidAttr)
	}
	if caps.MaxInline < 0 || caps.MaxInline > maxInline {
		return nil, fmt.Errorf("create qp: max_inline_data %d (limit %d): %w", caps.MaxInline, maxInline, ErrInvalidAttr)
	}
	if caps.PortMTU == 0 {
		caps.PortMTU = MTU4096
	}
	if caps.PortMTU.Bytes() == 0 {
		return nil, fmt.Errorf("create qp: port mtu %d: %w", caps.PortMTU, ErrInvalidAttr)
	}
	if caps.MaxSendSGE == 0 {
		caps.MaxSendSGE = 1
	}
	if caps.MaxRecvSGE == 0 {
		caps.MaxRecvSGE = 1
	}
	if caps.PKey == 0 {
		caps.PKey = 0xffff
	}
	if caps.LineRate == 0 {
		caps.LineRate = DefaultLineRate
	}
	if caps.DCQCN != nil {
		if err := caps.DCQCN.ValidateFor(caps.LineRate); err != nil {
			return nil, fmt.Errorf("create qp: dcqcn: %w", err)
		}
	}
	q := &QP{caps: caps, typ: caps.Type, qpn: caps.QPN, mem: env.Mem, out: env.Out, sink: env.Sink,
		ctr: env.Counters, pkey: caps.PKey, srq: caps.SRQ, stash: env.Stash, local: env.Local, cc: ccState{on: caps.DCQCN != nil}}
	gap := caps.CNP.MinInterval
	if gap == 0 {
		gap = DefaultCNPInterval
	}
	q.np.InitInterval(gap)
	if q.ctr == nil {
		q.ctr = new(Counters)
	}
	q.sq.init(max(caps.MaxSendWR, 1), caps.MaxSendSGE, caps.MaxInline)
	q.win.size, q.win.most = windowOf(caps.SendWindow)
	q.win.least = q.win.size
	switch {
	case caps.ReadWindow == 0:
		q.readWin = DefaultReadWindow
	case caps.ReadWindow > 0:
		q.readWin = uint64(caps.ReadWindow)
	}
	if q.typ == UD {
		q.sq.avs = make([]udDest, len(q.sq.slots))
	}
	rsge := caps.MaxRecvSGE
	if q.srq != nil {
		rsge = q.srq.q.maxSGE
	} else {
		q.rq.init(max(caps.MaxRecvWR, 1), caps.MaxRecvSGE)
	}
	q.resp.rsg = make([]SGE, rsge)
	if q.typ == UD {
		q.mtu = caps.PortMTU.Bytes()
	}
	return q, nil
}

// QPN returns the QP number.
func (q *QP) QPN() uint32 { return q.qpn }

// Type returns the transport service.
func (q *QP) Type() Type { return q.typ }

// State returns the current state.
func (q *QP) State() State { return q.state }

// DestQPN returns the number of the QP it is connected to (RC and UC,
// once set).
func (q *QP) DestQPN() uint32 { return q.attr.DestQPN }

// Counters returns the counters the QP increments.
func (q *QP) Counters() *Counters { return q.ctr }

// SendRetired returns how many send work requests the QP has retired
// since it was created: completed (signaled or not), flushed, or dropped
// by a reset. It only grows, and a request counts before its completion
// reaches the sink, so a consumer that sees the completion may post
// again into the room it left (what ibv_post_send's ENOMEM is about).
//
// A type 1 bind (LocalBind.Type1) is not counted: it comes from
// ibv_bind_mw, not from the work requests a client posts.
func (q *QP) SendRetired() uint64 { return q.sq.base + q.sq.head - q.sq.skipped }

// Release returns the buffers the QP holds to Env.Stash. Call it before
// dropping a QP that was not moved to RESET or ERR (which release them).
func (q *QP) Release() { q.stashClear() }

// reset returns the QP to RESET: queues emptied without completions,
// attributes and transport state cleared.
func (q *QP) reset() {
	q.state = StateReset
	q.attr = Attr{}
	if q.typ != UD {
		q.mtu = 0
	}
	q.path = bth.L2L3{}
	q.sq.clear()
	q.rq.clear()
	q.nextPSN, q.compPSN, q.sentHigh = 0, 0, 0
	q.curIdx, q.curPkt, q.rdOut = 0, 0, 0
	q.rd = rdState{}
	q.cred = credits{}
	q.win.reset()
	q.forceAck = false
	q.ackTimer.stop()
	q.rnr, q.rec, q.gentle, q.rtt, q.probe = rnrWait{}, recovery{}, gentleState{}, rttState{}, probeState{}
	q.cc = ccState{on: q.cc.on}
	q.ePSN = 0
	q.resetResponder()
}

// enterErr moves the QP to ERR: every outstanding send and receive work
// request completes, in order, with its own error status when it failed
// or WCWRFlushErr otherwise. Responses still queued are dropped, except
// after a responder error (keepResp), when the responses owed for the
// requests before the failed one and its NAK still go out.
func (q *QP) enterErr(keepResp bool) {
	q.state = StateErr
	q.attr.State = StateErr
	q.ackTimer.stop()
	q.rnr.stop()
	q.stopProbe()
	q.stashClear()
	q.flushSend()
	q.flushRecv()
	if !keepResp {
		q.resp.dropAll()
	}
}

// enterSQE moves a UC or UD QP to SQE after a send completion error:
// the send queue is flushed, the receive side keeps working.
func (q *QP) enterSQE() {
	q.state = StateSQE
	q.attr.State = StateSQE
	q.flushSend()
}

// flushSend completes every WQE in the send queue.
func (q *QP) flushSend() {
	sq := &q.sq
	for sq.head != sq.tail {
		w := sq.at(sq.head)
		sq.retiring(w)
		sq.head++ // retired before its completion is seen (SendRetired)
		st := WCWRFlushErr
		if w.done {
			st = w.status // its own error, or success not yet retired
		}
		q.sendWC(w, st, false)
	}
	sq.next, q.curIdx, q.curPkt = sq.tail, sq.tail, 0
	q.rdOut = 0
	q.rd.held, q.rd.asks, q.rd.bytes = sq.tail, 0, 0
	q.gentle.on = false
	q.compPSN = q.nextPSN
}

// flushRecv completes the receive in progress and every posted receive
// of the QP's own receive queue (an SRQ keeps its receives).
func (q *QP) flushRecv() {
	r := &q.resp
	if r.haveRecv {
		q.recvWC(WCWRFlushErr, WCRecv, 0, 0, 0, 0, 0)
	}
	r.rcur = curNone
	if q.srq != nil {
		return
	}
	for q.rq.head != q.rq.tail {
		w := &q.rq.slots[q.rq.head%uint64(len(q.rq.slots))]
		q.wc = WC{ID: w.id, Status: WCWRFlushErr, Opcode: WCRecv, QPN: q.qpn}
		q.rq.head++
		q.sink.Complete(&q.wc, true)
	}
}

// sendWC reports a send completion. Successful completions of
// unsignaled requests are suppressed unless force is set.
func (q *QP) sendWC(w *sendWQE, st WCStatus, force bool) {
	if st == WCSuccess && !force && !q.caps.SignalAll && w.wr.Flags&SendSignaled == 0 {
		return
	}
	q.wc = WC{ID: w.wr.ID, Status: st, Opcode: wcOpcode[w.wr.Opcode], ByteLen: w.length, QPN: q.qpn}
	q.sink.Complete(&q.wc, false)
}

var wcOpcode = [...]WCOpcode{
	WRSend: WCSend, WRSendWithImm: WCSend, WRSendWithInv: WCSend, WRWrite: WCRDMAWrite,
	WRWriteWithImm: WCRDMAWrite, WRRead: WCRDMARead, WRCompareSwap: WCCompSwap, WRFetchAdd: WCFetchAdd,
	WRFlush: WCFlush, WRAtomicWrite: WCAtomicWrite, WRBindMW: WCBindMW, WRLocalInv: WCLocalInv,
}

// recvWC completes the receive WQE in progress.
func (q *QP) recvWC(st WCStatus, op WCOpcode, n uint32, flags WCFlags, imm, inv, src uint32) {
	r := &q.resp
	if st != WCSuccess && st != WCWRFlushErr {
		q.ctr.RespCQEError++
	}
	q.wc = WC{ID: r.rwqe.id, Status: st, Opcode: op, Flags: flags, ByteLen: n, Imm: imm, InvRKey: inv,
		QPN: q.qpn, SrcQP: src}
	r.haveRecv = false
	q.sink.Complete(&q.wc, true)
}

// takeRecv makes sure a receive WQE is in progress, taking one from the
// SRQ or the receive queue. It reports false when none is posted.
func (q *QP) takeRecv() bool {
	r := &q.resp
	if r.haveRecv {
		return true
	}
	if q.srq != nil {
		r.haveRecv = q.srq.pop(&r.rwqe, r.rsg)
	} else {
		r.haveRecv = q.rq.pop(&r.rwqe, r.rsg)
	}
	return r.haveRecv
}

// PostRecv queues a receive work request (ibv_post_recv). It fails in
// RESET and on a QP attached to an SRQ; in ERR the request completes at
// once with WCWRFlushErr.
func (q *QP) PostRecv(wr *RecvWR) error {
	if q.state == StateReset {
		return fmt.Errorf("post recv: qp %#x in %s: %w", q.qpn, q.state, ErrInvalidState)
	}
	if q.srq != nil {
		return fmt.Errorf("post recv: qp %#x uses an srq: %w", q.qpn, ErrInvalidWR)
	}
	if q.caps.MaxRecvWR == 0 {
		return fmt.Errorf("post recv: qp %#x: max_recv_wr is 0: %w", q.qpn, ErrQueueFull)
	}
	if err := q.rq.post(wr); err != nil {
		return fmt.Errorf("post recv: qp %#x: %w", q.qpn, err)
	}
	if q.state == StateErr {
		q.flushRecv()
	}
	return nil
}

// Receive handles one packet addressed to this QP: p is parsed, its ICRC
// verified and its BTH DestQP equals QPN. Responses the responder owes
// are sent before Receive returns (or kept for Pump when the Output is
// full); requests the requester may now send wait for Pump. A packet of
// another transport than the QP's (a CNP is every QP's) is dropped, and
// Receive reports false (the stack counts it in rcv_unsupported); it
// reports true for every other packet.
func (q *QP) Receive(now Time, p *bth.Packet) bool {
	q.ctr.RcvdPkts++
	if p == nil || p.Info == nil || !p.Info.Valid || p.BTHOff+bth.BTHLen > len(p.Frame) {
		q.ctr.DroppedPkts++
		return true
	}
	op := p.Opcode()
	if op != bth.OpCNP && op.Transport() != q.typ.Transport() {
		q.ctr.DroppedPkts++
		return false
	}
	if op == bth.OpCNP {
		q.cnpReceived(now)
		return true
	}
	if q.state == StateReset || q.state == StateInit || q.state == StateErr {
		q.ctr.DroppedPkts++
		return true
	}
	if p.BTH().PKey()&0x7fff != q.pkey&0x7fff {
		q.ctr.DroppedPkts++
		return true
	}
	if p.ECN() == ecnCE {
		q.congested(now, p)
	}
	switch q.typ {
	case RC:
		if p.Info.Request {
			q.respondRC(now, p)
		} else {
			q.complete(now, p)
		}
	case UC:
		q.respondUC(p)
	case UD:
		q.receiveUD(p)
	}
	q.flushResp(now, q.caps.BatchAcks)
	return true
}

// SendResponses sends the responses the QP owes now, an ACK that
// Caps.BatchAcks holds back included (or keeps them for Pump when the
// Output is full or the pacer holds a READ response back).
func (q *QP) SendResponses(now Time) { q.flushResp(now, false) }

// Pump sends what the QP may send now: queued responses first, then
// requests as far as the send queue, max_rd_atomic, fences and an RNR
// wait allow. Packets the Output refused are retried here.
func (q *QP) Pump(now Time) {
	q.flushResp(now, false)
	if q.state != StateRTS && q.state != StateSQD {
		return
	}
	if q.rnr.armed {
		if now < q.rnr.due {
			return
		}
		q.rnr.stop()
	}
	if !q.paceReady(now) {
		return
	}
	if q.probe.want && !q.sendProbe(now) {
		return
	}
	for q.sendOne(now) && q.paceReady(now) {
	}
}

// Tick acts on expired timers: the local ACK timeout (go-back-N or retry
// exhaustion), the end of an RNR wait and the loss probe (sent by the
// next Pump).
func (q *QP) Tick(now Time) {
	if q.rnr.expired(now) {
		q.rnr.stop()
	}
	if q.ackTimer.expired(now) {
		q.ackTimeout(now)
	}
	if q.probe.expired(now) {
		q.probe.stop()
		q.probe.want = q.compPSN != q.sentHigh
	}
	q.ccTick(now)
}

// Deadline returns the earliest armed timer, false if none.
func (q *QP) Deadline() (Time, bool) {
	d, ok := earliest(q.ackTimer, q.rnr.timer, q.probe.timer)
	if c, k := q.ccDeadline(); k && (!ok || c < d) {
		d, ok = c, true
	}
	return d, ok
}

// Busy reports whether Pump would send something now (ignoring a full
// Output): queued responses, or requests the send queue may start or
// retransmit.
func (q *QP) Busy() bool {
	if q.resp.pending() {
		// A READ response the pacer holds waits for the Deadline.
		return !q.cc.hold.armed || q.resp.item(q.resp.ihead).kind != rkRead
	}
	if (q.state != StateRTS && q.state != StateSQD) || q.rnr.armed || q.cc.hold.armed {
		return false
	}
	if q.probe.want || q.rd.asks > 0 {
		return true
	}
	if q.gentle.on {
		if q.gentleWants() {
			return true
		}
		if q.gentle.peerKeeps <= 0 {
			return false
		}
	}
	if q.curIdx != q.sq.next {
		return !q.windowFull() && !q.creditHeld()
	}
	if q.state != StateRTS || q.sq.next == q.sq.tail {
		return false
	}
	return q.canStart(q.sq.at(q.sq.next))
}

// headers resets the reusable header block for a packet on this QP's
// connection (RC/UC) and returns it.
func (q *QP) headers(op bth.Opcode, psn bth.PSN, ack bool) *bth.Headers {
	h := &q.hdr
	*h = bth.Headers{L2L3: q.path}
	q.ipid++
	h.IPID = q.ipid
	h.BTH = bth.BTHFields{Opcode: op, PKey: q.pkey, DestQP: q.attr.DestQPN, AckReq: ack, PSN: psn}
	return h
}
