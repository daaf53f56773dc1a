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
			// Inside a multi-packet SEND/WRITE: progress up to the PSN
			// (none when it acknowledges nothing new, as a second NAK
			// for the same PSN does).
			if !w.rdAtomic && w.first.LessEq(through) && q.compPSN.LessEq(through) {
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
		if q.gentle {
			q.endGentle()
		}
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
	case implied:
		q.ctr.ImpliedNakSeqErr++
		// One go-back per lost READ response: while a retransmission
		// from an earlier or equal PSN is under way and nothing new was
		// acknowledged, later gaps are the rest of the first response
		// stream arriving.
		if q.retrying && q.retryPSN.LessEq(retryFrom) {
			return
		}
		q.retry(retryFrom)
	case seqNAK:
		// A responder NAKs an expected PSN once, and again only when
		// the requests it receives show that the requester went back
		// and the retransmission was lost too (respondRC): a sequence
		// NAK is a loss to recover from. Except a copy of the NAK that
		// started this go-back: arriving sooner after it than any
		// round trip could bring an answer to the retransmission, it
		// is that NAK again (repeated by a responder, or duplicated on the way).
		if q.retrying && retryFrom == q.retryPSN && now-q.retryAt <= q.minRTT/2 {
			return
		}
		plain := q.gentleNAK(retryFrom)
		q.retry(retryFrom)
		q.retryAt = now
		if !plain && (q.state == StateRTS || q.state == StateSQD) {
			q.startGentle()
		}
	}
}

// Gentle go-back. A responder that keeps the requests following a gap
// (as this package's does with Env.Stash) needs only the missing one.
// So after a sequence NAK the requester resends the NAKed packet alone,
// with the A bit, then its highest-PSN packet again with the A bit (the
// probe), and waits. Such a responder executes what it kept once the
// missing packet arrives and answers the probe, a duplicate now, with an
// ACK that covers everything: nothing more is sent again. A responder
// that drops what follows a gap (rdma_rxe does) acknowledges the resent
// packet and NAKs the next PSN for the probe; the requester goes back to
// that PSN, as go-back-N would have, one round trip later. After
// gentleMisses such answers in a row the requester takes the responder
// for one that drops, and sends everything again at once, trying the
// gentle way every gentleRetest go-backs in case it was short of
// buffers, or two losses in a row looked alike.

const (
	gentleRetest = 32
	gentleMisses = 3
)

func (q *QP) startGentle() {
	if q.peerKeeps < 0 {
		if q.gentleOff++; q.gentleOff < gentleRetest {
			return
		}
		q.gentleOff = 0
	}
	q.gentle, q.gentleSent, q.gentleProbe = true, 0, false
	if !q.gentleWants() {
		q.gentle = false // nothing to resend at the NAKed PSN
	}
}

// endGentle ends a gentle go-back on progress, unless the progress is
// the resent packet alone and the probe's answer is still to come. An
// ACK beyond the resent packet shows a responder that keeps requests.
func (q *QP) endGentle() {
	switch d := q.compPSN.Sub(q.retryPSN); {
	case d > 1:
		q.peerKeeps, q.gentleMiss = 1, 0
	case d == 1 && q.gentleProbe:
		return
	}
	q.gentle = false
}

// gentleNAK takes note of a sequence NAK for from during a gentle
// go-back. A NAK of the PSN after the resent packet, for the probe, is
// what a responder that drops requests past a gap answers (or one that
// keeps them, when that PSN was lost too): it reports true when the
// requester should then go back plainly, unless the responder is known
// to keep requests.
func (q *QP) gentleNAK(from bth.PSN) bool {
	if !q.gentle || !q.gentleProbe || from != q.retryPSN.Next() {
		return false
	}
	if q.gentleMiss++; q.gentleMiss >= gentleMisses {
		q.peerKeeps, q.gentleMiss, q.gentleOff = -1, 0, 0
	}
	return q.peerKeeps <= 0
}

// sendGentle sends the packets of a gentle go-back: the NAKed packet,
// then the probe. The transmit cursor stays on the NAKed packet: an ACK
// moves it on. A READ or atomic request goes alone (its responses move
// the requester on).
func (q *QP) sendGentle(now Time) bool {
	if !q.gentleWants() {
		return false
	}
	if q.gentleSent == 0 {
		w := q.sq.at(q.curIdx)
		if sent, _ := q.emitPkt(now, w, q.curIdx, q.curPkt); !sent {
			return false
		}
		q.gentleSent = 1
		if _, _, ok := q.probeTarget(); !ok || w.rdAtomic {
			q.gentleOn()
		}
		return true
	}
	idx, k, _ := q.probeTarget()
	if !q.emitAcked(now, idx, k) {
		return false
	}
	q.gentleSent, q.gentleProbe = 2, true
	q.gentleOn()
	return true
}

// gentleOn lets new requests go on after the packets of a gentle
// go-back when the responder is known to keep requests past a gap: they
// are not lost behind it (and the send window does not shrink for the
// loss either), so the cursor moves to the first PSN never sent.
func (q *QP) gentleOn() {
	if q.peerKeeps > 0 {
		q.seek(q.sentHigh)
	}
}

// gentleWants reports whether a gentle go-back has a packet to send.
func (q *QP) gentleWants() bool {
	if q.curIdx == q.sq.next {
		return false
	}
	w := q.sq.at(q.curIdx)
	if w.first.Add(int(q.curPkt)) != q.retryPSN {
		return false
	}
	switch q.gentleSent {
	case 0:
		return true
	case 1:
		if w.rdAtomic {
			return false
		}
		_, _, ok := q.probeTarget()
		return ok
	}
	return false
}

// probeTarget returns the gentle go-back's probe: the last packet sent
// (lastSent), unless that is the NAKed packet.
func (q *QP) probeTarget() (uint64, uint32, bool) {
	if q.sentHigh.Add(-1) == q.retryPSN {
		return 0, 0, false
	}
	return q.lastSent()
}

// lastSent returns the WQE and packet of the highest PSN sent, unless it
// is acknowledged or part of a READ or atomic (a responder executes a
// duplicate READ again): what probes send again.
func (q *QP) lastSent() (uint64, uint32, bool) {
	psn := q.sentHigh.Add(-1)
	sq := &q.sq
	for i := sq.head; i != sq.next; i++ {
		w := sq.at(i)
		if w.done || !psn.InWindow(w.first, int(w.npkts)) {
			continue
		}
		if w.rdAtomic {
			return 0, 0, false
		}
		return i, uint32(psn.Sub(w.first)), true
	}
	return 0, 0, false
}

// readStalled reports whether the highest PSN sent belongs to a READ and
// no atomic is unacknowledged: a probe then requests again.
func (q *QP) readStalled() bool {
	psn := q.sentHigh.Add(-1)
	last := false
	sq := &q.sq
	for i := sq.head; i != sq.next; i++ {
		w := sq.at(i)
		if w.done {
			continue
		}
		if w.rdAtomic && w.wr.Opcode != WRRead {
			return false
		}
		last = w.wr.Opcode == WRRead && psn.InWindow(w.first, int(w.npkts))
	}
	return last
}

// emitAcked sends packet k of WQE idx again with the A bit.
func (q *QP) emitAcked(now Time, idx uint64, k uint32) bool {
	q.forceAck = true
	sent, _ := q.emitPkt(now, q.sq.at(idx), idx, k)
	q.forceAck = false
	return sent
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

// onProgress resets the retry counters and restarts the ACK timer and
// the loss probe after a response acknowledged something new.
func (q *QP) onProgress(now Time) {
	q.retryLeft, q.rnrLeft = q.attr.RetryCnt, q.attr.RNRRetry
	q.retrying = false
	c := q.compCost()
	q.growWindow(int(c - q.ackedCost))
	q.ackedCost = c
	if q.rttOn && q.rttPSN.Less(q.compPSN) {
		q.rttOn = false
		q.rttSample(now - q.rttAt)
	}
	q.probeShift = 0
	q.stopProbe()
	if q.compPSN == q.sentHigh {
		q.ackArmed = false
	} else {
		q.armAck(now)
		q.armProbe(now)
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
	q.shrinkWindow()
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
	// The responder received the request at psn: whatever was lost
	// before has been recovered, so the transport retry count starts
	// afresh (rnr_retry bounds the RNR NAKs).
	q.retryLeft = q.attr.RetryCnt
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
	q.gentle = false
	q.rttOn = false
	q.stopProbe()
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
	q.retryAt = now
}

// Loss probes. Go-back-N recovers a lost request packet as soon as a
// later one reaches the responder, which NAKs the gap. What no later
// packet reveals waits for the local ACK timeout, which is long (tens
// of milliseconds with the usual timeout 14): the last packets before
// the requester stops (window full, send queue empty), a lost NAK, the
// lost ACK that would have opened the window. So when nothing has been
// acknowledged for a few round-trip times, the requester sends its
// highest-PSN packet again, with the A bit (a tail-loss probe). The
// responder answers it with what it expects: an ACK when it has
// everything (a duplicate), a NAK when a packet before it is missing
// (respondRC NAKs again for a probe), or it executes the probe if that
// alone was lost. A probe is an ordinary retransmission on the wire. It
// moves no cursor and charges no retry counter; the ACK timer still
// bounds the time without progress. The probe timer backs off
// exponentially until something is acknowledged.

const (
	minProbe      = 10 * time.Microsecond // lower bound of the probe timeout
	maxProbeShift = 10                    // probe backoff: at most 2^10 × the first timeout
)

// rttSample feeds one round-trip time into the smoothed estimate
// (RFC 6298's filter).
func (q *QP) rttSample(d Time) {
	if d <= 0 {
		d = 1
	}
	if q.minRTT == 0 || d < q.minRTT {
		q.minRTT = d
	}
	if q.srtt == 0 {
		q.srtt, q.rttvar = d, d/2
		return
	}
	dev := q.srtt - d
	if dev < 0 {
		dev = -dev
	}
	q.rttvar = (3*q.rttvar + dev) / 4
	q.srtt = (7*q.srtt + d) / 8
}

// probeTimeout returns the probe timeout, or false when there is no
// round-trip estimate yet or the probe would not come before the ACK
// timeout. It is short (the smoothed round trip plus twice its
// deviation, at least a quarter more): a needless probe costs one
// duplicate packet, a late one the link's time.
func (q *QP) probeTimeout() (Time, bool) {
	if q.srtt == 0 || q.attr.Timeout == 0 {
		return 0, false
	}
	d := max(q.srtt*5/4, q.srtt+2*q.rttvar, minProbe) << q.probeShift
	return d, d < ackTimeoutDur(q.attr.Timeout)
}

// armProbe starts the probe timer while packets are unacknowledged.
func (q *QP) armProbe(now Time) {
	if q.typ != RC || q.compPSN == q.sentHigh {
		return
	}
	if d, ok := q.probeTimeout(); ok {
		q.probeArmed, q.probeDue = true, now+d
	}
}

func (q *QP) stopProbe() { q.probeArmed, q.probeWant = false, false }

// sendProbe sends the loss probe: the highest-PSN packet sent, again,
// with the A bit. It reports false when the Output is full. When that
// packet is a READ request, its responses stopped coming (the last ones
// were lost, or the request): the requester goes back to the oldest
// unacknowledged PSN, as the ACK timeout would but without charging a
// retry, and so requests the rest of a READ again, which a responder
// answers from the data (IBTA duplicate READ). Atomics wait for the ACK
// timeout.
func (q *QP) sendProbe(now Time) bool {
	q.probeWant = false
	if q.readStalled() {
		q.goBack(q.compPSN)
		q.ctr.LossProbes++
	} else if idx, k, ok := q.lastSent(); ok {
		if !q.emitAcked(now, idx, k) {
			if q.state == StateRTS || q.state == StateSQD {
				q.probeWant = true
			}
			return false
		}
		q.ctr.LossProbes++
		q.rttOn = false
	}
	if q.probeShift < maxProbeShift {
		q.probeShift++
	}
	q.armProbe(now)
	return true
}
