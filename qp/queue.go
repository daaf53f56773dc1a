package qp

import (
	"fmt"
	"net/netip"

	"github.com/uroce/uroce/bth"
)

// Work queues are rings of fixed slots allocated when the QP (or SRQ) is
// created. Scatter/gather lists and inline data live in flat arrays
// sliced per slot, so posting and completing work never allocates.

// sendWQE is one posted send work request and its transport progress.
type sendWQE struct {
	wr     SendWR // SG points into the queue's SGE storage
	inline []byte // inline data (slot storage), nil unless SendInline
	length uint32 // total bytes of the message

	first    bth.PSN // first PSN, assigned when the request starts
	npkts    uint32  // PSNs consumed: packets, or READ response packets
	rcvd     uint32  // READ: response packets received in order ...
	keptFrom uint32  // ... and kept past the first gap: packets keptFrom on ...
	kept     uint32  // ... this many (keepPast)
	rdAtomic bool    // READ or atomic: needs a response, holds a credit
	cost0    uint64  // send window cost of the requests started before it
	done     bool    // acknowledged (or failed): ready to retire in order
	status   WCStatus
	ask      askState // READ or atomic: its last request (completer.go)
	// awData holds the inline data of an ATOMIC_WRITE, which has its 8
	// bytes whatever the QP's max_inline.
	awData [8]byte
}

// askState is what the last request of a READ or atomic asked for, and
// whether another is due. Responses tell which request they answer only
// by their order: the responder answers requests in the order they
// arrive (see READ recovery in completer.go).
type askState struct {
	seq   uint64  // the last request was the seq'th READ or atomic request sent (QP.rd.seq) ...
	from  uint32  // ... and asked for the responses from this packet on ...
	mark  bth.PSN // ... when sentHigh was this: a response from mark on answers a later request
	prev  uint64  // the latest earlier request whose answer may still come ...
	older uint8   // ... and how many such answers there may be, after packet from
	gap   bool    // the answers before the last one lack packet from (askGap)
	due   bool    // a request for the responses from rcvd on is to be sent (sendAsk)
}

// last returns the last PSN of the request.
func (w *sendWQE) last() bth.PSN { return w.first.Add(int(w.npkts) - 1) }

// sendQueue is the ring of send WQEs. Counters only grow; the slot of
// counter i is i modulo the capacity.
//
//	head ≤ next ≤ tail
//	[head, next): started (PSNs assigned), not yet retired
//	[next, tail): posted, not yet started
type sendQueue struct {
	slots     []sendWQE
	sges      []SGE
	inl       []byte
	avs       []udDest // UD: each slot's destination
	maxSGE    int
	maxInline int
	head      uint64
	next      uint64
	tail      uint64
	// base counts the WQEs retired before the last clear (a reset
	// drops what was posted): base+head only grows (SendRetired).
	base uint64
	// skipped counts the type 1 binds (LocalBind.Type1) retired or
	// dropped: SendRetired leaves them out.
	skipped uint64
}

func (s *sendQueue) init(n, maxSGE, maxInline int) {
	s.slots = make([]sendWQE, n)
	s.sges = make([]SGE, n*maxSGE)
	if maxInline > 0 {
		s.inl = make([]byte, n*maxInline)
	}
	s.maxSGE, s.maxInline = maxSGE, maxInline
}

func (s *sendQueue) at(i uint64) *sendWQE { return &s.slots[i%uint64(len(s.slots))] }

// av returns the destination of the WQE in counter i (UD).
func (s *sendQueue) av(i uint64) *udDest { return &s.avs[i%uint64(len(s.avs))] }

// udDest is a UD request's address handle, copied at post time without
// pointers (netip.Addr holds one): storing a pointer taken from the
// SendWR would make every caller's work request, scatter/gather list
// included, escape to the heap.
type udDest struct {
	path     bth.L2L3 // SrcIP and DstIP unset
	src, dst [16]byte
	v4       bool
}

func (d *udDest) set(p *bth.L2L3) {
	d.path = bth.L2L3{DstMAC: p.DstMAC, SrcMAC: p.SrcMAC, HasVLAN: p.HasVLAN, VLANTCI: p.VLANTCI,
		Version: p.Version, TrafficClass: p.TrafficClass, FlowLabel: p.FlowLabel, HopLimit: p.HopLimit,
		IPID: p.IPID, IPFlags: p.IPFlags, SrcPort: p.SrcPort, DstPort: p.DstPort, UDPChecksum: p.UDPChecksum}
	d.src, d.dst, d.v4 = p.SrcIP.As16(), p.DstIP.As16(), p.DstIP.Is4()
}

// fill writes the destination into h.
func (d *udDest) fill(h *bth.L2L3) {
	*h = d.path
	if d.v4 {
		h.SrcIP = netip.AddrFrom16(d.src).Unmap()
		h.DstIP = netip.AddrFrom16(d.dst).Unmap()
	} else {
		h.SrcIP = netip.AddrFrom16(d.src)
		h.DstIP = netip.AddrFrom16(d.dst)
	}
}

func (s *sendQueue) full() bool { return s.tail-s.head >= uint64(len(s.slots)) }

// clear empties the ring without completions.
func (s *sendQueue) clear() {
	for i := s.head; i != s.tail; i++ {
		s.retiring(s.at(i))
	}
	s.base += s.tail
	s.head, s.next, s.tail = 0, 0, 0
	for i := range s.slots {
		s.slots[i] = sendWQE{}
	}
}

// retiring takes note of w leaving the queue (retired, flushed or
// dropped): a type 1 bind is not one of the requests SendRetired counts.
func (s *sendQueue) retiring(w *sendWQE) {
	if w.wr.Opcode == WRBindMW && w.wr.Bind.Type1 {
		s.skipped++
	}
}

// push copies wr into the tail slot. The caller has checked capacity and
// the SGE count.
func (s *sendQueue) push(wr *SendWR, length uint32, inline bool, mem Memory) *sendWQE {
	i := s.tail % uint64(len(s.slots))
	w := &s.slots[i]
	// Field by field: storing wr.SG would make every caller's SG array
	// escape to the heap.
	*w = sendWQE{length: length, wr: SendWR{ID: wr.ID, Opcode: wr.Opcode, Flags: wr.Flags, Imm: wr.Imm,
		InvRKey: wr.InvRKey, RemoteAddr: wr.RemoteAddr, RKey: wr.RKey, CompareAdd: wr.CompareAdd,
		Swap: wr.Swap, FlushType: wr.FlushType, FlushLevel: wr.FlushLevel, FlushLen: wr.FlushLen,
		RemoteQPN: wr.RemoteQPN, RemoteQKey: wr.RemoteQKey, Bind: wr.Bind}}
	if s.avs != nil && wr.AH != nil {
		s.avs[i].set(&wr.AH.Path)
	}
	if inline {
		var buf []byte
		if wr.Opcode == WRAtomicWrite {
			buf = w.awData[:length]
		} else {
			buf = s.inl[int(i)*s.maxInline : int(i)*s.maxInline+int(length)]
		}
		off := 0
		if wr.Inline != nil {
			copy(buf, wr.Inline)
			w.inline = buf
			s.tail++
			return w
		}
		for _, sg := range wr.SG {
			// Inline data is read at post time; a bad key is caught here.
			if b, ok := mem.Local(sg.LKey, sg.Addr, sg.Length, 0); ok {
				off += copy(buf[off:], b)
			} else {
				w.status = WCLocProtErr
			}
		}
		w.inline = buf
	} else {
		sg := s.sges[int(i)*s.maxSGE : int(i)*s.maxSGE+len(wr.SG)]
		copy(sg, wr.SG)
		w.wr.SG = sg
	}
	s.tail++
	return w
}

// recvWQE is one posted receive work request.
type recvWQE struct {
	id     uint64
	sg     []SGE // slot storage
	length uint64
}

// recvQueue is a ring of receive WQEs, used by a QP or an SRQ.
type recvQueue struct {
	slots  []recvWQE
	sges   []SGE
	maxSGE int
	head   uint64
	tail   uint64
}

func (r *recvQueue) init(n, maxSGE int) {
	r.slots = make([]recvWQE, n)
	r.sges = make([]SGE, n*maxSGE)
	r.maxSGE = maxSGE
}

func (r *recvQueue) len() int { return int(r.tail - r.head) }

func (r *recvQueue) clear() { r.head, r.tail = 0, 0 }

func (r *recvQueue) post(wr *RecvWR) error {
	if len(wr.SG) > r.maxSGE {
		return fmt.Errorf("%d sges, max %d: %w", len(wr.SG), r.maxSGE, ErrTooManySGE)
	}
	if r.tail-r.head >= uint64(len(r.slots)) {
		return ErrQueueFull
	}
	i := int(r.tail % uint64(len(r.slots)))
	sg := r.sges[i*r.maxSGE : i*r.maxSGE+len(wr.SG)]
	copy(sg, wr.SG)
	var n uint64
	for _, e := range wr.SG {
		n += uint64(e.Length)
	}
	r.slots[i] = recvWQE{id: wr.ID, sg: sg, length: n}
	r.tail++
	return nil
}

// pop copies the oldest WQE into dst (whose SG storage is dstSG) and
// removes it.
func (r *recvQueue) pop(dst *recvWQE, dstSG []SGE) bool {
	if r.head == r.tail {
		return false
	}
	w := &r.slots[r.head%uint64(len(r.slots))]
	n := copy(dstSG, w.sg)
	*dst = recvWQE{id: w.id, sg: dstSG[:n], length: w.length}
	r.head++
	return true
}

// SRQ is a shared receive queue. It is used only from the goroutine that
// owns the QPs attached to it.
type SRQ struct {
	q        recvQueue
	limit    int
	limitHit bool
}

// NewSRQ returns a shared receive queue holding up to maxWR receives of
// up to maxSGE scatter/gather elements each.
func NewSRQ(maxWR, maxSGE int) *SRQ {
	if maxWR < 1 {
		maxWR = 1
	}
	if maxSGE < 1 {
		maxSGE = 1
	}
	s := &SRQ{}
	s.q.init(maxWR, maxSGE)
	return s
}

// PostRecv queues a receive work request.
func (s *SRQ) PostRecv(wr *RecvWR) error {
	if err := s.q.post(wr); err != nil {
		return fmt.Errorf("post srq recv: %w", err)
	}
	return nil
}

// SetLimit arms the SRQ limit (srq_limit): when the number of posted
// receives drops below limit, LimitReached reports it once. Zero disarms.
func (s *SRQ) SetLimit(limit int) { s.limit, s.limitHit = limit, false }

// LimitReached reports (once) that the receives fell below the armed
// limit (IBV_EVENT_SRQ_LIMIT_REACHED); the limit is then disarmed.
func (s *SRQ) LimitReached() bool {
	if s.limitHit {
		s.limitHit = false
		return true
	}
	return false
}

// Resize gives the SRQ room for maxWR receives, keeping those posted in
// their order; ErrQueueFull when more are posted than maxWR.
func (s *SRQ) Resize(maxWR int) error {
	if maxWR < s.q.len() {
		return fmt.Errorf("resize srq: %d receives posted, more than %d: %w", s.q.len(), maxWR, ErrQueueFull)
	}
	var q recvQueue
	q.init(max(maxWR, 1), s.q.maxSGE)
	var w recvWQE
	sg := make([]SGE, s.q.maxSGE)
	for s.q.pop(&w, sg) {
		q.post(&RecvWR{ID: w.id, SG: w.sg}) // room and SGEs were checked when it was posted
	}
	s.q = q
	return nil
}

// Len returns the number of receives posted and not consumed.
func (s *SRQ) Len() int { return s.q.len() }

// MaxSGE returns the SRQ's scatter/gather limit per receive.
func (s *SRQ) MaxSGE() int { return s.q.maxSGE }

func (s *SRQ) pop(dst *recvWQE, dstSG []SGE) bool {
	if !s.q.pop(dst, dstSG) {
		return false
	}
	if s.limit > 0 && s.q.len() < s.limit {
		s.limit = 0
		s.limitHit = true
	}
	return true
}
