package qp

import (
	"slices"

	"github.com/uroce/uroce/bth"
)

// End-to-end credits (IBTA 9.7.7.2, RC only). Every AETH of an ACK
// kind (ACK, READ response FIRST/LAST/ONLY, atomic ACK) carries a 5-bit
// credit count: how many receive WQEs the responder has posted and not
// yet taken, coded on a log-like scale (creditCounts), or 31 when it
// does not count them, as a QP with an SRQ does not (IBTA 9.7.5.1).
// The MSN in the same AETH plus the count is the last message the
// responder can accept (the limit). A requester does not start a
// message that takes a receive WQE (SEND in all its forms, RDMA WRITE
// with immediate) past the limit, except one: the first packet of the
// message right after the limit goes with the A bit, a probe whose
// answer brings the count up to date, or an RNR NAK when the responder
// still has no receive for it. Once that packet is acknowledged the
// responder holds a receive for the message and the rest of it goes.
// A requester starts with no credits: its first such message is a
// probe. Code 31 lifts the limit for good. READ, atomics and RDMA
// WRITE without immediate never wait for credits, but they queue
// behind a message that does, as every request queues behind the ones
// before it.
//
// The responder writes the count into an ACK as it goes out (sendResp),
// so that it counts what the application has posted by then; a queued
// ACK's MSN may be older than the count, which then only understates
// the limit. The WQE a multi-packet SEND in progress holds is not
// counted: it is no longer available.

// creditCounts gives the receive WQEs each credit code stands for
// (IBTA 9.7.5.1, the AETH credit count encoding); code 31 is
// bth.CreditsInvalid.
var creditCounts = [31]uint16{0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512,
	768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768}

// creditCode returns the code for n receive WQEs available: the largest
// whose count does not exceed n.
func creditCode(n int) uint8 {
	i, found := slices.BinarySearch(creditCounts[:], uint16(min(max(n, 0), int(creditCounts[30]))))
	if !found {
		i--
	}
	return uint8(i)
}

// synACK is a positive ACK queued by the responder, its count left
// out: it is written as the ACK goes out (ackSyndrome).
const synACK = bth.SyndromeACKNoCredits &^ bth.CreditsInvalid

// ackSyndrome returns syn, the syndrome of a response the responder
// sends now, with the QP's credit count when syn is a positive ACK.
func (q *QP) ackSyndrome(syn bth.Syndrome) bth.Syndrome {
	if syn.Kind() != bth.AckKindACK {
		return syn
	}
	if q.srq != nil {
		return bth.ACKSyndrome(bth.CreditsInvalid)
	}
	return bth.ACKSyndrome(creditCode(q.rq.len()))
}

// credits is what the requester knows of the responder's receive
// queue.
type credits struct {
	unlimited bool   // the responder advertised code 31: no limit ...
	lsn       uint32 // ... or the last MSN it has a receive WQE for
}

// take takes the credit code and MSN of an ACK-kind AETH. The limit
// only moves on: an AETH that left the responder before one that came
// first knows less.
func (c *credits) take(code uint8, msn uint32) {
	code &= 31
	if code == bth.CreditsInvalid {
		c.unlimited = true
		return
	}
	if lsn := (msn + uint32(creditCounts[code])) & bth.PSNMask; msnSub(lsn, c.lsn) > 0 {
		c.lsn = lsn
	}
}

// msnSub returns the signed distance a-b of two MSNs, which count
// modulo 2^24 as PSNs do.
func msnSub(a, b uint32) int { return bth.PSN(a & bth.PSNMask).Sub(bth.PSN(b & bth.PSNMask)) }

// needsRecv tells the operations that take a receive WQE at the
// responder.
var needsRecv = [...]bool{WRSend: true, WRSendWithImm: true, WRSendWithInv: true, WRWriteWithImm: true}

// creditUse is what the credits allow a request packet.
type creditUse uint8

const (
	creditFree  creditUse = iota // it goes: within the limit, a packet sent before, or one that takes no receive
	creditProbe                  // it goes with the A bit: the first packet of the message right after the limit
	creditWait                   // it waits for credits
)

// creditFor decides what the credits allow packet k of w, the WQE in
// queue counter idx (started or the next to start). It is the one
// place where the requester applies them. Messages are numbered as the
// responder's MSN counts them: the WQE in counter idx is message idx+1
// (every RC work request is one message, and both counters start from
// zero when the QP leaves RESET).
func (q *QP) creditFor(idx uint64, w *sendWQE, k uint32) creditUse {
	if q.typ != RC || q.cred.unlimited || int(w.wr.Opcode) >= len(needsRecv) || !needsRecv[w.wr.Opcode] {
		return creditFree
	}
	d := msnSub(uint32(idx+1), q.cred.lsn)
	started := idx < q.sq.next
	switch {
	case d <= 0:
		return creditFree
	case d == 1 && k == 0:
		return creditProbe
	case started && w.first.Add(int(k)).Less(q.sentHigh):
		return creditFree // sent before: credits never hold a retransmission back
	case d == 1 && started && w.first.Less(q.compPSN):
		return creditFree // the probe was acknowledged: the responder holds a receive for it
	}
	return creditWait
}

// creditHeld reports whether the packet at the transmit cursor waits
// for credits.
func (q *QP) creditHeld() bool {
	return q.curIdx != q.sq.next && q.creditFor(q.curIdx, q.sq.at(q.curIdx), q.curPkt) == creditWait
}
