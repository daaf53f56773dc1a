package qp

import (
	"encoding/binary"

	"github.com/uroce/uroce/bth"
)

// The responder executes incoming requests (IBTA 9.7.3-9.7.5): it checks
// the PSN against ePSN, the opcode sequence, lengths, keys and rights,
// consumes receive WQEs, writes and reads memory, and queues the ACKs,
// NAKs, READ responses and atomic ACKs it owes, in PSN order.

// curMsg is the multi-packet message the responder is in the middle of.
type curMsg uint8

const (
	curNone curMsg = iota
	curSend
	curWrite
)

// respKind is the kind of a queued response.
type respKind uint8

const (
	rkNone   respKind = iota
	rkAck             // ACK, NAK or RNR NAK (one packet)
	rkRead            // READ response packets
	rkAtomic          // atomic ACK
)

// respItem is a response waiting to be sent.
//
// A READ response names its source by R_Key and address, never by a
// slice: every packet looks the region up again (sendResp), so that once
// a region is deregistered or invalidated no response reads from it.
type respItem struct {
	kind respKind
	busy bool    // holds a READ/atomic resource (a new request, not a replay)
	psn  bth.PSN // PSN of the next packet
	syn  bth.Syndrome
	msn  uint32
	src  memRef // READ: the bytes still to send
	k, n uint32 // READ: next packet index and packet count
	orig uint64 // atomic: the original value
}

// memRef names the bytes of a remote access: the R_Key, the address and
// the length, as a RETH gives them.
type memRef struct {
	rkey uint32
	va   uint64
	dlen uint32
}

// rdRes remembers an executed READ, atomic, FLUSH or ATOMIC_WRITE for
// duplicates: a READ is executed again, an atomic is answered from its
// saved result, a FLUSH or ATOMIC_WRITE is answered again without
// executing it twice.
type rdRes struct {
	valid bool
	kind  resKind
	first bth.PSN
	npkts uint32
	msn   uint32
	orig  uint64
	read  memRef // READ: what the request asked for
}

// resKind is what a saved resource was.
type resKind uint8

const (
	resRead   resKind = iota
	resAtomic         // COMPARE_SWAP, FETCH_ADD
	resPlaced         // FLUSH, ATOMIC_WRITE: answered by a READ response ONLY of no bytes
)

// rerr is the outcome of executing a request. Every outcome but rOK and
// rDrop draws a NAK, which nakTable describes.
type rerr uint8

const (
	rOK      rerr = iota
	rSeq          // PSN out of sequence: PSN sequence NAK for ePSN
	rRNR          // no receive WQE: RNR NAK
	rInvReq       // NAK invalid request: opcode sequence, length, unsupported, resources
	rAccess       // NAK remote access error: R_Key, bounds, rights
	rLocLen       // receive buffer too small: NAK invalid request, WCLocLenErr
	rLocProt      // receive buffer key invalid: NAK remote operational error, WCLocProtErr
	rDrop         // silently dropped (no room to answer; the requester retries)
)

// nakTable turns a responder error into its NAK (IBTA 9.7.5.2.8, 9.9.3):
// the AETH syndrome, the status of the receive completion a SEND in
// progress takes, the counter, and whether the QP then enters ERR (the
// class B, C and D errors; a PSN sequence error and RNR are not fatal).
var nakTable = [...]struct {
	syn   bth.Syndrome // for RNR, the timer comes from min_rnr_timer
	st    WCStatus
	count func(*Counters) *uint64
	fatal bool
}{
	rSeq:     {bth.SyndromePSNSeqErr, WCSuccess, func(c *Counters) *uint64 { return &c.PacketSeqErr }, false},
	rRNR:     {bth.RNRSyndrome(0), WCSuccess, func(c *Counters) *uint64 { return &c.SendRNRErr }, false},
	rInvReq:  {bth.SyndromeInvalidReq, WCRemInvReqErr, nil, true},
	rAccess:  {bth.SyndromeRemoteAccess, WCRemAccessErr, func(c *Counters) *uint64 { return &c.RespRemoteAccessErr }, true},
	rLocLen:  {bth.SyndromeInvalidReq, WCLocLenErr, func(c *Counters) *uint64 { return &c.RespLocalLengthErr }, true},
	rLocProt: {bth.SyndromeRemoteOpError, WCLocProtErr, nil, true},
}

// nakSyndrome counts a NAK for e and returns its syndrome.
func (q *QP) nakSyndrome(e rerr) bth.Syndrome {
	n := &nakTable[e]
	if n.count != nil {
		*n.count(q.ctr)++
	}
	if e == rRNR {
		return bth.RNRSyndrome(q.attr.MinRNRTimer)
	}
	return n.syn
}

// nak is where the responder makes its NAKs: it queues the NAK for the
// request at psn that failed with e (for rSeq, psn is ePSN), and for a
// fatal error completes the receive in progress with the table's status
// and moves the QP to ERR, keeping the responses owed before the NAK.
// After a sequence or RNR NAK, later requests draw no NAK of their own
// unless they show the requester went back (respondRC).
func (q *QP) nak(psn bth.PSN, e rerr) {
	r := &q.resp
	syn := q.nakSyndrome(e)
	switch {
	case e == rSeq:
		r.nakSent = true
	case e == rRNR:
		r.nakSent, r.oosHigh = true, psn
	case r.haveRecv:
		q.recvWC(nakTable[e].st, WCRecv, 0, 0, 0, 0, q.attr.DestQPN)
	}
	q.queueAck(psn, syn, r.msn)
	if nakTable[e].fatal {
		q.enterErr(true)
	}
}

// responder is the receive-side transport state of a QP.
type responder struct {
	items   []respItem // ring of queued responses
	ihead   uint64
	itail   uint64
	busy    int // queued new READ/atomic responses: resources in use
	res     []rdRes
	resNext uint64
	msn     uint32
	nakSent bool    // a PSN sequence NAK (or RNR NAK) was sent for ePSN ...
	oosHigh bth.PSN // ... and this is the PSN of the latest request after it
	ackCap  bth.PSN // the highest PSN an ACK may name (see ackLimit)

	rcur     curMsg
	roff     uint32 // bytes of the current message so far
	wref     memRef // WRITE target, looked up again for every packet
	haveRecv bool   // rwqe holds a receive WQE being filled
	rwqe     recvWQE
	rsg      []SGE
	ucDrop   bool // UC: dropping until the next FIRST/ONLY

	stashN int   // requests kept past a gap (Env.Stash) ...
	kept   *kept // ... there; allocated when first needed
}

// kept holds the requests a responder keeps past a gap.
type kept struct {
	slots   [stashSlots]stashed // by PSN modulo stashSlots
	high    bth.PSN             // highest PSN kept
	pkt     bth.Packet          // a kept request being executed
	ooFirst bth.PSN             // the last WRITE_FIRST seen past a gap ...
	ooRef   memRef              // ... its target ...
	ooValid bool                // ... while requests are kept
}

// stashed is a kept request: its frame in a buffer from Env.Stash, or,
// for a WRITE_MIDDLE whose payload was written to its place already,
// what the request was.
type stashed struct {
	psn    bth.PSN
	buf    []byte // the frame ...
	n      int
	placed bool   // ... or the payload went to ref at off
	ack    bool   // (placed) the A bit
	ref    memRef // (placed)
	off    uint32 // (placed)
}

func (s *stashed) used() bool { return s.buf != nil || s.placed }

// stashSlots is how far past ePSN requests are kept: enough for a
// requester's default send window (48 packets at most) and some.
const stashSlots = 64

// initResponder sizes the READ/atomic resources (max_dest_rd_atomic) and
// the response queue.
func (q *QP) initResponder(n int) {
	r := &q.resp
	r.res = make([]rdRes, n)
	r.resNext = 0
	r.items = make([]respItem, 2*n+4)
	r.ihead, r.itail, r.busy = 0, 0, 0
}

func (q *QP) resetResponder() {
	q.stashClear()
	r := &q.resp
	clear(r.items)
	clear(r.res)
	r.ihead, r.itail, r.busy, r.resNext = 0, 0, 0, 0
	r.msn, r.nakSent = 0, false
	r.rcur, r.roff, r.wref = curNone, 0, memRef{}
	r.haveRecv, r.ucDrop = false, false
}

func (r *responder) pending() bool { return r.ihead != r.itail }

func (r *responder) room() bool { return len(r.items) > 0 && r.itail-r.ihead < uint64(len(r.items)) }

func (r *responder) item(i uint64) *respItem { return &r.items[i%uint64(len(r.items))] }

// dropAll empties the response queue.
func (r *responder) dropAll() {
	clear(r.items)
	r.ihead, r.itail, r.busy = 0, 0, 0
}

// queueAck queues an ACK, or a NAK made by nak. It replaces a queued
// ACK not yet sent (coalescing): each acknowledges everything before its
// PSN.
func (q *QP) queueAck(psn bth.PSN, syn bth.Syndrome, msn uint32) {
	r := &q.resp
	if syn.Kind() == bth.AckKindACK && r.ackCap.Less(psn) {
		psn = r.ackCap // see ackLimit
	}
	if len(r.items) == 0 {
		return
	}
	if r.pending() {
		if last := r.item(r.itail - 1); last.isACK() {
			*last = respItem{kind: rkAck, psn: psn, syn: syn, msn: msn}
			q.ctr.AckCoalesced++
			return
		}
	}
	if !r.room() {
		return // the requester's timer recovers
	}
	*r.item(r.itail) = respItem{kind: rkAck, psn: psn, syn: syn, msn: msn}
	r.itail++
}

// isACK reports whether a queued response is a plain ACK, which a later
// one may replace.
func (it *respItem) isACK() bool { return it.kind == rkAck && it.syn.Kind() == bth.AckKindACK }

// flushResp sends queued responses until the queue is empty, the
// Output is full or the pacer holds a READ response back (DCQCN: what
// is queued after it waits with it, the responses going out in PSN
// order). With hold (Caps.BatchAcks, from Receive), a plain ACK queued
// last stays for a later one to replace.
func (q *QP) flushResp(now Time, hold bool) {
	r := &q.resp
	for r.pending() {
		it := r.item(r.ihead)
		if hold && r.ihead+1 == r.itail && it.isACK() {
			return
		}
		if it.kind == rkRead && !q.paceReady(now) {
			return
		}
		if !q.sendResp(now, it) {
			return
		}
		if it.kind == rkNone {
			r.ihead++
		}
	}
}

// sendResp sends the next packet of a queued response; a finished item
// gets kind rkNone.
func (q *QP) sendResp(now Time, it *respItem) bool {
	var h *bth.Headers
	var payload []byte
	switch it.kind {
	case rkAck:
		h = q.headers(bth.OpAck, it.psn, false)
		h.Syndrome, h.MSN = q.ackSyndrome(it.syn), it.msn
	case rkAtomic:
		h = q.headers(bth.OpAtomicAck, it.psn, false)
		h.Syndrome, h.MSN, h.AtomicAckOrig = q.ackSyndrome(synACK), it.msn, it.orig
	case rkRead:
		op := bth.OpReadRespMiddle
		switch {
		case it.n == 1:
			op = bth.OpReadRespOnly
		case it.k == 0:
			op = bth.OpReadRespFirst
		case it.k == it.n-1:
			op = bth.OpReadRespLast
		}
		if n := min(uint32(q.mtu), it.src.dlen); n > 0 {
			b, ok := q.mem.Remote(it.src.rkey, it.src.va, n, AccessRemoteRead)
			if !ok || uint32(len(b)) < n {
				q.readGone(it)
				return true
			}
			payload = b[:n]
		}
		h = q.headers(op, it.psn, false)
		h.Syndrome, h.MSN = q.ackSyndrome(synACK), it.msn
	default:
		return true
	}
	if !q.out.Send(h, payload) {
		return false
	}
	q.ctr.SentPkts++
	if it.kind == rkRead {
		q.paced(now, len(payload)+wireOverhead)
		it.src.va += uint64(len(payload))
		it.src.dlen -= uint32(len(payload))
		it.k++
		it.psn = it.psn.Next()
		if it.k < it.n {
			return true
		}
	}
	if it.busy {
		q.resp.busy--
	}
	it.kind = rkNone
	return true
}

// readGone handles a READ whose source is no longer accessible: its
// region was deregistered or invalidated after the request was
// accepted. What was not sent yet is refused as an R_Key violation
// would have been (a class C responder error): a remote access error
// NAK goes out in place of the next response packet, nothing queued
// after it is sent, and the QP enters ERR.
func (q *QP) readGone(it *respItem) {
	r := &q.resp
	*it = respItem{kind: rkAck, psn: it.psn, syn: q.nakSyndrome(rAccess), msn: it.msn - 1}
	for i := r.ihead + 1; i != r.itail; i++ {
		*r.item(i) = respItem{}
	}
	r.itail, r.busy = r.ihead+1, 0
	if q.state != StateErr {
		q.enterErr(true)
	}
}

// respondRC handles a request packet on an RC QP.
func (q *QP) respondRC(now Time, p *bth.Packet) {
	r := &q.resp
	psn := p.BTH().PSN()
	d := psn.Sub(q.ePSN)
	switch {
	case d < 0:
		if r.ackCap.Less(psn) {
			r.ackCap = psn
		}
		q.duplicate(p, psn)
		return
	case d > 0:
		// NAK the first request past a gap and pass over the rest
		// without an answer (dropped, or kept: stashPut), except a
		// request whose PSN is not above the previous out-of-sequence
		// one: the requester went back (or probes) and still ePSN did
		// not arrive, so the retransmission was lost too, or the NAK
		// was. It is NAKed again; requests that keep increasing after a
		// NAK are the same loss, and get no more NAKs. One NAK per
		// loss, as the IBTA and rdma_rxe have it: a lost NAK is
		// recovered by the requester's loss probe, which draws it again.
		q.ctr.OutOfSequence++
		again := r.nakSent && psn.Sub(r.oosHigh) <= 0
		if !r.nakSent || again {
			q.nak(q.ePSN, rSeq)
		}
		r.oosHigh = psn
		q.stashPut(p, psn, d)
		return
	}
	r.ackCap = psn
	e := q.execute(p, psn, true)
	q.answer(p, psn, e)
	if e == rOK && r.stashN > 0 {
		q.replay()
	}
}

// answer queues what the requester is owed for the request at psn,
// executed with outcome e.
func (q *QP) answer(p *bth.Packet, psn bth.PSN, e rerr) {
	r := &q.resp
	switch e {
	case rOK:
		k := p.Info.Kind
		if (k == bth.KindSend || k == bth.KindWrite) && p.BTH().AckReq() {
			q.queueAck(psn, synACK, r.msn)
		}
	case rDrop:
		q.ctr.DroppedPkts++
	default:
		q.nak(psn, e)
	}
}

// Kept requests. A responder may drop the requests that follow a gap
// until the missing one arrives; with Env.Stash it keeps SEND and WRITE
// requests up to stashSlots PSNs past ePSN instead, and executes them,
// in PSN order, as soon as the missing request arrives: nothing is
// executed out of order. The payload of a WRITE_MIDDLE whose WRITE_FIRST
// was seen goes straight to its place in the WRITE's target, and only a
// note of it is kept: a WRITE's middle bytes may then land before bytes
// that precede them, but its LAST packet, and so its last bytes, still
// lands last.
//
// The ACK limit. What was executed from the stash is not acknowledged
// at once: an ACK names at most the highest PSN received in sequence or
// as a duplicate (resp.ackCap), that is, a PSN the requester has sent
// since it went back. A requester that is resending its requests from
// the NAKed PSN may not expect an ACK for requests it has not resent
// yet: rdma_rxe's completer then moves its acknowledged PSN past a WQE
// without completing it, and if the resent last packet of that WQE is
// lost, it never retries (the QP hangs). So a go-back-N requester sees
// what a responder without a stash would show it, duplicates
// acknowledged one by one; a requester that knows better (completer.go's
// gentle go-back) sends the NAKed request and then its highest-PSN
// request again, and the ACK of that duplicate covers everything kept.
// For the same reason a duplicate is acknowledged up to its own PSN, not
// up to the last request executed: a requester that went back after its
// ACK timeout (the ACKs were lost) is resending too.

// stashPut keeps the request at psn, d PSNs past ePSN.
func (q *QP) stashPut(p *bth.Packet, psn bth.PSN, d int) {
	r := &q.resp
	k := p.Info.Kind
	if q.stash == nil || d >= stashSlots || (k != bth.KindSend && k != bth.KindWrite) || p.End > len(p.Frame) {
		return
	}
	if r.kept == nil {
		r.kept = new(kept)
	}
	kp := r.kept
	s := &kp.slots[psn%stashSlots]
	if s.used() {
		if s.psn == psn {
			return // kept already
		}
		q.stashFree(s) // left behind by a jump of ePSN
	}
	if k == bth.KindWrite && p.Info.Pos == bth.PosFirst {
		reth := p.RETH()
		if reth.DMALen() <= maxMessage && q.attr.AccessFlags&AccessRemoteWrite != 0 {
			kp.ooFirst, kp.ooRef, kp.ooValid = psn, memRef{rkey: reth.RKey(), va: reth.VA(), dlen: reth.DMALen()}, true
		}
	}
	if k == bth.KindWrite && p.Info.Pos == bth.PosMiddle {
		if ref, off, ok := q.placeEarly(p, psn); ok {
			*s = stashed{psn: psn, placed: true, ack: p.BTH().AckReq(), ref: ref, off: off}
			q.stashCount(psn)
			return
		}
	}
	b := q.stash.Get(p.End)
	if b == nil {
		return
	}
	*s = stashed{psn: psn, buf: b, n: copy(b, p.Frame[:p.End])}
	q.stashCount(psn)
}

func (q *QP) stashCount(psn bth.PSN) {
	r := &q.resp
	if r.stashN == 0 || r.kept.high.Less(psn) {
		r.kept.high = psn
	}
	r.stashN++
}

// placeEarly writes the payload of the WRITE_MIDDLE at psn, past ePSN,
// to its place, when the WRITE it belongs to is known: the one in
// progress, or the one whose FIRST was seen last past the gap. It
// returns the WRITE and the offset.
func (q *QP) placeEarly(p *bth.Packet, psn bth.PSN) (memRef, uint32, bool) {
	r := &q.resp
	mtu := uint32(q.mtu)
	if uint32(p.PayloadN) != mtu {
		return memRef{}, 0, false
	}
	middle := func(ref memRef, idx int) bool {
		n := (uint64(ref.dlen) + uint64(mtu) - 1) / uint64(mtu)
		return idx > 0 && uint64(idx) < n-1
	}
	var ref memRef
	idx := 0
	switch {
	case r.rcur == curWrite && middle(r.wref, int(r.roff/mtu)+psn.Sub(q.ePSN)):
		ref, idx = r.wref, int(r.roff/mtu)+psn.Sub(q.ePSN)
	case r.kept.ooValid && middle(r.kept.ooRef, psn.Sub(r.kept.ooFirst)):
		ref, idx = r.kept.ooRef, psn.Sub(r.kept.ooFirst)
	default:
		return memRef{}, 0, false
	}
	off := uint32(idx) * mtu
	b, ok := q.mem.Remote(ref.rkey, ref.va+uint64(off), mtu, AccessRemoteWrite)
	if !ok || uint32(len(b)) < mtu {
		return memRef{}, 0, false
	}
	copy(b, p.Payload())
	return ref, off, true
}

func (q *QP) stashFree(s *stashed) {
	if s.buf != nil {
		q.stash.Put(s.buf)
	}
	*s = stashed{}
	q.resp.stashN--
}

// stashClear gives every kept request back.
func (q *QP) stashClear() {
	r := &q.resp
	if r.kept == nil {
		return
	}
	for i := range r.kept.slots {
		if s := &r.kept.slots[i]; s.used() {
			q.stashFree(s)
		}
	}
	r.kept.ooValid = false
}

// replay executes the kept requests that now follow ePSN.
func (q *QP) replay() {
	r := &q.resp
	ran := false
	kp := r.kept
	for r.stashN > 0 && q.state != StateErr {
		s := &kp.slots[q.ePSN%stashSlots]
		if !s.used() || s.psn != q.ePSN {
			break
		}
		psn := q.ePSN
		if s.placed {
			ref, off, ack := s.ref, s.off, s.ack
			q.stashFree(s)
			mtu := uint32(q.mtu)
			if r.rcur != curWrite || r.wref != ref || r.roff != off || uint64(off)+uint64(mtu) >= uint64(r.wref.dlen) {
				q.nak(psn, rInvReq) // not the WRITE_MIDDLE it seemed
				return
			}
			r.roff += mtu
			q.ePSN = psn.Next()
			r.nakSent = false
			if ack {
				q.queueAck(psn, synACK, r.msn)
			}
			ran = true
			continue
		}
		buf := s.buf[:s.n]
		s.buf = nil
		q.stashFree(s)
		p := &kp.pkt
		if bth.Parse(buf, p) != nil {
			q.stash.Put(buf)
			break
		}
		e := q.execute(p, psn, true) // copies the payload out
		q.answer(p, psn, e)
		q.stash.Put(buf)
		if e != rOK {
			if e == rRNR {
				q.stashClear() // the requester goes back to psn
			}
			return
		}
		ran = true
	}
	if q.state == StateErr {
		return
	}
	if ran {
		// Everything executed is acknowledged (coalescing into an ACK
		// queued for the last A-bit request).
		q.queueAck(q.ePSN.Add(-1), synACK, r.msn)
	}
	for i := range kp.slots {
		if s := &kp.slots[i]; s.used() && s.psn.Sub(q.ePSN) <= 0 {
			q.stashFree(s) // stale: ePSN went past it
		}
	}
	if r.stashN == 0 {
		kp.ooValid = false
	}
	// Kept requests may follow another gap: the next request past
	// ePSN draws a NAK for it, as after any gap.
	r.nakSent = false
}

// execute runs an in-sequence request (RC: PSN == ePSN; UC: accepted by
// respondUC) and advances ePSN on success.
func (q *QP) execute(p *bth.Packet, psn bth.PSN, rc bool) rerr {
	r := &q.resp
	info := p.Info
	cont := info.Pos == bth.PosMiddle || info.Pos == bth.PosLast
	var e rerr
	switch info.Kind {
	case bth.KindSend:
		if (cont && r.rcur != curSend) || (!cont && r.rcur != curNone) {
			return rInvReq
		}
		e = q.execSend(p)
	case bth.KindWrite:
		if (cont && r.rcur != curWrite) || (!cont && r.rcur != curNone) {
			return rInvReq
		}
		e = q.execWrite(p)
	case bth.KindReadRequest:
		if !rc || r.rcur != curNone {
			return rInvReq
		}
		return q.execRead(p, psn)
	case bth.KindCompareSwap, bth.KindFetchAdd:
		if !rc || r.rcur != curNone {
			return rInvReq
		}
		return q.execAtomic(p, psn)
	case bth.KindFlush:
		if !rc || r.rcur != curNone {
			return rInvReq
		}
		return q.execFlush(p, psn)
	case bth.KindAtomicWrite:
		if !rc || r.rcur != curNone {
			return rInvReq
		}
		return q.execAtomicWrite(p, psn)
	default:
		return rInvReq // RESYNC: not supported
	}
	if e == rOK {
		q.ePSN = psn.Next()
		r.nakSent = false
	}
	return e
}

// lenCheck checks a SEND/WRITE packet's payload against the path MTU:
// FIRST and MIDDLE carry exactly one MTU, LAST 1 to MTU bytes, ONLY up
// to one MTU.
func lenCheck(pos bth.Position, n, mtu uint32) bool {
	switch pos {
	case bth.PosFirst, bth.PosMiddle:
		return n == mtu
	case bth.PosLast:
		return n >= 1 && n <= mtu
	}
	return n <= mtu
}

func (q *QP) execSend(p *bth.Packet) rerr {
	r := &q.resp
	info := p.Info
	n := uint32(p.PayloadN)
	if !lenCheck(info.Pos, n, uint32(q.mtu)) {
		return rInvReq
	}
	first := info.Pos == bth.PosFirst || info.Pos == bth.PosOnly
	last := info.Pos == bth.PosLast || info.Pos == bth.PosOnly
	if first {
		if !q.takeRecv() {
			return rRNR
		}
		r.roff = 0
	}
	if e := q.scatterRecv(r.roff, p.Payload()); e != rOK {
		return e
	}
	r.roff += n
	if !last {
		r.rcur = curSend
		return rOK
	}
	var flags WCFlags
	var imm, inv uint32
	if info.Imm {
		flags |= WCWithImm
		imm = p.ImmDt().Value()
	}
	if info.Inv {
		inv = p.IETH().RKey()
		if !q.mem.Invalidate(inv) {
			return rInvReq
		}
		flags |= WCWithInv
	}
	r.rcur = curNone
	r.msn++
	q.recvWC(WCSuccess, WCRecv, r.roff, flags, imm, inv, q.attr.DestQPN)
	return rOK
}

func (q *QP) execWrite(p *bth.Packet) rerr {
	r := &q.resp
	info := p.Info
	n := uint32(p.PayloadN)
	mtu := uint32(q.mtu)
	if !lenCheck(info.Pos, n, mtu) {
		return rInvReq
	}
	first := info.Pos == bth.PosFirst || info.Pos == bth.PosOnly
	last := info.Pos == bth.PosLast || info.Pos == bth.PosOnly
	ref, off := r.wref, r.roff
	if first {
		reth := p.RETH()
		ref, off = memRef{rkey: reth.RKey(), va: reth.VA(), dlen: reth.DMALen()}, 0
		if ref.dlen > maxMessage {
			return rInvReq
		}
		if q.attr.AccessFlags&AccessRemoteWrite == 0 {
			return rAccess
		}
		if ref.dlen > 0 {
			if !q.mem.Check(ref.rkey, ref.va, ref.dlen, AccessRemoteWrite, true) {
				return rAccess
			}
		}
	}
	dl := ref.dlen
	end := uint64(off) + uint64(n)
	if end > uint64(dl) || (last && end != uint64(dl)) || (!last && end == uint64(dl)) {
		return rInvReq
	}
	// The target is looked up again for every packet: a region
	// deregistered or invalidated during the WRITE is not written to.
	var dst []byte
	if n > 0 {
		b, ok := q.mem.Remote(ref.rkey, ref.va+uint64(off), n, AccessRemoteWrite)
		if !ok || uint32(len(b)) < n {
			return rAccess
		}
		dst = b
	}
	var imm uint32
	if info.Imm {
		if !q.takeRecv() {
			return rRNR
		}
		imm = p.ImmDt().Value()
	}
	copy(dst, p.Payload())
	if !last {
		r.rcur, r.wref, r.roff = curWrite, ref, uint32(end)
		return rOK
	}
	r.rcur, r.roff, r.wref = curNone, 0, memRef{}
	r.msn++
	if info.Imm {
		q.recvWC(WCSuccess, WCRecvRDMAImm, dl, WCWithImm, imm, 0, q.attr.DestQPN)
	}
	return rOK
}

// takeRes takes the next READ/atomic resource, or reports that all of
// max_dest_rd_atomic are in use.
func (q *QP) takeRes() *rdRes {
	r := &q.resp
	if len(r.res) == 0 || r.busy >= len(r.res) {
		return nil
	}
	res := &r.res[r.resNext%uint64(len(r.res))]
	r.resNext++
	return res
}

func (q *QP) execRead(p *bth.Packet, psn bth.PSN) rerr {
	r := &q.resp
	reth := p.RETH()
	dl := reth.DMALen()
	if q.attr.AccessFlags&AccessRemoteRead == 0 {
		return rAccess
	}
	if dl > maxMessage || len(r.res) == 0 || r.busy >= len(r.res) {
		return rInvReq
	}
	if !r.room() {
		return rDrop
	}
	src := memRef{rkey: reth.RKey(), va: reth.VA(), dlen: dl}
	if dl > 0 {
		if !q.mem.Check(src.rkey, src.va, dl, AccessRemoteRead, true) {
			return rAccess
		}
	}
	npkts := q.respPkts(dl)
	r.msn++
	*q.takeRes() = rdRes{valid: true, first: psn, npkts: npkts, msn: r.msn, read: src}
	q.pushRead(psn, src, npkts, r.msn, true)
	q.ePSN = psn.Add(int(npkts))
	r.nakSent = false
	return rOK
}

func (q *QP) respPkts(dl uint32) uint32 {
	if dl == 0 {
		return 1
	}
	m := uint32(q.mtu)
	return (dl + m - 1) / m
}

// endAnswers ends the READ answers still queued or going out for the
// n PSNs from psn that a duplicate READ asks for again: its own answer
// takes their place, as rdma_rxe's responder ends the answer in
// progress when asked again. Queued behind them instead, every request
// again would add a whole answer to those still to send, and a
// requester whose ACK timeout comes before an answer is out would ask
// faster than the answers drain.
func (q *QP) endAnswers(psn bth.PSN, n uint32) {
	r := &q.resp
	for i := r.ihead; i != r.itail; i++ {
		it := r.item(i)
		if it.kind != rkRead || it.k >= it.n {
			continue
		}
		rest := int(it.n - it.k) // packets still to send, from it.psn
		if !it.psn.InWindow(psn, int(n)) && !psn.InWindow(it.psn, rest) {
			continue
		}
		if it.busy {
			r.busy--
		}
		*it = respItem{}
	}
}

func (q *QP) pushRead(psn bth.PSN, src memRef, npkts, msn uint32, busy bool) bool {
	r := &q.resp
	if !r.room() {
		return false
	}
	*r.item(r.itail) = respItem{kind: rkRead, busy: busy, psn: psn, msn: msn, src: src, n: npkts}
	r.itail++
	if busy {
		r.busy++
	}
	return true
}

func (q *QP) pushAtomic(psn bth.PSN, orig uint64, msn uint32, busy bool) bool {
	r := &q.resp
	if !r.room() {
		return false
	}
	*r.item(r.itail) = respItem{kind: rkAtomic, busy: busy, psn: psn, msn: msn, orig: orig}
	r.itail++
	if busy {
		r.busy++
	}
	return true
}

func (q *QP) execAtomic(p *bth.Packet, psn bth.PSN) rerr {
	r := &q.resp
	a := p.AtomicETH()
	if q.attr.AccessFlags&AccessRemoteAtomic == 0 {
		return rAccess
	}
	if len(r.res) == 0 || r.busy >= len(r.res) || a.VA()&7 != 0 {
		return rInvReq
	}
	if !r.room() {
		return rDrop
	}
	b, ok := q.mem.Remote(a.RKey(), a.VA(), 8, AccessRemoteAtomic)
	if !ok || len(b) < 8 {
		return rAccess
	}
	orig := binary.NativeEndian.Uint64(b)
	if p.Info.Kind == bth.KindFetchAdd {
		binary.NativeEndian.PutUint64(b, orig+a.SwapAdd())
	} else if orig == a.Compare() {
		binary.NativeEndian.PutUint64(b, a.SwapAdd())
	}
	r.msn++
	*q.takeRes() = rdRes{valid: true, kind: resAtomic, first: psn, npkts: 1, msn: r.msn, orig: orig}
	q.pushAtomic(psn, orig, r.msn, true)
	q.ePSN = psn.Next()
	r.nakSent = false
	return rOK
}

// Memory placement (IBA 1.5 annex A19). FLUSH and ATOMIC_WRITE are
// checked in rdma_rxe's order, with its outcomes: rights the QP does not
// grant (remote write for ATOMIC_WRITE, the flush right of each
// placement type asked for) are an invalid request, as the IBTA has it
// for an operation a QP does not support, where READ, WRITE and the
// atomics here answer a remote access error; a bad R_Key, rights the
// region lacks or bytes outside it a remote access error; an
// ATOMIC_WRITE whose length or payload is not 8 bytes, or whose address
// is not 8-byte aligned, an invalid request. Both are answered by an
// RDMA READ response ONLY with no payload, and both hold a READ/atomic
// resource while the answer is queued, saved for duplicates.

// placedRes saves the resource of a FLUSH or ATOMIC_WRITE executed at
// psn and queues its answer. A FLUSH finds none free when a requester
// does not count FLUSHes against its max_rd_atomic (rdma_rxe's does
// not): it is answered all the same, and a duplicate of it is dropped.
func (q *QP) placedRes(psn bth.PSN) {
	r := &q.resp
	r.msn++
	res := q.takeRes()
	if res != nil {
		*res = rdRes{valid: true, kind: resPlaced, first: psn, npkts: 1, msn: r.msn}
	}
	q.pushRead(psn, memRef{}, 1, r.msn, res != nil)
	q.ePSN = psn.Next()
	r.nakSent = false
}

func (q *QP) execFlush(p *bth.Packet, psn bth.PSN) rerr {
	r := &q.resp
	f := p.FETH()
	var need Access
	if f.Placement()&uint8(FlushGlobal) != 0 {
		need |= AccessFlushGlobal
	}
	if f.Placement()&uint8(FlushPersistent) != 0 {
		need |= AccessFlushPersistent
	}
	if q.attr.AccessFlags&need != need {
		return rInvReq
	}
	reth := p.RETH()
	if reth.DMALen() > maxMessage {
		return rInvReq
	}
	if !r.room() {
		return rDrop
	}
	if !q.mem.Flush(reth.RKey(), reth.VA(), reth.DMALen(), need, f.Selectivity() == uint8(FlushMR)) {
		return rAccess
	}
	q.placedRes(psn)
	return rOK
}

func (q *QP) execAtomicWrite(p *bth.Packet, psn bth.PSN) rerr {
	r := &q.resp
	if q.attr.AccessFlags&AccessRemoteWrite == 0 {
		return rInvReq
	}
	if len(r.res) == 0 || r.busy >= len(r.res) {
		return rInvReq
	}
	reth := p.RETH()
	dst := memRef{rkey: reth.RKey(), va: reth.VA(), dlen: reth.DMALen()}
	if dst.dlen > maxMessage {
		return rInvReq
	}
	if !r.room() {
		return rDrop
	}
	if dst.dlen > 0 && !q.mem.Check(dst.rkey, dst.va, dst.dlen, AccessRemoteWrite, true) {
		return rAccess
	}
	if dst.dlen != 8 || p.PayloadN != 8 || dst.va&7 != 0 {
		return rInvReq
	}
	b, ok := q.mem.Remote(dst.rkey, dst.va, 8, AccessRemoteWrite)
	if !ok || len(b) < 8 {
		return rAccess
	}
	copy(b, p.Payload())
	q.placedRes(psn)
	return rOK
}

// duplicate answers a request whose PSN is before ePSN: SEND and WRITE
// are acknowledged again, up to their own PSN, with the current MSN, a
// READ is executed again from its saved resource, an atomic is answered
// from its saved result, a FLUSH or ATOMIC_WRITE answered again.
func (q *QP) duplicate(p *bth.Packet, psn bth.PSN) {
	r := &q.resp
	q.ctr.DuplicateRequest++
	switch p.Info.Kind {
	case bth.KindReadRequest:
		res := q.findRes(psn, resRead)
		reth := p.RETH()
		src := memRef{rkey: reth.RKey(), va: reth.VA(), dlen: reth.DMALen()}
		if res == nil || !q.dupReadFits(res, psn, src) {
			q.ctr.DroppedPkts++
			return
		}
		if src.dlen > 0 {
			// The region may have gone since the READ was first
			// executed: refused as a new READ would be.
			if !q.mem.Check(src.rkey, src.va, src.dlen, AccessRemoteRead, true) || q.attr.AccessFlags&AccessRemoteRead == 0 {
				q.nak(psn, rAccess)
				return
			}
		}
		n := q.respPkts(src.dlen)
		q.endAnswers(psn, n)
		if !q.pushRead(psn, src, n, res.msn, false) {
			q.ctr.DroppedPkts++
		}
	case bth.KindCompareSwap, bth.KindFetchAdd:
		res := q.findRes(psn, resAtomic)
		if res == nil || res.first != psn {
			q.ctr.DroppedPkts++
			return
		}
		if !q.pushAtomic(psn, res.orig, res.msn, false) {
			q.ctr.DroppedPkts++
		}
	case bth.KindFlush, bth.KindAtomicWrite:
		// Answered again, not executed again (IBA oA19-14, oA19-15 for
		// FLUSH; an ATOMIC_WRITE is not repeated either, as rdma_rxe
		// replays both). Without a saved resource it is dropped, a
		// class D error, as a duplicate atomic is.
		res := q.findRes(psn, resPlaced)
		if res == nil || res.first != psn {
			q.ctr.DroppedPkts++
			return
		}
		if !q.pushRead(psn, memRef{}, 1, res.msn, false) {
			q.ctr.DroppedPkts++
		}
	default:
		// Its own PSN, not the last executed (ePSN-1): see the ACK
		// limit.
		q.queueAck(psn, synACK, r.msn)
	}
}

// dupReadFits reports whether a duplicate READ request at psn for src
// lies within the READ saved in res, and may be executed again: its
// responses fall in the saved PSN range, it names the same R_Key, and
// its bytes are bytes of the original request (a requester asks again
// for all or, from the first response it lacks, the rest of a READ),
// starting in the original's response at psn: the responses, PSN psn
// first, carry what the original's did from there on. Anything else is
// dropped, a class D error (rdma_rxe drops what lies outside the saved
// READ): what it would read was never granted by the request being
// repeated, or would land in the wrong place.
func (q *QP) dupReadFits(res *rdRes, psn bth.PSN, src memRef) bool {
	k := psn.Sub(res.first) // ≥ 0: findRes found psn in the saved range
	if src.dlen > maxMessage || k+int(q.respPkts(src.dlen)) > int(res.npkts) {
		return false
	}
	if src.dlen == 0 {
		return true
	}
	o := res.read
	off := src.va - o.va
	return src.rkey == o.rkey && src.va >= o.va && off <= uint64(o.dlen) &&
		uint64(src.dlen) <= uint64(o.dlen)-off && off/uint64(q.mtu) == uint64(k)
}

// findRes returns the saved resource of a kind whose PSN range holds psn.
func (q *QP) findRes(psn bth.PSN, kind resKind) *rdRes {
	r := &q.resp
	for i := range r.res {
		res := &r.res[i]
		if res.valid && res.kind == kind && psn.InWindow(res.first, int(res.npkts)) {
			return res
		}
	}
	return nil
}

// scatterRecv writes data into the receive WQE in progress at byte off.
func (q *QP) scatterRecv(off uint32, data []byte) rerr {
	r := &q.resp
	if uint64(off)+uint64(len(data)) > r.rwqe.length {
		return rLocLen
	}
	if !scatter(q.mem, r.rwqe.sg, off, data, AccessLocalWrite) {
		return rLocProt
	}
	return rOK
}

// respondUC handles a packet on a UC QP: no ACKs; after a PSN gap the
// message in progress is dropped and so is everything up to the next
// FIRST or ONLY packet.
func (q *QP) respondUC(p *bth.Packet) {
	r := &q.resp
	psn := p.BTH().PSN()
	pos := p.Info.Pos
	start := pos == bth.PosFirst || pos == bth.PosOnly
	if psn != q.ePSN || r.ucDrop {
		if psn != q.ePSN {
			q.ctr.OutOfSequence++
		}
		r.rcur, r.roff = curNone, 0 // the receive WQE is kept for the next message
		if !start {
			r.ucDrop = true
			q.ePSN = psn.Next()
			q.ctr.DroppedPkts++
			return
		}
		r.ucDrop = false
	}
	q.ePSN = psn.Next()
	switch e := q.execute(p, psn, false); e {
	case rOK:
	case rLocLen, rLocProt:
		st := WCLocLenErr
		if e == rLocProt {
			st = WCLocProtErr
		}
		if e == rLocLen {
			q.ctr.RespLocalLengthErr++
		}
		if r.haveRecv {
			q.recvWC(st, WCRecv, 0, 0, 0, 0, q.attr.DestQPN)
		}
		q.enterErr(false)
	default:
		q.ctr.DroppedPkts++
		r.rcur, r.roff = curNone, 0
		r.ucDrop = !(pos == bth.PosLast || pos == bth.PosOnly)
	}
}
