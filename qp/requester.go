package qp

import (
	"fmt"
	"time"

	"github.com/uroce/uroce/bth"
)

// The requester turns send WQEs into request packets: it starts WQEs in
// order (assigning PSNs), segments messages by the path MTU and keeps a
// transmit cursor that go-back-N moves back (completer.go).

// maxAckEvery is how many packets of a long message may go without the
// A bit at most; a send window asks for ACKs more often.
const maxAckEvery = 64

// minPktCost is the least a packet costs in the send window: small
// packets cost a responder time too.
const minPktCost = 1024

// windowOf returns the send window for Caps.SendWindow and the largest
// it may grow to.
func windowOf(n int) (win, most int) {
	switch {
	case n == 0:
		return DefaultSendWindow, maxSendWindow
	case n < 0:
		return 0, 0
	}
	return n, n
}

// The default send window adapts: it grows by winGrowUnit for every
// window's worth acknowledged, up to maxSendWindow, and halves on every
// loss, down to DefaultSendWindow. Without loss it opens up (the link,
// not the window, sets the pace); with frequent loss it stays small, and
// so does what a loss holds up.
const (
	maxSendWindow = 256 << 10
	winGrowUnit   = 4 << 10
)

// window is the requester's send window over SEND and WRITE bytes
// (pktCost), and the spacing of the A bit it asks with.
type window struct {
	size      int    // bytes unacknowledged allowed, 0: unbounded ...
	least     int    // ... at least ...
	most      int    // ... and at most (adaptive when they differ)
	grow      int    // acknowledged cost toward the next growth
	ackedCost uint64 // compCost when last acknowledged
	nextCost  uint64 // send window cost of the requests started so far
	noAck     int    // packets sent since the last one with the A bit ...
	noAckCost int    // ... and their send window cost
}

// reset empties the window and returns it to its least size.
func (w *window) reset() { *w = window{size: w.least, least: w.least, most: w.most} }

// growWindow takes acked, the send window cost just acknowledged.
func (q *QP) growWindow(acked int) {
	if q.win.size >= q.win.most || acked <= 0 {
		return
	}
	q.win.grow += acked
	for q.win.grow >= q.win.size && q.win.size < q.win.most {
		q.win.grow -= q.win.size
		q.win.size = min(q.win.size+winGrowUnit, q.win.most)
	}
}

// shrinkWindow halves an adaptive send window after a loss.
func (q *QP) shrinkWindow() {
	if q.win.most > q.win.least {
		q.win.size = max(q.win.size/2, q.win.least)
		q.win.grow = 0
	}
}

// compCost returns the send window cost of the requests before compPSN.
func (q *QP) compCost() uint64 {
	if q.compPSN == q.nextPSN {
		return q.win.nextCost
	}
	o := q.oldest()
	return q.costAt(o, uint32(q.compPSN.Sub(o.first)))
}

// pktCost returns what packet k of SEND/WRITE w costs in the send
// window: its payload, at least minPktCost. READ and atomic requests
// cost nothing (max_rd_atomic bounds them).
func (q *QP) pktCost(w *sendWQE, k uint32) int {
	if w.rdAtomic {
		return 0
	}
	n := uint32(q.mtu)
	if k == w.npkts-1 {
		n = w.length - k*uint32(q.mtu)
	}
	return max(int(n), minPktCost)
}

// costAt returns the send window cost of the requests before packet k
// of w.
func (q *QP) costAt(w *sendWQE, k uint32) uint64 {
	if w.rdAtomic {
		return w.cost0
	}
	return w.cost0 + uint64(k)*uint64(max(q.mtu, minPktCost))
}

// inFlight returns the send window cost of the unacknowledged requests
// before packet k of w (or, with w nil, before the next request).
func (q *QP) inFlight(w *sendWQE, k uint32) int {
	end := q.win.nextCost
	if w != nil {
		end = q.costAt(w, k)
	}
	return int(end - q.compCost())
}

// windowFull reports whether the packet at the transmit cursor is a
// SEND or WRITE packet outside the send window: the unacknowledged
// requests before it fill the window.
func (q *QP) windowFull() bool {
	if q.win.size == 0 || q.typ != RC || q.curIdx == q.sq.next {
		return false
	}
	w := q.sq.at(q.curIdx)
	return !w.rdAtomic && q.inFlight(w, q.curPkt) >= q.win.size
}

var wrNames = [...]string{"SEND", "SEND_WITH_IMM", "SEND_WITH_INV", "RDMA_WRITE", "RDMA_WRITE_WITH_IMM",
	"RDMA_READ", "ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD", "FLUSH", "ATOMIC_WRITE", "BIND_MW", "LOCAL_INV"}

func (o WROpcode) String() string {
	if int(o) < len(wrNames) {
		return wrNames[o]
	}
	return "invalid"
}

// isRdAtomic reports whether a request is answered by a response of its
// own (a READ response or an atomic ACK) and holds a max_rd_atomic
// credit while it is outstanding: READ, the atomics, and FLUSH and
// ATOMIC_WRITE (answered by a zero-length READ response).
func isRdAtomic(o WROpcode) bool { return o >= WRRead && o <= WRAtomicWrite }

// isLocal reports whether a request is a local operation (LocalOps).
func isLocal(o WROpcode) bool { return o == WRBindMW || o == WRLocalInv }

// writesLocal reports whether a request's response is written into its
// local buffers (READ and the fetching atomics).
func writesLocal(o WROpcode) bool { return o >= WRRead && o <= WRFetchAdd }

// opAllowed reports whether a QP type supports a send operation.
func opAllowed(t Type, o WROpcode) bool {
	switch t {
	case RC:
		return o <= WRAtomicWrite || isLocal(o)
	case UC:
		return o == WRSend || o == WRSendWithImm || o == WRWrite || o == WRWriteWithImm || isLocal(o)
	case UD:
		return o == WRSend || o == WRSendWithImm
	}
	return false
}

// PostSend queues a send work request (ibv_post_send); Pump transmits
// it. It fails in RESET, INIT and RTR. In ERR and SQE the request
// completes at once with WCWRFlushErr. Errors found when the request is
// executed (keys, lengths) become completion statuses.
func (q *QP) PostSend(now Time, wr *SendWR) error {
	switch q.state {
	case StateReset, StateInit, StateRTR:
		return fmt.Errorf("post send: qp %#x in %s: %w", q.qpn, q.state, ErrInvalidState)
	}
	if !opAllowed(q.typ, wr.Opcode) {
		return fmt.Errorf("post send: qp %#x: %s on a %s qp: %w", q.qpn, wr.Opcode, q.typ, ErrInvalidWR)
	}
	if isLocal(wr.Opcode) && (q.local == nil || len(wr.SG) > 0) {
		return fmt.Errorf("post send: qp %#x: %s without local operations or with sges: %w", q.qpn, wr.Opcode, ErrInvalidWR)
	}
	if len(wr.SG) > q.sq.maxSGE {
		return fmt.Errorf("post send: qp %#x: %d sges, max %d: %w", q.qpn, len(wr.SG), q.sq.maxSGE, ErrTooManySGE)
	}
	if q.caps.MaxSendWR == 0 || q.sq.full() {
		return fmt.Errorf("post send: qp %#x: %w", q.qpn, ErrQueueFull)
	}
	inline := wr.Flags&SendInline != 0 && (!isRdAtomic(wr.Opcode) || wr.Opcode == WRAtomicWrite)
	var n uint64
	if inline && wr.Inline != nil {
		n = uint64(len(wr.Inline))
	} else {
		for _, sg := range wr.SG {
			n += uint64(sg.Length)
		}
	}
	if n > maxMessage {
		return fmt.Errorf("post send: qp %#x: length %d exceeds %d: %w", q.qpn, n, maxMessage, ErrInvalidWR)
	}
	if inline && n > uint64(q.sq.maxInline) && wr.Opcode != WRAtomicWrite {
		return fmt.Errorf("post send: qp %#x: inline length %d exceeds %d: %w", q.qpn, n, q.sq.maxInline, ErrInvalidWR)
	}
	if (wr.Opcode == WRCompareSwap || wr.Opcode == WRFetchAdd) && n != 8 {
		return fmt.Errorf("post send: qp %#x: atomic needs one 8-byte local buffer, got %d bytes: %w", q.qpn, n, ErrInvalidWR)
	}
	if wr.Opcode == WRAtomicWrite && n != 8 {
		return fmt.Errorf("post send: qp %#x: atomic write needs 8 bytes of data, got %d: %w", q.qpn, n, ErrInvalidWR)
	}
	if wr.Opcode == WRFlush && (n != 0 || wr.FlushType&^(FlushGlobal|FlushPersistent) != 0 || wr.FlushType == 0 || wr.FlushLevel > FlushMR) {
		return fmt.Errorf("post send: flush of type %d, level %d, with %d bytes of data: %w",
			wr.FlushType, wr.FlushLevel, n, ErrInvalidWR)
	}
	if q.typ == UD && wr.AH == nil {
		return fmt.Errorf("post send: qp %#x: ud request without an address handle: %w", q.qpn, ErrInvalidWR)
	}
	if q.typ == UD && wr.RemoteQPN > bth.PSNMask {
		return fmt.Errorf("post send: qp %#x: remote qpn %#x: %w", q.qpn, wr.RemoteQPN, ErrInvalidWR)
	}
	q.sq.push(wr, uint32(n), inline, q.mem)
	if q.state == StateErr || q.state == StateSQE {
		q.flushSend()
	}
	return nil
}

// pkts returns the PSNs a request consumes.
func (q *QP) pkts(w *sendWQE) uint32 {
	switch w.wr.Opcode {
	case WRCompareSwap, WRFetchAdd, WRFlush, WRAtomicWrite:
		return 1
	}
	if q.typ == UD || w.length == 0 {
		return 1
	}
	m := uint32(q.mtu)
	return (w.length + m - 1) / m
}

// canStart reports whether the next posted WQE may start now: the
// max_rd_atomic credits, a fence, the PSN window and the responder's
// end-to-end credits allow it.
func (q *QP) canStart(w *sendWQE) bool {
	if q.typ != RC {
		return true
	}
	if isLocal(w.wr.Opcode) {
		return w.wr.Flags&SendFence == 0 || q.rdOut == 0
	}
	if q.creditFor(q.sq.next, w, 0) == creditWait {
		return false
	}
	if isRdAtomic(w.wr.Opcode) {
		if q.attr.MaxRdAtomic > 0 && q.rdOut >= int(q.attr.MaxRdAtomic) {
			return false // max_rd_atomic
		}
		if q.readWin > 0 && q.rdOut > 0 && q.rd.bytes+rdBytes(w) > q.readWin {
			return false // the READ window
		}
	}
	if w.wr.Flags&SendFence != 0 && q.rdOut > 0 {
		return false
	}
	// Keep the unacknowledged PSNs well inside half the PSN space.
	if q.compPSN != q.nextPSN && q.nextPSN.Sub(q.compPSN)+int(q.pkts(w)) >= 1<<22 {
		return false
	}
	if q.win.size > 0 && !isRdAtomic(w.wr.Opcode) && q.inFlight(nil, 0) >= q.win.size {
		return false
	}
	return true
}

// start validates the next posted WQE and assigns its PSNs. A request
// that fails here completes with its error and moves the QP to ERR (RC)
// or SQE (UC, UD); start then returns false.
func (q *QP) start(w *sendWQE) bool {
	st := w.status
	w.rdAtomic = isRdAtomic(w.wr.Opcode)
	if st == WCSuccess {
		switch {
		case q.typ == UD && int(w.length) > q.mtu:
			st = WCLocLenErr
		case w.rdAtomic && q.attr.MaxRdAtomic == 0:
			st = WCLocQPOpErr
		case w.inline == nil:
			var need Access
			if writesLocal(w.wr.Opcode) {
				need = AccessLocalWrite
			}
			for _, sg := range w.wr.SG {
				if sg.Length == 0 {
					continue
				}
				if !q.mem.Check(sg.LKey, sg.Addr, sg.Length, need, false) {
					st = WCLocProtErr
					break
				}
			}
		}
	}
	w.first = q.nextPSN
	if isLocal(w.wr.Opcode) {
		// Carried out now, in its turn; no PSN, nothing to send.
		q.sq.next++
		if st == WCSuccess {
			st = q.local.Execute(&w.wr)
		}
		if st != WCSuccess {
			q.failWQE(w, st)
			return false
		}
		w.done = true
		return true
	}
	w.npkts = q.pkts(w)
	q.sq.next++
	if st != WCSuccess {
		q.failWQE(w, st)
		return false
	}
	q.nextPSN = q.nextPSN.Add(int(w.npkts))
	w.cost0 = q.win.nextCost
	if w.rdAtomic {
		q.rdOut++
		q.rd.bytes += rdBytes(w)
	} else if q.typ == RC {
		q.win.nextCost = q.costAt(w, w.npkts-1) + uint64(q.pktCost(w, w.npkts-1))
	}
	return true
}

// rdBytes is what READ or atomic w counts in the READ window: its
// responses' bytes.
func rdBytes(w *sendWQE) uint64 {
	if w.wr.Opcode == WRRead {
		return uint64(w.length)
	}
	return 8
}

// failWQE completes w with an error and takes the QP out of service:
// ERR for RC (everything else is flushed), SQE for UC and UD.
func (q *QP) failWQE(w *sendWQE, st WCStatus) {
	w.done, w.status = true, st
	if q.typ == RC {
		q.enterErr(false)
	} else {
		q.enterSQE()
	}
}

// sendOne sends one packet at the transmit cursor, starting the next WQE
// when the cursor reaches it. It reports whether a packet went out.
func (q *QP) sendOne(now Time) bool {
	sq := &q.sq
	if q.rd.asks > 0 {
		if sent, found := q.sendAsk(now); found {
			return sent
		}
	}
	if q.gentle.on {
		if q.gentleWants() {
			return q.sendGentle(now)
		}
		if q.gentle.peerKeeps <= 0 {
			return false
		}
		// A responder known to keep requests: new ones go on (the
		// cursor moved past the resent packets, sendGentle).
	}
	if q.curIdx == sq.next {
		if q.state != StateRTS || sq.next == sq.tail {
			return false
		}
		w := sq.at(sq.next)
		if !q.canStart(w) || !q.start(w) {
			return false
		}
		if w.done { // a local operation: carried out, and retired in its turn
			q.curIdx = sq.next
			q.curPkt = 0
			q.retire()
			return true
		}
	} else if q.windowFull() || q.creditHeld() {
		return false
	}
	return q.emit(now, sq.at(q.curIdx))
}

// dataOpcode returns the opcode of a SEND or WRITE packet of request
// o on transport t, from bth's opcode table.
func dataOpcode(t bth.Transport, o WROpcode, first, last bool) (bth.Opcode, bool) {
	kind := bth.KindWrite
	if o == WRSend || o == WRSendWithImm || o == WRSendWithInv {
		kind = bth.KindSend
	}
	pos := bth.PosMiddle
	switch {
	case first && last:
		pos = bth.PosOnly
	case first:
		pos = bth.PosFirst
	case last:
		pos = bth.PosLast
	}
	imm := last && (o == WRSendWithImm || o == WRWriteWithImm)
	inv := last && o == WRSendWithInv
	return bth.Lookup(t, kind, pos, imm, inv)
}

// emit sends the packet at the cursor of WQE w and moves the cursor on.
// It reports false when the Output is full (the cursor stays) or the
// request failed.
func (q *QP) emit(now Time, w *sendWQE) bool {
	sent, last := q.emitPkt(now, w, q.curIdx, q.curPkt)
	if !sent {
		return false
	}
	if last {
		q.curIdx++
		q.curPkt = 0
		if q.typ != RC {
			w.done = true
			q.retire()
		}
		// The cursor's request is the only one of w in flight now.
		w.ask.older = 0
		q.skipAnswered()
	} else {
		q.curPkt++
	}
	return true
}

// emitPkt sends packet k of WQE w, the one in queue counter idx. It
// reports whether the packet went out and whether it was the last of
// the request.
func (q *QP) emitPkt(now Time, w *sendWQE, idx uint64, k uint32) (sent, last bool) {
	mtu := uint32(q.mtu)
	if w.wr.Opcode == WRRead {
		// A READ asks for the responses it lacks: from the first
		// missing one, at its PSN, with the address moved on and the
		// length cut to match (a new READ asks for all of them).
		k = w.rcvd
	}
	psn := w.first.Add(int(k))
	var h *bth.Headers
	var payload []byte
	last = true
	switch w.wr.Opcode {
	case WRRead:
		off := k * mtu
		h = q.headers(bth.OpReadRequest, psn, true)
		h.VA, h.RKey, h.DMALen = w.wr.RemoteAddr+uint64(off), w.wr.RKey, w.length-off
		if w.kept > 0 {
			// The gap before the responses kept (keepPast), and the
			// first of them again: its copy shows the answer passed
			// the gap, so a gap lost again shows too.
			h.DMALen = min((w.keptFrom+1)*mtu, w.length) - off
		}
	case WRCompareSwap:
		h = q.headers(bth.OpCompareSwap, psn, true)
		h.AtomicVA, h.AtomicRKey, h.SwapAdd, h.Compare = w.wr.RemoteAddr, w.wr.RKey, w.wr.Swap, w.wr.CompareAdd
	case WRFetchAdd:
		h = q.headers(bth.OpFetchAdd, psn, true)
		h.AtomicVA, h.AtomicRKey, h.SwapAdd = w.wr.RemoteAddr, w.wr.RKey, w.wr.CompareAdd
	case WRFlush:
		// No payload (IBA oA19-2); the RETH names the range, its length
		// zero for a whole-region FLUSH unless one was given.
		h = q.headers(bth.OpFlush, psn, true)
		h.FETH = bth.FETHValue(uint8(w.wr.FlushType), uint8(w.wr.FlushLevel))
		h.VA, h.RKey, h.DMALen = w.wr.RemoteAddr, w.wr.RKey, w.wr.FlushLen
	case WRAtomicWrite:
		h = q.headers(bth.OpAtomicWrite, psn, true)
		h.VA, h.RKey, h.DMALen = w.wr.RemoteAddr, w.wr.RKey, 8
		var ok bool
		if payload, ok = q.gather(w, 0, 8); !ok {
			q.failWQE(w, WCLocProtErr)
			return false, last
		}
	default:
		off := k * mtu
		n := min(mtu, w.length-off)
		first := k == 0
		last = k+1 >= w.npkts
		op, ok := dataOpcode(q.typ.Transport(), w.wr.Opcode, first, last)
		if !ok {
			// PostSend refused what the QP type does not support.
			q.failWQE(w, WCLocQPOpErr)
			return false, last
		}
		ack := false
		if q.typ == RC {
			// The A bit goes on last packets, on the packet that fills
			// the send window and every quarter window (so that ACKs
			// open the window while it is still partly full, and a
			// loss shows within a quarter window), and at least every
			// maxAckEvery packets.
			c := q.pktCost(w, k)
			// A paced QP asks on every packet: its packets are spread
			// out, and ACKs few and far between would make the loss
			// probe resend what is only waiting for the pacer.
			// A credit probe asks, so that its answer brings credits.
			ack = last || q.forceAck || q.win.noAck+1 >= maxAckEvery || (q.gentle.on && psn == q.rec.psn) || q.cc.limited() ||
				(q.win.size > 0 && (q.inFlight(w, k)+c >= q.win.size || q.win.noAckCost+c >= q.win.size/4)) ||
				q.creditFor(idx, w, k) == creditProbe
		}
		h = q.headers(op, psn, ack)
		if q.typ == UD {
			q.sq.av(idx).fill(&h.L2L3)
			h.IPID = q.ipid
			if h.SrcPort == 0 {
				h.SrcPort = bth.UDSourcePort(q.qpn)
			}
			h.BTH.DestQP = w.wr.RemoteQPN
			h.QKey = w.wr.RemoteQKey
			if h.QKey&0x80000000 != 0 {
				h.QKey = q.attr.QKey // the high bit selects the QP's own Q_Key
			}
			h.SrcQP = q.qpn
		}
		if first && (w.wr.Opcode == WRWrite || w.wr.Opcode == WRWriteWithImm) {
			h.VA, h.RKey, h.DMALen = w.wr.RemoteAddr, w.wr.RKey, w.length
		}
		if last {
			h.Imm = w.wr.Imm
			h.InvKey = w.wr.InvRKey
			h.BTH.SE = w.wr.Flags&SendSolicited != 0 && w.wr.Opcode != WRWrite
		}
		if payload, ok = q.gather(w, off, n); !ok {
			q.failWQE(w, WCLocProtErr)
			return false, last
		}
	}
	if !q.out.Send(h, payload) {
		return false, last
	}
	q.ctr.SentPkts++
	q.paced(now, len(payload)+wireOverhead)
	if q.typ == RC {
		q.forceAck = false
		if h.BTH.AckReq {
			q.win.noAck, q.win.noAckCost = 0, 0
		} else {
			q.win.noAck++
			q.win.noAckCost += q.pktCost(w, k)
		}
		end := psn.Next()
		if w.wr.Opcode == WRRead {
			end = w.first.Add(int(w.npkts))
		}
		if psn.Less(q.sentHigh) {
			q.ctr.RetransmittedPkts++
		} else if w.wr.Opcode == WRRead {
			q.rd.pace.start(now, w)
		} else if h.BTH.AckReq && !q.rtt.on && !w.rdAtomic {
			// Time a new packet's acknowledgement (never a resent
			// one's: its ACK may answer the first copy).
			q.rtt.on, q.rtt.psn, q.rtt.at = true, psn, now
		}
		if q.sentHigh.Less(end) {
			q.sentHigh = end
		}
		if w.rdAtomic {
			q.asked(w)
		}
		if !q.ackTimer.armed {
			q.armAck(now)
		}
		if !q.probe.armed && !q.probe.want {
			q.armProbe(now)
		}
	}
	return true, last
}

// ackTimeoutDur returns the local ACK timeout: 4.096 µs × 2^t.
func ackTimeoutDur(t uint8) time.Duration { return time.Duration(4096) << t }

// armAck starts the local ACK timer (unless the timeout is infinite).
func (q *QP) armAck(now Time) {
	if q.attr.Timeout == 0 {
		return
	}
	q.ackTimer.arm(now + ackTimeoutDur(q.attr.Timeout))
}

// gather returns n payload bytes of w from byte off: a view of the
// registered memory when one SGE holds them, else a copy in scratch.
func (q *QP) gather(w *sendWQE, off, n uint32) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	if w.inline != nil {
		return w.inline[off : off+n], true
	}
	walk := walkFrom(w.wr.SG, off)
	part, ok := walk.next(n)
	if !ok {
		return nil, false
	}
	if part.Length == n {
		return q.mem.Local(part.LKey, part.Addr, n, 0)
	}
	// Spanning SGEs: a copy.
	if uint32(len(q.scratch)) < n {
		q.scratch = make([]byte, max(n, 4096))
	}
	buf := q.scratch[:n]
	done := uint32(0)
	for {
		b, ok := q.mem.Local(part.LKey, part.Addr, part.Length, 0)
		if !ok {
			return nil, false
		}
		done += uint32(copy(buf[done:], b))
		if done == n {
			return buf, true
		}
		if part, ok = walk.next(n - done); !ok {
			return nil, false
		}
	}
}

// scatterSend writes data into w's local buffers at byte off (READ
// responses, atomic results).
func (q *QP) scatterSend(w *sendWQE, off uint32, data []byte) bool {
	return scatter(q.mem, w.wr.SG, off, data, AccessLocalWrite)
}

// retire completes, in order, the WQEs at the head that are done.
// Failed WQEs are completed by the flush that follows their failure.
func (q *QP) retire() {
	sq := &q.sq
	for sq.head != sq.next {
		w := sq.at(sq.head)
		if !w.done || w.status != WCSuccess {
			return
		}
		sq.retiring(w)
		sq.head++
		q.sendWC(w, WCSuccess, false)
	}
}
