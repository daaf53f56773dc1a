// Package proto is the protocol between the uroce daemon and its local
// clients: the messages of the control socket and the layout of the
// shared-memory rings of the data path. The daemon, the Go client
// package and the C libraries (libibverbs.so.1 and librdmacm.so.1)
// speak it; SPEC.md beside this file describes it for the C side.
//
// Every message is a Header followed by one fixed-size body, all
// little-endian, with no padding but the explicit Pad fields: the
// structs here are the layout (Encode and Decode use encoding/binary).
// Bodies may grow at their end in later versions; a receiver takes the
// prefix it knows and zero-fills what a shorter body lacks.
package proto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Version is the protocol version a client names in Hello. The daemon
// refuses other versions.
const Version = 5

// MaxMessage bounds a message, header included.
const MaxMessage = 64 << 10

// HeaderLen is the length of Header on the wire.
const HeaderLen = 16

// Header starts every message. A response repeats the request's Op and
// Seq; Err is 0 or a positive errno value (EINVAL, ENOMEM, EBUSY, …) as
// libibverbs returns them. Messages the daemon sends on its own (events)
// have Seq 0.
type Header struct {
	Op    Op
	Flags uint16
	Seq   uint32
	Len   uint32 // body bytes after the header
	Err   int32
}

// Op names a request, its response, or an event.
type Op uint16

// Requests. Each gets one response with the same Op.
const (
	OpHello Op = iota + 1
	OpQueryDevice
	OpQueryPort
	OpQueryGID
	OpQueryPKey
	OpAllocPD
	OpDeallocPD
	OpRegMR
	OpDeregMR
	OpCreateChannel
	OpDestroyChannel
	OpCreateCQ
	OpDestroyCQ
	OpCreateSRQ
	OpModifySRQ
	OpQuerySRQ
	OpDestroySRQ
	OpCreateQP
	OpModifyQP
	OpQueryQP
	OpDestroyQP
	OpCreateAH
	OpDestroyAH
	OpStat
	// RDMA CM (librdmacm); see SPEC.md's "Connection management".
	OpCMCreateChannel
	OpCMDestroyChannel
	OpCMCreateID
	OpCMDestroyID
	OpCMMigrateID
	OpCMBind
	OpCMResolveAddr
	OpCMResolveRoute
	OpCMListen
	OpCMConnect
	OpCMAccept
	OpCMReject
	OpCMDisconnect
	OpCMGetEvent
	OpCMInitQPAttr
	OpCMEstablish
	// Memory windows; see SPEC.md's "Memory windows".
	OpAllocMW
	OpDeallocMW
	OpBindMW
	// Multicast; see SPEC.md's "Multicast".
	OpAttachMcast
	OpDetachMcast
	// ibv_resize_cq and ibv_modify_srq's IBV_SRQ_MAX_WR; see SPEC.md's
	// "Resizing a CQ" and "Resizing an SRQ".
	OpResizeCQ
	OpResizeSRQ
	opEnd
)

// Events the daemon sends (Seq 0).
const (
	// OpEventDeviceGone: the daemon is stopping; every QP is in ERR
	// and its completions are flushed. The socket closes next.
	OpEventDeviceGone Op = 0x100 + iota
	// OpEventAsync carries an AsyncEvent (ibv_async_event).
	OpEventAsync
)

var opNames = map[Op]string{
	OpHello: "hello", OpQueryDevice: "query device", OpQueryPort: "query port", OpQueryGID: "query gid",
	OpQueryPKey: "query pkey", OpAllocPD: "alloc pd", OpDeallocPD: "dealloc pd", OpRegMR: "reg mr",
	OpDeregMR: "dereg mr", OpCreateChannel: "create comp channel", OpDestroyChannel: "destroy comp channel",
	OpCreateCQ: "create cq", OpDestroyCQ: "destroy cq", OpCreateSRQ: "create srq", OpModifySRQ: "modify srq",
	OpQuerySRQ: "query srq", OpDestroySRQ: "destroy srq", OpCreateQP: "create qp", OpModifyQP: "modify qp",
	OpQueryQP: "query qp", OpDestroyQP: "destroy qp", OpCreateAH: "create ah", OpDestroyAH: "destroy ah",
	OpStat: "stat", OpCMCreateChannel: "cm create event channel", OpCMDestroyChannel: "cm destroy event channel",
	OpCMCreateID: "cm create id", OpCMDestroyID: "cm destroy id", OpCMMigrateID: "cm migrate id",
	OpCMBind: "cm bind", OpCMResolveAddr: "cm resolve addr", OpCMResolveRoute: "cm resolve route",
	OpCMListen: "cm listen", OpCMConnect: "cm connect", OpCMAccept: "cm accept", OpCMReject: "cm reject",
	OpCMDisconnect: "cm disconnect", OpCMGetEvent: "cm get event", OpCMInitQPAttr: "cm init qp attr",
	OpCMEstablish: "cm establish", OpAllocMW: "alloc mw", OpDeallocMW: "dealloc mw", OpBindMW: "bind mw",
	OpAttachMcast: "attach mcast", OpDetachMcast: "detach mcast", OpResizeCQ: "resize cq", OpResizeSRQ: "resize srq",
	OpEventDeviceGone: "device gone", OpEventAsync: "async event",
}

func (o Op) String() string {
	if s, ok := opNames[o]; ok {
		return s
	}
	return fmt.Sprintf("op %d", uint16(o))
}

// Valid reports whether o is a request the daemon knows.
func (o Op) Valid() bool { return o >= OpHello && o < opEnd }

// Errors of decoding.
var (
	ErrShort   = errors.New("message too short")
	ErrLong    = errors.New("message too long")
	ErrBadBody = errors.New("body length does not match the header")
)

// PutHeader writes h into b, which must hold HeaderLen bytes.
func PutHeader(b []byte, h Header) {
	binary.LittleEndian.PutUint16(b[0:], uint16(h.Op))
	binary.LittleEndian.PutUint16(b[2:], h.Flags)
	binary.LittleEndian.PutUint32(b[4:], h.Seq)
	binary.LittleEndian.PutUint32(b[8:], h.Len)
	binary.LittleEndian.PutUint32(b[12:], uint32(h.Err))
}

// ParseHeader splits a message into its header and body. It checks the
// lengths only; what the body means depends on the Op.
func ParseHeader(msg []byte) (Header, []byte, error) {
	if len(msg) < HeaderLen {
		return Header{}, nil, ErrShort
	}
	if len(msg) > MaxMessage {
		return Header{}, nil, ErrLong
	}
	h := Header{
		Op:    Op(binary.LittleEndian.Uint16(msg[0:])),
		Flags: binary.LittleEndian.Uint16(msg[2:]),
		Seq:   binary.LittleEndian.Uint32(msg[4:]),
		Len:   binary.LittleEndian.Uint32(msg[8:]),
		Err:   int32(binary.LittleEndian.Uint32(msg[12:])),
	}
	if uint64(h.Len) != uint64(len(msg)-HeaderLen) {
		return h, nil, ErrBadBody
	}
	return h, msg[HeaderLen:], nil
}

// Marshal builds a message of header h and body (a struct of this
// package, a []byte, or nil). h.Len is set from the body.
func Marshal(h Header, body any) ([]byte, error) {
	var b bytes.Buffer
	b.Write(make([]byte, HeaderLen))
	switch v := body.(type) {
	case nil:
	case []byte:
		b.Write(v)
	default:
		if err := binary.Write(&b, binary.LittleEndian, v); err != nil {
			return nil, err
		}
	}
	msg := b.Bytes()
	if len(msg) > MaxMessage {
		return nil, ErrLong
	}
	h.Len = uint32(len(msg) - HeaderLen)
	PutHeader(msg, h)
	return msg, nil
}

// Unmarshal decodes body into v, a pointer to a struct of this package.
// A body shorter than the struct leaves the rest zero (an older peer);
// a longer one is read as far as the struct goes (a newer peer).
func Unmarshal(body []byte, v any) error {
	n := binary.Size(v)
	if n < 0 {
		return fmt.Errorf("unmarshal %T: not a fixed-size struct", v)
	}
	if len(body) < n {
		buf := make([]byte, n)
		copy(buf, body)
		body = buf
	}
	_, err := binary.Decode(body[:n], binary.LittleEndian, v)
	return err
}

// Name is a NUL-padded fixed-size string field.
type Name [64]byte

// NameOf returns s as a Name, cut to fit.
func NameOf(s string) Name {
	var n Name
	copy(n[:len(n)-1], s)
	return n
}

func (n Name) String() string {
	if i := bytes.IndexByte(n[:], 0); i >= 0 {
		return string(n[:i])
	}
	return string(n[:])
}

// Hello opens a session: the first request on a new connection. The
// response carries the session's doorbell, an eventfd (see SPEC.md).
type Hello struct {
	Version uint32
	Flags   uint32
}

// HelloResp answers Hello.
type HelloResp struct {
	Version  uint32
	Session  uint32
	Device   Name // the device name, e.g. uroce0
	Netdev   Name // the network interface it runs on
	NumPorts uint32
	Pad      uint32
}

// DeviceAttr answers QueryDevice (ibv_device_attr's fields, in order
// where they are kept).
type DeviceAttr struct {
	NodeGUID        uint64
	SysImageGUID    uint64
	MaxMRSize       uint64
	PageSizeCap     uint64
	VendorID        uint32
	VendorPartID    uint32
	HWVer           uint32
	MaxQP           int32
	MaxQPWR         int32
	DeviceCapFlags  uint32
	MaxSGE          int32
	MaxCQ           int32
	MaxCQE          int32
	MaxMR           int32
	MaxPD           int32
	MaxQPRdAtom     int32
	MaxQPInitRdAtom int32
	MaxSRQ          int32
	MaxSRQWR        int32
	MaxSRQSGE       int32
	MaxAH           int32
	MaxInline       int32
	MaxPKeys        uint16
	PhysPortCnt     uint8
	AtomicCap       uint8 // ibv_atomic_cap: 1 = IBV_ATOMIC_HCA
	Pad             uint32
	FWVer           Name
	MaxMW           int32 // memory windows (version 3)
	Pad2            uint32
	// Multicast (version 4): groups, QPs per group, attachments in all.
	MaxMcastGrp           int32
	MaxMcastQPAttach      int32
	MaxTotalMcastQPAttach int32
	Pad3                  uint32
}

// Device capability flags of DeviceAttr (ibv_device_cap_flags).
const (
	DeviceSysImageGUID    = 1 << 11 // IBV_DEVICE_SYS_IMAGE_GUID: sys_image_guid is set
	DeviceRCRNRNAKGen     = 1 << 12 // IBV_DEVICE_RC_RNR_NAK_GEN: RC responders send RNR NAKs
	DeviceSRQResize       = 1 << 13 // IBV_DEVICE_SRQ_RESIZE: ibv_modify_srq takes IBV_SRQ_MAX_WR
	DeviceMemWindow       = 1 << 17 // IBV_DEVICE_MEM_WINDOW
	DeviceMemMgtExt       = 1 << 21 // IBV_DEVICE_MEM_MGT_EXTENSIONS
	DeviceMemWindowType2B = 1 << 24 // IBV_DEVICE_MEM_WINDOW_TYPE_2B
)

// PortReq names a port (1) for QueryPort.
type PortReq struct {
	Port uint32
}

// PortAttr answers QueryPort (ibv_port_attr's fields).
type PortAttr struct {
	State         uint32 // ibv_port_state: 4 = ACTIVE
	MaxMTU        uint32 // ibv_mtu
	ActiveMTU     uint32
	GIDTblLen     int32
	PortCapFlags  uint32
	MaxMsgSz      uint32
	PKeyTblLen    uint16
	LID           uint16
	SMLID         uint16
	LMC           uint8
	MaxVLNum      uint8
	SMSL          uint8
	SubnetTimeout uint8
	InitTypeReply uint8
	ActiveWidth   uint8
	ActiveSpeed   uint8
	PhysState     uint8
	LinkLayer     uint8 // 2 = IBV_LINK_LAYER_ETHERNET
	Flags         uint8
	LinkMTU       uint32 // the interface's IP MTU
	MAC           [8]byte
}

// IndexReq names a port and a table index (QueryGID, QueryPKey).
type IndexReq struct {
	Port  uint32
	Index int32
}

// GIDResp answers QueryGID.
type GIDResp struct {
	GID  [16]byte
	Type uint32 // ibv_gid_type: 2 = RoCEv2
	Pad  uint32
}

// PKeyResp answers QueryPKey.
type PKeyResp struct {
	PKey uint16
	Pad  [6]byte
}

// Handle names an object of the session: the body of the destroy and
// dealloc requests and of AllocPD's response.
type Handle struct {
	Handle uint32
	Pad    uint32
}

// Memory kinds of RegMR.
const (
	// MemShared: the bytes are in a memfd the client passes with the
	// request (SCM_RIGHTS), sealed against shrinking, at offset Addr.
	MemShared = 1
	// MemProcess: the bytes are the client's own memory at address
	// Addr, which the daemon reaches through the client process.
	MemProcess = 2
)

// RegMR registers memory (ibv_reg_mr, ibv_reg_mr_iova2).
type RegMR struct {
	PD     uint32
	Access uint32 // ibv_access_flags
	IOVA   uint64 // the address SGEs and peers use for the first byte
	Length uint64
	Kind   uint32
	Pad    uint32
	Addr   uint64 // MemShared: offset in the memfd; MemProcess: client address
}

// RegMRResp answers RegMR.
type RegMRResp struct {
	MR   uint32
	LKey uint32
	RKey uint32
	Pad  uint32
}

// Memory window types (ibv_mw_type).
const (
	MWType1 = 1
	MWType2 = 2
)

// AllocMW allocates a memory window (ibv_alloc_mw).
type AllocMW struct {
	PD   uint32
	Type uint32 // MWType1, MWType2
}

// AllocMWResp answers AllocMW.
type AllocMWResp struct {
	MW   uint32
	RKey uint32
}

// BindMW binds a type 1 window (ibv_bind_mw) on QP: Length bytes at
// Addr of the region MR (0: none, to unbind with Length 0) with Access
// (remote rights, ibv_access_flags), under a new consumer key. Flags
// are ibv_send_flags (IBV_SEND_SIGNALED: a completion with ID).
type BindMW struct {
	QP     uint32
	MW     uint32
	MR     uint32
	Flags  uint32
	ID     uint64
	Addr   uint64
	Length uint64
	Access uint32
	Pad    uint32
}

// BindMWResp answers BindMW: the window's R_Key now.
type BindMWResp struct {
	RKey uint32
	Pad  uint32
}

// McastReq attaches the UD QP to the multicast group GID, or detaches
// it (ibv_attach_mcast, ibv_detach_mcast). LID is ignored, as on RoCE.
type McastReq struct {
	QP  uint32
	LID uint16
	Pad uint16
	GID [16]byte
}

// ChannelResp answers CreateChannel; the channel's eventfd comes with it.
type ChannelResp struct {
	Channel uint32
	Pad     uint32
}

// CreateCQ creates a completion queue (ibv_create_cq). Channel 0 means
// none.
type CreateCQ struct {
	CQE        int32
	Channel    uint32
	CompVector int32
	Pad        uint32
}

// CreateCQResp answers CreateCQ; the ring's memfd comes with it.
type CreateCQResp struct {
	CQ        uint32
	CQE       uint32 // completions the CQ holds (>= the CQE asked for)
	Slots     uint32 // ring slots (a power of two)
	RingBytes uint32
}

// ResizeCQ gives a CQ a new ring of at least CQE completions
// (ibv_resize_cq); the answer is a CreateCQResp with the new ring's
// memfd.
type ResizeCQ struct {
	CQ  uint32
	CQE int32
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
type CreateSRQ struct {
	PD     uint32
	MaxWR  uint32
	MaxSGE uint32
	Limit  uint32
}

// CreateSRQResp answers CreateSRQ; the ring's memfd comes with it.
type CreateSRQResp struct {
	SRQ       uint32
	MaxWR     uint32
	MaxSGE    uint32
	Slots     uint32
	SlotBytes uint32
	RingBytes uint32
}

// ResizeSRQ gives an SRQ a new ring of at least MaxWR receives
// (ibv_modify_srq with IBV_SRQ_MAX_WR); the answer is a ResizeSRQResp
// with the new ring's memfd.
type ResizeSRQ struct {
	SRQ   uint32
	MaxWR uint32
}

// ResizeSRQResp answers ResizeSRQ. Copied is the old ring's producer
// index the daemon read: the slots before it are in the new ring, the
// ones the client produced after it are the client's to copy.
type ResizeSRQResp struct {
	MaxWR     uint32
	Slots     uint32
	SlotBytes uint32
	RingBytes uint32
	Copied    uint32
	Pad       uint32
}

// ModifySRQ sets an SRQ's limit (ibv_modify_srq with IBV_SRQ_LIMIT).
type ModifySRQ struct {
	SRQ   uint32
	Mask  uint32 // ibv_srq_attr_mask: 1 MAX_WR (refused), 2 LIMIT
	MaxWR uint32
	Limit uint32
}

// SRQAttr answers QuerySRQ.
type SRQAttr struct {
	MaxWR  uint32
	MaxSGE uint32
	Limit  uint32
	Pad    uint32
}

// QP types, with ibv_qp_type values.
const (
	QPTypeRC = 2
	QPTypeUC = 3
	QPTypeUD = 4
)

// CreateQP creates a queue pair (ibv_create_qp).
type CreateQP struct {
	PD         uint32
	Type       uint32 // QPTypeRC, QPTypeUC, QPTypeUD
	SendCQ     uint32
	RecvCQ     uint32
	SRQ        uint32 // 0: none
	MaxSendWR  uint32
	MaxRecvWR  uint32
	MaxSendSGE uint32
	MaxRecvSGE uint32
	MaxInline  uint32
	SigAll     uint32
	Pad        uint32
}

// CreateQPResp answers CreateQP; the rings' memfd comes with it. The
// capabilities are what the QP got (at least what was asked; the inline
// capacity at least 16 bytes per send SGE, the room the SGEs take in a
// send slot).
type CreateQPResp struct {
	QP          uint32
	QPN         uint32
	MaxSendWR   uint32
	MaxRecvWR   uint32
	MaxSendSGE  uint32
	MaxRecvSGE  uint32
	MaxInline   uint32
	SQSlots     uint32
	SQSlotBytes uint32
	SQOffset    uint32
	RQSlots     uint32
	RQSlotBytes uint32
	RQOffset    uint32
	RingBytes   uint32
}

// AHAttr is an address vector (ibv_ah_attr with its ibv_global_route).
type AHAttr struct {
	DGID         [16]byte
	FlowLabel    uint32
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	IsGlobal     uint8
	DLID         uint16
	SL           uint8
	Port         uint8
	DMAC         [6]byte // zero: resolved by the daemon
	Pad          [2]byte
}

// QPAttr carries QP attributes (ibv_qp_attr); a mask (ibv_qp_attr_mask)
// says which count.
type QPAttr struct {
	State           uint32 // ibv_qp_state
	CurState        uint32
	PathMTU         uint32 // ibv_mtu
	QKey            uint32
	RQPSN           uint32
	SQPSN           uint32
	DestQPN         uint32
	AccessFlags     uint32
	PKeyIndex       uint16
	Port            uint8
	Timeout         uint8
	RetryCnt        uint8
	RNRRetry        uint8
	MaxRdAtomic     uint8
	MaxDestRdAtomic uint8
	MinRNRTimer     uint8
	Pad             [7]byte
	AH              AHAttr
}

// ModifyQP changes a QP's attributes (ibv_modify_qp).
type ModifyQP struct {
	QP   uint32
	Mask uint32
	Attr QPAttr
}

// QueryQPResp answers QueryQP (whose body is a Handle).
type QueryQPResp struct {
	Attr QPAttr
	Init CreateQP
}

// CreateAH creates an address handle (ibv_create_ah).
type CreateAH struct {
	PD   uint32
	Pad  uint32
	Attr AHAttr
}

// CreateAHResp answers CreateAH.
type CreateAHResp struct {
	AH   uint32
	Pad  uint16
	DMAC [6]byte
}

// StatReq asks for the daemon's counters; the response body is a Stat
// as JSON (see SPEC.md). QPN 0 asks for all QPs, ^0 for none.
type StatReq struct {
	Flags uint32
	QPN   uint32
}

// Async event types, with ibv_event_type values.
const (
	EventCQErr           = 0
	EventQPFatal         = 1
	EventSRQLimit        = 17
	EventDeviceFatal     = 8
	EventPortActive      = 9
	EventQPLastWQE       = 15
	EventCommEstablished = 4
)

// AsyncEvent is the body of OpEventAsync.
type AsyncEvent struct {
	Type   uint32
	Handle uint32 // the QP, CQ or SRQ it is about
}

// RDMA CM port spaces (rdma_port_space).
const (
	PSIPoIB = 0x0002
	PSTCP   = 0x0106
	PSUDP   = 0x0111
)

// RDMA CM event types (rdma_cm_event_type).
const (
	CMEventAddrResolved    = 0
	CMEventAddrError       = 1
	CMEventRouteResolved   = 2
	CMEventRouteError      = 3
	CMEventConnectRequest  = 4
	CMEventConnectResponse = 5
	CMEventConnectError    = 6
	CMEventUnreachable     = 7
	CMEventRejected        = 8
	CMEventEstablished     = 9
	CMEventDisconnected    = 10
	CMEventDeviceRemoval   = 11
	CMEventTimewaitExit    = 15
)

// Address families of CMAddr.
const (
	AFInet  = 2
	AFInet6 = 10
)

// CMAddr is a socket address: an IPv4 address is in IPv4-mapped IPv6
// form (::ffff:a.b.c.d) with Family AFInet. Port in host order. The
// zero CMAddr is no address.
type CMAddr struct {
	Family uint16
	Port   uint16
	Scope  uint32 // IPv6 scope ID
	Addr   [16]byte
}

// CMCreateID creates an RDMA CM identifier (rdma_create_id) whose events
// go to Channel.
type CMCreateID struct {
	Channel uint32
	PS      uint32 // PSTCP, PSUDP, PSIPoIB
	QPType  uint32 // QPTypeRC or QPTypeUD
	Pad     uint32
}

// CMMigrateID moves an ID's future events to another channel
// (rdma_migrate_id).
type CMMigrateID struct {
	ID      uint32
	Channel uint32
}

// CMBind binds an ID to a local address (rdma_bind_addr); port 0 takes
// a free one. The response is a CMRoute.
type CMBind struct {
	ID   uint32
	Pad  uint32
	Addr CMAddr
}

// CMResolve starts address resolution (rdma_resolve_addr: Src may be
// zero, Dst is the peer) or, with zero addresses, route resolution
// (rdma_resolve_route). The response is a CMRoute as known so far; the
// outcome comes as an event.
type CMResolve struct {
	ID        uint32
	TimeoutMS uint32
	Src, Dst  CMAddr
}

// CMRoute is what the daemon knows of an ID's addresses and path.
type CMRoute struct {
	Src, Dst  CMAddr
	SGID      [16]byte
	DGID      [16]byte
	SGIDIndex uint32
	PathMTU   uint32 // ibv_mtu
	DMAC      [6]byte
	HopLimit  uint8
	Bound     uint8 // 1: Src is the ID's
}

// CMListen starts listening on the ID's bound address (rdma_listen).
type CMListen struct {
	ID      uint32
	Backlog int32
}

// CMConnParam is rdma_conn_param (or, for UD, the QP number and Q_Key
// of SIDR). Private data: at most 56 bytes in a connect, 196 in an
// accept, 148 in a reject.
type CMConnParam struct {
	PrivateDataLen     uint8
	ResponderResources uint8
	InitiatorDepth     uint8
	Flags              uint8
	RetryCount         uint8
	RNRRetryCount      uint8
	SRQ                uint8
	Pad                uint8
	QPN                uint32
	QKey               uint32
	Pad2               uint32
	PrivateData        [196]byte
}

// CMConnect connects an ID (rdma_connect) or accepts the connection
// request of a child ID (rdma_accept), with QP, a QP handle of the
// session (0: Param.QPN names it).
type CMConnect struct {
	ID    uint32
	QP    uint32
	Param CMConnParam
}

// CMReject refuses a connection request (rdma_reject).
type CMReject struct {
	ID             uint32
	PrivateDataLen uint32
	PrivateData    [148]byte
}

// CMEvent answers CMGetEvent: the oldest event of the channel.
type CMEvent struct {
	Type     uint32 // CMEvent*
	Status   int32  // 0; a reject reason (REJECTED); a negative errno
	ID       uint32 // the ID; for CONNECT_REQUEST a new ID of the session
	ListenID uint32 // CONNECT_REQUEST: the listening ID
	Param    CMConnParam
	Route    CMRoute // CONNECT_REQUEST: the new ID's; others: the ID's now
	AH       AHAttr  // UD (SIDR): the peer's address
}

// CMInitQPAttr asks which attributes the QP of an ID takes to reach
// State (rdma_init_qp_attr): for a QP the client moves itself.
type CMInitQPAttr struct {
	ID    uint32
	State uint32 // ibv_qp_state: 1 INIT, 2 RTR, 3 RTS
}

// CMQPAttr answers CMInitQPAttr: the attributes and their
// ibv_qp_attr_mask.
type CMQPAttr struct {
	Mask uint32
	Pad  uint32
	Attr QPAttr
}
