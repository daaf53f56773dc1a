package mad

import (
	"net/netip"
	"time"

	"github.com/uroce/uroce/bth"
)

// Sizes of the variable parts of the CM messages (IBTA §12.6): every
// message fills the 232 data bytes of its MAD, the private data takes
// what the fixed fields leave.
const (
	PathLen           = 44 // a path in a REQ
	REQPrivateLen     = 92
	MRAPrivateLen     = 222
	REJARILen         = 72 // additional reject information
	REJPrivateLen     = 148
	REPPrivateLen     = 196
	RTUPrivateLen     = 224
	DREQPrivateLen    = 220
	DREPPrivateLen    = 224
	LAPPrivateLen     = 168
	APRInfoLen        = 72
	APRPrivateLen     = 148
	SIDRREQPrivateLen = 216
	SIDRREPInfoLen    = 72
	SIDRREPPrivateLen = 136
)

// TransportType is a REQ's 2-bit transport service type.
type TransportType uint8

// Transport service types. TransportExtended defers to the REQ's
// extended transport type, where 1 means XRC (Annex A14).
const (
	TransportRC       TransportType = 0
	TransportUC       TransportType = 1
	TransportRD       TransportType = 2
	TransportExtended TransportType = 3
	ExtTransportXRC                 = 1
)

func (t TransportType) String() string { return [4]string{"RC", "UC", "RD", "extended"}[t&3] }

// MTU is the 4-bit path MTU code of a REQ, encoded as in path records
// and PortInfo: 1 is 256 bytes, 2 512, 3 1024, 4 2048, 5 4096.
type MTU uint8

// Path MTU codes.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes, or 0 for a reserved code.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// MTUOf returns the code of an MTU of n bytes, or 0 when n is not one.
func MTUOf(n int) MTU {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m
		}
	}
	return 0
}

// Timeout returns the duration of a 5-bit CM timeout code: the CM
// response timeouts, the service timeout of an MRA, the local ACK
// timeout and the target ACK delay all count 4.096 µs × 2^code.
func Timeout(code uint8) time.Duration { return 4096 * time.Nanosecond << (code & 31) }

// MsgRef names the message that an MRA acknowledges or a REJ rejects
// (the 2-bit "Message MRAed" and "Message REJected" fields).
type MsgRef uint8

// Message references. For an MRA, MsgOther is a LAP; for a REJ, it is
// none of REQ or REP (a REJ for a timeout or a stale connection).
const (
	MsgREQ   MsgRef = 0
	MsgREP   MsgRef = 1
	MsgOther MsgRef = 2
)

func (m MsgRef) String() string { return [4]string{"REQ", "REP", "other", "reserved"}[m&3] }

func get24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

func put24(b []byte, v uint32) {
	_ = b[2]
	b[0] = byte(v >> 16)
	b[1] = byte(v >> 8)
	b[2] = byte(v)
}

func bit(v bool, m byte) byte {
	if v {
		return m
	}
	return 0
}

func gid(b []byte) netip.Addr { return netip.AddrFrom16([16]byte(b[:16])) }

func putGID(b []byte, a netip.Addr) {
	g := a.As16() // the zero Addr gives zeros; an IPv4 address its ::ffff: form
	copy(b[:16], g[:])
}

// Path is a view of the 44 bytes that describe one path in a REQ: its
// primary path at data byte 52 and its alternate path at byte 96 (IBTA
// §12.6, table 106). A path not in use is all zeros.
//
//	    0               1               2               3
//	    0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//	   +-------------------------------+-------------------------------+
//	 0 |         Local Port LID        |        Remote Port LID        |
//	   +-------------------------------+-------------------------------+
//	 4 |                      Local Port GID (128)                     |
//	   +---------------------------------------------------------------+
//	20 |                     Remote Port GID (128)                     |
//	   +---------------------------------------+-----------+-----------+
//	36 |               Flow Label              |    Resv   |    Rate   |
//	   +---------------+---------------+-------+-+-----+---+-----+-----+
//	40 | Traffic Class |   Hop Limit   |   SL  |L| Rsv |   ACKT  | Rsv |
//	   +---------------+---------------+-------+-+-----+---------+-----+
//
// L is Subnet Local, ACKT the local ACK timeout (see Timeout). On RoCE
// the LIDs are 0xffff and the GIDs the IP addresses, IPv4 ones in their
// ::ffff: form (seen).
//
// Accessors assume len(p) >= PathLen.
type Path []byte

// LocalLID is the local port's LID.
func (p Path) LocalLID() uint16 { return be.Uint16(p[0:]) }

// RemoteLID is the remote port's LID.
func (p Path) RemoteLID() uint16 { return be.Uint16(p[2:]) }

// LocalGID is the local port's GID.
func (p Path) LocalGID() netip.Addr { return gid(p[4:]) }

// RemoteGID is the remote port's GID.
func (p Path) RemoteGID() netip.Addr { return gid(p[20:]) }

// FlowLabel is the 20-bit flow label.
func (p Path) FlowLabel() uint32 { return be.Uint32(p[36:]) >> 12 }

// PacketRate is the 6-bit static rate code.
func (p Path) PacketRate() uint8 { return p[39] & 0x3f }

// TrafficClass is the traffic class (IPv4 TOS or IPv6 traffic class on RoCE).
func (p Path) TrafficClass() uint8 { return p[40] }

// HopLimit is the hop limit (TTL on RoCE).
func (p Path) HopLimit() uint8 { return p[41] }

// SL is the 4-bit service level.
func (p Path) SL() uint8 { return p[42] >> 4 }

// SubnetLocal tells that the path stays in the local subnet.
func (p Path) SubnetLocal() bool { return p[42]&0x08 != 0 }

// LocalACKTimeout is the 5-bit local ACK timeout code.
func (p Path) LocalACKTimeout() uint8 { return p[43] >> 3 }

// PathFields are the values of a path, for building one. The Reserved
// fields hold reserved bits as received; they are zero when sending.
type PathFields struct {
	LocalLID        uint16
	RemoteLID       uint16
	LocalGID        netip.Addr // zeros when invalid; an IPv4 address is written in its ::ffff: form
	RemoteGID       netip.Addr
	FlowLabel       uint32 // 20 bits
	PacketRate      uint8  // 6 bits
	TrafficClass    uint8
	HopLimit        uint8
	SL              uint8 // 4 bits
	SubnetLocal     bool
	LocalACKTimeout uint8 // 5 bits
	// Reserved0 holds the 6 reserved bits between flow label and
	// packet rate (in a LAP: the 4 after the flow label, then the 2
	// before the packet rate).
	Reserved0 uint8
	Reserved1 uint8 // the 3 bits after SubnetLocal
	Reserved2 uint8 // the 3 bits after LocalACKTimeout
}

// Fields returns the path's values.
func (p Path) Fields() PathFields {
	return PathFields{LocalLID: p.LocalLID(), RemoteLID: p.RemoteLID(), LocalGID: p.LocalGID(),
		RemoteGID: p.RemoteGID(), FlowLabel: p.FlowLabel(), PacketRate: p.PacketRate(),
		TrafficClass: p.TrafficClass(), HopLimit: p.HopLimit(), SL: p.SL(), SubnetLocal: p.SubnetLocal(),
		LocalACKTimeout: p.LocalACKTimeout(), Reserved0: uint8(be.Uint32(p[36:])>>6) & 0x3f,
		Reserved1: p[42] & 7, Reserved2: p[43] & 7}
}

// Encode writes f into b[:PathLen] in the layout of a REQ path.
func (f *PathFields) Encode(b []byte) {
	_ = b[PathLen-1]
	be.PutUint16(b[0:], f.LocalLID)
	be.PutUint16(b[2:], f.RemoteLID)
	putGID(b[4:], f.LocalGID)
	putGID(b[20:], f.RemoteGID)
	be.PutUint32(b[36:], f.FlowLabel<<12|uint32(f.Reserved0&0x3f)<<6|uint32(f.PacketRate&0x3f))
	b[40] = f.TrafficClass
	b[41] = f.HopLimit
	b[42] = f.SL<<4 | bit(f.SubnetLocal, 0x08) | f.Reserved1&7
	b[43] = f.LocalACKTimeout<<3 | f.Reserved2&7
}

// REQ is a view of the data of a REQ, the request for communication
// the active side sends first (IBTA §12.6, table 106):
//
//	     0               1               2               3
//	     0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//	    +---------------------------------------------------------------+
//	  0 |                     Local Communication ID                    |
//	    +---------------+-----------------------------------------------+
//	  4 |    Reserved   |                   Vendor ID                   |
//	    +---------------+-----------------------------------------------+
//	  8 |                        Service ID (64)                        |
//	    +---------------------------------------------------------------+
//	 16 |                       Local CA GUID (64)                      |
//	    +---------------------------------------------------------------+
//	 24 |                            Reserved                           |
//	    +---------------------------------------------------------------+
//	 28 |                          Local Q_Key                          |
//	    +-----------------------------------------------+---------------+
//	 32 |                   Local QPN                   |   Resp Rsrc   |
//	    +-----------------------------------------------+---------------+
//	 36 |                   Local EECN                  |   Init Depth  |
//	    +-----------------------------------------------+---------+---+-+
//	 40 |                  Remote EECN                  |   RCMT  | TS|E|
//	    +-----------------------------------------------+---------+---+-+
//	 44 |                  Starting PSN                 |   LCMT  | Rty |
//	    +-------------------------------+-------+-+-----+-------+-+-----+
//	 48 |             P_Key             |  MTU  |D| RNR |  MCR  |S| Ext |
//	    +-------------------------------+-------+-+-----+-------+-+-----+
//	 52 |               primary path (44 bytes, see Path)               |
//	    +---------------------------------------------------------------+
//	 96 |                   alternate path (44 bytes)                   |
//	    +---------------------------------------------------------------+
//	140 |                    Private Data (92 bytes)                    |
//	    +---------------------------------------------------------------+
//
// RCMT and LCMT are the remote and local CM response timeouts, TS the
// transport service type, E end-to-end flow control, Rty the retry
// count, D RDC exists, RNR the RNR retry count, MCR max CM retries, S
// SRQ, Ext the extended transport type. The Vendor ID (bytes 5-7,
// reserved before enhanced connection establishment) names whose
// options the attribute modifier carries. The top bit of the alternate
// path's last reserved bits (byte 139, 0x04) is SAP Supported.
//
// The Starting PSN is the first PSN the passive side sends with (it is
// the active side's receive PSN); the REP's is the active side's first
// send PSN (seen on rdma_rxe and ConnectX).
//
// Accessors assume len(r) >= DataLen; MAD.Data of a parsed MAD is.
type REQ []byte

// LocalCommID is the active side's communication ID.
func (r REQ) LocalCommID() uint32 { return be.Uint32(r[0:]) }

// VendorID is the 24-bit vendor ID of enhanced connection establishment.
func (r REQ) VendorID() uint32 { return get24(r[5:]) }

// ServiceID names the service asked for.
func (r REQ) ServiceID() ServiceID { return ServiceID(be.Uint64(r[8:])) }

// LocalCAGUID is the active side's channel adapter GUID.
func (r REQ) LocalCAGUID() uint64 { return be.Uint64(r[16:]) }

// LocalQKey is the active side's Q_Key (RD only).
func (r REQ) LocalQKey() uint32 { return be.Uint32(r[28:]) }

// LocalQPN is the active side's QP number.
func (r REQ) LocalQPN() uint32 { return get24(r[32:]) }

// ResponderResources is how many RDMA READs and atomics the active side
// accepts outstanding as a responder.
func (r REQ) ResponderResources() uint8 { return r[35] }

// LocalEECN is the active side's EE context (RD only).
func (r REQ) LocalEECN() uint32 { return get24(r[36:]) }

// InitiatorDepth is how many RDMA READs and atomics the active side
// will have outstanding as a requester.
func (r REQ) InitiatorDepth() uint8 { return r[39] }

// RemoteEECN is the passive side's EE context (RD only).
func (r REQ) RemoteEECN() uint32 { return get24(r[40:]) }

// RemoteCMResponseTimeout is the 5-bit code of how long the active side
// waits for an answer (see Timeout).
func (r REQ) RemoteCMResponseTimeout() uint8 { return r[43] >> 3 }

// TransportType is the transport service type.
func (r REQ) TransportType() TransportType { return TransportType(r[43]>>1) & 3 }

// EndToEndFlowControl tells that the active side's receive queue
// generates end-to-end credits.
func (r REQ) EndToEndFlowControl() bool { return r[43]&1 != 0 }

// StartingPSN is the first PSN the passive side is to send with.
func (r REQ) StartingPSN() bth.PSN { return bth.PSN(get24(r[44:])) }

// LocalCMResponseTimeout is the 5-bit code of how long the passive side
// may take to answer a message from the active side.
func (r REQ) LocalCMResponseTimeout() uint8 { return r[47] >> 3 }

// RetryCount is the transport retry count (3 bits).
func (r REQ) RetryCount() uint8 { return r[47] & 7 }

// PKey is the partition key.
func (r REQ) PKey() uint16 { return be.Uint16(r[48:]) }

// PathMTU is the path MTU code.
func (r REQ) PathMTU() MTU { return MTU(r[50] >> 4) }

// RDCExists tells that an RD channel exists (RD only).
func (r REQ) RDCExists() bool { return r[50]&0x08 != 0 }

// RNRRetryCount is the RNR NAK retry count (3 bits, 7 is infinite).
func (r REQ) RNRRetryCount() uint8 { return r[50] & 7 }

// MaxCMRetries is how many times the CM resends a message (4 bits).
func (r REQ) MaxCMRetries() uint8 { return r[51] >> 4 }

// SRQ tells that the active side's QP uses a shared receive queue.
func (r REQ) SRQ() bool { return r[51]&0x08 != 0 }

// ExtTransportType is the extended transport type (3 bits, see
// TransportExtended).
func (r REQ) ExtTransportType() uint8 { return r[51] & 7 }

// Primary is the primary path.
func (r REQ) Primary() Path { return Path(r[52:96:96]) }

// Alternate is the alternate path (zeros when there is none).
func (r REQ) Alternate() Path { return Path(r[96:140:140]) }

// SAPSupported tells that the active side supports the Suggest
// Alternate Path message.
func (r REQ) SAPSupported() bool { return r[139]&0x04 != 0 }

// PrivateData returns the 92 bytes of private data. rdma_cm puts a
// CMAHeader at its start (see CMAHeader).
func (r REQ) PrivateData() []byte { return r[140:232:232] }

// CMAHeader returns the rdma_cm IP addressing header at the start of
// the private data, when the service ID is one of rdma_cm's IP port
// spaces and the header is well formed.
func (r REQ) CMAHeader() (CMAHeader, bool) {
	if !r.ServiceID().IsIP() {
		return nil, false
	}
	return ParseCMAHeader(r.PrivateData())
}

// REQFields are the values of a REQ, for building one.
type REQFields struct {
	LocalCommID             uint32
	VendorID                uint32 // 24 bits
	ServiceID               ServiceID
	LocalCAGUID             uint64
	LocalQKey               uint32
	LocalQPN                uint32 // 24 bits
	ResponderResources      uint8
	LocalEECN               uint32 // 24 bits
	InitiatorDepth          uint8
	RemoteEECN              uint32 // 24 bits
	RemoteCMResponseTimeout uint8  // 5 bits
	TransportType           TransportType
	EndToEndFlowControl     bool
	StartingPSN             bth.PSN
	LocalCMResponseTimeout  uint8 // 5 bits
	RetryCount              uint8 // 3 bits
	PKey                    uint16
	PathMTU                 MTU
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtTransportType        uint8 // 3 bits
	Primary                 PathFields
	Alternate               PathFields // its Reserved2 does not hold the SAP Supported bit
	SAPSupported            bool
	PrivateData             [REQPrivateLen]byte
	Reserved4               uint8  // byte 4; zero when sending
	Reserved24              uint32 // bytes 24-27; zero when sending
}

// Fields returns the REQ's values.
func (r REQ) Fields() REQFields {
	f := REQFields{LocalCommID: r.LocalCommID(), VendorID: r.VendorID(), ServiceID: r.ServiceID(),
		LocalCAGUID: r.LocalCAGUID(), LocalQKey: r.LocalQKey(), LocalQPN: r.LocalQPN(),
		ResponderResources: r.ResponderResources(), LocalEECN: r.LocalEECN(), InitiatorDepth: r.InitiatorDepth(),
		RemoteEECN: r.RemoteEECN(), RemoteCMResponseTimeout: r.RemoteCMResponseTimeout(),
		TransportType: r.TransportType(), EndToEndFlowControl: r.EndToEndFlowControl(),
		StartingPSN: r.StartingPSN(), LocalCMResponseTimeout: r.LocalCMResponseTimeout(),
		RetryCount: r.RetryCount(), PKey: r.PKey(), PathMTU: r.PathMTU(), RDCExists: r.RDCExists(),
		RNRRetryCount: r.RNRRetryCount(), MaxCMRetries: r.MaxCMRetries(), SRQ: r.SRQ(),
		ExtTransportType: r.ExtTransportType(), Primary: r.Primary().Fields(), Alternate: r.Alternate().Fields(),
		SAPSupported: r.SAPSupported(), Reserved4: r[4], Reserved24: be.Uint32(r[24:])}
	f.Alternate.Reserved2 &^= 0x04
	copy(f.PrivateData[:], r.PrivateData())
	return f
}

// Encode writes f into b[:DataLen].
func (f *REQFields) Encode(b []byte) {
	_ = b[DataLen-1]
	be.PutUint32(b[0:], f.LocalCommID)
	b[4] = f.Reserved4
	put24(b[5:], f.VendorID)
	be.PutUint64(b[8:], uint64(f.ServiceID))
	be.PutUint64(b[16:], f.LocalCAGUID)
	be.PutUint32(b[24:], f.Reserved24)
	be.PutUint32(b[28:], f.LocalQKey)
	put24(b[32:], f.LocalQPN)
	b[35] = f.ResponderResources
	put24(b[36:], f.LocalEECN)
	b[39] = f.InitiatorDepth
	put24(b[40:], f.RemoteEECN)
	b[43] = f.RemoteCMResponseTimeout<<3 | byte(f.TransportType&3)<<1 | bit(f.EndToEndFlowControl, 1)
	put24(b[44:], uint32(f.StartingPSN))
	b[47] = f.LocalCMResponseTimeout<<3 | f.RetryCount&7
	be.PutUint16(b[48:], f.PKey)
	b[50] = byte(f.PathMTU)<<4 | bit(f.RDCExists, 0x08) | f.RNRRetryCount&7
	b[51] = f.MaxCMRetries<<4 | bit(f.SRQ, 0x08) | f.ExtTransportType&7
	f.Primary.Encode(b[52:96])
	f.Alternate.Encode(b[96:140])
	b[139] = b[139]&^0x04 | bit(f.SAPSupported, 0x04)
	copy(b[140:DataLen], f.PrivateData[:])
}

// MRA is a view of the data of an MRA, the message receipt
// acknowledgement a side sends when it needs more time to answer a REQ,
// REP or LAP (IBTA §12.6, table 107):
//
//	    0               1               2               3
//	    0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//	   +---------------------------------------------------------------+
//	 0 |                     Local Communication ID                    |
//	   +---------------------------------------------------------------+
//	 4 |                    Remote Communication ID                    |
//	   +---+-----------+---------+-----+-------------------------------+
//	 8 | M |  Reserved |   STmo  | Rsv |          Private Data         |
//	   +---+-----------+---------+-----+-------------------------------+
//	12 |                  ... (222 bytes from byte 10)                 |
//	   +---------------------------------------------------------------+
//
// M is the message MRAed, STmo the service timeout (see Timeout).
type MRA []byte

// LocalCommID is the sender's communication ID.
func (m MRA) LocalCommID() uint32 { return be.Uint32(m[0:]) }

// RemoteCommID is the receiver's communication ID.
func (m MRA) RemoteCommID() uint32 { return be.Uint32(m[4:]) }

// MessageMRAed names the message acknowledged (MsgOther: a LAP).
func (m MRA) MessageMRAed() MsgRef { return MsgRef(m[8] >> 6) }

// ServiceTimeout is the 5-bit code of the extra time the sender needs.
func (m MRA) ServiceTimeout() uint8 { return m[9] >> 3 }

// PrivateData returns the 222 bytes of private data.
func (m MRA) PrivateData() []byte { return m[10:232:232] }

// MRAFields are the values of an MRA, for building one.
type MRAFields struct {
	LocalCommID    uint32
	RemoteCommID   uint32
	MessageMRAed   MsgRef
	ServiceTimeout uint8 // 5 bits
	PrivateData    [MRAPrivateLen]byte
	Reserved8      uint8 // the 6 bits after MessageMRAed; zero when sending
	Reserved9      uint8 // the 3 bits after ServiceTimeout; zero when sending
}

// Fields returns the MRA's values.
func (m MRA) Fields() MRAFields {
	f := MRAFields{LocalCommID: m.LocalCommID(), RemoteCommID: m.RemoteCommID(), MessageMRAed: m.MessageMRAed(),
		ServiceTimeout: m.ServiceTimeout(), Reserved8: m[8] & 0x3f, Reserved9: m[9] & 7}
	copy(f.PrivateData[:], m.PrivateData())
	return f
}

// Encode writes f into b[:DataLen].
func (f *MRAFields) Encode(b []byte) {
	_ = b[DataLen-1]
	be.PutUint32(b[0:], f.LocalCommID)
	be.PutUint32(b[4:], f.RemoteCommID)
	b[8] = byte(f.MessageMRAed)<<6 | f.Reserved8&0x3f
	b[9] = f.ServiceTimeout<<3 | f.Reserved9&7
	copy(b[10:DataLen], f.PrivateData[:])
}

// REJ is a view of the data of a REJ, the answer that refuses a REQ or
// a REP, or gives up on a connection (IBTA §12.6, table 108):
//
//	    0               1               2               3
//	    0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//	   +---------------------------------------------------------------+
//	 0 |                     Local Communication ID                    |
//	   +---------------------------------------------------------------+
//	 4 |                    Remote Communication ID                    |
//	   +---+-----------+-------------+-+-------------------------------+
//	 8 | M |  Reserved |   InfoLen   |R|             Reason            |
//	   +---+-----------+-------------+-+-------------------------------+
//	12 |            Additional Reject Information (72 bytes)           |
//	   +---------------------------------------------------------------+
//	84 |                    Private Data (148 bytes)                   |
//	   +---------------------------------------------------------------+
//
// M is the message rejected, InfoLen the length of the additional
// reject information in bytes. The local communication ID is zero when
// the passive side rejects a REQ before it gave the connection one
// (seen on rdma_rxe).
type REJ []byte

// LocalCommID is the sender's communication ID (0 when it has none).
func (r REJ) LocalCommID() uint32 { return be.Uint32(r[0:]) }

// RemoteCommID is the receiver's communication ID.
func (r REJ) RemoteCommID() uint32 { return be.Uint32(r[4:]) }

// MessageRejected names the message rejected.
func (r REJ) MessageRejected() MsgRef { return MsgRef(r[8] >> 6) }

// RejectInfoLength is the length of the additional reject information.
func (r REJ) RejectInfoLength() uint8 { return r[9] >> 1 }

// Reason is the rejection reason.
func (r REJ) Reason() RejectReason { return RejectReason(be.Uint16(r[10:])) }

// ARI returns the 72 bytes of additional reject information; the first
// RejectInfoLength of them are meaningful.
func (r REJ) ARI() []byte { return r[12:84:84] }

// PrivateData returns the 148 bytes of private data.
func (r REJ) PrivateData() []byte { return r[84:232:232] }

// REJFields are the values of a REJ, for building one.
type REJFields struct {
	LocalCommID      uint32
	RemoteCommID     uint32
	MessageRejected  MsgRef
	RejectInfoLength uint8 // 7 bits
	Reason           RejectReason
	ARI              [REJARILen]byte
	PrivateData      [REJPrivateLen]byte
	Reserved8        uint8 // the 6 bits after MessageRejected; zero when sending
	Reserved9        uint8 // the bit after RejectInfoLength; zero when sending
}

// Fields returns the REJ's values.
func (r REJ) Fields() REJFields {
	f := REJFields{LocalCommID: r.LocalCommID(), RemoteCommID: r.RemoteCommID(), MessageRejected: r.MessageRejected(),
		RejectInfoLength: r.RejectInfoLength(), Reason: r.Reason(), Reserved8: r[8] & 0x3f, Reserved9: r[9] & 1}
	copy(f.ARI[:], r.ARI())
	copy(f.PrivateData[:], r.PrivateData())
	return f
}

// Encode writes f into b[:DataLen].
func (f *REJFields) Encode(b []byte) {
	_ = b[DataLen-1]
	be.PutUint32(b[0:], f.LocalCommID)
	be.PutUint32(b[4:], f.RemoteCommID)
	b[8] = byte(f.MessageRejected)<<6 | f.Reserved8&0x3f
	b[9] = f.RejectInfoLength<<1 | f.Reserved9&1
	be.PutUint16(b[10:], uint16(f.Reason))
	copy(b[12:84], f.ARI[:])
	copy(b[84:DataLen], f.PrivateData[:])
}

// REP is a view of the data of a REP, the passive side's acceptance of
// a REQ (IBTA §12.6, table 110):
//
//	    0               1               2               3
//	    0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//	   +---------------------------------------------------------------+
//	 0 |                     Local Communication ID                    |
//	   +---------------------------------------------------------------+
//	 4 |                    Remote Communication ID                    |
//	   +---------------------------------------------------------------+
//	 8 |                          Local Q_Key                          |
//	   +-----------------------------------------------+---------------+
//	12 |                   Local QPN                   |  Vendor ID H  |
//	   +-----------------------------------------------+---------------+
//	16 |            Local EE Context Number            |  Vendor ID M  |
//	   +-----------------------------------------------+---------------+
//	20 |                  Starting PSN                 |  Vendor ID L  |
//	   +---------------+---------------+---------+---+-+-----+-+-------+
//	24 |   Resp Rsrc   |   Init Depth  |   TAD   | F |E| RNR |S|  Rsv  |
//	   +---------------+---------------+---------+---+-+-----+-+-------+
//	28 |                       Local CA GUID (64)                      |
//	   +---------------------------------------------------------------+
//	36 |                    Private Data (196 bytes)                   |
//	   +---------------------------------------------------------------+
//
// TAD is the target ACK delay (see Timeout), F failover accepted, E
// end-to-end flow control, RNR the RNR retry count, S SRQ. The three
// Vendor ID bytes (reserved before enhanced connection establishment)
// make one 24-bit vendor ID. The Starting PSN is the first PSN the
// active side sends with.
type REP []byte

// LocalCommID is the passive side's communication ID.
func (r REP) LocalCommID() uint32 { return be.Uint32(r[0:]) }

// RemoteCommID is the active side's communication ID (the REQ's local one).
func (r REP) RemoteCommID() uint32 { return be.Uint32(r[4:]) }

// LocalQKey is the passive side's Q_Key (RD only).
func (r REP) LocalQKey() uint32 { return be.Uint32(r[8:]) }

// LocalQPN is the passive side's QP number.
func (r REP) LocalQPN() uint32 { return get24(r[12:]) }

// VendorID is the 24-bit vendor ID of enhanced connection establishment.
func (r REP) VendorID() uint32 { return uint32(r[15])<<16 | uint32(r[19])<<8 | uint32(r[23]) }

// LocalEECN is the passive side's EE context (RD only).
func (r REP) LocalEECN() uint32 { return get24(r[16:]) }

// StartingPSN is the first PSN the active side is to send with.
func (r REP) StartingPSN() bth.PSN { return bth.PSN(get24(r[20:])) }

// ResponderResources is how many RDMA READs and atomics the passive side
// accepts outstanding as a responder.
func (r REP) ResponderResources() uint8 { return r[24] }

// InitiatorDepth is how many RDMA READs and atomics the passive side
// will have outstanding as a requester.
func (r REP) InitiatorDepth() uint8 { return r[25] }

// TargetACKDelay is the 5-bit code of the passive side's ACK delay.
func (r REP) TargetACKDelay() uint8 { return r[26] >> 3 }

// FailoverAccepted is the 2-bit answer to the REQ's alternate path (0:
// accepted, 1: not supported, 2: rejected).
func (r REP) FailoverAccepted() uint8 { return r[26] >> 1 & 3 }

// EndToEndFlowControl tells that the passive side's receive queue
// generates end-to-end credits.
func (r REP) EndToEndFlowControl() bool { return r[26]&1 != 0 }

// RNRRetryCount is the RNR NAK retry count (3 bits) the active side's
// QP is to use.
func (r REP) RNRRetryCount() uint8 { return r[27] >> 5 }

// SRQ tells that the passive side's QP uses a shared receive queue.
func (r REP) SRQ() bool { return r[27]&0x10 != 0 }

// LocalCAGUID is the passive side's channel adapter GUID.
func (r REP) LocalCAGUID() uint64 { return be.Uint64(r[28:]) }

// PrivateData returns the 196 bytes of private data.
func (r REP) PrivateData() []byte { return r[36:232:232] }

// REPFields are the values of a REP, for building one.
type REPFields struct {
	LocalCommID         uint32
	RemoteCommID        uint32
	LocalQKey           uint32
	LocalQPN            uint32 // 24 bits
	VendorID            uint32 // 24 bits
	LocalEECN           uint32 // 24 bits
	StartingPSN         bth.PSN
	ResponderResources  uint8
	InitiatorDepth      uint8
	TargetACKDelay      uint8 // 5 bits
	FailoverAccepted    uint8 // 2 bits
	EndToEndFlowControl bool
	RNRRetryCount       uint8 // 3 bits
	SRQ                 bool
	LocalCAGUID         uint64
	PrivateData         [REPPrivateLen]byte
	Reserved27          uint8 // the 4 bits after SRQ; zero when sending
}

// Fields returns the REP's values.
func (r REP) Fields() REPFields {
	f := REPFields{LocalCommID: r.LocalCommID(), RemoteCommID: r.RemoteCommID(), LocalQKey: r.LocalQKey(),
		LocalQPN: r.LocalQPN(), VendorID: r.VendorID(), LocalEECN: r.LocalEECN(), StartingPSN: r.StartingPSN(),
		ResponderResources: r.ResponderResources(), InitiatorDepth: r.InitiatorDepth(),
		TargetACKDelay: r.TargetACKDelay(), FailoverAccepted: r.FailoverAccepted(),
		EndToEndFlowControl: r.EndToEndFlowControl(), RNRRetryCount: r.RNRRetryCount(), SRQ: r.SRQ(),
		LocalCAGUID: r.LocalCAGUID(), Reserved27: r[27] & 0x0f}
	copy(f.PrivateData[:], r.PrivateData())
	return f
}

// Encode writes f into b[:DataLen].
func (f *REPFields) Encode(b []byte) {
	_ = b[DataLen-1]
	be.PutUint32(b[0:], f.LocalCommID)
	be.PutUint32(b[4:], f.RemoteCommID)
	be.PutUint32(b[8:], f.LocalQKey)
	put24(b[12:], f.LocalQPN)
	b[15] = byte(f.VendorID >> 16)
	put24(b[16:], f.LocalEECN)
	b[19] = byte(f.VendorID >> 8)
	put24(b[20:], uint32(f.StartingPSN))
	b[23] = byte(f.VendorID)
	b[24] = f.ResponderResources
	b[25] = f.InitiatorDepth
	b[26] = f.TargetACKDelay<<3 | (f.FailoverAccepted&3)<<1 | bit(f.EndToEndFlowControl, 1)
	b[27] = f.RNRRetryCount<<5 | bit(f.SRQ, 0x10) | f.Reserved27&0x0f
	be.PutUint64(b[28:], f.LocalCAGUID)
	copy(b[36:DataLen], f.PrivateData[:])
}

// RTU is a view of the data of an RTU, the active side's ready-to-use
// that completes the establishment (IBTA §12.6, table 111):
//
//	   0               1               2               3
//	   0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//	  +---------------------------------------------------------------+
//	0 |                     Local Communication ID                    |
//	  +---------------------------------------------------------------+
//	4 |                    Remote Communication ID                    |
//	  +---------------------------------------------------------------+
//	8 |                    Private Data (224 bytes)                   |
//	  +---------------------------------------------------------------+
type RTU []byte

// LocalCommID is the active side's communication ID.
func (r RTU) LocalCommID() uint32 { return be.Uint32(r[0:]) }

// RemoteCommID is the passive side's communication ID.
func (r RTU) RemoteCommID() uint32 { return be.Uint32(r[4:]) }

// PrivateData returns the 224 bytes of private data.
func (r RTU) PrivateData() []byte { return r[8:232:232] }

// RTUFields are the values of an RTU, for building one.
type RTUFields struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [RTUPrivateLen]byte
}

// Fields returns the RTU's values.
func (r RTU) Fields() RTUFields {
	f := RTUFields{LocalCommID: r.LocalCommID(), RemoteCommID: r.RemoteCommID()}
	copy(f.PrivateData[:], r.PrivateData())
	return f
}

// Encode writes f into b[:DataLen].
func (f *RTUFields) Encode(b []byte) {
	_ = b[DataLen-1]
	be.PutUint32(b[0:], f.LocalCommID)
	be.PutUint32(b[4:], f.RemoteCommID)
	copy(b[8:DataLen], f.PrivateData[:])
}

// DREQ is a view of the data of a DREQ, the request to release a
// connection that either side may send (IBTA §12.6, table 112):
//
//	    0               1               2               3
//	    0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//	   +---------------------------------------------------------------+
//	 0 |                     Local Communication ID                    |
//	   +---------------------------------------------------------------+
//	 4 |                    Remote Communication ID                    |
//	   +-----------------------------------------------+---------------+
//	 8 |                Remote QPN/EECN                |    Reserved   |
//	   +-----------------------------------------------+---------------+
//	12 |                    Private Data (220 bytes)                   |
//	   +---------------------------------------------------------------+
type DREQ []byte

// LocalCommID is the sender's communication ID.
func (d DREQ) LocalCommID() uint32 { return be.Uint32(d[0:]) }

// RemoteCommID is the receiver's communication ID.
func (d DREQ) RemoteCommID() uint32 { return be.Uint32(d[4:]) }

// RemoteQPN is the receiver's QP (or EE context) number.
func (d DREQ) RemoteQPN() uint32 { return get24(d[8:]) }

// PrivateData returns the 220 bytes of private data.
func (d DREQ) PrivateData() []byte { return d[12:232:232] }

// DREQFields are the values of a DREQ, for building one.
type DREQFields struct {
	LocalCommID  uint32
	RemoteCommID uint32
	RemoteQPN    uint32 // 24 bits
	PrivateData  [DREQPrivateLen]byte
	Reserved11   uint8 // byte 11; zero when sending
}

// Fields returns the DREQ's values.
func (d DREQ) Fields() DREQFields {
	f := DREQFields{LocalCommID: d.LocalCommID(), RemoteCommID: d.RemoteCommID(), RemoteQPN: d.RemoteQPN(), Reserved11: d[11]}
	copy(f.PrivateData[:], d.PrivateData())
	return f
}

// Encode writes f into b[:DataLen].
func (f *DREQFields) Encode(b []byte) {
	_ = b[DataLen-1]
	be.PutUint32(b[0:], f.LocalCommID)
	be.PutUint32(b[4:], f.RemoteCommID)
	put24(b[8:], f.RemoteQPN)
	b[11] = f.Reserved11
	copy(b[12:DataLen], f.PrivateData[:])
}

// DREP is a view of the data of a DREP, the answer to a DREQ (IBTA
// §12.6, table 113). Its layout is the RTU's:
//
//	   0               1               2               3
//	   0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//	  +---------------------------------------------------------------+
//	0 |                     Local Communication ID                    |
//	  +---------------------------------------------------------------+
//	4 |                    Remote Communication ID                    |
//	  +---------------------------------------------------------------+
//	8 |                    Private Data (224 bytes)                   |
//	  +---------------------------------------------------------------+
type DREP []byte

// LocalCommID is the sender's communication ID.
func (d DREP) LocalCommID() uint32 { return be.Uint32(d[0:]) }

// RemoteCommID is the receiver's communication ID.
func (d DREP) RemoteCommID() uint32 { return be.Uint32(d[4:]) }

// PrivateData returns the 224 bytes of private data.
func (d DREP) PrivateData() []byte { return d[8:232:232] }

// DREPFields are the values of a DREP, for building one.
type DREPFields struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [DREPPrivateLen]byte
}

// Fields returns the DREP's values.
func (d DREP) Fields() DREPFields {
	f := DREPFields{LocalCommID: d.LocalCommID(), RemoteCommID: d.RemoteCommID()}
	copy(f.PrivateData[:], d.PrivateData())
	return f
}

// Encode writes f into b[:DataLen].
func (f *DREPFields) Encode(b []byte) {
	_ = b[DataLen-1]
	be.PutUint32(b[0:], f.LocalCommID)
	be.PutUint32(b[4:], f.RemoteCommID)
	copy(b[8:DataLen], f.PrivateData[:])
}
