package stack

// Backed regions (RegisterMRBacked) have no buffer the QP could copy
// into or out of. Each QP's qp.Memory hands it the bytes of one packet
// in its engine's bounce buffer instead: read from the Backing when the
// QP asks for them (unless it overwrites them all, see bounceMode), and
// written back after the QP wrote into them.
//
// The QP asks for the bytes of one packet at a time and is done with
// them (it copied into or out of them) before it calls anything else:
// Memory again, Output or CompletionSink (qp/requester.go gather,
// gatherSlow and scatterSend, qp/responder.go execWrite, placeEarly,
// scatterRecv, execAtomic and sendResp, qp/ud.go). One buffer per engine
// with at most one write-back pending is therefore enough. The pending
// write-back is done
//
//   - before the buffer is used again (the next backed access),
//   - before a completion is pushed to a CQ (qpSink.Complete): a
//     completion is never seen before the data it announces,
//   - before the engine transmits (engine.flush): no ACK or response
//     leaves before the data it acknowledges is in place,
//   - when the engine lets go of the QP (releaseCur), inside the batch:
//     Deregister, which waits for the batch, then knows that no engine
//     calls the backing of a region it removed.
//
// Verbs goroutines reach a QP's memory only to copy inline data named
// by SGEs when the request is posted (qp's sendQueue.push), under the
// QP's lock: they read into a buffer of the QP's own, holding the
// region's backMu so that Deregister can wait for them.

// bounceLen is the largest access a QP makes at once: one packet's
// payload at the largest path MTU.
const bounceLen = 4096

// pendingWrite is the write-back an engine owes: n bytes of its bounce
// buffer to offset off of mr's backing.
type pendingWrite struct {
	mr  *MR
	off int64
	n   int
}

// bounceMode is what the QP does with the bytes of a backed access.
type bounceMode uint8

const (
	// bounceRead: the QP reads them (payloads it sends: SEND and WRITE
	// data, READ responses).
	bounceRead bounceMode = iota
	// bounceReadWrite: it may write them (a peer's WRITE landing in
	// the region, an atomic). They are read first: execWrite may get
	// the bytes of a WRITE and then give up (an RNR NAK for a WRITE
	// with immediate data and no receive posted), and the write-back
	// then puts back what was there.
	bounceReadWrite
	// bounceWrite: it overwrites them all (local writes: receives,
	// READ responses and atomic results, qp's scatterRecv and
	// scatterSend, see qp.Memory), so nothing is read first.
	bounceWrite
)

// bounceIn brings n bytes at offset off of mr's backing into the bounce
// buffer and returns them; the write modes owe a write-back.
func (e *engine) bounceIn(mr *MR, off int64, n uint32, mode bounceMode) ([]byte, bool) {
	e.writeBack()
	if n > bounceLen {
		return nil, false
	}
	if e.bounce == nil {
		e.bounce = make([]byte, bounceLen)
	}
	b := e.bounce[:n:n]
	if n == 0 {
		return b, true
	}
	if mode != bounceWrite {
		if k, _ := mr.back.ReadAt(b, off); k != len(b) { // a full read may come with io.EOF
			e.c.backingErr++
			return nil, false
		}
	}
	if mode != bounceRead {
		e.owed = pendingWrite{mr: mr, off: off, n: int(n)}
	}
	return b, true
}

// writeBack does the write-back the engine owes, if any. A failure is
// counted: the QP took the access as done, as an RNIC writing to pages
// a process unmapped would.
func (e *engine) writeBack() {
	w := e.owed
	if w.mr == nil {
		return
	}
	e.owed = pendingWrite{}
	if k, err := w.mr.back.WriteAt(e.bounce[:w.n], w.off); err != nil || k != w.n {
		e.c.backingErr++
	}
}

// qpMemory is a QP's qp.Memory: its PD's regions, the bytes of backed
// ones brought through the QP's engine.
type qpMemory struct {
	q *QP
	// inl holds inline data read from backed regions at post time, on
	// verbs goroutines (guarded by the QP's lock).
	inl []byte
}

// Local implements qp.Memory.
func (m *qpMemory) Local(lkey uint32, addr uint64, length uint32, need Access) ([]byte, bool) {
	mr := m.q.pd.mem.localMR(lkey, need)
	if mr == nil {
		return nil, false
	}
	if mr.back == nil {
		return mr.slice(addr, length)
	}
	mode := bounceRead
	if need&AccessLocalWrite != 0 {
		mode = bounceWrite
	}
	return m.backed(mr, addr, length, mode)
}

// Remote implements qp.Memory. A zero-length access is not checked
// (IBTA 9.4.4).
func (m *qpMemory) Remote(rkey uint32, va uint64, length uint32, need Access) ([]byte, bool) {
	if length == 0 {
		return emptyBytes, true
	}
	mr, lo, size := m.q.pd.mem.remoteMR(rkey, need, m.q)
	if mr == nil || !within(lo, size, va, length) {
		return nil, false
	}
	if mr.back == nil {
		return mr.slice(va, length)
	}
	mode := bounceRead
	if need&(AccessRemoteWrite|AccessRemoteAtomic) != 0 {
		mode = bounceReadWrite
	}
	return m.backed(mr, va, length, mode)
}

// Check implements qp.Memory.
func (m *qpMemory) Check(key uint32, addr uint64, length uint32, need Access, remote bool) bool {
	return m.q.pd.mem.check(key, addr, length, need, remote, m.q)
}

// Flush implements qp.Memory.
func (m *qpMemory) Flush(rkey uint32, va uint64, length uint32, need Access, whole bool) bool {
	return m.q.pd.mem.flush(rkey, va, length, need, whole, m.q)
}

// Invalidate implements qp.Memory.
func (m *qpMemory) Invalidate(rkey uint32) bool { return m.q.pd.mem.Invalidate(rkey) }

// backed returns the bytes [va, va+n) of the backed region mr.
func (m *qpMemory) backed(mr *MR, va uint64, n uint32, mode bounceMode) ([]byte, bool) {
	off, ok := mr.span(va, n)
	if !ok {
		return nil, false
	}
	q := m.q
	if q.inEngine {
		return q.eng.Load().bounceIn(mr, off, n, mode)
	}
	if mode != bounceRead {
		// Only engines write (a write-back needs their batch); verbs
		// calls only read inline data.
		return nil, false
	}
	if len(m.inl) < int(n) {
		m.inl = make([]byte, max(int(n), q.init.MaxInline))
	}
	b := m.inl[:n:n]
	mr.backMu.RLock()
	defer mr.backMu.RUnlock()
	if !mr.valid.Load() {
		return nil, false
	}
	if k, _ := mr.back.ReadAt(b, off); k != len(b) {
		q.dev.backingErr.Add(1)
		return nil, false
	}
	return b, true
}
