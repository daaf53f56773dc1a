package bth

import "encoding/binary"

var be = binary.BigEndian

// BTH is a view of the 12-byte base transport header (IBTA 9.2):
//
//	 0               1               2               3
//	+---------------+-+-+---+-------+-------------------------------+
//	|    OpCode     |S|M|Pad| TVer  |            P_Key              |
//	+-+-+-----------+---------------+-------------------------------+
//	|F|B|   Resv6   |              Destination QP                   |
//	+-+-------------+-----------------------------------------------+
//	|A|    Resv7    |                     PSN                       |
//	+---------------+-----------------------------------------------+
//
// Accessors assume len(b) >= BTHLen; the parser checks that once.
type BTH []byte

// Opcode returns the BTH opcode.
func (b BTH) Opcode() Opcode { return Opcode(b[0]) }

// SE is the solicited event bit.
func (b BTH) SE() bool { return b[1]&0x80 != 0 }

// MigReq is the migration request bit (M).
func (b BTH) MigReq() bool { return b[1]&0x40 != 0 }

// PadCount is the number of pad bytes after the payload (0-3).
func (b BTH) PadCount() int { return int(b[1]>>4) & 3 }

// TVer is the transport header version (0).
func (b BTH) TVer() uint8 { return b[1] & 0x0f }

// PKey is the partition key.
func (b BTH) PKey() uint16 { return be.Uint16(b[2:]) }

// FECN is the forward explicit congestion notification bit.
func (b BTH) FECN() bool { return b[4]&0x80 != 0 }

// BECN is the backward explicit congestion notification bit.
func (b BTH) BECN() bool { return b[4]&0x40 != 0 }

// Resv6 returns the six reserved bits after FECN and BECN.
func (b BTH) Resv6() uint8 { return b[4] & 0x3f }

// DestQP is the 24-bit destination queue pair number.
func (b BTH) DestQP() uint32 { return uint32(b[5])<<16 | uint32(b[6])<<8 | uint32(b[7]) }

// AckReq is the acknowledge request bit (A).
func (b BTH) AckReq() bool { return b[8]&0x80 != 0 }

// Resv7 returns the seven reserved bits after A.
func (b BTH) Resv7() uint8 { return b[8] & 0x7f }

// PSN is the packet sequence number.
func (b BTH) PSN() PSN { return PSN(uint32(b[9])<<16 | uint32(b[10])<<8 | uint32(b[11])) }

// SetPSN rewrites the PSN.
func (b BTH) SetPSN(p PSN) { put24(b[9:], uint32(p)) }

// SetAckReq sets or clears the A bit.
func (b BTH) SetAckReq(a bool) {
	if a {
		b[8] |= 0x80
	} else {
		b[8] &^= 0x80
	}
}

// BTHFields are the values of a BTH, for building one.
type BTHFields struct {
	Opcode   Opcode
	SE       bool
	MigReq   bool
	PadCount uint8 // set by the frame builder from the payload length
	TVer     uint8
	PKey     uint16
	FECN     bool
	BECN     bool
	DestQP   uint32
	AckReq   bool
	PSN      PSN
	Resv6    uint8 // reserved bits after FECN/BECN; zero when sending
	Resv7    uint8 // reserved bits after A; zero when sending
}

// Fields returns the header's values.
func (b BTH) Fields() BTHFields {
	return BTHFields{Opcode: b.Opcode(), SE: b.SE(), MigReq: b.MigReq(), PadCount: uint8(b.PadCount()),
		TVer: b.TVer(), PKey: b.PKey(), FECN: b.FECN(), BECN: b.BECN(), DestQP: b.DestQP(),
		AckReq: b.AckReq(), PSN: b.PSN(), Resv6: b.Resv6(), Resv7: b.Resv7()}
}

// Encode writes f into b[:BTHLen].
func (f *BTHFields) Encode(b []byte) {
	_ = b[BTHLen-1]
	b[0] = byte(f.Opcode)
	b[1] = bit(f.SE, 0x80) | bit(f.MigReq, 0x40) | (f.PadCount&3)<<4 | f.TVer&0x0f
	be.PutUint16(b[2:], f.PKey)
	b[4] = bit(f.FECN, 0x80) | bit(f.BECN, 0x40) | f.Resv6&0x3f
	put24(b[5:], f.DestQP)
	b[8] = bit(f.AckReq, 0x80) | f.Resv7&0x7f
	put24(b[9:], uint32(f.PSN))
}

func bit(v bool, m byte) byte {
	if v {
		return m
	}
	return 0
}

func put24(b []byte, v uint32) {
	_ = b[2]
	b[0] = byte(v >> 16)
	b[1] = byte(v >> 8)
	b[2] = byte(v)
}

func get24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

// RETH is a view of the 16-byte RDMA extended transport header:
// virtual address (64), R_Key (32), DMA length (32).
type RETH []byte

// VA is the remote virtual address.
func (r RETH) VA() uint64 { return be.Uint64(r) }

// RKey is the remote key.
func (r RETH) RKey() uint32 { return be.Uint32(r[8:]) }

// DMALen is the length of the whole RDMA operation in bytes.
func (r RETH) DMALen() uint32 { return be.Uint32(r[12:]) }

// PutRETH writes a RETH into b.
func PutRETH(b []byte, va uint64, rkey, dmaLen uint32) {
	_ = b[RETHLen-1]
	be.PutUint64(b, va)
	be.PutUint32(b[8:], rkey)
	be.PutUint32(b[12:], dmaLen)
}

// AETH is a view of the 4-byte ACK extended transport header:
// syndrome (8), MSN (24).
type AETH []byte

// Syndrome returns the raw syndrome byte.
func (a AETH) Syndrome() Syndrome { return Syndrome(a[0]) }

// MSN is the message sequence number.
func (a AETH) MSN() uint32 { return get24(a[1:]) }

// PutAETH writes an AETH into b.
func PutAETH(b []byte, s Syndrome, msn uint32) {
	_ = b[AETHLen-1]
	b[0] = byte(s)
	put24(b[1:], msn)
}

// Syndrome is the AETH syndrome byte (IBTA 9.7.5.1): bits 6-5 give the
// kind (ACK, RNR NAK, NAK), bits 4-0 the credit count, RNR timer or NAK code.
type Syndrome uint8

// AckKind is the kind named by a syndrome's bits 6-5.
type AckKind uint8

// Syndrome kinds.
const (
	AckKindACK      AckKind = 0 // 00: positive acknowledgement
	AckKindRNR      AckKind = 1 // 01: receiver not ready
	AckKindReserved AckKind = 2 // 10: reserved
	AckKindNAK      AckKind = 3 // 11: negative acknowledgement
)

var ackKindNames = [4]string{"ack", "rnr_nak", "reserved", "nak"}

func (k AckKind) String() string { return ackKindNames[k&3] }

// NAK codes (IBTA table 45).
const (
	NAKPSNSequenceError   = 0
	NAKInvalidRequest     = 1
	NAKRemoteAccessError  = 2
	NAKRemoteOpError      = 3
	NAKInvalidRDRequest   = 4
	CreditsInvalid        = 0x1f // ACK credit count meaning "not used"
	syndromeKindShift     = 5
	syndromeValueMask     = 0x1f
	syndromeReservedTop   = 0x80
	synACK                = Syndrome(AckKindACK << syndromeKindShift)
	synRNR                = Syndrome(AckKindRNR << syndromeKindShift)
	synNAK                = Syndrome(AckKindNAK << syndromeKindShift)
	SyndromeACKNoCredits  = synACK | CreditsInvalid
	SyndromePSNSeqErr     = synNAK | NAKPSNSequenceError
	SyndromeInvalidReq    = synNAK | NAKInvalidRequest
	SyndromeRemoteAccess  = synNAK | NAKRemoteAccessError
	SyndromeRemoteOpError = synNAK | NAKRemoteOpError
)

var nakNames = [...]string{"psn_sequence_error", "invalid_request", "remote_access_error",
	"remote_operational_error", "invalid_rd_request"}

// Kind returns the syndrome's kind.
func (s Syndrome) Kind() AckKind { return AckKind(s>>syndromeKindShift) & 3 }

// Value returns the low five bits: credits, RNR timer code or NAK code.
func (s Syndrome) Value() uint8 { return uint8(s) & syndromeValueMask }

// ACKSyndrome returns an ACK syndrome with the given credit count.
func ACKSyndrome(credits uint8) Syndrome { return synACK | Syndrome(credits&syndromeValueMask) }

// RNRSyndrome returns an RNR NAK syndrome with the given timer code.
func RNRSyndrome(timer uint8) Syndrome { return synRNR | Syndrome(timer&syndromeValueMask) }

// NAKSyndrome returns a NAK syndrome with the given code.
func NAKSyndrome(code uint8) Syndrome { return synNAK | Syndrome(code&syndromeValueMask) }

// CodeName names the low bits for a NAK ("remote_access_error"), an ACK
// ("credits") or an RNR NAK ("rnr_timer").
func (s Syndrome) CodeName() string {
	switch s.Kind() {
	case AckKindACK:
		return "credits"
	case AckKindRNR:
		return "rnr_timer"
	case AckKindNAK:
		if int(s.Value()) < len(nakNames) {
			return nakNames[s.Value()]
		}
		return "reserved_nak"
	}
	return "reserved"
}

// RNRTimerMicros is the receiver-not-ready delay in microseconds for each
// 5-bit timer code (IBTA table 46). Code 0 means 655.36 ms.
var RNRTimerMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
	163840, 245760, 327680, 491520,
}

// ImmDt is a view of the 4-byte immediate data header.
type ImmDt []byte

// Value returns the immediate data as a big-endian number, as on the wire.
func (i ImmDt) Value() uint32 { return be.Uint32(i) }

// FETH is a view of the 4-byte FLUSH extended header (IBA 1.5 Memory
// Placement Extensions, annex A19), before the RETH of a FLUSH request:
//
//	bits 31-6: reserved
//	bits 5-4:  selectivity level (0: the RETH's range, 1: the whole region)
//	bits 3-0:  placement type (bit 0: global visibility, bit 1: persistence)
type FETH []byte

// Placement returns the placement type bits.
func (f FETH) Placement() uint8 { return f[3] & 0x0f }

// Selectivity returns the selectivity level.
func (f FETH) Selectivity() uint8 { return f[3] >> 4 & 3 }

// FETHValue builds the FETH word of a placement type and selectivity level.
func FETHValue(placement, selectivity uint8) uint32 {
	return uint32(selectivity&3)<<4 | uint32(placement&0x0f)
}

// IETH is a view of the 4-byte invalidate header (the R_Key to invalidate).
type IETH []byte

// RKey returns the R_Key to invalidate.
func (i IETH) RKey() uint32 { return be.Uint32(i) }

// AtomicETH is a view of the 28-byte atomic extended transport header:
// VA (64), R_Key (32), swap or add data (64), compare data (64).
type AtomicETH []byte

// VA is the remote virtual address (8-byte aligned).
func (a AtomicETH) VA() uint64 { return be.Uint64(a) }

// RKey is the remote key.
func (a AtomicETH) RKey() uint32 { return be.Uint32(a[8:]) }

// SwapAdd is the swap (compare-and-swap) or add (fetch-and-add) operand.
func (a AtomicETH) SwapAdd() uint64 { return be.Uint64(a[12:]) }

// Compare is the compare operand of compare-and-swap.
func (a AtomicETH) Compare() uint64 { return be.Uint64(a[20:]) }

// PutAtomicETH writes an AtomicETH into b.
func PutAtomicETH(b []byte, va uint64, rkey uint32, swapAdd, compare uint64) {
	_ = b[AtomicETHLen-1]
	be.PutUint64(b, va)
	be.PutUint32(b[8:], rkey)
	be.PutUint64(b[12:], swapAdd)
	be.PutUint64(b[20:], compare)
}

// AtomicAck is a view of the 8-byte atomic acknowledge header: the
// original remote value.
type AtomicAck []byte

// Orig returns the value the remote location held before the atomic.
func (a AtomicAck) Orig() uint64 { return be.Uint64(a) }

// DETH is a view of the 8-byte datagram header: Q_Key (32), reserved (8),
// source QP (24).
type DETH []byte

// QKey is the queue key.
func (d DETH) QKey() uint32 { return be.Uint32(d) }

// SrcQP is the sender's queue pair number.
func (d DETH) SrcQP() uint32 { return get24(d[5:]) }

// PutDETH writes a DETH into b.
func PutDETH(b []byte, qkey, srcQP uint32) {
	_ = b[DETHLen-1]
	be.PutUint32(b, qkey)
	b[4] = 0
	put24(b[5:], srcQP)
}

// RDETH is a view of the 4-byte reliable datagram header (reserved byte,
// 24-bit EE context).
type RDETH []byte

// EEContext returns the end-to-end context number.
func (r RDETH) EEContext() uint32 { return get24(r[1:]) }

// XRCETH is a view of the 4-byte XRC header (reserved byte, 24-bit XRC SRQ).
type XRCETH []byte

// XRCSRQ returns the XRC shared receive queue number.
func (x XRCETH) XRCSRQ() uint32 { return get24(x[1:]) }

// DCETH is a view of the 20-byte header that ConnectX NICs put after the
// BTH of their Dynamically Connected (DC) transport packets. NVIDIA does
// not publish its layout; what is known comes from DC captures (seen):
//
//	byte  0      0x11 on requests, 0x10 on responses
//	bytes 1-3    the sender's QPN: the DC initiator on requests, the DC
//	             target on responses
//	bytes 4-7    a 32-bit value constant for a connection
//	byte  8      zero
//	bytes 9-11   a 24-bit connection number the target hands out in its
//	             answer to DC_CONNECT (0xffffff in the DC_CONNECT itself)
//	bytes 12-19  a 64-bit value constant for a connection
//
// The accessors name those positions; the bytes are kept as they are so
// that a decoded DC packet re-encodes unchanged.
type DCETH []byte

// Flags returns byte 0 (0x11 on requests, 0x10 on responses).
func (d DCETH) Flags() uint8 { return d[0] }

// SenderQP returns bytes 1-3, the sending QP's number.
func (d DCETH) SenderQP() uint32 { return get24(d[1:]) }

// Word returns bytes 4-7.
func (d DCETH) Word() uint32 { return be.Uint32(d[4:]) }

// Conn returns bytes 9-11, the connection number.
func (d DCETH) Conn() uint32 { return get24(d[9:]) }

// Tail returns bytes 12-19.
func (d DCETH) Tail() uint64 { return be.Uint64(d[12:]) }
