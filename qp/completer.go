package qp

import (
	"encoding/binary"
	"time"

	"github.com/uroce/uroce/bth"
)

// The completer consumes RC responses (ACK, NAK, RNR NAK, READ response,
// atomic ACK), retires acknowledged WQEs in order, and drives recovery:
// go-back-N on a PSN sequence NAK, an implied NAK or a local ACK
// timeout, the RNR wait, and the retry counters (IBTA 9.7.5.2).

// complete handles a response packet on an RC QP.
func (q *QP) complete(now Time, p *bth.Packet) {
	if q.state != StateRTS && q.state != StateSQD {
		q.ctr.DroppedPkts++
		return
	}
	psn := p.BTH().PSN()
	// Responses are for PSNs sent and not yet acknowledged; others are
	// late duplicates.
	if !psn.InWindow(q.compPSN, q.sentHigh.Sub(q.compPSN)) {
		q.ctr.DroppedPkts++
		return
	}
	kind := p.Info.Kind
	var syn bth.Syndrome
	if a := p.AETH(); a != nil {
		syn = a.Syndrome()
	}
	if kind == bth.KindAck && syn.Kind() == bth.AckKindReserved {
		q.ctr.DroppedPkts++
		return
	}
	// An ACK acknowledges its PSN; a NAK, a READ response or an atomic
	// ACK acknowledges every PSN before its own.
	through := psn.Add(-1)
	if kind == bth.KindAck && syn.Kind() == bth.AckKindACK {
		through = psn
	}
	sq := &q.sq
	progress := false
	implied := false // go back because responses were lost
	seqNAK := false  // go back because the responder asked to
	var retryFrom bth.PSN
	i := sq.head
	for ; i != sq.next; i++ {
		w := sq.at(i)
		if w.done {
			continue
		}
		if !w.last().LessEq(through) {
			break
		}
		if w.rdAtomic {
			// The responder went past a READ or atomic whose responses
			// did not all arrive: they were lost (implied NAK).
			implied, retryFrom = true, w.first.Add(int(w.rcvd))
			break
		}
		w.done = true
		q.compPSN = w.last().Next()
		progress = true
	}
	var w *sendWQE
	if i != sq.next && !implied {
		w = sq.at(i)
	}
	var failSt WCStatus
	rnr := false
	if w != nil {
		switch kind {
		case bth.KindAck:
			// Inside a multi-packet SEND/WRITE: progress up to the PSN.
			if !w.rdAtomic && w.first.LessEq(through) {
				q.compPSN = through.Next()
				progress = true
			}
			switch syn.Kind() {
			case bth.AckKindNAK:
				code := syn.Value()
				if code == bth.NAKPSNSequenceError {
					q.ctr.RcvdSeqErr++
					if !(q.rnrWait && psn == q.rnrPSN) {
						seqNAK, retryFrom = true, psn
					}
					break
				}
				failSt = nakStatus(code)
				switch code {
				case bth.NAKInvalidRequest:
					q.ctr.ReqRemoteInvalidReq++
				case bth.NAKRemoteAccessError:
					q.ctr.ReqRemoteAccessErrs++
				}
			case bth.AckKindRNR:
				q.ctr.RcvdRNRErr++
				rnr = true
			}
		case bth.KindReadResponse:
			failSt, progress, implied, retryFrom = q.readResponse(w, p, psn, progress)
		case bth.KindAtomicAck:
			if !w.rdAtomic || w.wr.Opcode == WRRead || psn != w.first {
				q.ctr.DroppedPkts++
				break
			}
			var b [8]byte
			binary.NativeEndian.PutUint64(b[:], p.AtomicAck().Orig())
			if !q.scatterSend(w, 0, b[:]) {
				failSt = WCLocProtErr
				break
			}
			w.done = true
			q.rdOut--
			q.compPSN = psn.Next()
			progress = true
		}
	}
	if progress {
		q.onProgress(now)
		// A retransmission under way need not resend what is now
		// acknowledged (and whose slots retire below).
		if q.curIdx != sq.next {
			if c := sq.at(q.curIdx); c.first.Add(int(q.curPkt)).Less(q.compPSN) {
				q.seek(q.compPSN)
			}
		}
	}
	q.retire()
	switch {
	case failSt != WCSuccess:
		q.failWQE(w, failSt)
	case rnr:
		q.rnrNAK(now, w, psn, syn.Value())
	case implied || seqNAK:
		if implied {
			q.ctr.ImpliedNakSeqErr++
		}
		// One go-back per loss: while a retransmission from an earlier
		// or equal PSN is under way and nothing new was acknowledged,
		// later NAKs and gaps are echoes of the same loss.
		if q.retrying && q.retryPSN.LessEq(retryFrom) {
			return
		}
		q.retry(retryFrom)
	}
}

// readResponse takes one READ response packet for WQE w.
func (q *QP) readResponse(w *sendWQE, p *bth.Packet, psn bth.PSN, progress bool) (WCStatus, bool, bool, bth.PSN) {
	if w.wr.Opcode != WRRead {
		q.ctr.DroppedPkts++
		return WCSuccess, progress, false, 0
	}
	exp := w.first.Add(int(w.rcvd))
	if psn != exp {
		if exp.Less(psn) {
			// A response packet is missing: implied NAK.
			return WCSuccess, progress, true, exp
		}
		return WCSuccess, progress, false, 0
	}
	// The PSN fixes the offset. After a re-request the responses restart
	// with FIRST (or ONLY), and late responses of the first request may
	// still arrive, so only "ends the READ or not" is checked: the packet
	// at the READ's last PSN is a LAST or ONLY carrying the remainder,
	// every other one a FIRST or MIDDLE carrying a full MTU.
	k := w.rcvd
	mtu := uint32(q.mtu)
	end := k == w.npkts-1
	pos := p.Info.Pos
	n := mtu
	if end {
		n = w.length - k*mtu
	}
	if end != (pos == bth.PosLast || pos == bth.PosOnly) || uint32(p.PayloadN) != n {
		return WCBadRespErr, progress, false, 0
	}
	if !q.scatterSend(w, k*mtu, p.Payload()) {
		return WCLocProtErr, progress, false, 0
	}
	w.rcvd++
	q.compPSN = psn.Next()
	if w.rcvd == w.npkts {
		w.done = true
		q.rdOut--
	}
	return WCSuccess, true, false, 0
}

// nakStatus maps a NAK code to the requester's completion status.
func nakStatus(code uint8) WCStatus {
	switch code {
	case bth.NAKInvalidRequest:
		return WCRemInvReqErr
	case bth.NAKRemoteAccessError:
		return WCRemAccessErr
	case bth.NAKRemoteOpError:
		return WCRemOpErr
	case bth.NAKInvalidRDRequest:
		return WCRemInvRDReqErr
	}
	return WCBadRespErr
}

// onProgress resets the retry counters and restarts the ACK timer after
// a response acknowledged something new.
func (q *QP) onProgress(now Time) {
	q.retryLeft, q.rnrLeft = q.attr.RetryCnt, q.attr.RNRRetry
	q.retrying = false
	if q.compPSN == q.sentHigh {
		q.ackArmed = false
	} else {
		q.armAck(now)
	}
}

// infiniteRetry reports whether retry_cnt never runs out.
func (q *QP) infiniteRetry() bool { return q.caps.InfiniteRetry7 && q.attr.RetryCnt == 7 }

// retry goes back to PSN from after a sequence NAK, an implied NAK or a
// timeout, charging the retry counter; when it is exhausted the oldest
// outstanding WQE completes with WCRetryExcErr.
func (q *QP) retry(from bth.PSN) {
	if q.retryLeft == 0 && !q.infiniteRetry() {
		q.ctr.RetryExceededErr++
		q.failWQE(q.oldest(), WCRetryExcErr)
		return
	}
	if !q.infiniteRetry() {
		q.retryLeft--
	}
	q.ctr.CompleterRetryErr++
	q.retrying, q.retryPSN = true, from
	q.goBack(from)
}

// rnrNAK handles an RNR NAK for PSN psn of WQE w: wait for the timer
// the responder named, then resend from psn.
func (q *QP) rnrNAK(now Time, w *sendWQE, psn bth.PSN, code uint8) {
	if q.rnrLeft == 0 {
		q.ctr.RNRNakRetryErr++
		q.failWQE(w, WCRNRRetryExcErr)
		return
	}
	if q.rnrLeft != 7 {
		q.rnrLeft--
	}
	q.goBack(psn)
	q.rnrWait = true
	q.rnrPSN = psn
	q.rnrUntil = now + time.Duration(bth.RNRTimerMicros[code&31])*time.Microsecond
}

// oldest returns the oldest WQE not yet done (the one holding compPSN).
func (q *QP) oldest() *sendWQE {
	sq := &q.sq
	for i := sq.head; i != sq.next; i++ {
		if w := sq.at(i); !w.done {
			return w
		}
	}
	return sq.at(sq.head)
}

// goBack moves the transmit cursor to PSN from (go-back-N): everything
// from there on is sent again.
func (q *QP) goBack(from bth.PSN) {
	q.ackArmed = false
	q.seek(from)
}

// seek moves the transmit cursor to PSN from.
func (q *QP) seek(from bth.PSN) {
	sq := &q.sq
	for i := sq.head; i != sq.next; i++ {
		w := sq.at(i)
		if w.done {
			continue
		}
		if from.InWindow(w.first, int(w.npkts)) {
			q.curIdx, q.curPkt = i, uint32(from.Sub(w.first))
			return
		}
	}
	q.curIdx, q.curPkt = sq.next, 0
}

// ackTimeout handles the expiry of the local ACK timer.
func (q *QP) ackTimeout(now Time) {
	q.ackArmed = false
	if q.compPSN == q.sentHigh {
		return
	}
	q.ctr.LocalAckTimeoutErr++
	q.retry(q.compPSN)
}
