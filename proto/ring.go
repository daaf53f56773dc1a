package proto

import "encoding/binary"

// Rings. A QP's send and receive queues, an SRQ and a CQ are rings of
// fixed-size slots in memory shared by the client and the daemon (a
// memfd the daemon creates, seals against resizing, and passes to the
// client). Each ring starts with a header of RingHeaderLen bytes whose
// fields sit on their own cache lines:
//
//	+0    producer index (u32, free-running; slot = index & (slots-1))
//	+64   consumer index (u32, free-running)
//	+128  flags (u32): send/receive rings: FlagNeedWakeup; CQ rings:
//	      the notification armed (ArmNext, ArmSolicited)
//	+136  CQ rings: completions lost to a full ring (u32)
//	+140  CQ rings: completion events sent (u32)
//	+144  receive and SRQ rings: requests posted to the QP (u32, see
//	      SPEC.md: a client waits for it to pass its receives)
//	+148  send rings: requests the QP has retired (u32, free-running)
//	+152  send rings: requests the daemon refused from the ring (u32,
//	      free-running); with +148, what a client subtracts from its
//	      producer index to know how many are outstanding
//	+192  slots (u32) and slot bytes (u32), for information
//
// The client produces on send and receive rings, the daemon consumes;
// the daemon produces on CQ rings, the client consumes. The producer
// writes a slot, then stores the producer index with release order; the
// consumer loads the producer index with acquire order, reads the slot,
// then stores the consumer index. The daemon takes nothing it reads
// from shared memory on trust: it copies a slot before checking it and
// bounds every index.
const RingHeaderLen = 256

// Offsets of the ring header fields.
const (
	OffProducer = 0
	OffConsumer = 64
	OffFlags    = 128
	OffOverrun  = 136
	OffEvents   = 140
	OffPosted   = 144
	OffRetired  = 148
	OffRefused  = 152
	OffSlots    = 192
	OffSlotSize = 196
)

// FlagNeedWakeup is set by the daemon in a send or receive ring's flags
// when it stops polling the session's rings: a client that produces
// while it is set writes to the session's doorbell eventfd (any 8-byte
// value) after storing the producer index. As with AF_XDP's
// need_wakeup, a client that sees it clear rings nothing.
const FlagNeedWakeup = 1

// CQ notification (ibv_req_notify_cq): the client stores ArmNext or
// ArmSolicited in a CQ ring's flags, then checks the ring again; the
// daemon, after producing a completion that the armed state asks for,
// clears the flags and writes to the CQ's completion channel eventfd.
const (
	ArmNext      = 1
	ArmSolicited = 2
)

// Send slots. A send ring slot holds one work request (ibv_send_wr) in
// SendSlotHeader bytes, then its SGEs (SGELen bytes each) or its inline
// data. SendSlotBytes gives the slot size for a QP's limits.
const (
	SendSlotHeader = 64
	SGELen         = 16
	RecvSlotHeader = 16
	WCLen          = 64
)

// SendSlotBytes returns the size of a send slot holding maxSGE SGEs or
// maxInline bytes of inline data: a multiple of 64.
func SendSlotBytes(maxSGE, maxInline int) int {
	n := max(maxSGE*SGELen, maxInline)
	return (SendSlotHeader + n + 63) &^ 63
}

// RecvSlotBytes returns the size of a receive slot of maxSGE SGEs.
func RecvSlotBytes(maxSGE int) int {
	return (RecvSlotHeader + maxSGE*SGELen + 15) &^ 15
}

// Work request opcodes in send slots, with ibv_wr_opcode values.
const (
	WRWrite        = 0
	WRWriteWithImm = 1
	WRSend         = 2
	WRSendWithImm  = 3
	WRRead         = 4
	WRCompareSwap  = 5
	WRFetchAdd     = 6
	WRLocalInv     = 7
	WRBindMW       = 8
	WRSendWithInv  = 9
	WRFlush        = 14
	WRAtomicWrite  = 15
)

// Send flags, with ibv_send_flags values.
const (
	SendFence     = 1
	SendSignaled  = 2
	SendSolicited = 4
	SendInline    = 8
)

// SendSlot is the header of a send slot, as laid out at its start:
//
//	+0  wr_id u64          +8  opcode u8, flags u8, num_sge u16
//	+12 imm_data or invalidate_rkey u32 (host order)
//	+16 remote_addr u64    +24 rkey u32     +28 ah handle u32 (UD)
//	+32 compare_add u64    +40 swap u64
//	+48 remote_qpn u32     +52 remote_qkey u32
//	+56 inline length u32
//	+60 FLUSH: placement type u8, selectivity level u8; reserved u16
//	+64 SGEs (addr u64, length u32, lkey u32) or inline bytes
//
// A FLUSH (ibv_wr_flush) gives its length in compare_add and has no
// SGEs; an ATOMIC_WRITE (ibv_wr_atomic_write) its 8 bytes as inline
// data (whatever the QP's max_inline) or in one SGE. A LOCAL_INV gives
// the key to invalidate at +12. A BIND_MW (of a type 2 window) has no
// SGEs and reuses the fields:
//
//	+16 the window's address u64 (remote_addr)
//	+24 the window's new R_Key u32 (rkey)
//	+28 the window's handle u32 (ah)
//	+32 the window's length u64 (compare_add)
//	+48 the region's handle u32 (remote_qpn)
//	+52 the window's access flags u32 (remote_qkey, ibv_access_flags)
type SendSlot struct {
	ID         uint64
	Opcode     uint8
	Flags      uint8
	NumSGE     uint16
	Imm        uint32
	RemoteAddr uint64
	RKey       uint32
	AH         uint32
	CompareAdd uint64
	Swap       uint64
	RemoteQPN  uint32
	RemoteQKey uint32
	InlineLen  uint32
	FlushType  uint8 // ibv_placement_type bits
	FlushLevel uint8 // ibv_selectivity_level
	Reserved   uint16
}

// Put writes s at the start of slot b.
func (s *SendSlot) Put(b []byte) {
	le := binary.LittleEndian
	le.PutUint64(b[0:], s.ID)
	b[8], b[9] = s.Opcode, s.Flags
	le.PutUint16(b[10:], s.NumSGE)
	le.PutUint32(b[12:], s.Imm)
	le.PutUint64(b[16:], s.RemoteAddr)
	le.PutUint32(b[24:], s.RKey)
	le.PutUint32(b[28:], s.AH)
	le.PutUint64(b[32:], s.CompareAdd)
	le.PutUint64(b[40:], s.Swap)
	le.PutUint32(b[48:], s.RemoteQPN)
	le.PutUint32(b[52:], s.RemoteQKey)
	le.PutUint32(b[56:], s.InlineLen)
	b[60], b[61] = s.FlushType, s.FlushLevel
	le.PutUint16(b[62:], s.Reserved)
}

// Get reads s from the start of slot b (at least SendSlotHeader bytes).
func (s *SendSlot) Get(b []byte) {
	le := binary.LittleEndian
	s.ID = le.Uint64(b[0:])
	s.Opcode, s.Flags = b[8], b[9]
	s.NumSGE = le.Uint16(b[10:])
	s.Imm = le.Uint32(b[12:])
	s.RemoteAddr = le.Uint64(b[16:])
	s.RKey = le.Uint32(b[24:])
	s.AH = le.Uint32(b[28:])
	s.CompareAdd = le.Uint64(b[32:])
	s.Swap = le.Uint64(b[40:])
	s.RemoteQPN = le.Uint32(b[48:])
	s.RemoteQKey = le.Uint32(b[52:])
	s.InlineLen = le.Uint32(b[56:])
	s.FlushType, s.FlushLevel = b[60], b[61]
	s.Reserved = le.Uint16(b[62:])
}

// PutSGE writes SGE i of a send (base SendSlotHeader) or receive (base
// RecvSlotHeader) slot.
func PutSGE(b []byte, base, i int, addr uint64, length, lkey uint32) {
	o := base + i*SGELen
	binary.LittleEndian.PutUint64(b[o:], addr)
	binary.LittleEndian.PutUint32(b[o+8:], length)
	binary.LittleEndian.PutUint32(b[o+12:], lkey)
}

// GetSGE reads SGE i of a slot.
func GetSGE(b []byte, base, i int) (addr uint64, length, lkey uint32) {
	o := base + i*SGELen
	return binary.LittleEndian.Uint64(b[o:]), binary.LittleEndian.Uint32(b[o+8:]), binary.LittleEndian.Uint32(b[o+12:])
}

// RecvSlot is the header of a receive slot: +0 wr_id u64, +8 num_sge
// u32, +12 reserved, +16 SGEs.
type RecvSlot struct {
	ID     uint64
	NumSGE uint32
}

// Put writes s at the start of slot b.
func (s *RecvSlot) Put(b []byte) {
	binary.LittleEndian.PutUint64(b[0:], s.ID)
	binary.LittleEndian.PutUint32(b[8:], s.NumSGE)
	binary.LittleEndian.PutUint32(b[12:], 0)
}

// Get reads s from slot b.
func (s *RecvSlot) Get(b []byte) {
	s.ID = binary.LittleEndian.Uint64(b[0:])
	s.NumSGE = binary.LittleEndian.Uint32(b[8:])
}

// WC is a completion in a CQ ring slot (ibv_wc's fields):
//
//	+0  wr_id u64      +8  status u32    +12 opcode u32 (ibv_wc_opcode)
//	+16 vendor_err u32 +20 byte_len u32  +24 imm_data or invalidated rkey u32 (host order)
//	+28 qp_num u32     +32 src_qp u32    +36 wc_flags u32
//	+40 pkey_index u16 +42 slid u16      +44 sl u8, dlid_path_bits u8
//	+48 reserved to 64
type WC struct {
	ID        uint64
	Status    uint32
	Opcode    uint32
	VendorErr uint32
	ByteLen   uint32
	Imm       uint32
	QPN       uint32
	SrcQP     uint32
	Flags     uint32
	PKeyIndex uint16
	SLID      uint16
	SL        uint8
	DLIDBits  uint8
}

// Put writes w into slot b.
func (w *WC) Put(b []byte) {
	le := binary.LittleEndian
	le.PutUint64(b[0:], w.ID)
	le.PutUint32(b[8:], w.Status)
	le.PutUint32(b[12:], w.Opcode)
	le.PutUint32(b[16:], w.VendorErr)
	le.PutUint32(b[20:], w.ByteLen)
	le.PutUint32(b[24:], w.Imm)
	le.PutUint32(b[28:], w.QPN)
	le.PutUint32(b[32:], w.SrcQP)
	le.PutUint32(b[36:], w.Flags)
	le.PutUint16(b[40:], w.PKeyIndex)
	le.PutUint16(b[42:], w.SLID)
	b[44], b[45] = w.SL, w.DLIDBits
}

// Get reads w from slot b.
func (w *WC) Get(b []byte) {
	le := binary.LittleEndian
	w.ID = le.Uint64(b[0:])
	w.Status = le.Uint32(b[8:])
	w.Opcode = le.Uint32(b[12:])
	w.VendorErr = le.Uint32(b[16:])
	w.ByteLen = le.Uint32(b[20:])
	w.Imm = le.Uint32(b[24:])
	w.QPN = le.Uint32(b[28:])
	w.SrcQP = le.Uint32(b[32:])
	w.Flags = le.Uint32(b[36:])
	w.PKeyIndex = le.Uint16(b[40:])
	w.SLID = le.Uint16(b[42:])
	w.SL, w.DLIDBits = b[44], b[45]
}

// RingBytes returns the bytes of a ring of slots slots of size bytes,
// header included.
func RingBytes(slots, size int) int { return RingHeaderLen + slots*size }

// Slots returns the power of two at least n (and at least 1).
func Slots(n int) int {
	s := 1
	for s < n {
		s <<= 1
	}
	return s
}
