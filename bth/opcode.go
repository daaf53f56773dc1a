// Package bth holds RoCE wire formats: the opcode table, views over the
// InfiniBand transport headers (BTH and its extended headers), PSN
// arithmetic, the invariant CRC, and Ethernet/VLAN/IPv4/IPv6/UDP framing.
//
// Everything here works on caller-owned byte slices: parsing is a table
// lookup plus slicing, building writes into the caller's buffer, and
// nothing allocates.
//
// References: InfiniBand Architecture Specification vol. 1, chapter 9
// (transport layer) and Annex A17 (RoCEv2).
package bth

// Opcode is the 8-bit BTH opcode. Its top three bits name the transport,
// the low five bits the operation (IBTA 9.2, table 35).
type Opcode uint8

// Transport is the transport service named by an opcode's top three bits.
type Transport uint8

// Transport services.
const (
	TransportRC  Transport = 0 // 000: reliable connection
	TransportUC  Transport = 1 // 001: unreliable connection
	TransportRD  Transport = 2 // 010: reliable datagram
	TransportUD  Transport = 3 // 011: unreliable datagram
	TransportCNP Transport = 4 // 100: congestion notification (RoCEv2)
	TransportXRC Transport = 5 // 101: extended reliable connection
)

var transportNames = [8]string{"RC", "UC", "RD", "UD", "CNP", "XRC", "T6", "T7"}

func (t Transport) String() string { return transportNames[t&7] }

// Transport returns the opcode's transport service.
func (o Opcode) Transport() Transport { return Transport(o >> 5) }

// Kind is what a packet does, independent of transport.
type Kind uint8

// Packet kinds.
const (
	KindInvalid Kind = iota
	KindSend
	KindWrite
	KindReadRequest
	KindReadResponse
	KindAck
	KindAtomicAck
	KindCompareSwap
	KindFetchAdd
	KindFlush
	KindAtomicWrite
	KindResync
	KindCNP
	// KindDCConnect is the packet a ConnectX DC initiator sends to open a
	// connection to a DC target (opcode 0x55 with a DCETH, see DCInfo).
	KindDCConnect
)

var kindNames = [...]string{"invalid", "send", "write", "read_request", "read_response", "ack",
	"atomic_ack", "compare_swap", "fetch_add", "flush", "atomic_write", "resync", "cnp", "dc_connect"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "invalid"
}

// Position tells where a packet sits in its message.
type Position uint8

// Positions in a message.
const (
	PosOnly Position = iota
	PosFirst
	PosMiddle
	PosLast
)

var posNames = [...]string{"only", "first", "middle", "last"}

func (p Position) String() string { return posNames[p&3] }

// Hdr is a set of extended transport headers.
type Hdr uint16

// Extended headers, in the order they follow the BTH on the wire.
const (
	HdrRDETH     Hdr = 1 << iota // reliable datagram ETH, 4 bytes
	HdrDETH                      // datagram ETH, 8 bytes
	HdrXRCETH                    // XRC ETH, 4 bytes
	HdrFETH                      // flush ETH, 4 bytes (before RETH)
	HdrRETH                      // RDMA ETH, 16 bytes
	HdrAtomicETH                 // atomic ETH, 28 bytes
	HdrAETH                      // ACK ETH, 4 bytes
	HdrAtomicAck                 // atomic ACK ETH, 8 bytes
	HdrImmDt                     // immediate data, 4 bytes
	HdrIETH                      // invalidate ETH, 4 bytes
	HdrCNPPad                    // the 16 reserved bytes of a CNP
	// HdrDCETH is the 20-byte header ConnectX puts right after the BTH of
	// its Dynamically Connected transport packets (see DCETH). On the
	// wire it comes first, before every other extended header.
	HdrDCETH
	numHdr = iota
)

// hdrOrder lists the extended headers in the order they follow the BTH.
var hdrOrder = [numHdr]uint8{11, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}

// Header sizes in bytes.
const (
	BTHLen       = 12
	RDETHLen     = 4
	DETHLen      = 8
	XRCETHLen    = 4
	FETHLen      = 4
	RETHLen      = 16
	AtomicETHLen = 28
	AETHLen      = 4
	AtomicAckLen = 8
	ImmDtLen     = 4
	IETHLen      = 4
	CNPPadLen    = 16
	DCETHLen     = 20
	ICRCLen      = 4
)

var hdrLens = [numHdr]uint8{RDETHLen, DETHLen, XRCETHLen, FETHLen, RETHLen, AtomicETHLen,
	AETHLen, AtomicAckLen, ImmDtLen, IETHLen, CNPPadLen, DCETHLen}

var hdrNames = [numHdr]string{"RDETH", "DETH", "XRCETH", "FETH", "RETH", "AtomicETH", "AETH",
	"AtomicAckETH", "ImmDt", "IETH", "CNPPad", "DCETH"}

// HdrLen returns the wire size of a single extended header h.
func HdrLen(h Hdr) int {
	for i := 0; i < numHdr; i++ {
		if h == 1<<i {
			return int(hdrLens[i])
		}
	}
	return 0
}

// String lists the headers in wire order, joined by "+".
func (h Hdr) String() string {
	s := ""
	for _, i := range hdrOrder {
		if h&(1<<i) != 0 {
			if s != "" {
				s += "+"
			}
			s += hdrNames[i]
		}
	}
	return s
}

// OpInfo describes one opcode: everything the parser and builder need.
type OpInfo struct {
	Name      string    // e.g. "RC_SEND_FIRST"
	Valid     bool      // false for reserved opcodes
	Transport Transport // from the top bits
	Kind      Kind
	Pos       Position
	Imm       bool // carries immediate data
	Inv       bool // carries an invalidate R_Key
	Hdrs      Hdr  // extended headers present
	// HdrLen is the total size of BTH plus extended headers.
	HdrLen uint8
	// Off holds each extended header's offset from the start of the BTH,
	// indexed by bit number of its Hdr flag; 0 when absent.
	Off [numHdr]uint8
	// Payload tells whether the opcode may carry payload bytes.
	Payload bool
	// Request is true for requester-to-responder packets.
	Request bool
}

// Has reports whether h is among the opcode's extended headers.
func (oi *OpInfo) Has(h Hdr) bool { return oi.Hdrs&h != 0 }

// Offset returns the offset of extended header h from the BTH start,
// or -1 when the opcode does not carry it.
func (oi *OpInfo) Offset(h Hdr) int {
	if oi.Hdrs&h == 0 {
		return -1
	}
	for i := 0; i < numHdr; i++ {
		if h == 1<<i {
			return int(oi.Off[i])
		}
	}
	return -1
}

// Info returns the table entry of an opcode. The pointer is to static data.
func (o Opcode) Info() *OpInfo { return &opTable[o] }

// Valid reports whether o is a defined opcode.
func (o Opcode) Valid() bool { return opTable[o].Valid }

func (o Opcode) String() string {
	if opTable[o].Valid {
		return opTable[o].Name
	}
	return "RESERVED_0x" + hex2(uint8(o))
}

func hex2(b uint8) string {
	const d = "0123456789abcdef"
	return string([]byte{d[b>>4], d[b&15]})
}

// Well-known opcodes. The transport base is OR-ed with the operation.
const (
	OpSendFirst         Opcode = 0x00
	OpSendMiddle        Opcode = 0x01
	OpSendLast          Opcode = 0x02
	OpSendLastImm       Opcode = 0x03
	OpSendOnly          Opcode = 0x04
	OpSendOnlyImm       Opcode = 0x05
	OpWriteFirst        Opcode = 0x06
	OpWriteMiddle       Opcode = 0x07
	OpWriteLast         Opcode = 0x08
	OpWriteLastImm      Opcode = 0x09
	OpWriteOnly         Opcode = 0x0a
	OpWriteOnlyImm      Opcode = 0x0b
	OpReadRequest       Opcode = 0x0c
	OpReadRespFirst     Opcode = 0x0d
	OpReadRespMiddle    Opcode = 0x0e
	OpReadRespLast      Opcode = 0x0f
	OpReadRespOnly      Opcode = 0x10
	OpAck               Opcode = 0x11
	OpAtomicAck         Opcode = 0x12
	OpCompareSwap       Opcode = 0x13
	OpFetchAdd          Opcode = 0x14
	OpResync            Opcode = 0x15
	OpSendLastInv       Opcode = 0x16
	OpSendOnlyInv       Opcode = 0x17
	OpFlush             Opcode = 0x1c
	OpAtomicWrite       Opcode = 0x1d
	OpUCBase            Opcode = 0x20
	OpRDBase            Opcode = 0x40
	OpUDBase            Opcode = 0x60
	OpUDSendOnly        Opcode = 0x64
	OpUDSendOnlyImm     Opcode = 0x65
	OpCNP               Opcode = 0x81
	OpXRCBase           Opcode = 0xa0
	opTransportBaseMask Opcode = 0xe0
)

type opDef struct {
	low  uint8
	name string
	kind Kind
	pos  Position
	hdrs Hdr
	imm  bool
	inv  bool
	data bool
	req  bool
}

// The operations of the RC transport (IBTA table 35). Other transports take
// subsets of these and add their own datagram headers.
var rcOps = []opDef{
	{0x00, "SEND_FIRST", KindSend, PosFirst, 0, false, false, true, true},
	{0x01, "SEND_MIDDLE", KindSend, PosMiddle, 0, false, false, true, true},
	{0x02, "SEND_LAST", KindSend, PosLast, 0, false, false, true, true},
	{0x03, "SEND_LAST_WITH_IMMEDIATE", KindSend, PosLast, HdrImmDt, true, false, true, true},
	{0x04, "SEND_ONLY", KindSend, PosOnly, 0, false, false, true, true},
	{0x05, "SEND_ONLY_WITH_IMMEDIATE", KindSend, PosOnly, HdrImmDt, true, false, true, true},
	{0x06, "RDMA_WRITE_FIRST", KindWrite, PosFirst, HdrRETH, false, false, true, true},
	{0x07, "RDMA_WRITE_MIDDLE", KindWrite, PosMiddle, 0, false, false, true, true},
	{0x08, "RDMA_WRITE_LAST", KindWrite, PosLast, 0, false, false, true, true},
	{0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", KindWrite, PosLast, HdrImmDt, true, false, true, true},
	{0x0a, "RDMA_WRITE_ONLY", KindWrite, PosOnly, HdrRETH, false, false, true, true},
	{0x0b, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", KindWrite, PosOnly, HdrRETH | HdrImmDt, true, false, true, true},
	{0x0c, "RDMA_READ_REQUEST", KindReadRequest, PosOnly, HdrRETH, false, false, false, true},
	{0x0d, "RDMA_READ_RESPONSE_FIRST", KindReadResponse, PosFirst, HdrAETH, false, false, true, false},
	{0x0e, "RDMA_READ_RESPONSE_MIDDLE", KindReadResponse, PosMiddle, 0, false, false, true, false},
	{0x0f, "RDMA_READ_RESPONSE_LAST", KindReadResponse, PosLast, HdrAETH, false, false, true, false},
	{0x10, "RDMA_READ_RESPONSE_ONLY", KindReadResponse, PosOnly, HdrAETH, false, false, true, false},
	{0x11, "ACKNOWLEDGE", KindAck, PosOnly, HdrAETH, false, false, false, false},
	{0x12, "ATOMIC_ACKNOWLEDGE", KindAtomicAck, PosOnly, HdrAETH | HdrAtomicAck, false, false, false, false},
	{0x13, "COMPARE_SWAP", KindCompareSwap, PosOnly, HdrAtomicETH, false, false, false, true},
	{0x14, "FETCH_ADD", KindFetchAdd, PosOnly, HdrAtomicETH, false, false, false, true},
	{0x15, "RESYNC", KindResync, PosOnly, 0, false, false, false, true},
	{0x16, "SEND_LAST_WITH_INVALIDATE", KindSend, PosLast, HdrIETH, false, true, true, true},
	{0x17, "SEND_ONLY_WITH_INVALIDATE", KindSend, PosOnly, HdrIETH, false, true, true, true},
	{0x1c, "FLUSH", KindFlush, PosOnly, HdrFETH | HdrRETH, false, false, false, true},
	{0x1d, "ATOMIC_WRITE", KindAtomicWrite, PosOnly, HdrRETH, false, false, true, true},
}

var opTable [256]OpInfo

func setOp(code Opcode, prefix string, d opDef, extra Hdr) {
	opTable[code] = makeOp(code, prefix, d, extra)
}

func makeOp(code Opcode, prefix string, d opDef, extra Hdr) OpInfo {
	hdrs := d.hdrs | extra
	oi := OpInfo{
		Name: prefix + d.name, Valid: true, Transport: code.Transport(), Kind: d.kind, Pos: d.pos,
		Imm: d.imm, Inv: d.inv, Hdrs: hdrs, Payload: d.data, Request: d.req,
	}
	off := BTHLen
	for _, i := range hdrOrder {
		if hdrs&(1<<i) != 0 {
			oi.Off[i] = uint8(off)
			off += int(hdrLens[i])
		}
	}
	oi.HdrLen = uint8(off)
	return oi
}

func init() {
	for _, d := range rcOps {
		if d.low == 0x15 {
			// RESYNC exists on RD only.
			setOp(OpRDBase|Opcode(d.low), "RD_", d, HdrRDETH|HdrDETH)
			continue
		}
		setOp(OpRCBase|Opcode(d.low), "RC_", d, 0)
		// XRC: every RC operation with an XRCETH after the BTH on requests.
		var x Hdr
		if d.req {
			x = HdrXRCETH
		}
		setOp(OpXRCBase|Opcode(d.low), "XRC_", d, x)
		// RD: RDETH on every packet, DETH on requests.
		if d.low != 0x1c && d.low != 0x1d && d.low != 0x16 && d.low != 0x17 {
			x = HdrRDETH
			if d.req {
				x |= HdrDETH
			}
			setOp(OpRDBase|Opcode(d.low), "RD_", d, x)
		}
		// UC: SEND and WRITE only.
		if d.low <= 0x0b {
			setOp(OpUCBase|Opcode(d.low), "UC_", d, 0)
		}
	}
	// UD: SEND_ONLY with and without immediate, with a DETH.
	setOp(OpUDSendOnly, "UD_", rcOps[4], HdrDETH)
	setOp(OpUDSendOnlyImm, "UD_", rcOps[5], HdrDETH)
	// RoCEv2 congestion notification packet (Annex A17.9.3).
	setOp(OpCNP, "", opDef{name: "CNP", kind: KindCNP, pos: PosOnly, hdrs: HdrCNPPad}, 0)

	// ConnectX Dynamically Connected transport: the RD opcode numbers, a
	// DCETH after the BTH, then the RC operation's own headers (seen in
	// DC captures: WRITE_FIRST/MIDDLE/ONLY, ACK and the connect packet).
	for _, d := range rcOps {
		if d.low > 0x14 {
			continue
		}
		if d.low == 0x11 {
			d.data = true // the ACK answering a DC_CONNECT carries 8 bytes (seen)
		}
		dcTable[OpRDBase|Opcode(d.low)] = makeOp(OpRDBase|Opcode(d.low), "DC_", d, HdrDCETH)
	}
	dcTable[OpRDBase|0x15] = makeOp(OpRDBase|0x15, "DC_",
		opDef{low: 0x15, name: "CONNECT", kind: KindDCConnect, pos: PosOnly, data: true, req: true}, HdrDCETH)
}

var dcTable [256]OpInfo

// opIndex finds an opcode by what it does (Lookup). An entry holds the
// opcode plus one, 0 where the table has none.
var opIndex [8][16][4][2][2]uint16

func init() {
	for c := range opTable {
		oi := &opTable[c]
		if oi.Valid {
			opIndex[oi.Transport][oi.Kind][oi.Pos][b2i(oi.Imm)][b2i(oi.Inv)] = uint16(c) + 1
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Lookup returns the opcode of transport t for a packet of kind k at
// position pos in its message, carrying immediate data (imm) or an
// invalidate R_Key (inv): the inverse of Info. It reports false when no
// opcode does that (UC has no READ, UD no multi-packet SEND, no opcode
// carries both).
func Lookup(t Transport, k Kind, pos Position, imm, inv bool) (Opcode, bool) {
	if int(k) >= len(opIndex[0]) {
		return 0, false
	}
	v := opIndex[t&7][k][pos&3][b2i(imm)][b2i(inv)]
	return Opcode(v - 1), v != 0
}

// DCInfo returns the table entry of an opcode as ConnectX uses it for its
// Dynamically Connected (DC) transport, or an entry with Valid false when
// the opcode is outside the RD range (0x40-0x55). DC packets reuse the
// RD opcode numbers with their own layout: a DCETH right after the BTH,
// then the headers of the matching RC operation. Parse picks this layout
// for an RD opcode whose RDETH reserved byte is non-zero (standard RD
// requires zero; ConnectX puts 0x10 or 0x11 there).
func DCInfo(o Opcode) *OpInfo { return &dcTable[o] }

// OpRCBase is the RC transport's opcode base (zero).
const OpRCBase Opcode = 0x00

// Opcode builds the opcode of an operation on a transport: for example
// OpSendOnly.On(TransportUC) is UC_SEND_ONLY.
func (o Opcode) On(t Transport) Opcode { return Opcode(t)<<5 | (o &^ opTransportBaseMask) }
