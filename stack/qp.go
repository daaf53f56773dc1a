package stack

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/qp"
)

// Work request and completion types of the transport, used as they are.
type (
	// SGE is a scatter/gather element: Length bytes at virtual address
	// Addr of the region whose local key is LKey (MR.SGE builds one).
	SGE = qp.SGE
	// RecvWR is a receive work request (ibv_recv_wr).
	RecvWR = qp.RecvWR
	// WC is a work completion (ibv_wc).
	WC = qp.WC
	// WCStatus is a completion status (ibv_wc_status).
	WCStatus = qp.WCStatus
	// WCOpcode is the operation a completion reports (ibv_wc_opcode).
	WCOpcode = qp.WCOpcode
	// WCFlags are ibv_wc_flags.
	WCFlags = qp.WCFlags
	// QPType is a QP's transport service.
	QPType = qp.Type
	// QPState is a QP state.
	QPState = qp.State
	// MTU is a path MTU enum (1 = 256 … 5 = 4096).
	MTU = qp.MTU
	// AttrMask selects the attributes Modify sets.
	AttrMask = qp.AttrMask
	// Opcode is a send work request's operation.
	Opcode = qp.WROpcode
	// SendFlags are ibv_send_flags.
	SendFlags = qp.SendFlags
	// FlushType is the placement type of a FLUSH (ibv_placement_type).
	FlushType = qp.FlushType
	// FlushLevel is the selectivity level of a FLUSH
	// (ibv_selectivity_level).
	FlushLevel = qp.FlushLevel
	// PSN is a 24-bit packet sequence number.
	PSN = bth.PSN
	// QPCounters are a QP's protocol counters (QP.Counters, and their
	// sums in Counters.QP), named by EachQPCounter.
	QPCounters = qp.Counters
)

// QP types, states, MTUs, operations, flags and statuses re-exported from
// package qp.
const (
	RC = qp.RC
	UC = qp.UC
	UD = qp.UD

	StateReset = qp.StateReset
	StateInit  = qp.StateInit
	StateRTR   = qp.StateRTR
	StateRTS   = qp.StateRTS
	StateSQD   = qp.StateSQD
	StateSQE   = qp.StateSQE
	StateErr   = qp.StateErr

	MTU256  = qp.MTU256
	MTU512  = qp.MTU512
	MTU1024 = qp.MTU1024
	MTU2048 = qp.MTU2048
	MTU4096 = qp.MTU4096

	OpSend         = qp.WRSend
	OpSendWithImm  = qp.WRSendWithImm
	OpSendWithInv  = qp.WRSendWithInv
	OpWrite        = qp.WRWrite
	OpWriteWithImm = qp.WRWriteWithImm
	OpRead         = qp.WRRead
	OpCompareSwap  = qp.WRCompareSwap
	OpFetchAdd     = qp.WRFetchAdd
	OpFlush        = qp.WRFlush
	OpAtomicWrite  = qp.WRAtomicWrite
	OpBindMW       = qp.WRBindMW
	OpLocalInv     = qp.WRLocalInv

	FlushGlobal     = qp.FlushGlobal
	FlushPersistent = qp.FlushPersistent
	FlushRange      = qp.FlushRange
	FlushMR         = qp.FlushMR

	SendFence     = qp.SendFence
	SendSignaled  = qp.SendSignaled
	SendSolicited = qp.SendSolicited
	SendInline    = qp.SendInline

	WCSuccess        = qp.WCSuccess
	WCLocLenErr      = qp.WCLocLenErr
	WCLocQPOpErr     = qp.WCLocQPOpErr
	WCLocProtErr     = qp.WCLocProtErr
	WCWRFlushErr     = qp.WCWRFlushErr
	WCMWBindErr      = qp.WCMWBindErr
	WCBadRespErr     = qp.WCBadRespErr
	WCLocAccessErr   = qp.WCLocAccessErr
	WCRemInvReqErr   = qp.WCRemInvReqErr
	WCRemAccessErr   = qp.WCRemAccessErr
	WCRemOpErr       = qp.WCRemOpErr
	WCRetryExcErr    = qp.WCRetryExcErr
	WCRNRRetryExcErr = qp.WCRNRRetryExcErr
	WCFatalErr       = qp.WCFatalErr
	WCGeneralErr     = qp.WCGeneralErr

	WCSend        = qp.WCSend
	WCRDMAWrite   = qp.WCRDMAWrite
	WCRDMARead    = qp.WCRDMARead
	WCCompSwap    = qp.WCCompSwap
	WCFetchAdd    = qp.WCFetchAdd
	WCBindMW      = qp.WCBindMW
	WCLocalInv    = qp.WCLocalInv
	WCFlush       = qp.WCFlush
	WCAtomicWrite = qp.WCAtomicWrite
	WCRecv        = qp.WCRecv
	WCRecvRDMAImm = qp.WCRecvRDMAImm

	WCWithGRH = qp.WCWithGRH
	WCWithImm = qp.WCWithImm
	WCWithInv = qp.WCWithInv

	AttrState           = qp.AttrState
	AttrCurState        = qp.AttrCurState
	AttrAccessFlags     = qp.AttrAccessFlags
	AttrPKeyIndex       = qp.AttrPKeyIndex
	AttrPort            = qp.AttrPort
	AttrQKey            = qp.AttrQKey
	AttrAV              = qp.AttrAV
	AttrPathMTU         = qp.AttrPathMTU
	AttrTimeout         = qp.AttrTimeout
	AttrRetryCnt        = qp.AttrRetryCnt
	AttrRNRRetry        = qp.AttrRNRRetry
	AttrRQPSN           = qp.AttrRQPSN
	AttrMaxQPRdAtomic   = qp.AttrMaxQPRdAtomic
	AttrMinRNRTimer     = qp.AttrMinRNRTimer
	AttrSQPSN           = qp.AttrSQPSN
	AttrMaxDestRdAtomic = qp.AttrMaxDestRdAtomic
	AttrDestQPN         = qp.AttrDestQPN
)

// RemoteAddr names remote memory: a virtual address and an R_Key.
type RemoteAddr struct {
	Addr uint64
	RKey uint32
}

// SendWR is a send work request (ibv_send_wr). PostSend copies it: the
// caller may reuse it, and its SG slice, when PostSend returns.
type SendWR struct {
	ID      uint64
	Op      Opcode
	Flags   SendFlags
	SG      []SGE
	Imm     uint32 // immediate data (host order), *_WITH_IMM
	InvRKey uint32 // R_Key to invalidate, SEND_WITH_INV; key to invalidate, LOCAL_INV
	// BindMW is the type 2 window to bind, its new R_Key and the
	// binding, for OpBindMW. OpBindMW and OpLocalInv (of a region or a
	// type 2 window) are carried out when the QP's requester reaches
	// them in the send queue, and complete in its order.
	BindMW MWBindWR
	// Remote is the target of WRITE, READ, atomics, FLUSH and
	// ATOMIC_WRITE; atomics need an 8-byte aligned address and one
	// 8-byte SGE for the result, ATOMIC_WRITE an 8-byte aligned address
	// and 8 bytes of data (SG or Inline).
	Remote     RemoteAddr
	CompareAdd uint64 // compare (CMP_SWAP) or addend (FETCH_ADD)
	Swap       uint64 // CMP_SWAP
	// FLUSH (ibv_wr_flush): the placement type (FlushGlobal,
	// FlushPersistent or both), the selectivity level, and with
	// FlushRange the bytes from Remote.Addr to make visible or
	// persistent. The peer's QP and region need the matching
	// AccessFlushGlobal or AccessFlushPersistent.
	FlushType  FlushType
	FlushLevel FlushLevel
	FlushLen   uint32
	// Inline, with SendInline, is the data itself, sent instead of
	// what SG names (copied when the request is posted).
	Inline []byte
	// UD only.
	AH         *AH
	RemoteQPN  uint32
	RemoteQKey uint32
}

// QPInit are a QP's creation attributes (ibv_qp_init_attr).
type QPInit struct {
	Type       QPType
	SendCQ     *CQ
	RecvCQ     *CQ
	SRQ        *SRQ // shared receive queue, or nil
	MaxSendWR  int
	MaxRecvWR  int // ignored with an SRQ
	MaxSendSGE int // default 1
	MaxRecvSGE int // default 1
	MaxInline  int
	SignalAll  bool // sq_sig_all
	// InfiniteRetry7 makes RetryCnt 7 mean "retry forever", as rdma_rxe
	// does; by the IBTA (and by default) 7 means seven retries.
	InfiniteRetry7 bool
	// GSI makes the QP the device's general services QP: QPN 1, a UD QP,
	// one per device, on which management datagrams (the connection
	// manager's MADs) come and go with Q_Key GSIQKey. Its owner moves it
	// to INIT with that Q_Key and P_Key index 0, then RTR and RTS, as any
	// UD QP (IBTA vol 1, 13.5.1, and the kernel's ib_mad for QP1).
	GSI bool
	// SendRetired, when set, is called each time the QP produces a send
	// completion, before the completion is pushed to the CQ, with the
	// number of send work requests retired so far (qp.QP.SendRetired:
	// unsignaled ones before it included). The daemon publishes it to
	// its client, whose ibv_post_send refuses work past max_send_wr
	// outstanding. It runs with the QP's lock held, in an engine or in
	// the verbs call that flushes the queue: it must not block. The
	// count includes the OpBindMW and OpLocalInv requests; QP.BindMW,
	// not a send work request here, is not counted.
	SendRetired func(n uint64)
}

// GSIQPN and GSIQKey are the general services QP's number and Q_Key
// (IBTA vol 1, 3.5.8 and 13.5.1).
const (
	GSIQPN  = 1
	GSIQKey = 0x80010000
)

// QPAttr are QP attributes (ibv_qp_attr); Modify reads those the mask
// names. AH is the address vector (AttrAV).
type QPAttr struct {
	State           QPState
	CurState        QPState
	AccessFlags     Access
	PKeyIndex       uint16
	Port            uint8
	QKey            uint32
	AH              AHAttr
	PathMTU         MTU
	Timeout         uint8
	RetryCnt        uint8
	RNRRetry        uint8
	RQPSN           PSN
	SQPSN           PSN
	MaxRdAtomic     uint8
	MaxDestRdAtomic uint8
	MinRNRTimer     uint8
	DestQPN         uint32
}

// QP is a queue pair (ibv_qp). Its methods are safe for concurrent use;
// the transport state itself is touched only under the QP's lock, by the
// engine that owns the QP and by verbs calls.
type QP struct {
	dev *Device
	pd  *PD
	// eng is the engine that owns the QP: changed only by that engine,
	// with the QP's lock held (releaseCur), when the QP moves to moveTo.
	eng    atomic.Pointer[engine]
	qpn    uint32
	init   QPInit
	sendCQ *CQ
	recvCQ *CQ
	srq    *SRQ
	// ready is set once CreateQP has made the transport: the QP is in
	// the device's table (its number taken) a little before, and an
	// engine drops what arrives for it until then.
	ready atomic.Bool

	mu        sync.Mutex // guards everything below up to the engine's fields
	q         *qp.QP
	ctr       qp.Counters
	inEngine  bool // the engine is calling into q: Output may send
	destroyed bool
	ah        AHAttr     // last address vector set
	peer      netip.Addr // connected peer's address, checked on receive
	local     netip.Addr // our address on the path
	prio      uint8      // the priority PAUSE/PFC hold its traffic by (pause.go); engine's
	out       qpOutput
	sink      qpSink
	mem       qpMemory
	moveTo    *engine // the engine the QP moves to once its own lets it go (placeAtRTR)

	// Owned by the engine goroutine.
	heapIdx  int  // index in the timer heap, -1 when not armed
	deadline Time // armed deadline
	active   bool // in the engine's list of QPs to pump
	busy     bool // had packets to send when last released

	kicked atomic.Bool // in an engine's kick list
}

// CreateQP creates a queue pair (ibv_create_qp) in the RESET state.
func (pd *PD) CreateQP(init QPInit) (*QP, error) {
	d := pd.dev
	lim := &d.attr.Limits
	if init.SendCQ == nil || init.RecvCQ == nil {
		return nil, fmt.Errorf("create qp: send and receive cqs are required: %w", ErrInvalidArg)
	}
	if init.SendCQ.dev != d || init.RecvCQ.dev != d || (init.SRQ != nil && init.SRQ.pd.dev != d) {
		return nil, fmt.Errorf("create qp: cq or srq of another device: %w", ErrInvalidArg)
	}
	if init.MaxSendSGE == 0 {
		init.MaxSendSGE = 1
	}
	if init.MaxRecvSGE == 0 {
		init.MaxRecvSGE = 1
	}
	switch {
	case init.Type != RC && init.Type != UC && init.Type != UD:
		return nil, fmt.Errorf("create qp: type %d: %w", init.Type, ErrInvalidArg)
	case init.GSI && (init.Type != UD || init.SRQ != nil):
		return nil, fmt.Errorf("create qp: qp1 is a UD qp without an srq: %w", ErrInvalidArg)
	case init.MaxSendWR < 1 || init.MaxSendWR > lim.MaxQPWR:
		return nil, fmt.Errorf("create qp: max_send_wr %d, want 1 to %d: %w", init.MaxSendWR, lim.MaxQPWR, ErrInvalidArg)
	case init.SRQ == nil && (init.MaxRecvWR < 1 || init.MaxRecvWR > lim.MaxQPWR):
		return nil, fmt.Errorf("create qp: max_recv_wr %d, want 1 to %d: %w", init.MaxRecvWR, lim.MaxQPWR, ErrInvalidArg)
	case init.MaxSendSGE < 0 || init.MaxSendSGE > lim.MaxSGE || init.MaxRecvSGE < 0 || init.MaxRecvSGE > lim.MaxSGE:
		return nil, fmt.Errorf("create qp: sges %d/%d, max %d: %w", init.MaxSendSGE, init.MaxRecvSGE, lim.MaxSGE, ErrInvalidArg)
	case init.MaxInline < 0 || init.MaxInline > lim.MaxInline:
		return nil, fmt.Errorf("create qp: max_inline %d, max %d: %w", init.MaxInline, lim.MaxInline, ErrInvalidArg)
	}
	q := &QP{dev: d, pd: pd, init: init, sendCQ: init.SendCQ, recvCQ: init.RecvCQ, srq: init.SRQ, heapIdx: -1,
		prio: d.cfg.Marking.priority(d.cfg.Marking.trafficClass(0))}
	q.out.q = q
	q.sink.q = q
	q.mem.q = q
	if err := q.takeUses(); err != nil {
		return nil, err
	}
	if err := d.qps.add(q); err != nil {
		q.dropUses()
		return nil, fmt.Errorf("create qp: %w", err)
	}
	q.eng.Store(d.engines[int(q.qpn)%len(d.engines)])
	caps := qp.Caps{
		Type:           init.Type,
		QPN:            q.qpn,
		MaxSendWR:      init.MaxSendWR,
		MaxRecvWR:      init.MaxRecvWR,
		MaxSendSGE:     init.MaxSendSGE,
		MaxRecvSGE:     init.MaxRecvSGE,
		MaxInline:      init.MaxInline,
		SignalAll:      init.SignalAll,
		PKey:           0xffff,
		InfiniteRetry7: init.InfiniteRetry7,
		PortMTU:        d.attr.ActiveMTU,
		SendWindow:     d.cfg.SendWindow,
		ReadWindow:     d.cfg.ReadWindow,
		CNP:            d.cfg.Marking.cnp(d.cfg.DCQCN),
		LineRate:       d.linkBps,
		BatchAcks:      true, // the engine pumps its busy QPs after every batch
	}
	if !d.cfg.NoDCQCN {
		caps.DCQCN = d.cfg.DCQCN
	}
	if caps.SendWindow > 0 {
		caps.SendWindow *= d.attr.ActiveMTU.Bytes() // packets of the port's MTU
	}
	if init.SRQ != nil {
		caps.SRQ = init.SRQ.q
		caps.MaxRecvWR = 0
	}
	env := qp.Env{Mem: &q.mem, Out: &q.out, Sink: &q.sink, Counters: &q.ctr}
	if init.Type == RC || init.Type == UC {
		env.Local = (*qpLocal)(q)
	}
	if init.Type == RC && d.cfg.KeepPastGap {
		env.Stash = &q.eng.Load().stash
	}
	t, err := qp.New(caps, env)
	if err != nil {
		d.qps.remove(q)
		q.dropUses()
		return nil, err
	}
	q.mu.Lock()
	q.q = t
	q.mu.Unlock()
	q.ready.Store(true)
	return q, nil
}

// takeUses takes a use of the QP's PD, CQs and SRQ, or none of them.
func (q *QP) takeUses() error {
	if err := q.pd.use("create qp"); err != nil {
		return err
	}
	if !q.sendCQ.uses.take() {
		q.pd.uses.drop()
		return fmt.Errorf("create qp: send cq: %w", ErrDestroyed)
	}
	if !q.recvCQ.uses.take() {
		q.pd.uses.drop()
		q.sendCQ.uses.drop()
		return fmt.Errorf("create qp: recv cq: %w", ErrDestroyed)
	}
	if q.srq != nil && !q.srq.uses.take() {
		q.pd.uses.drop()
		q.sendCQ.uses.drop()
		q.recvCQ.uses.drop()
		return fmt.Errorf("create qp: srq: %w", ErrDestroyed)
	}
	return nil
}

// dropUses gives back what takeUses took.
func (q *QP) dropUses() {
	q.pd.uses.drop()
	q.sendCQ.uses.drop()
	q.recvCQ.uses.drop()
	if q.srq != nil {
		q.srq.uses.drop()
	}
}

// lock takes the QP's lock and its SRQ's.
func (q *QP) lock() {
	q.mu.Lock()
	if q.srq != nil {
		q.srq.mu.Lock()
	}
}

func (q *QP) unlock() {
	if q.srq != nil {
		q.srq.mu.Unlock()
	}
	q.mu.Unlock()
}

// QPN returns the QP number.
func (q *QP) QPN() uint32 { return q.qpn }

// Type returns the QP's transport service.
func (q *QP) Type() QPType { return q.init.Type }

// PD returns the QP's protection domain.
func (q *QP) PD() *PD { return q.pd }

// State returns the QP's current state.
func (q *QP) State() QPState {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.q == nil {
		return StateReset
	}
	return q.q.State()
}

func (q *QP) check(op string) error {
	if q.destroyed {
		return fmt.Errorf("%s: qp %#x: %w", op, q.qpn, ErrDestroyed)
	}
	if q.dev.closed.Load() {
		return fmt.Errorf("%s: %w", op, ErrClosed)
	}
	return nil
}

// Modify changes the QP's attributes and state (ibv_modify_qp) with the
// verbs rules: each transition requires and allows given attributes. The
// address vector is resolved (its MAC looked up) before anything changes.
func (q *QP) Modify(attr *QPAttr, mask AttrMask) error {
	a := qp.Attr{
		State: attr.State, CurState: attr.CurState, AccessFlags: attr.AccessFlags,
		PKeyIndex: attr.PKeyIndex, Port: attr.Port, QKey: attr.QKey, PathMTU: attr.PathMTU,
		Timeout: attr.Timeout, RetryCnt: attr.RetryCnt, RNRRetry: attr.RNRRetry,
		RQPSN: attr.RQPSN, SQPSN: attr.SQPSN, MaxRdAtomic: attr.MaxRdAtomic,
		MaxDestRdAtomic: attr.MaxDestRdAtomic, MinRNRTimer: attr.MinRNRTimer, DestQPN: attr.DestQPN,
	}
	var path pathInfo
	if mask&qp.AttrAV != 0 {
		if q.init.Type == UD {
			return fmt.Errorf("modify qp %#x: address vector on a ud qp: %w", q.qpn, ErrInvalidAttr)
		}
		p, err := q.dev.resolvePath(&attr.AH)
		if err != nil {
			return fmt.Errorf("modify qp %#x: %w", q.qpn, err)
		}
		path = p
		a.AV = p.av
	}
	lim := &q.dev.attr
	if mask&qp.AttrPathMTU != 0 && (attr.PathMTU > lim.ActiveMTU || attr.PathMTU < MTU256) {
		return fmt.Errorf("modify qp %#x: path mtu %d, port active mtu %d: %w", q.qpn, attr.PathMTU, lim.ActiveMTU, ErrInvalidAttr)
	}
	if mask&qp.AttrMaxQPRdAtomic != 0 && int(attr.MaxRdAtomic) > lim.MaxQPInitRdAtom {
		return fmt.Errorf("modify qp %#x: max_rd_atomic %d, max %d: %w", q.qpn, attr.MaxRdAtomic, lim.MaxQPInitRdAtom, ErrInvalidAttr)
	}
	if mask&qp.AttrMaxDestRdAtomic != 0 && int(attr.MaxDestRdAtomic) > lim.MaxQPRdAtom {
		return fmt.Errorf("modify qp %#x: max_dest_rd_atomic %d, max %d: %w", q.qpn, attr.MaxDestRdAtomic, lim.MaxQPRdAtom, ErrInvalidAttr)
	}
	if mask&qp.AttrPort != 0 && attr.Port != 1 {
		return fmt.Errorf("modify qp %#x: port %d, the device has port 1: %w", q.qpn, attr.Port, ErrInvalidAttr)
	}
	if mask&qp.AttrPKeyIndex != 0 && attr.PKeyIndex != 0 {
		return fmt.Errorf("modify qp %#x: pkey index %d, the table has 1 entry: %w", q.qpn, attr.PKeyIndex, ErrInvalidAttr)
	}
	q.lock()
	err := q.check("modify qp")
	if err == nil {
		err = q.q.Modify(q.dev.clock.Now(), &a, mask)
	}
	if err == nil && mask&qp.AttrAV != 0 {
		q.ah = attr.AH
		q.ah.DMAC = path.av.Path.DstMAC
		q.peer, q.local = path.dst, path.src
		q.prio = q.dev.cfg.Marking.pathPriority(&path.av.Path)
	}
	if err == nil && mask&(qp.AttrAV|qp.AttrDestQPN) != 0 {
		q.placeAtRTR()
	}
	q.unlock()
	if err != nil {
		return err
	}
	q.kick()
	return nil
}

// InitAttr are the attributes of the RESET→INIT transition.
type InitAttr struct {
	PKeyIndex   uint16
	AccessFlags Access // remote rights granted to the peer (RC/UC)
	QKey        uint32 // UD
}

// ToInit moves the QP from RESET to INIT.
func (q *QP) ToInit(a InitAttr) error {
	attr, mask := InitTransition(q.init.Type, a)
	return q.Modify(&attr, mask)
}

// InitTransition returns the attributes and mask of the RESET→INIT
// transition of a QP of type t (what ToInit passes to Modify).
func InitTransition(t QPType, a InitAttr) (QPAttr, AttrMask) {
	attr := QPAttr{State: StateInit, PKeyIndex: a.PKeyIndex, Port: 1, AccessFlags: a.AccessFlags, QKey: a.QKey}
	mask := qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort
	if t == UD {
		mask |= qp.AttrQKey
	} else {
		mask |= qp.AttrAccessFlags
	}
	return attr, mask
}

// RTRAttr are the attributes of the INIT→RTR transition. UD QPs use none.
type RTRAttr struct {
	DestQPN         uint32
	AH              AHAttr // the peer
	RQPSN           PSN    // first PSN expected from the peer
	PathMTU         MTU    // 0: the port's active MTU
	MaxDestRdAtomic uint8  // RC: READ/atomic resources as responder
	MinRNRTimer     uint8  // RC: RNR NAK timer code sent to the peer
}

// ToRTR moves the QP from INIT to RTR.
func (q *QP) ToRTR(a RTRAttr) error {
	attr, mask := RTRTransition(q.init.Type, a, q.dev.attr.ActiveMTU)
	return q.Modify(&attr, mask)
}

// RTRTransition returns the attributes and mask of the INIT→RTR
// transition of a QP of type t on a port of the given active MTU.
func RTRTransition(t QPType, a RTRAttr, active MTU) (QPAttr, AttrMask) {
	attr := QPAttr{State: StateRTR, DestQPN: a.DestQPN, AH: a.AH, RQPSN: a.RQPSN, PathMTU: a.PathMTU,
		MaxDestRdAtomic: a.MaxDestRdAtomic, MinRNRTimer: a.MinRNRTimer}
	if attr.PathMTU == 0 {
		attr.PathMTU = active
	}
	mask := qp.AttrState
	switch t {
	case RC:
		mask |= qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN | qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer
	case UC:
		mask |= qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN
	}
	return attr, mask
}

// RTSAttr are the attributes of the RTR→RTS transition.
type RTSAttr struct {
	SQPSN       PSN
	Timeout     uint8 // RC: local ACK timeout 4.096 µs × 2^Timeout, 0 = infinite
	RetryCnt    uint8 // RC
	RNRRetry    uint8 // RC, 7 = infinite
	MaxRdAtomic uint8 // RC: outstanding READ/atomics as requester
}

// ToRTS moves the QP from RTR to RTS.
func (q *QP) ToRTS(a RTSAttr) error {
	attr, mask := RTSTransition(q.init.Type, a)
	return q.Modify(&attr, mask)
}

// RTSTransition returns the attributes and mask of the RTR→RTS
// transition of a QP of type t.
func RTSTransition(t QPType, a RTSAttr) (QPAttr, AttrMask) {
	attr := QPAttr{State: StateRTS, SQPSN: a.SQPSN, Timeout: a.Timeout, RetryCnt: a.RetryCnt,
		RNRRetry: a.RNRRetry, MaxRdAtomic: a.MaxRdAtomic}
	mask := qp.AttrState | qp.AttrSQPSN
	if t == RC {
		mask |= qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxQPRdAtomic
	}
	return attr, mask
}

// ToErr moves the QP to ERR: outstanding work completes with flush errors.
func (q *QP) ToErr() error { return q.Modify(&QPAttr{State: StateErr}, qp.AttrState) }

// ToReset moves the QP to RESET, dropping all work without completions.
func (q *QP) ToReset() error { return q.Modify(&QPAttr{State: StateReset}, qp.AttrState) }

// Query returns the QP's attributes and creation attributes
// (ibv_query_qp).
func (q *QP) Query() (QPAttr, QPInit) {
	q.mu.Lock()
	a := q.q.Query()
	ah := q.ah
	q.mu.Unlock()
	return QPAttr{
		State: a.State, CurState: a.CurState, AccessFlags: a.AccessFlags, PKeyIndex: a.PKeyIndex,
		Port: a.Port, QKey: a.QKey, AH: ah, PathMTU: a.PathMTU, Timeout: a.Timeout,
		RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry, RQPSN: a.RQPSN, SQPSN: a.SQPSN,
		MaxRdAtomic: a.MaxRdAtomic, MaxDestRdAtomic: a.MaxDestRdAtomic, MinRNRTimer: a.MinRNRTimer,
		DestQPN: a.DestQPN,
	}, q.init
}

// PostSend posts a send work request (ibv_post_send) and wakes the
// engine. Errors are those of ibv_post_send: a full queue, too many
// SGEs, a state that takes no work, a malformed request.
func (q *QP) PostSend(wr *SendWR) error {
	q.lock()
	err := q.postSendLocked(wr)
	q.unlock()
	if err != nil {
		return err
	}
	q.kick()
	return nil
}

// PostSendBatch posts wrs in order under one lock and one wake-up, and
// returns how many were posted; on error, wrs[n] failed and the rest
// were not tried (ibv_post_send's bad_wr).
func (q *QP) PostSendBatch(wrs []SendWR) (int, error) {
	q.lock()
	n := 0
	var err error
	for i := range wrs {
		if err = q.postSendLocked(&wrs[i]); err != nil {
			break
		}
		n++
	}
	q.unlock()
	if n > 0 {
		q.kick()
	}
	if err != nil {
		return n, fmt.Errorf("wr %d: %w", n, err)
	}
	return n, nil
}

func (q *QP) postSendLocked(wr *SendWR) error {
	if err := q.check("post send"); err != nil {
		return err
	}
	s := &qp.SendWR{
		ID: wr.ID, Opcode: wr.Op, Flags: wr.Flags, SG: wr.SG, Imm: wr.Imm, InvRKey: wr.InvRKey,
		RemoteAddr: wr.Remote.Addr, RKey: wr.Remote.RKey, CompareAdd: wr.CompareAdd, Swap: wr.Swap,
		FlushType: wr.FlushType, FlushLevel: wr.FlushLevel, FlushLen: wr.FlushLen,
		RemoteQPN: wr.RemoteQPN, RemoteQKey: wr.RemoteQKey, Inline: wr.Inline,
	}
	if wr.Op == OpBindMW {
		s.RKey = localBindKey(wr.BindMW)
		b := &wr.BindMW.MWBind
		s.Bind = qp.LocalBind{Addr: b.Addr, Length: b.Length, Access: b.Access}
		if b.MR != nil {
			s.Bind.MR = b.MR.lkey
		}
	}
	if wr.AH != nil {
		if wr.AH.pd != q.pd {
			return fmt.Errorf("post send: qp %#x: address handle of another pd: %w", q.qpn, ErrInvalidWR)
		}
		s.AH = &wr.AH.av
	} else if q.init.Type == UD {
		return fmt.Errorf("post send: qp %#x: ud work request without address handle: %w", q.qpn, ErrInvalidWR)
	}
	return q.q.PostSend(q.dev.clock.Now(), s)
}

// PostRecv posts a receive work request (ibv_post_recv). A QP attached to
// an SRQ takes receives from it instead.
func (q *QP) PostRecv(wr *RecvWR) error {
	if q.srq != nil {
		return fmt.Errorf("post recv: qp %#x uses an srq: %w", q.qpn, ErrInvalidArg)
	}
	q.mu.Lock()
	err := q.check("post recv")
	if err == nil {
		err = q.q.PostRecv(wr)
	}
	q.mu.Unlock()
	return err
}

// PostRecvBatch posts wrs in order under one lock and returns how many
// were posted; on error, wrs[n] failed and the rest were not tried.
func (q *QP) PostRecvBatch(wrs []RecvWR) (int, error) {
	if q.srq != nil {
		return 0, fmt.Errorf("post recv: qp %#x uses an srq: %w", q.qpn, ErrInvalidArg)
	}
	q.mu.Lock()
	err := q.check("post recv")
	n := 0
	for ; err == nil && n < len(wrs); n++ {
		if err = q.q.PostRecv(&wrs[n]); err != nil {
			break
		}
	}
	q.mu.Unlock()
	if err != nil {
		return n, fmt.Errorf("wr %d: %w", n, err)
	}
	return n, nil
}

// Counters returns the QP's protocol counters.
func (q *QP) Counters() QPCounters {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ctr
}

// Destroy destroys the QP (ibv_destroy_qp). Outstanding work is dropped
// without completions; move the QP to ERR and drain its CQs first to get
// them. The QP leaves its multicast groups (where ibv_destroy_qp fails
// with EBUSY until they are detached).
func (q *QP) Destroy() error {
	q.sendPostedUD()
	q.lock()
	if q.destroyed {
		q.unlock()
		return fmt.Errorf("destroy qp %#x: %w", q.qpn, ErrDestroyed)
	}
	q.destroyed = true
	q.q.Release()
	q.unlock()
	q.detachAll()
	q.dev.qps.remove(q)
	q.dev.retiredMu.Lock()
	q.mu.Lock()
	addCounters(&q.dev.retired, &q.ctr)
	q.mu.Unlock()
	q.dev.retiredMu.Unlock()
	q.kick() // the engine forgets it
	q.dev.quiesce()
	q.dropUses()
	return nil
}

// udFlushLimit bounds how long Destroy waits for a UD QP's posted
// datagrams to go out.
const udFlushLimit = 100 * time.Millisecond

// sendPostedUD lets the engine send the datagrams a UD QP has posted
// before Destroy drops them: an RNIC has sent them by the time a program
// destroys the QP, and programs count on it (mckey's sender destroys
// its QP right after posting, unsignaled). A connected QP's requests
// need their peer's acknowledgements and are flushed, as before.
func (q *QP) sendPostedUD() {
	if q.init.Type != UD || q.dev.cfg.Manual {
		return
	}
	deadline := time.Now().Add(udFlushLimit)
	for {
		q.lock()
		busy := !q.destroyed && q.q.Busy()
		q.unlock()
		if !busy || time.Now().After(deadline) {
			return
		}
		q.kick()
		time.Sleep(20 * time.Microsecond)
	}
}

// placeAtRTR chooses the engine of a connected QP by the pair of QP
// numbers, the flow's identity both ends share: bth.SourcePort derives
// the UDP source port from the same pair, as NICs spread such flows
// over their queues by the port. Both ends compute it alike (pairEngine),
// so two uroce devices with as many queues put the QP on the same queue
// index whatever their QP numbers, and its frames arrive on the queue
// of the engine that owns it. The QP's engine hands it over the next
// time it lets the QP go (releaseCur) while the QP is not in its list
// of QPs to pump: at once when the modify's kick is the first news, as
// it is when a QP is connected before work is posted. A QP keeping
// requests past a gap borrows its engine's buffers
// (Config.KeepPastGap) and stays where it is. Called with the QP's lock
// held.
func (q *QP) placeAtRTR() {
	n := len(q.dev.engines)
	if n < 2 || q.dev.cfg.KeepPastGap || (q.init.Type != RC && q.init.Type != UC) {
		return
	}
	to := q.dev.engines[pairEngine(q.qpn, q.q.DestQPN(), n)]
	q.moveTo = nil
	if to != q.eng.Load() {
		q.moveTo = to
	}
}

// pairEngine maps a connection, the QP numbers of its two ends, to one
// of n engines, the same at both ends: by the lower number, so that ends
// numbered alike keep every QP on the engine its number gave it at
// creation, and consecutive pairs take turns however the ends' numbers
// differ. The source port itself would spread badly: of two small QP
// numbers it is their product, even whenever one of them is.
func pairEngine(a, b uint32, n int) int {
	return int(min(a, b) % uint32(n))
}

// kick queues the QP for its engine's attention and wakes the engine.
func (q *QP) kick() {
	e := q.eng.Load()
	if q.kicked.CompareAndSwap(false, true) {
		e.kickMu.Lock()
		e.kicked = append(e.kicked, q)
		e.kickPending.Store(true)
		e.kickMu.Unlock()
	}
	if e.sleeping.Load() {
		e.link.Wake()
	}
}

// qpOutput is the qp.Output of a QP: it sends into its engine's transmit
// batch, and only while the engine is calling into the QP. Calls from
// verbs goroutines report no buffer: the QP keeps the packet and the
// engine sends it when it next pumps the QP.
type qpOutput struct{ q *QP }

// Send implements qp.Output.
func (o *qpOutput) Send(h *bth.Headers, payload []byte) bool {
	q := o.q
	if !q.inEngine {
		return false
	}
	return q.eng.Load().send(q, h, payload)
}

// qpSink routes a QP's completions to its CQs.
type qpSink struct{ q *QP }

// Complete implements qp.CompletionSink. The data of a backed region
// the completion announces is written back first.
func (s *qpSink) Complete(wc *WC, recv bool) {
	if s.q.inEngine {
		s.q.eng.Load().writeBack()
	}
	c := s.q.sendCQ
	if recv {
		c = s.q.recvCQ
	} else {
		s.q.retired()
	}
	c.push(wc)
	if c.sink == nil {
		return
	}
	if s.q.inEngine {
		s.q.eng.Load().publishLater(c)
	} else {
		// A verbs call completing work (a QP moved to ERR): the caller
		// holds the QP's lock, as engines do; completions are rare here.
		c.sink.Publish()
	}
}

// retired reports the send requests retired to QPInit.SendRetired; the
// caller holds the QP's lock.
func (q *QP) retired() {
	if f := q.init.SendRetired; f != nil {
		f(q.q.SendRetired())
	}
}

// QPStatus is what `uroce stat` shows of a QP, as `rdma resource show
// qp` does.
type QPStatus struct {
	QPN     uint32
	Type    QPType
	State   QPState
	SQPSN   PSN // the PSN of the next new request
	RQPSN   PSN // the PSN expected next
	DestQPN uint32
	// Rate is the QP's DCQCN rate in bit/s while a CNP has it below the
	// line rate (RateLimited), paced.
	Rate        uint64
	RateLimited bool
	Counters    qp.Counters
}

// Status returns the QP's state, current PSNs and counters.
func (q *QP) Status() QPStatus {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := QPStatus{QPN: q.qpn, Type: q.init.Type, State: q.q.State(), DestQPN: q.q.Query().DestQPN, Counters: q.ctr}
	s.SQPSN, s.RQPSN = q.q.PSNs()
	s.Rate, s.RateLimited = q.q.Rate()
	return s
}
