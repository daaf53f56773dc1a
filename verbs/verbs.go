// Package verbs is the verbs API as interfaces: one program runs on an
// in-process stack (Local, over a stack.Device it opened itself, which
// needs root and an interface of its own) or on the uroce daemon
// (client.Open, unprivileged, sharing the daemon's device with other
// programs), and does not otherwise care which.
//
// The value types (SGEs, work requests, completions, attributes) are the
// stack's; the objects are interfaces. Semantics are those of ibverbs
// and of package stack, whose documentation applies to every method.
package verbs

import (
	"context"
	"net/netip"

	"github.com/uroce/uroce/stack"
)

// Value types shared with package stack.
type (
	SGE        = stack.SGE
	RecvWR     = stack.RecvWR
	WC         = stack.WC
	Access     = stack.Access
	QPType     = stack.QPType
	QPState    = stack.QPState
	MTU        = stack.MTU
	PSN        = stack.PSN
	Opcode     = stack.Opcode
	SendFlags  = stack.SendFlags
	AttrMask   = stack.AttrMask
	AHAttr     = stack.AHAttr
	InitAttr   = stack.InitAttr
	RTRAttr    = stack.RTRAttr
	RTSAttr    = stack.RTSAttr
	QPAttr     = stack.QPAttr
	SRQInit    = stack.SRQInit
	DeviceAttr = stack.DeviceAttr
	Counters   = stack.Counters
	RemoteAddr = stack.RemoteAddr
	MWType     = stack.MWType
)

// Device is an open RDMA device (ibv_context).
type Device interface {
	// Query returns the device's and its port's attributes.
	Query() DeviceAttr
	// GIDs returns the GID table; GID one entry of it.
	GIDs() []netip.Addr
	GID(i int) (netip.Addr, error)
	// Counters returns the device's counters.
	Counters() Counters
	// AllocBuffer returns n bytes of memory that the device reaches
	// best: plain memory in-process, memory shared with the daemon
	// through it. Any []byte may be registered; buffers from here
	// avoid a copy per packet through the daemon. They stay valid
	// until FreeBuffer or Close.
	AllocBuffer(n int) ([]byte, error)
	// FreeBuffer gives back a buffer of AllocBuffer whose regions are
	// deregistered.
	FreeBuffer(b []byte) error
	AllocPD() (PD, error)
	CreateCQ(n int) (CQ, error)
	// Close closes the device; what was created on it goes with it.
	Close() error
}

// PD is a protection domain (ibv_pd).
type PD interface {
	RegisterMR(buf []byte, access Access) (MR, error)
	CreateQP(init QPInit) (QP, error)
	CreateSRQ(init SRQInit) (SRQ, error)
	CreateAH(attr AHAttr) (AH, error)
	// AllocMW allocates an unbound memory window of type t
	// (stack.MWType1 or stack.MWType2; ibv_alloc_mw).
	AllocMW(t MWType) (MW, error)
	Dealloc() error
}

// MW is a memory window (ibv_mw); see stack.MW. A type 1 window is
// bound with QP.BindMW, a type 2 window with an OpBindMW work request
// and unbound with OpLocalInv or a peer's SEND_WITH_INV. OpBindMW and
// OpLocalInv are carried out in send-queue order, and so is QP.BindMW
// (ibv_bind_mw), whose new R_Key RKey gives at once.
type MW interface {
	// RKey returns the window's R_Key: on the daemon, as of the last
	// bind posted from this process.
	RKey() uint32
	Type() MWType
	Dealloc() error
}

// MWBind is a window's binding (ibv_mw_bind_info); see stack.MWBind.
type MWBind struct {
	MR     MR
	Addr   uint64
	Length uint64
	Access Access
}

// MWBindWR is the window, its new R_Key and the binding of an OpBindMW
// work request (ibv_send_wr's bind_mw); see stack.MWBindWR.
type MWBindWR struct {
	MW   MW
	RKey uint32
	MWBind
}

// MR is a registered memory region (ibv_mr).
type MR interface {
	LKey() uint32
	RKey() uint32
	// Addr is the address peers and SGEs use for the region's first
	// byte: the address of its buffer.
	Addr() uint64
	Len() int
	Bytes() []byte
	// SGE returns the SGE for length bytes at offset off.
	SGE(off uint64, length uint32) SGE
	Deregister() error
}

// CQ is a completion queue (ibv_cq).
type CQ interface {
	// Poll moves up to len(wcs) completions into wcs and returns their
	// number; it never blocks.
	Poll(wcs []WC) int
	// Wait blocks until a completion is ready, the CQ overran, or ctx
	// is done.
	Wait(ctx context.Context) error
	// Resize gives the CQ room for n completions, keeping those
	// waiting (ibv_resize_cq).
	Resize(n int) error
	Destroy() error
}

// SRQ is a shared receive queue (ibv_srq).
type SRQ interface {
	PostRecv(wr *RecvWR) error
	// Resize gives the SRQ room for n receives, keeping those posted
	// (ibv_modify_srq with IBV_SRQ_MAX_WR).
	Resize(n int) error
	Destroy() error
}

// AH is an address handle (ibv_ah).
type AH interface {
	Attr() AHAttr
	Destroy() error
}

// QPInit are a QP's creation attributes (ibv_qp_init_attr).
type QPInit struct {
	Type           QPType
	SendCQ, RecvCQ CQ
	SRQ            SRQ // or nil
	MaxSendWR      int
	MaxRecvWR      int
	MaxSendSGE     int
	MaxRecvSGE     int
	MaxInline      int
	SignalAll      bool
	InfiniteRetry7 bool // see stack.QPInit
}

// SendWR is a send work request (ibv_send_wr); see stack.SendWR.
type SendWR struct {
	ID         uint64
	Op         Opcode
	Flags      SendFlags
	SG         []SGE
	Imm        uint32
	InvRKey    uint32
	Remote     RemoteAddr
	CompareAdd uint64
	Swap       uint64
	FlushType  stack.FlushType  // FLUSH
	FlushLevel stack.FlushLevel // FLUSH
	FlushLen   uint32           // FLUSH
	Inline     []byte
	AH         AH // UD
	RemoteQPN  uint32
	RemoteQKey uint32
	BindMW     MWBindWR // OpBindMW
}

// QP is a queue pair (ibv_qp).
type QP interface {
	QPN() uint32
	Type() QPType
	State() QPState
	Modify(attr *QPAttr, mask AttrMask) error
	ToInit(a InitAttr) error
	ToRTR(a RTRAttr) error
	ToRTS(a RTSAttr) error
	ToErr() error
	ToReset() error
	PostSend(wr *SendWR) error
	// PostSendBatch posts wrs in order and returns how many were
	// posted; on error wrs[n] failed and the rest were not tried.
	PostSendBatch(wrs []SendWR) (int, error)
	PostRecv(wr *RecvWR) error
	PostRecvBatch(wrs []RecvWR) (int, error)
	// BindMW binds the type 1 window mw (ibv_bind_mw) with a new
	// consumer key; see stack.QP.BindMW.
	BindMW(mw MW, id uint64, flags SendFlags, b MWBind) error
	// AttachMcast and DetachMcast attach the UD QP to a multicast
	// group and detach it (ibv_attach_mcast, ibv_detach_mcast); see
	// stack.QP.AttachMcast.
	AttachMcast(gid netip.Addr) error
	DetachMcast(gid netip.Addr) error
	Destroy() error
}
