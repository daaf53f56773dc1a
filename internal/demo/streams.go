package demo

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"time"

	"github.com/uroce/uroce/stack"
)

// testTamper, set by tests, may change the memory of either side just
// before an RC message is checked, to show that the check fails.
var testTamper func(op Op, i int, s *session)

// atomStart is the initial value of the atomics' target word.
const atomStart = 0x1000

// rcStream drives one RC operation: message i goes from (or lands in) A's
// slot i and B's slot i; SEND and WRITE_WITH_IMM consume B's receive i.
type rcStream struct {
	s      *session
	op     Op
	qa, qb *stack.QP
	size   int
	recvs  bool // B gets a receive completion per message
	next   int  // next message to post
	done   int  // messages completed at A
	recvd  int  // receive completions verified at B
	sg     [1]stack.SGE
	wr     stack.SendWR
	rwr    stack.RecvWR
}

func (s *session) runRC(ctx context.Context, op Op) (OpResult, error) {
	qa, qb, err := s.connect(stack.RC)
	if err != nil {
		return OpResult{}, err
	}
	defer qa.Destroy()
	defer qb.Destroy()
	st := &rcStream{s: s, op: op, qa: qa, qb: qb, size: s.w.Size, recvs: op == RCSend || op == RCWriteImm}
	if op.atomic() {
		st.size = 8
		binary.LittleEndian.PutUint64(s.b.buf[s.atomic:], atomStart)
	}
	if op == RCRead {
		for k := 0; k < s.slots; k++ {
			copy(s.b.buf[s.slot(k):], s.pattern(k, st.size))
		}
	}
	if st.recvs {
		for k := 0; k < s.slots; k++ {
			if err := st.postRecv(k); err != nil {
				return OpResult{}, err
			}
		}
	}
	r := OpResult{Op: op, Size: st.size}
	if s.w.Latency > 0 {
		lat := make([]time.Duration, 0, s.w.Latency)
		if err := st.stream(ctx, s.w.Latency, 1, &lat); err != nil {
			return r, err
		}
		r.Latency = latencyOf(lat)
	}
	start := time.Now()
	if err := st.stream(ctx, s.w.Count, s.w.Window, nil); err != nil {
		return r, err
	}
	r.Elapsed = time.Since(start)
	r.Messages = s.w.Count
	r.Bytes = int64(s.w.Count) * int64(st.size)
	if op.atomic() {
		n := uint64(st.next)
		want := atomStart + n
		if op == RCFetchAdd {
			want = atomStart + n*(n+1)/2
		}
		if got := binary.LittleEndian.Uint64(s.b.buf[s.atomic:]); got != want {
			return r, fmt.Errorf("target word %#x after %d operations, want %#x: %w", got, n, want, ErrData)
		}
	}
	return r, nil
}

// postRecv posts B's receive i into slot i.
func (st *rcStream) postRecv(i int) error {
	st.rwr = stack.RecvWR{ID: uint64(i)}
	if st.op == RCSend {
		st.sg[0] = st.s.b.mr.SGE(uint64(st.s.slot(i)), uint32(st.size))
		st.rwr.SG = st.sg[:]
	}
	return st.qb.PostRecv(&st.rwr)
}

// post posts message i at A.
func (st *rcStream) post(i int) error {
	s := st.s
	a, b := s.a, s.b
	off := s.slot(i)
	st.wr = stack.SendWR{ID: uint64(i), Flags: stack.SendSignaled,
		Remote: stack.RemoteAddr{Addr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()}}
	st.sg[0] = a.mr.SGE(uint64(off), uint32(st.size))
	st.wr.SG = st.sg[:]
	switch st.op {
	case RCSend, RCWrite, RCWriteImm:
		copy(a.buf[off:], s.pattern(i, st.size))
		st.wr.Op = stack.OpWrite
		switch st.op {
		case RCSend:
			st.wr.Op = stack.OpSend
		case RCWriteImm:
			st.wr.Op, st.wr.Imm = stack.OpWriteWithImm, uint32(i)
		}
	case RCRead:
		clear(a.buf[off : off+st.size])
		st.wr.Op = stack.OpRead
	case RCCmpSwap, RCFetchAdd:
		clear(a.buf[off : off+8])
		st.wr.Remote.Addr = b.mr.Addr() + uint64(s.atomic)
		if st.op == RCCmpSwap {
			st.wr.Op, st.wr.CompareAdd, st.wr.Swap = stack.OpCompareSwap, atomStart+uint64(i), atomStart+uint64(i)+1
		} else {
			st.wr.Op, st.wr.CompareAdd = stack.OpFetchAdd, uint64(i)+1
		}
	}
	if st.op == RCSend {
		st.wr.Remote = stack.RemoteAddr{}
	}
	return st.qa.PostSend(&st.wr)
}

// completed checks message i once A has its completion.
func (st *rcStream) completed(i int, wc *stack.WC) error {
	s := st.s
	if wc.Status != stack.WCSuccess {
		return fmt.Errorf("message %d completed with status %v (vendor error %#x)", i, wc.Status, wc.VendErr)
	}
	if wc.ID != uint64(i) {
		return fmt.Errorf("completion for message %d arrived while %d was expected", wc.ID, i)
	}
	if testTamper != nil {
		testTamper(st.op, i, s)
	}
	off := s.slot(i)
	var got, want []byte
	switch st.op {
	case RCWrite:
		got, want = s.b.buf[off:off+st.size], s.pattern(i, st.size)
	case RCRead:
		got, want = s.a.buf[off:off+st.size], s.pattern(i%s.slots, st.size)
	case RCCmpSwap, RCFetchAdd:
		v := binary.LittleEndian.Uint64(s.a.buf[off:])
		w := atomStart + uint64(i)
		if st.op == RCFetchAdd {
			w = atomStart + uint64(i)*uint64(i+1)/2
		}
		if v != w {
			return fmt.Errorf("message %d returned %#x, want %#x: %w", i, v, w, ErrData)
		}
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("message %d: %w", i, ErrData)
	}
	return nil
}

// received checks B's receive completion of message i and posts the
// receive that takes its slot.
func (st *rcStream) received(i int, wc *stack.WC) error {
	s := st.s
	switch {
	case wc.Status != stack.WCSuccess:
		return fmt.Errorf("receive %d completed with status %v", i, wc.Status)
	case wc.ID != uint64(i):
		return fmt.Errorf("receive %d completed while %d was expected", wc.ID, i)
	case int(wc.ByteLen) != st.size:
		return fmt.Errorf("receive %d: %d bytes, want %d: %w", i, wc.ByteLen, st.size, ErrData)
	case st.op == RCWriteImm && (wc.Opcode != stack.WCRecvRDMAImm || wc.Flags&stack.WCWithImm == 0 || wc.Imm != uint32(i)):
		return fmt.Errorf("receive %d: opcode %d, immediate %d (flags %#x): %w", i, wc.Opcode, wc.Imm, wc.Flags, ErrData)
	case st.op == RCSend && wc.Opcode != stack.WCRecv:
		return fmt.Errorf("receive %d: opcode %d, want RECV", i, wc.Opcode)
	}
	if testTamper != nil {
		testTamper(st.op, i, s)
	}
	off := s.slot(i)
	if !bytes.Equal(s.b.buf[off:off+st.size], s.pattern(i, st.size)) {
		return fmt.Errorf("message %d as received: %w", i, ErrData)
	}
	return st.postRecv(i + s.slots)
}

// stream runs n messages with up to window in flight. With lat, window
// must be 1 and lat receives each message's time from post to completion.
func (st *rcStream) stream(ctx context.Context, n, window int, lat *[]time.Duration) error {
	s := st.s
	end := st.next + n
	var posted time.Time
	for st.done < end || st.recvs && st.recvd < end {
		for st.next < end && st.next-st.done < window {
			if lat != nil {
				posted = time.Now()
			}
			if err := st.post(st.next); err != nil {
				return fmt.Errorf("post message %d: %w", st.next, err)
			}
			st.next++
		}
		progress := false
		k := s.a.scq.Poll(s.wc)
		for j := 0; j < k; j++ {
			if lat != nil {
				*lat = append(*lat, time.Since(posted))
			}
			if err := st.completed(st.done, &s.wc[j]); err != nil {
				return err
			}
			st.done++
			progress = true
		}
		if st.recvs {
			k := s.b.rcq.Poll(s.wc)
			for j := 0; j < k; j++ {
				if err := st.received(st.recvd, &s.wc[j]); err != nil {
					return err
				}
				st.recvd++
				progress = true
			}
		}
		if progress {
			continue
		}
		cq := s.a.scq
		if st.done == end {
			cq = s.b.rcq
		}
		if err := s.wait(ctx, cq); err != nil {
			return fmt.Errorf("%d of %d messages completed, %d received: %w", st.done, end, st.recvd, err)
		}
	}
	return nil
}

// wait waits for a completion on cq: a short spin first (completions of
// fast operations come within microseconds), then blocking.
func (s *session) wait(ctx context.Context, cq *stack.CQ) error {
	for i := 0; i < 50; i++ {
		if cq.Len() > 0 {
			return nil
		}
		runtime.Gosched()
	}
	wctx, cancel := context.WithTimeout(ctx, s.w.Stall)
	defer cancel()
	if err := cq.Wait(wctx); err != nil {
		if ctx.Err() == nil && wctx.Err() != nil {
			return fmt.Errorf("no progress for %v", s.w.Stall)
		}
		return err
	}
	return nil
}

// waitSends waits for n signalled completions at A, in order from first.
func (s *session) waitSends(ctx context.Context, first, n int) error {
	for got := 0; got < n; {
		k := s.a.scq.Poll(s.wc[:min(len(s.wc), n-got)])
		for j := 0; j < k; j++ {
			wc := &s.wc[j]
			if wc.Status != stack.WCSuccess || wc.ID != uint64(first+got) {
				return fmt.Errorf("message %d: completion %d with status %v", first+got, wc.ID, wc.Status)
			}
			got++
		}
		if k == 0 {
			if err := s.wait(ctx, s.a.scq); err != nil {
				return fmt.Errorf("%d of %d sends completed: %w", got, n, err)
			}
		}
	}
	return nil
}

// runUC writes Count messages over UC, in rounds of one per slot: B's
// slots are cleared, A writes the round, and B's memory is checked until
// every message is there or nothing changed for LossWait.
func (s *session) runUC(ctx context.Context) (OpResult, error) {
	qa, qb, err := s.connect(stack.UC)
	if err != nil {
		return OpResult{}, err
	}
	defer qa.Destroy()
	defer qb.Destroy()
	size := s.w.Size
	r := OpResult{Op: UCWrite, Size: size}
	ok := make([]bool, s.slots)
	got := make([]byte, size)
	var sg [1]stack.SGE
	start := time.Now()
	for base := 0; base < s.w.Count; base += s.slots {
		m := min(s.slots, s.w.Count-base)
		for j := 0; j < m; j++ {
			clear(s.b.buf[s.slot(j) : s.slot(j)+size])
			ok[j] = false
		}
		for j := 0; j < m; j++ {
			i := base + j
			copy(s.a.buf[s.slot(j):], s.pattern(i, size))
			sg[0] = s.a.mr.SGE(uint64(s.slot(j)), uint32(size))
			wr := stack.SendWR{ID: uint64(i), Op: stack.OpWrite, Flags: stack.SendSignaled, SG: sg[:],
				Remote: stack.RemoteAddr{Addr: s.b.mr.Addr() + uint64(s.slot(j)), RKey: s.b.mr.RKey()}}
			if err := qa.PostSend(&wr); err != nil {
				return r, fmt.Errorf("post message %d: %w", i, err)
			}
		}
		if err := s.waitSends(ctx, base, m); err != nil {
			return r, err
		}
		left, last := m, time.Now()
		for left > 0 && time.Since(last) < s.w.LossWait {
			for j := 0; j < m; j++ {
				if ok[j] {
					continue
				}
				// No completion tells when the engine is done writing
				// a UC WRITE: ReadAt reads between its batches.
				if _, err := s.b.mr.ReadAt(got, int64(s.slot(j))); err != nil {
					return r, err
				}
				if bytes.Equal(got, s.pattern(base+j, size)) {
					ok[j] = true
					left--
					last = time.Now()
				}
			}
			if left > 0 {
				if err := ctx.Err(); err != nil {
					return r, err
				}
				time.Sleep(20 * time.Microsecond)
			}
		}
		r.Messages += m - left
		r.Lost += left
	}
	r.Elapsed = time.Since(start)
	r.Bytes = int64(r.Messages) * int64(size)
	if r.Lost > 0 && !s.w.Lossy {
		return r, fmt.Errorf("%d of %d messages did not arrive intact: %w", r.Lost, s.w.Count, ErrData)
	}
	return r, nil
}

// runUD sends Count datagrams of the path MTU at most over UD, in rounds
// of one per slot, with an immediate numbering them; B keeps a receive
// posted in every slot.
func (s *session) runUD(ctx context.Context) (OpResult, error) {
	qa, qb, err := s.connect(stack.UD)
	if err != nil {
		return OpResult{}, err
	}
	defer qa.Destroy()
	defer qb.Destroy()
	size := s.ud
	r := OpResult{Op: UDSend, Size: size}
	ah, err := s.a.pd.CreateAH(stack.AHAttr{DGID: s.gid(s.b), SGIDIndex: s.a.gid})
	if err != nil {
		return r, err
	}
	defer ah.Destroy()
	var sg [1]stack.SGE
	post := func(k int) error {
		sg[0] = s.b.mr.SGE(uint64(s.slot(k)), uint32(size+grh))
		return qb.PostRecv(&stack.RecvWR{ID: uint64(k), SG: sg[:]})
	}
	for k := 0; k < s.slots; k++ {
		if err := post(k); err != nil {
			return r, err
		}
	}
	seen := make([]bool, s.slots)
	start := time.Now()
	for base := 0; base < s.w.Count; base += s.slots {
		m := min(s.slots, s.w.Count-base)
		clear(seen)
		for j := 0; j < m; j++ {
			i := base + j
			copy(s.a.buf[s.slot(j):], s.pattern(i, size))
			sg[0] = s.a.mr.SGE(uint64(s.slot(j)), uint32(size))
			wr := stack.SendWR{ID: uint64(i), Op: stack.OpSendWithImm, Flags: stack.SendSignaled, SG: sg[:], Imm: uint32(i),
				AH: ah, RemoteQPN: qb.QPN(), RemoteQKey: qkey}
			if err := qa.PostSend(&wr); err != nil {
				return r, fmt.Errorf("post message %d: %w", i, err)
			}
		}
		if err := s.waitSends(ctx, base, m); err != nil {
			return r, err
		}
		got, last := 0, time.Now()
		for got < m && time.Since(last) < s.w.LossWait {
			k := s.b.rcq.Poll(s.wc)
			for j := 0; j < k; j++ {
				wc := &s.wc[j]
				slot := int(wc.ID)
				if wc.Status != stack.WCSuccess {
					return r, fmt.Errorf("receive in slot %d completed with status %v", slot, wc.Status)
				}
				i := int(wc.Imm)
				off := s.slot(slot) + grh
				switch {
				case wc.Flags&stack.WCWithImm == 0 || i < base || i >= base+m:
					r.Extra++ // a late duplicate of an earlier round
				case int(wc.ByteLen) != size+grh || wc.SrcQP != qa.QPN() ||
					!bytes.Equal(s.b.buf[off:off+size], s.pattern(i, size)):
					return r, fmt.Errorf("datagram %d (%d bytes from qp %#x): %w", i, wc.ByteLen, wc.SrcQP, ErrData)
				case seen[i-base]:
					r.Extra++
				default:
					seen[i-base] = true
					got++
					last = time.Now()
				}
				if err := post(slot); err != nil {
					return r, err
				}
			}
			if k == 0 {
				if err := ctx.Err(); err != nil {
					return r, err
				}
				time.Sleep(20 * time.Microsecond)
			}
		}
		r.Messages += got
		r.Lost += m - got
	}
	r.Elapsed = time.Since(start)
	r.Bytes = int64(r.Messages) * int64(size)
	if r.Lost > 0 && !s.w.Lossy {
		return r, fmt.Errorf("%d of %d datagrams did not arrive intact: %w", r.Lost, s.w.Count, ErrData)
	}
	if r.Extra > 0 && !s.w.Lossy {
		return r, fmt.Errorf("%d datagrams arrived twice: %w", r.Extra, ErrData)
	}
	return r, nil
}
