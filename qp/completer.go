package qp

import (
	"encoding/binary"
	"time"

	"github.com/uroce/uroce/bth"
)

// The completer consumes RC responses (ACK, NAK, RNR NAK, READ response,
// atomic ACK), retires acknowledged WQEs in order, and drives recovery:
// go-back-N on a PSN sequence NAK, an implied NAK or a local ACK
// timeout, requests for the missing responses of READs, the RNR wait,
// and the retry counters (IBTA 9.7.5.2). goBackFor is where every
// retransmission starts.

// outcome is what one response does, gathered by complete's steps and
// acted on by its last (settle).
type outcome struct {
	psn       bth.PSN
	syn       bth.Syndrome // the AETH's, if any
	w         *sendWQE     // the WQE holding psn, if the response is for it ...
	wi        uint64       // ... and its queue counter
	progress  bool         // something new was acknowledged or answered
	asks      int          // READs and atomics whose missing responses are asked for again
	blocked   bool         // one that lacks responses comes before psn
	implied   bool         // an ACK or NAK shows them lost: go back to impliedAt
	impliedAt bth.PSN
	fail      WCStatus // a NAK or a bad response fails w
	rnr       bool     // an RNR NAK for w
	seqNAK    bool     // a PSN sequence NAK to go back for
}

// complete handles a response packet on an RC QP: it checks the packet,
// acknowledges what the response covers (ackThrough), lets the handler
// of the response's kind act on the WQE it is for (onAck, onReadResponse,
// onAtomicAck), and settles the outcome (settle).
func (q *QP) complete(now Time, p *bth.Packet) {
	if q.state != StateRTS && q.state != StateSQD {
		q.ctr.DroppedPkts++
		return
	}
	a := outcome{psn: p.BTH().PSN()}
	psn := a.psn
	if ae := p.AETH(); ae != nil {
		a.syn = ae.Syndrome()
		// The answers to the requests in flight bring the responder's
		// end-to-end credits, and so does another answer to the last
		// one acknowledged (to a copy of it): its count may be newer.
		if a.syn.Kind() == bth.AckKindACK && psn.InWindow(q.compPSN.Add(-1), q.sentHigh.Sub(q.compPSN)+1) {
			q.cred.take(a.syn.Value(), ae.MSN())
		}
	}
	// Responses are for PSNs sent and not yet acknowledged; others are
	// late duplicates.
	if !psn.InWindow(q.compPSN, q.sentHigh.Sub(q.compPSN)) {
		q.ctr.DroppedPkts++
		return
	}
	kind := p.Info.Kind
	isAck := kind == bth.KindAck
	if isAck && a.syn.Kind() == bth.AckKindReserved {
		q.ctr.DroppedPkts++
		return
	}
	comp := q.compPSN
	q.ackThrough(&a, isAck)
	if a.w != nil && isAck && a.blocked && (a.syn.Kind() == bth.AckKindACK || (q.rec.on && q.rec.psn.Less(psn))) {
		// Past a READ or atomic that lacks responses, an ACK
		// acknowledges nothing, and a NAK asks for nothing while a
		// go-back from before it is under way: it may be older.
		a.w = nil
	}
	if a.w != nil {
		switch kind {
		case bth.KindAck:
			q.onAck(&a)
		case bth.KindReadResponse:
			q.onReadResponse(now, p, &a)
		case bth.KindAtomicAck:
			q.onAtomicAck(now, p, &a)
		}
	}
	q.settle(now, &a, comp)
}

// ackThrough marks done the WQEs a response acknowledges in full: an
// ACK acknowledges its PSN, a NAK, a READ response or an atomic ACK
// every PSN before its own. It finds the WQE holding the response's
// PSN, and what READs and atomics before it lack.
func (q *QP) ackThrough(a *outcome, isAck bool) {
	psn := a.psn
	through := psn.Add(-1)
	if isAck && a.syn.Kind() == bth.AckKindACK {
		through = psn
	}
	sq := &q.sq
	for i := sq.head; i != sq.next; i++ {
		x := sq.at(i)
		if x.done {
			continue
		}
		if !x.last().LessEq(through) {
			if psn.InWindow(x.first, int(x.npkts)) {
				a.w, a.wi = x, i
			}
			return
		}
		if !x.rdAtomic {
			if !(isAck && a.blocked) {
				x.done = true
				a.progress = true
			}
			continue
		}
		// The responder went past a READ or atomic whose responses did
		// not all arrive. When an ACK or NAK shows them lost, the
		// requester goes back to the first missing one (go-back-N, the
		// IBTA's implied NAK). An ACK is taken for nothing past it (as
		// rdma_rxe takes it), a NAK for what it asks. Later READ
		// responses and atomic ACKs are kept: only what is missing is
		// asked for again.
		lost := q.lostPast(i, x, psn)
		if isAck && lost {
			a.implied, a.impliedAt = true, x.first.Add(int(x.rcvd))
			return
		}
		a.blocked = true
		if lost {
			q.askAgain(x, askOver)
			a.asks++
		}
	}
}

// onAck handles an ACK, NAK or RNR NAK for a PSN inside WQE a.w.
func (q *QP) onAck(a *outcome) {
	w, psn, through := a.w, a.psn, a.psn.Add(-1)
	if a.syn.Kind() == bth.AckKindACK {
		through = psn
	}
	// Inside a multi-packet SEND/WRITE: progress up to the PSN (none
	// when it acknowledges nothing new, as a second NAK for the same
	// PSN does).
	if !a.blocked && !w.rdAtomic && w.first.LessEq(through) && q.compPSN.LessEq(through) {
		q.compPSN = through.Next()
		a.progress = true
	}
	switch a.syn.Kind() {
	case bth.AckKindNAK:
		code := a.syn.Value()
		if code == bth.NAKPSNSequenceError {
			q.ctr.RcvdSeqErr++
			a.seqNAK = !(q.rnr.armed && psn == q.rnr.psn)
			return
		}
		a.fail = nakStatus(code)
		switch code {
		case bth.NAKInvalidRequest:
			q.ctr.ReqRemoteInvalidReq++
		case bth.NAKRemoteAccessError:
			q.ctr.ReqRemoteAccessErrs++
		}
	case bth.AckKindRNR:
		q.ctr.RcvdRNRErr++
		a.rnr = true
	}
}

// onReadResponse handles a READ response packet (or the answer to a
// FLUSH or ATOMIC_WRITE) for WQE a.w.
func (q *QP) onReadResponse(now Time, p *bth.Packet, a *outcome) {
	seq := q.answers(a.w, a.psn)
	var gap bool
	a.fail, gap = q.readResponse(now, a.wi, a.w, p, a.psn, &a.progress)
	if gap {
		a.asks++
	}
	if seq > q.rd.seen {
		q.rd.seen = seq
		a.asks += q.lostBefore(seq)
	}
}

// onAtomicAck handles an atomic ACK for WQE a.w: the original value
// goes to its local buffer.
func (q *QP) onAtomicAck(now Time, p *bth.Packet, a *outcome) {
	w := a.w
	if (w.wr.Opcode != WRCompareSwap && w.wr.Opcode != WRFetchAdd) || a.psn != w.first {
		q.ctr.DroppedPkts++
		return
	}
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], p.AtomicAck().Orig())
	if !q.scatterSend(w, 0, b[:]) {
		a.fail = WCLocProtErr
		return
	}
	q.rdDone(now, w)
	a.progress = true
}

// settle retires what a response completed, takes note of progress
// (compPSN was comp before it), and starts what it calls for: the
// failure of a WQE, the RNR wait, a go-back, or requests for missing
// READ responses.
func (q *QP) settle(now Time, a *outcome, comp bth.PSN) {
	q.retire()
	q.updateComp()
	if a.progress {
		if q.gentle.on {
			q.endGentle()
		}
		q.onProgress(now, q.compPSN != comp)
	}
	// A retransmission under way need not resend what is now answered.
	q.skipAnswered()
	switch {
	case a.fail != WCSuccess:
		q.failWQE(a.w, a.fail)
		return
	case a.rnr:
		q.rnrNAK(now, a.w, a.psn, a.syn.Value())
	case a.implied:
		q.goBackFor(now, backImplied, a.impliedAt)
	case a.seqNAK:
		q.goBackFor(now, backSeqNAK, a.psn)
	}
	if a.asks > 0 && (q.state == StateRTS || q.state == StateSQD) {
		q.goBackFor(now, backAsk, 0)
	}
}

// updateComp moves compPSN to the oldest PSN not yet answered: in the
// oldest WQE not done, past the READ responses received in order, or
// past the packets of a SEND or WRITE acknowledged so far.
func (q *QP) updateComp() {
	sq := &q.sq
	for i := sq.head; i != sq.next; i++ {
		w := sq.at(i)
		if w.done {
			continue
		}
		p := w.first.Add(int(w.rcvd))
		if !w.rdAtomic && w.first.Less(q.compPSN) && q.compPSN.LessEq(w.last()) {
			p = q.compPSN
		}
		q.compPSN = p
		return
	}
	q.compPSN = q.nextPSN
}

// skipAnswered moves the transmit cursor past the WQEs done and the
// packets acknowledged.
func (q *QP) skipAnswered() {
	sq := &q.sq
	for q.curIdx != sq.next {
		c := sq.at(q.curIdx)
		if !c.done {
			if !c.rdAtomic && c.first.Add(int(q.curPkt)).Less(q.compPSN) {
				q.curPkt = uint32(q.compPSN.Sub(c.first))
			}
			return
		}
		q.curIdx++
		q.curPkt = 0
	}
}

// recovery is the requester's retry counters and the go-back under way.
type recovery struct {
	retryLeft uint8   // retry_cnt left
	rnrLeft   uint8   // rnr_retry left
	on        bool    // a go-back-N retransmission is under way ...
	psn       bth.PSN // ... from this PSN, with no progress since ...
	at        Time    // ... begun at this time
	charged   Time    // when retry_cnt was last charged
}

// rnrWait is the wait an RNR NAK asked for.
type rnrWait struct {
	timer         // armed while waiting
	psn   bth.PSN // the PSN the NAK named
}

// gentleState is a gentle go-back (see below) and what the requester
// learnt of the responder from earlier ones.
type gentleState struct {
	on        bool  // after a NAK, only the NAKed packet goes until it is acknowledged ...
	sent      uint8 // ... packets sent so far: 1 the NAKed one, 2 the probe too ...
	probe     bool  // ... a probe was sent
	reads     bool  // ... or the NAKed request was a READ or atomic: those after it go too
	peerKeeps int8  // the responder keeps requests past a gap: 1 yes, -1 no, 0 unknown
	miss      int   // gentle go-backs in a row answered as by a responder that drops
	off       int   // go-backs since the responder was last taken not to keep them
}

// rttState is the round-trip time estimate and the packet being timed.
type rttState struct {
	est rttEst
	min Time    // the quickest round trip seen
	on  bool    // an A-bit packet is being timed ...
	psn bth.PSN // ... this one ...
	at  Time    // ... sent at this time
}

// probeState is the tail-loss probe's timer and backoff.
type probeState struct {
	timer
	want  bool  // the timer expired: Pump sends a probe
	shift uint8 // backoff since the last progress
}

// backReason is why the requester goes back.
type backReason uint8

const (
	backSeqNAK  backReason = iota // a PSN sequence NAK: the responder lacks the requests from its PSN on
	backImplied                   // an ACK or NAK past a READ or atomic that lacks responses: go-back-N from the first missing one
	backAsk                       // responses of READs or atomics lost: those alone are asked for again (askAgain)
	backTimeout                   // the local ACK timer expired: everything unacknowledged
	backProbe                     // the probe timer expired with READs unanswered: the first and the last ask again, uncharged (askStalled)
	backRNR                       // an RNR NAK: from its PSN, once the RNR wait is over (rnrNAK)
)

// goBackFor starts a retransmission, for why, from PSN from. It is the
// one place where the requester decides to send again. Go-back-N (the
// seqNAK, implied, timeout and RNR reasons) moves the transmit cursor
// back: every request from there on is sent again, but for the WQEs
// answered in full meanwhile, and a READ asks only for the responses it
// lacks. Asking again (askAgain, the ask and probe reasons) sends one
// READ request per READ for its missing responses, and an atomic again,
// and leaves the cursor where it is. Every reason but RNR and the probe
// charges retry_cnt (the ask reason once per response that shows new
// losses).
func (q *QP) goBackFor(now Time, why backReason, from bth.PSN) {
	switch why {
	case backSeqNAK:
		// A responder NAKs an expected PSN once, and again only when
		// the requests it receives show that the requester went back
		// and the retransmission was lost too (respondRC): a sequence
		// NAK is a loss to recover from. Except a copy of the NAK that
		// started this go-back: arriving sooner after it than any
		// round trip could bring an answer to the retransmission, it
		// is that NAK again (repeated by a responder, or duplicated on the way).
		if q.rec.on && from == q.rec.psn && now-q.rec.at <= q.rtt.min/2 {
			return
		}
		plain := q.gentleNAK(from)
		if q.lostAgain(now, from) {
			q.shrinkWindow()
			q.goBack(from)
		} else {
			q.retry(now, from)
		}
		q.rec.at = now
		if !plain && (q.state == StateRTS || q.state == StateSQD) {
			q.startGentle()
		}
	case backImplied:
		q.ctr.ImpliedNakSeqErr++
		q.retry(now, from)
	case backAsk:
		q.ctr.ImpliedNakSeqErr++
		q.charge()
	case backTimeout:
		q.ctr.LocalAckTimeoutErr++
		q.retry(now, from)
		q.rec.at = now
	case backProbe:
		q.askStalled()
	case backRNR:
		q.goBack(from)
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
// buffers, or two losses in a row looked alike. No responder keeps a
// READ or atomic past a gap: when the NAKed request is one, it goes
// again with the READs and atomics that follow it, up to the first SEND
// or WRITE, which waits for their answers.

const (
	gentleRetest = 32
	gentleMisses = 3
)

func (q *QP) startGentle() {
	if q.gentle.peerKeeps < 0 {
		if q.gentle.off++; q.gentle.off < gentleRetest {
			return
		}
		q.gentle.off = 0
	}
	q.gentle.on, q.gentle.sent, q.gentle.probe, q.gentle.reads = true, 0, false, false
	if !q.gentleWants() {
		q.gentle.on = false // nothing to resend at the NAKed PSN
	}
}

// endGentle ends a gentle go-back on progress, unless the progress is
// the resent packet alone and the probe's answer is still to come. An
// ACK beyond the resent packet shows a responder that keeps requests.
func (q *QP) endGentle() {
	switch d := q.compPSN.Sub(q.rec.psn); {
	case d > 1:
		q.gentle.peerKeeps, q.gentle.miss = 1, 0
	case d == 1 && q.gentle.probe:
		return
	}
	q.gentle.on = false
}

// gentleNAK takes note of a sequence NAK for from during a gentle
// go-back. A NAK of the PSN after the resent packet, for the probe, is
// what a responder that drops requests past a gap answers (or one that
// keeps them, when that PSN was lost too): it reports true when the
// requester should then go back plainly, unless the responder is known
// to keep requests.
func (q *QP) gentleNAK(from bth.PSN) bool {
	if !q.gentle.on || !q.gentle.probe || from != q.rec.psn.Next() {
		return false
	}
	if q.gentle.miss++; q.gentle.miss >= gentleMisses {
		q.gentle.peerKeeps, q.gentle.miss, q.gentle.off = -1, 0, 0
	}
	return q.gentle.peerKeeps <= 0
}

// sendGentle sends the packets of a gentle go-back: the NAKed packet,
// then the probe. The transmit cursor stays on the NAKed packet: an ACK
// moves it on. A READ or atomic request goes with the READs and atomics
// after it, without a probe, and the cursor with them (their responses
// move the requester on).
func (q *QP) sendGentle(now Time) bool {
	if !q.gentleWants() {
		return false
	}
	w := q.sq.at(q.curIdx)
	if w.rdAtomic {
		if !q.emit(now, w) {
			return false
		}
		q.gentle.sent, q.gentle.reads = 1, true
		return true
	}
	if q.gentle.sent == 0 {
		if sent, _ := q.emitPkt(now, w, q.curIdx, q.curPkt); !sent {
			return false
		}
		q.gentle.sent = 1
		if _, _, ok := q.probeTarget(); !ok {
			q.gentleOn()
		}
		return true
	}
	idx, k, _ := q.probeTarget()
	if !q.emitAcked(now, idx, k) {
		return false
	}
	q.gentle.sent, q.gentle.probe = 2, true
	q.gentleOn()
	return true
}

// gentleOn lets new requests go on after the packets of a gentle
// go-back when the responder is known to keep requests past a gap: they
// are not lost behind it (and the send window does not shrink for the
// loss either), so the cursor moves to the first PSN never sent.
func (q *QP) gentleOn() {
	if q.gentle.peerKeeps > 0 {
		q.seek(q.sentHigh)
	}
}

// gentleWants reports whether a gentle go-back has a packet to send.
func (q *QP) gentleWants() bool {
	if q.curIdx == q.sq.next {
		return false
	}
	w := q.sq.at(q.curIdx)
	if q.gentle.reads {
		return w.rdAtomic
	}
	if w.first.Add(int(q.curPkt)) != q.rec.psn {
		return false
	}
	switch q.gentle.sent {
	case 0:
		return true
	case 1:
		_, _, ok := q.probeTarget()
		return ok
	}
	return false
}

// probeTarget returns the gentle go-back's probe: the last packet sent
// (lastSent), unless that is the NAKed packet.
func (q *QP) probeTarget() (uint64, uint32, bool) {
	if q.sentHigh.Add(-1) == q.rec.psn {
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

// emitAcked sends packet k of WQE idx again with the A bit.
func (q *QP) emitAcked(now Time, idx uint64, k uint32) bool {
	q.forceAck = true
	sent, _ := q.emitPkt(now, q.sq.at(idx), idx, k)
	q.forceAck = false
	return sent
}

// readResponse takes a response packet at psn for READ w (queue counter
// i), received at now, and sets progress when it is new. It returns the completion status
// of a bad response, and whether the packet shows w's responses from rcvd
// on lost (a gap), which it then asks for again.
func (q *QP) readResponse(now Time, i uint64, w *sendWQE, p *bth.Packet, psn bth.PSN, progress *bool) (WCStatus, bool) {
	if w.wr.Opcode == WRFlush || w.wr.Opcode == WRAtomicWrite {
		return q.placedResponse(now, w, p, psn, progress), false
	}
	if w.wr.Opcode != WRRead {
		q.ctr.DroppedPkts++
		return WCSuccess, false
	}
	pos := p.Info.Pos
	ends := pos == bth.PosLast || pos == bth.PosOnly
	exp := w.first.Add(int(w.rcvd))
	if psn != exp {
		gap := false
		if exp.Less(psn) {
			if kept, fresh := q.keepPast(w, p, psn); kept {
				if !fresh {
					// A copy of the first one kept comes from a later
					// answer (a request for the gap asks for it too): if
					// the gap is still there, that answer's packets
					// before it were lost.
					if uint32(psn.Sub(w.first)) == w.keptFrom && !w.ask.due && i < q.curIdx {
						q.askAgain(w, askOver)
						return WCSuccess, true
					}
					return WCSuccess, false
				}
				*progress = true
				// The first packet past the gap: the gap alone is
				// asked for.
				if w.kept == 1 {
					if gap = q.lostGap(i, w); gap {
						q.askAgain(w, askGap)
					}
				}
				if ends && w.ask.older > 0 {
					w.ask.older--
				}
				return WCSuccess, gap
			}
			// A response packet is missing: implied NAK, unless an
			// earlier request may still be answering.
			if gap = q.lostGap(i, w); gap {
				q.askAgain(w, askGap)
			}
			if ends && w.ask.older > 0 {
				w.ask.older-- // whichever request it answers, one more earlier answer is over
			}
		}
		return WCSuccess, gap // a gap, or a duplicate
	}
	// The PSN fixes the offset. After a re-request the responses restart
	// with FIRST (or ONLY), and late responses of the first request may
	// still arrive, so only "ends the READ or not" is checked: the packet
	// at the READ's last PSN is a LAST or ONLY carrying the remainder,
	// every other one a FIRST or MIDDLE carrying a full MTU.
	k := w.rcvd
	mtu := uint32(q.mtu)
	end := k == w.npkts-1
	n := mtu
	if end {
		n = w.length - k*mtu
	}
	// The answer to a request for the gap before kept responses ends
	// where they begin; a late one of an earlier request goes on there.
	gapEnd := w.kept > 0 && k+1 == w.keptFrom
	if (end != ends && !gapEnd) || uint32(p.PayloadN) != n {
		return WCBadRespErr, false
	}
	if !q.scatterSend(w, k*mtu, p.Payload()) {
		return WCLocProtErr, false
	}
	if k == w.ask.from && (w.ask.gap || k > 0 && (pos == bth.PosFirst || pos == bth.PosOnly)) {
		// The answer to the last request has begun: the earlier ones
		// lack this response, or have a MIDDLE or LAST here. (A
		// responder may also end an answer when asked again, as
		// rdma_rxe does, and answer from MIDDLE.)
		w.ask.older = 0
	}
	w.rcvd++
	*progress = true
	lost := false
	if w.kept > 0 && w.rcvd == w.keptFrom {
		// The gap is filled: on past what was kept. If the READ still
		// lacks responses and no earlier answer may bring them, they
		// were lost too.
		w.rcvd += w.kept
		w.kept = 0
		if w.rcvd < w.npkts && w.ask.older == 0 && !w.ask.due && i < q.curIdx {
			q.askAgain(w, askOver)
			lost = true
		}
	}
	if w.rcvd == w.npkts {
		q.rdDone(now, w)
	}
	return WCSuccess, lost
}

// keepPast keeps a response packet of READ w that comes past a gap
// (psn after the one expected): its payload goes to its place, which
// the PSN fixes, so that asking again costs the gap alone, not every
// response after it. One run of packets is kept, from the first past
// the gap on while they follow each other; it reports whether p was
// kept, and whether it was new rather than a copy of one kept.
func (q *QP) keepPast(w *sendWQE, p *bth.Packet, psn bth.PSN) (kept, fresh bool) {
	k := uint32(psn.Sub(w.first))
	if w.kept > 0 && k >= w.keptFrom && k < w.keptFrom+w.kept {
		return true, false
	}
	if w.kept > 0 && k != w.keptFrom+w.kept {
		return false, false
	}
	mtu := uint32(q.mtu)
	n, end := mtu, k == w.npkts-1
	if end {
		n = w.length - k*mtu
	}
	pos := p.Info.Pos
	if end != (pos == bth.PosLast || pos == bth.PosOnly) || uint32(p.PayloadN) != n {
		return false, false
	}
	if !q.scatterSend(w, k*mtu, p.Payload()) {
		return false, false
	}
	if w.kept == 0 {
		w.keptFrom = k
	}
	w.kept++
	return true, true
}

// placedResponse takes the answer to a FLUSH or ATOMIC_WRITE: an RDMA
// READ response ONLY with no payload at the request's PSN (as rdma_rxe
// answers both). One at another PSN answers another request and is
// dropped, as a stray atomic ACK is; a lost answer is asked for again as
// an atomic's is.
func (q *QP) placedResponse(now Time, w *sendWQE, p *bth.Packet, psn bth.PSN, progress *bool) WCStatus {
	if psn != w.first || w.done {
		q.ctr.DroppedPkts++
		return WCSuccess
	}
	if p.Info.Pos != bth.PosOnly || p.PayloadN != 0 {
		return WCBadRespErr
	}
	q.rdDone(now, w)
	*progress = true
	return WCSuccess
}

// READ recovery. A READ whose responses were lost asks for them: a READ
// request at the PSN of the first response missing (emitPkt), which the
// responder answers as a duplicate READ. The responses that follow the
// gap in the same answer are kept (keepPast), and the request then asks
// for the gap and the first of them only; once the gap is filled, what
// is still missing after them is asked for (readResponse). The
// responses of other READs are kept too; so is every READ answered in
// full, which no go-back asks for again. An atomic whose ACK was lost is sent again, and answered from
// the responder's saved result.
//
// Responders answer requests in the order they arrive, so a response
// shows responses lost when it comes after them: a response past the
// one expected of the same READ (a gap), or the answer to a request sent
// after the READ's last one. Telling which request a response answers
// takes care: a READ asked for again has two answers in flight for a
// while, the first going on after its gap, and responses to requests
// sent before the request again show nothing. So each READ or atomic
// keeps what its last request asked for (askState):
//
//   - a gap counts unless an earlier answer may still come (older: one
//     more for each request again while the last answer goes on, one
//     less at each end of an answer, none once the new answer begins or
//     the answer to a later request does);
//   - a response past the READ answers a later request when its PSN is
//     at or above those sent by the time of the READ's last request
//     (mark); a READ response also when it is known to answer a READ
//     request sent later (seq, see answers and lostBefore), wherever
//     its PSN lies.
//
// What no response shows, the loss probe asks for (askStalled) when
// nothing new comes for a while, the while set by the pace of READ
// answers rather than their round trip (readPace); the ACK timer, which
// only an answer to the oldest request outstanding restarts, bounds it
// all.
//
// max_rd_atomic credits come back in order: a READ answered in full
// behind one still missing responses keeps its credit, so that no more
// READs and atomics are outstanding than the responder keeps for
// duplicates (max_dest_rd_atomic): the responses asked for again are
// still there to be sent.

// rdState is the requester's part for READs and atomics.
type rdState struct {
	held  uint64 // queue counter from which READs and atomics hold their credits ...
	bytes uint64 // ... and the bytes of their responses (the READ window)
	asks  int    // WQEs with a request due for missing responses (askState.due)
	seq   uint64 // READ and atomic requests sent
	seen  uint64 // the latest of them whose answer has begun
	pace  readPace
}

// readPace is how soon a READ's answer is due once the responder turns
// to it (probeTimeout). A READ's round trip is no measure of it: it
// holds the time the READ queued behind the others.
type readPace struct {
	est  rttEst  // from the end of the answer before, or the request if later, to the end of the answer ...
	min  Time    // ... at least the quickest round trip, less than which no answer takes
	on   bool    // one READ is timed at a time: this one ...
	psn  bth.PSN // ... whose last PSN is this ...
	at   Time    // ... requested at this time
	done Time    // when the last READ was answered in full
}

// start starts timing the answer of the new READ w, requested at now,
// unless another is being timed.
func (p *readPace) start(now Time, w *sendWQE) {
	if !p.on {
		p.on, p.psn, p.at = true, w.last(), now
	}
}

// stop stops timing READ w (or, with w nil, any), asked for again: its
// answer may then be either request's. Before the first sample the
// timing goes on: a first estimate too long is better than none.
func (p *readPace) stop(w *sendWQE) {
	if p.est.srtt != 0 && (w == nil || p.psn == w.last()) {
		p.on = false
	}
}

// answered takes note that READ w was answered in full at now, and
// samples the pace if w was timed. Answers that come in a burst, read at
// one clock tick, take no time: the quickest round trip bounds the pace
// from below. Before the first sample, any READ answered in full gives
// one, too long if anything: it was requested after the READ timed,
// which may be the one that lost responses.
func (p *readPace) answered(now Time, w *sendWQE) {
	if p.on && (p.psn == w.last() || p.est.srtt == 0) {
		p.on = false
		p.est.sample(now - max(p.at, p.done))
		if d := max(now-p.at, 1); p.min == 0 || d < p.min {
			p.min = d
		}
	}
	p.done = now
}

// timeout returns the probe timeout while a READ is the oldest request
// outstanding, false before the first sample.
func (p *readPace) timeout() (Time, bool) {
	if p.est.srtt == 0 {
		return 0, false
	}
	return max(p.est.timeout(), 2*p.min), true
}

// answers returns the seq of the request of READ w that the response at
// psn answers, or 0 if it may answer an earlier one: its last request's,
// unless an earlier answer may still come or psn lies before what the
// last request asked for.
func (q *QP) answers(w *sendWQE, psn bth.PSN) uint64 {
	if w.wr.Opcode != WRRead || w.ask.older > 0 || psn.Sub(w.first) < int(w.ask.from) {
		return 0
	}
	return w.ask.seq
}

// lostBefore takes note that the answer to the s'th READ or atomic
// request has begun: the answers to the requests before it are over. It
// asks again for what the READs and atomics lack whose last request
// went before, and returns how many it asks for.
func (q *QP) lostBefore(s uint64) int {
	n := 0
	sq := &q.sq
	for i := sq.head; i != q.curIdx; i++ {
		w := sq.at(i)
		if !w.rdAtomic || w.done {
			continue
		}
		if a := &w.ask; a.older > 0 && a.prev < s {
			a.older = 0
		}
		if !w.ask.due && w.ask.seq < s {
			q.askAgain(w, askOver)
			n++
		}
	}
	return n
}

// lostPast reports whether a response at psn, past READ or atomic w
// (queue counter i), shows w's missing responses lost: whether it
// answers a request first sent after w's last one. If the cursor is yet
// to send w, it is not asked for apart.
func (q *QP) lostPast(i uint64, w *sendWQE, psn bth.PSN) bool {
	if psn.Less(w.ask.mark) {
		return false // sent by the responder before it had w's last request
	}
	return i < q.curIdx && !w.ask.due
}

// lostGap reports whether a gap in the responses of READ w (queue
// counter i) shows the responses from rcvd on lost.
func (q *QP) lostGap(i uint64, w *sendWQE) bool {
	return w.ask.older == 0 && i < q.curIdx && !w.ask.due
}

// askWhy is what is known of the answer to the last request of a READ
// asked for again.
type askWhy uint8

const (
	askOver askWhy = iota // it is over
	askGap                // it has a gap where the rest begins, and may go on after it
	askLate               // it may go on, or not have begun (the probe)
)

// askAgain makes a request for the responses w lacks due (sendAsk).
func (q *QP) askAgain(w *sendWQE, why askWhy) {
	a := &w.ask
	a.due, a.gap = true, why == askGap
	if why == askOver {
		a.older = 0
	} else if a.older < 255 {
		a.older++
		a.prev = a.seq
	}
	q.rd.asks++
}

// askStalled asks again for what the first and the last READ sent that
// lack responses lack (the probe timer expired): the first, whose
// answer is due before the others' and which a responder that lost its
// request executes as new; the last, which such a responder, having
// dropped what followed the gap and seen the last already, NAKs again
// for the first one it lacks. Answers show what else was lost, as any
// answer to a later request does (lostBefore).
func (q *QP) askStalled() {
	sq := &q.sq
	var first, last *sendWQE
	for i := sq.head; i != q.curIdx; i++ {
		w := sq.at(i)
		if w.done || w.wr.Opcode != WRRead {
			continue
		}
		if first == nil {
			first = w
		}
		last = w
	}
	for _, w := range [2]*sendWQE{first, last} {
		if w != nil && !w.ask.due {
			q.askAgain(w, askLate)
		}
	}
}

// sendAsk sends the oldest request due for missing responses. found is
// false when none is due.
func (q *QP) sendAsk(now Time) (sent, found bool) {
	sq := &q.sq
	for i := sq.head; i != q.curIdx; i++ {
		if w := sq.at(i); w.ask.due {
			sent, _ = q.emitPkt(now, w, i, 0)
			return sent, true
		}
	}
	q.rd.asks = 0
	return false, false
}

// asked takes note of a request of READ or atomic w just sent.
func (q *QP) asked(w *sendWQE) {
	a := &w.ask
	if a.due {
		a.due = false
		q.rd.asks--
	}
	if a.seq != 0 {
		q.rd.pace.stop(w)
	}
	q.rd.seq++
	a.from, a.mark, a.seq = w.rcvd, q.sentHigh, q.rd.seq
}

// rdDone marks READ or atomic w answered in full at now, and gives back
// the credits that are free now: those of the READs and atomics answered
// in full up to the first that is not.
func (q *QP) rdDone(now Time, w *sendWQE) {
	if w.wr.Opcode == WRRead {
		q.rd.pace.answered(now, w)
	}
	w.done = true
	if w.ask.due {
		w.ask.due = false
		q.rd.asks--
	}
	sq := &q.sq
	i := max(q.rd.held, sq.head)
	for ; i != sq.next; i++ {
		x := sq.at(i)
		if !x.rdAtomic {
			continue
		}
		if !x.done {
			break
		}
		q.rdOut--
		q.rd.bytes -= rdBytes(x)
	}
	q.rd.held = i
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

// onProgress resets the retry counters and restarts the loss probe
// after a response acknowledged something new, and the ACK timer when
// that was the oldest request outstanding (moved: compPSN moved on):
// the timer bounds the time a request waits for its answer, also while
// later ones are answered.
func (q *QP) onProgress(now Time, moved bool) {
	q.rec.retryLeft, q.rec.rnrLeft = q.attr.RetryCnt, q.attr.RNRRetry
	q.rec.on = false
	c := q.compCost()
	q.growWindow(int(c - q.win.ackedCost))
	q.win.ackedCost = c
	if q.rtt.on && q.rtt.psn.Less(q.compPSN) {
		q.rtt.on = false
		q.rttSample(now - q.rtt.at)
	}
	q.probe.shift = 0
	q.stopProbe()
	if q.compPSN == q.sentHigh {
		q.ackTimer.stop()
	} else {
		if moved || !q.ackTimer.armed {
			q.armAck(now)
		}
		q.armProbe(now)
	}
}

// infiniteRetry reports whether retry_cnt never runs out.
func (q *QP) infiniteRetry() bool { return q.caps.InfiniteRetry7 && q.attr.RetryCnt == 7 }

// retry goes back to PSN from (go-back-N) after a sequence NAK, an
// implied NAK or a timeout, charging the retry counter.
func (q *QP) retry(now Time, from bth.PSN) {
	if !q.charge() {
		return
	}
	q.rec.charged = now
	q.shrinkWindow()
	q.rec.on, q.rec.psn = true, from
	q.goBack(from)
}

// lostAgain reports whether a sequence NAK for PSN from says that the
// retransmission from there was lost again, less than an ACK timeout
// after retry_cnt was last charged. Such a NAK sends the requests again
// at once, without a charge: a responder that NAKs each lost
// retransmission (this package's does) draws retries a round trip
// apart, and under congestion that keeps losing the same packet they
// would run out within a millisecond, where a requester that waits for
// its ACK timer (against rdma_rxe, which NAKs a gap once) spends one per
// timeout. So retry_cnt bounds the time a request can go unanswered,
// (retry_cnt+1) ACK timeouts, whichever answers the responder gives;
// with the timeout infinite (0), every NAK is charged.
func (q *QP) lostAgain(now Time, from bth.PSN) bool {
	return q.rec.on && from == q.rec.psn && q.attr.Timeout != 0 && now-q.rec.charged < ackTimeoutDur(q.attr.Timeout)
}

// charge takes a retry from retry_cnt. When none is left the oldest
// outstanding WQE completes with WCRetryExcErr (the QP enters ERR) and
// charge reports false.
func (q *QP) charge() bool {
	if q.rec.retryLeft == 0 && !q.infiniteRetry() {
		q.ctr.RetryExceededErr++
		q.failWQE(q.oldest(), WCRetryExcErr)
		return false
	}
	if !q.infiniteRetry() {
		q.rec.retryLeft--
	}
	q.ctr.CompleterRetryErr++
	return true
}

// rnrNAK handles an RNR NAK for PSN psn of WQE w: wait for the timer
// the responder named, then resend from psn.
func (q *QP) rnrNAK(now Time, w *sendWQE, psn bth.PSN, code uint8) {
	if q.rec.rnrLeft == 0 {
		q.ctr.RNRNakRetryErr++
		q.failWQE(w, WCRNRRetryExcErr)
		return
	}
	if q.rec.rnrLeft != 7 {
		q.rec.rnrLeft--
	}
	// The responder received the request at psn: whatever was lost
	// before has been recovered, so the transport retry count starts
	// afresh (rnr_retry bounds the RNR NAKs).
	q.rec.retryLeft = q.attr.RetryCnt
	q.goBackFor(now, backRNR, psn)
	q.rnr.arm(now + time.Duration(bth.RNRTimerMicros[code&31])*time.Microsecond)
	q.rnr.psn = psn
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
// from there on that is not done is sent again, and what the cursor
// will send is no longer asked for apart.
func (q *QP) goBack(from bth.PSN) {
	q.ackTimer.stop()
	q.gentle.on = false
	q.rtt.on = false
	q.rd.pace.stop(nil)
	q.stopProbe()
	q.seek(from)
	for i := q.curIdx; q.rd.asks > 0 && i != q.sq.next; i++ {
		if w := q.sq.at(i); w.ask.due {
			w.ask.due = false
			q.rd.asks--
		}
	}
}

// seek moves the transmit cursor to PSN from, or to the first WQE after
// it that is not done. On a READ the cursor stays at packet 0: emitPkt
// asks for the responses the READ lacks.
func (q *QP) seek(from bth.PSN) {
	sq := &q.sq
	for i := sq.head; i != sq.next; i++ {
		w := sq.at(i)
		if w.done || w.last().Less(from) {
			continue
		}
		q.curIdx, q.curPkt = i, 0
		if !w.rdAtomic && w.first.Less(from) {
			q.curPkt = uint32(from.Sub(w.first))
		}
		return
	}
	q.curIdx, q.curPkt = sq.next, 0
}

// ackTimeout handles the expiry of the local ACK timer.
func (q *QP) ackTimeout(now Time) {
	q.ackTimer.stop()
	if q.compPSN == q.sentHigh {
		return
	}
	q.goBackFor(now, backTimeout, q.compPSN)
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

// rttSample feeds one round-trip time into the smoothed estimate.
func (q *QP) rttSample(d Time) {
	d = max(d, 1)
	if q.rtt.min == 0 || d < q.rtt.min {
		q.rtt.min = d
	}
	q.rtt.est.sample(d)
}

// rttEst is a smoothed round-trip time and its deviation (RFC 6298's
// filter).
type rttEst struct {
	srtt, rttvar Time
}

func (e *rttEst) sample(d Time) {
	if d <= 0 {
		d = 1
	}
	if e.srtt == 0 {
		e.srtt, e.rttvar = d, d/2
		return
	}
	dev := e.srtt - d
	if dev < 0 {
		dev = -dev
	}
	e.rttvar = (3*e.rttvar + dev) / 4
	e.srtt = (7*e.srtt + d) / 8
}

// timeout returns the probe timeout of the estimate: the smoothed round
// trip plus twice its deviation, at least a quarter more.
func (e *rttEst) timeout() Time { return max(e.srtt*5/4, e.srtt+2*e.rttvar) }

// probeTimeout returns the probe timeout, or false when there is no
// round-trip estimate yet or the probe would not come before the ACK
// timeout. It is short (rttEst.timeout): a needless probe costs one
// duplicate packet, or a READ's missing responses once more, a late one
// the link's time. When a READ is the oldest request outstanding, the
// READ pace stands for the round trip (readPace).
func (q *QP) probeTimeout() (Time, bool) {
	if q.attr.Timeout == 0 {
		return 0, false
	}
	d, ok := q.rtt.est.timeout(), q.rtt.est.srtt != 0
	if q.compPSN != q.sentHigh && q.oldest().wr.Opcode == WRRead {
		if p, pok := q.rd.pace.timeout(); pok {
			d, ok = p, true
		}
	}
	if !ok {
		return 0, false
	}
	d = max(d, minProbe) << q.probe.shift
	return d, d < ackTimeoutDur(q.attr.Timeout)
}

// armProbe starts the probe timer while packets are unacknowledged.
func (q *QP) armProbe(now Time) {
	if q.typ != RC || q.compPSN == q.sentHigh {
		return
	}
	if d, ok := q.probeTimeout(); ok {
		q.probe.arm(now + d)
	}
}

func (q *QP) stopProbe() { q.probe.stop(); q.probe.want = false }

// sendProbe sends the loss probe: the highest-PSN packet sent, again,
// with the A bit. It reports false when the Output is full. READs whose
// responses stopped coming (the last ones were lost, or the request)
// ask for the responses they lack again, without charging a retry,
// which a responder answers from the data (IBTA duplicate READ).
// Atomics wait for the ACK timeout.
func (q *QP) sendProbe(now Time) bool {
	q.probe.want = false
	asked := q.rd.asks
	q.goBackFor(now, backProbe, 0)
	probed := q.rd.asks > asked
	if idx, k, ok := q.lastSent(); ok {
		if !q.emitAcked(now, idx, k) {
			if q.state == StateRTS || q.state == StateSQD {
				q.probe.want = true
			}
			return false
		}
		probed = true
		q.rtt.on = false
	}
	if probed {
		q.ctr.LossProbes++
	}
	if q.probe.shift < maxProbeShift {
		q.probe.shift++
	}
	q.armProbe(now)
	return true
}
