package client

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uroce/uroce/proto"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
)

// QP is a queue pair (verbs.QP): its work requests go into rings the
// daemon polls.
type QP struct {
	d    *Device
	pd   *PD
	h    uint32
	qpn  uint32
	typ  stack.QPType
	mem  []byte
	caps proto.CreateQPResp
	srq  *SRQ

	state   atomic.Uint32 // as the last Modify or State left it ...
	stateAt atomic.Int64  // ... when State last asked the daemon (0: never)

	smu  sync.Mutex
	sq   proto.Ring
	slot proto.SendSlot
	rmu  sync.Mutex
	rq   proto.Ring
}

var wireOp = [...]uint8{stack.OpSend: proto.WRSend, stack.OpSendWithImm: proto.WRSendWithImm,
	stack.OpSendWithInv: proto.WRSendWithInv, stack.OpWrite: proto.WRWrite, stack.OpWriteWithImm: proto.WRWriteWithImm,
	stack.OpRead: proto.WRRead, stack.OpCompareSwap: proto.WRCompareSwap, stack.OpFetchAdd: proto.WRFetchAdd,
	stack.OpFlush: proto.WRFlush, stack.OpAtomicWrite: proto.WRAtomicWrite, stack.OpBindMW: proto.WRBindMW,
	stack.OpLocalInv: proto.WRLocalInv}

var qpTypes = map[stack.QPType]uint32{stack.RC: proto.QPTypeRC, stack.UC: proto.QPTypeUC, stack.UD: proto.QPTypeUD}

// CreateQP implements verbs.PD.
func (pd *PD) CreateQP(init verbs.QPInit) (verbs.QP, error) {
	scq, ok1 := init.SendCQ.(*CQ)
	rcq, ok2 := init.RecvCQ.(*CQ)
	if !ok1 || !ok2 || scq.d != pd.d || rcq.d != pd.d {
		return nil, fmt.Errorf("create qp: cqs of another device: %w", stack.ErrInvalidArg)
	}
	typ, ok := qpTypes[init.Type]
	if !ok {
		return nil, fmt.Errorf("create qp: type %d: %w", init.Type, stack.ErrInvalidArg)
	}
	req := proto.CreateQP{PD: pd.h, Type: typ, SendCQ: scq.h, RecvCQ: rcq.h, MaxSendWR: uint32(init.MaxSendWR),
		MaxRecvWR: uint32(init.MaxRecvWR), MaxSendSGE: uint32(init.MaxSendSGE), MaxRecvSGE: uint32(init.MaxRecvSGE),
		MaxInline: uint32(init.MaxInline)}
	if init.SignalAll {
		req.SigAll = 1
	}
	var srq *SRQ
	if init.SRQ != nil {
		if srq, ok = init.SRQ.(*SRQ); !ok || srq.d != pd.d {
			return nil, fmt.Errorf("create qp: srq of another device: %w", stack.ErrInvalidArg)
		}
		req.SRQ = srq.h
	}
	var r proto.CreateQPResp
	fd, err := pd.d.call(proto.OpCreateQP, &req, -1, &r)
	if err != nil {
		return nil, fmt.Errorf("create qp: %w", err)
	}
	mem, err := mapRing(fd, r.RingBytes)
	if err != nil {
		return nil, fmt.Errorf("create qp: %w", err)
	}
	q := &QP{d: pd.d, pd: pd, h: r.QP, qpn: r.QPN, typ: init.Type, mem: mem, caps: r, srq: srq}
	sq, ok := proto.NewRing(mem[r.SQOffset:], int(r.SQSlots), int(r.SQSlotBytes))
	if !ok {
		unix.Munmap(mem)
		return nil, fmt.Errorf("create qp: the daemon's send ring does not fit its size")
	}
	q.sq = sq
	if srq == nil {
		if q.rq, ok = proto.NewRing(mem[r.RQOffset:], int(r.RQSlots), int(r.RQSlotBytes)); !ok {
			unix.Munmap(mem)
			return nil, fmt.Errorf("create qp: the daemon's receive ring does not fit its size")
		}
	}
	return q, nil
}

// QPN implements verbs.QP.
func (q *QP) QPN() uint32 { return q.qpn }

// Type implements verbs.QP.
func (q *QP) Type() stack.QPType { return q.typ }

// State implements verbs.QP: the QP's state as the daemon has it (it
// moves to ERR on its own after a fatal error). It asks the daemon at
// most every stateTTL and otherwise answers what it last heard: programs
// look at the state in their wait loops.
func (q *QP) State() stack.QPState {
	now := time.Now().UnixNano()
	if at := q.stateAt.Load(); at != 0 && now-at < int64(stateTTL) {
		return stack.QPState(q.state.Load())
	}
	var r proto.QueryQPResp
	if _, err := q.d.call(proto.OpQueryQP, &proto.Handle{Handle: q.h}, -1, &r); err != nil {
		return stack.StateErr
	}
	q.state.Store(r.Attr.State)
	q.stateAt.Store(now)
	return stack.QPState(r.Attr.State)
}

// refresh learns the state from the daemon, which moved the QP itself
// (RDMA CM).
func (q *QP) refresh() {
	q.stateAt.Store(0)
	q.State()
}

// stateTTL is how long State answers from what it last heard.
const stateTTL = 5 * time.Millisecond

// Modify implements verbs.QP.
func (q *QP) Modify(attr *stack.QPAttr, mask stack.AttrMask) error {
	a := proto.QPAttr{State: uint32(attr.State), CurState: uint32(attr.CurState), PathMTU: uint32(attr.PathMTU),
		QKey: attr.QKey, RQPSN: uint32(attr.RQPSN), SQPSN: uint32(attr.SQPSN), DestQPN: attr.DestQPN,
		AccessFlags: uint32(attr.AccessFlags), PKeyIndex: attr.PKeyIndex, Port: attr.Port, Timeout: attr.Timeout,
		RetryCnt: attr.RetryCnt, RNRRetry: attr.RNRRetry, MaxRdAtomic: attr.MaxRdAtomic,
		MaxDestRdAtomic: attr.MaxDestRdAtomic, MinRNRTimer: attr.MinRNRTimer}
	if mask&stack.AttrAV != 0 {
		a.AH = ahAttrTo(&attr.AH)
	}
	if _, err := q.d.call(proto.OpModifyQP, &proto.ModifyQP{QP: q.h, Mask: uint32(mask), Attr: a}, -1, nil); err != nil {
		return fmt.Errorf("modify qp %#x: %w", q.qpn, err)
	}
	if mask&stack.AttrState != 0 {
		q.state.Store(uint32(attr.State))
		q.stateAt.Store(0)
	}
	return nil
}

// ToInit implements verbs.QP.
func (q *QP) ToInit(a stack.InitAttr) error {
	attr, mask := stack.InitTransition(q.typ, a)
	return q.Modify(&attr, mask)
}

// ToRTR implements verbs.QP.
func (q *QP) ToRTR(a stack.RTRAttr) error {
	attr, mask := stack.RTRTransition(q.typ, a, q.d.attr.ActiveMTU)
	return q.Modify(&attr, mask)
}

// ToRTS implements verbs.QP.
func (q *QP) ToRTS(a stack.RTSAttr) error {
	attr, mask := stack.RTSTransition(q.typ, a)
	return q.Modify(&attr, mask)
}

// ToErr implements verbs.QP.
func (q *QP) ToErr() error { return q.Modify(&stack.QPAttr{State: stack.StateErr}, stack.AttrState) }

// ToReset implements verbs.QP.
func (q *QP) ToReset() error {
	return q.Modify(&stack.QPAttr{State: stack.StateReset}, stack.AttrState)
}

// PostSend implements verbs.QP.
func (q *QP) PostSend(wr *verbs.SendWR) error {
	q.smu.Lock()
	err := q.putSend(wr)
	ring := err == nil && q.sq.Flags()&proto.FlagNeedWakeup != 0
	q.smu.Unlock()
	if err != nil {
		return fmt.Errorf("post send: qp %#x: %w", q.qpn, err)
	}
	if ring {
		q.d.ring()
	}
	return nil
}

// PostSendBatch implements verbs.QP: one doorbell, if any, for all.
func (q *QP) PostSendBatch(wrs []verbs.SendWR) (int, error) {
	q.smu.Lock()
	n := 0
	var err error
	for ; n < len(wrs); n++ {
		if err = q.putSend(&wrs[n]); err != nil {
			break
		}
	}
	ring := n > 0 && q.sq.Flags()&proto.FlagNeedWakeup != 0
	q.smu.Unlock()
	if ring {
		q.d.ring()
	}
	if err != nil {
		return n, fmt.Errorf("post send: qp %#x: wr %d: %w", q.qpn, n, err)
	}
	return n, nil
}

// putSend checks wr as ibv_post_send does and puts it in the next send
// slot. The caller holds smu.
func (q *QP) putSend(wr *verbs.SendWR) error {
	switch stack.QPState(q.state.Load()) {
	case stack.StateReset, stack.StateInit, stack.StateRTR:
		return fmt.Errorf("qp in %v: %w", stack.QPState(q.state.Load()), stack.ErrInvalidState)
	}
	if int(wr.Op) >= len(wireOp) {
		return fmt.Errorf("opcode %d: %w", wr.Op, stack.ErrInvalidWR)
	}
	inline := wr.Flags&stack.SendInline != 0 && wr.Op != stack.OpRead && wr.Op != stack.OpCompareSwap &&
		wr.Op != stack.OpFetchAdd && wr.Op != stack.OpFlush
	maxInline := int(q.caps.MaxInline)
	if wr.Op == stack.OpAtomicWrite {
		maxInline = max(maxInline, 8) // its 8 bytes need no max_inline (proto.SendSlot)
	}
	if !inline && len(wr.SG) > int(q.caps.MaxSendSGE) {
		return fmt.Errorf("%d sges, max %d: %w", len(wr.SG), q.caps.MaxSendSGE, stack.ErrTooManySGE)
	}
	// Outstanding requests, not ring slots, count against max_send_wr:
	// the daemon takes a slot before the QP is done with its request.
	prod := q.sq.Producer()
	if q.sq.Outstanding(prod) >= q.caps.MaxSendWR || prod-q.sq.Consumer() >= q.sq.Len() {
		return stack.ErrQueueFull
	}
	b := q.sq.Slot(prod)
	s := &q.slot
	*s = proto.SendSlot{ID: wr.ID, Opcode: wireOp[wr.Op], Flags: uint8(wr.Flags), NumSGE: uint16(len(wr.SG)),
		Imm: wr.Imm, RemoteAddr: wr.Remote.Addr, RKey: wr.Remote.RKey, CompareAdd: wr.CompareAdd, Swap: wr.Swap,
		RemoteQPN: wr.RemoteQPN, RemoteQKey: wr.RemoteQKey}
	switch wr.Op {
	case stack.OpSendWithInv:
		s.Imm = wr.InvRKey
	case stack.OpLocalInv, stack.OpBindMW:
		// Local operations: no data (the daemon executes them when it
		// takes them from the ring).
		s.Imm, s.NumSGE, s.Flags = wr.InvRKey, 0, s.Flags&^uint8(stack.SendInline)
		if wr.Op == stack.OpBindMW {
			if err := q.putBindMW(s, wr); err != nil {
				return err
			}
		}
		s.Put(b)
		q.sq.SetProducer(prod + 1)
		return nil
	}
	if wr.Op == stack.OpFlush {
		s.CompareAdd, s.FlushType, s.FlushLevel = uint64(wr.FlushLen), uint8(wr.FlushType), uint8(wr.FlushLevel)
	}
	if q.typ == stack.UD {
		ah, ok := wr.AH.(*AH)
		if !ok || ah.pd != q.pd {
			return fmt.Errorf("ud work request without an address handle of the qp's pd: %w", stack.ErrInvalidWR)
		}
		s.AH = ah.h
	}
	if inline {
		n := 0
		data := b[proto.SendSlotHeader:]
		if wr.Inline != nil {
			if len(wr.Inline) > maxInline || proto.SendSlotHeader+len(wr.Inline) > len(b) {
				return fmt.Errorf("inline length %d exceeds %d: %w", len(wr.Inline), maxInline, stack.ErrInvalidWR)
			}
			n = copy(data, wr.Inline)
		} else {
			for _, sg := range wr.SG {
				if n+int(sg.Length) > maxInline || proto.SendSlotHeader+n+int(sg.Length) > len(b) {
					return fmt.Errorf("inline length exceeds %d: %w", maxInline, stack.ErrInvalidWR)
				}
				src, ok := q.d.bytesAt(sg.LKey, sg.Addr, sg.Length)
				if !ok {
					return fmt.Errorf("inline data not in a region of this device: %w", stack.ErrInvalidWR)
				}
				n += copy(data[n:], src)
			}
		}
		s.NumSGE, s.InlineLen = 0, uint32(n)
	} else {
		for i, sg := range wr.SG {
			proto.PutSGE(b, proto.SendSlotHeader, i, sg.Addr, sg.Length, sg.LKey)
		}
	}
	s.Put(b)
	q.sq.SetProducer(prod + 1)
	return nil
}

// PostRecv implements verbs.QP.
func (q *QP) PostRecv(wr *stack.RecvWR) error {
	if q.srq != nil {
		return fmt.Errorf("post recv: qp %#x uses an srq: %w", q.qpn, stack.ErrInvalidArg)
	}
	q.rmu.Lock()
	err := postRecvRing(q.d, &q.rq, int(q.caps.MaxRecvSGE), wr)
	q.rmu.Unlock()
	if err != nil {
		return fmt.Errorf("post recv: qp %#x: %w", q.qpn, err)
	}
	return nil
}

// PostRecvBatch implements verbs.QP.
func (q *QP) PostRecvBatch(wrs []stack.RecvWR) (int, error) {
	for i := range wrs {
		if err := q.PostRecv(&wrs[i]); err != nil {
			return i, err
		}
	}
	return len(wrs), nil
}

// Destroy implements verbs.QP.
func (q *QP) Destroy() error {
	if err := q.d.destroy(proto.OpDestroyQP, q.h); err != nil {
		return fmt.Errorf("destroy qp %#x: %w", q.qpn, err)
	}
	unix.Munmap(q.mem)
	return nil
}
