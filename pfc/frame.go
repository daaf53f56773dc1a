package pfc

import (
	"encoding/binary"
	"errors"
	"net"
	"time"
)

var be = binary.BigEndian

// Frame constants.
const (
	EtherType     = 0x8808 // MAC Control
	EtherTypeVLAN = 0x8100 // an 802.1Q tag before the EtherType
	MinLen        = 60     // minimum frame without the FCS; builders pad to it
	Priorities    = 8      // PFC priorities, 0-7
	QuantumBits   = 512    // bit times in one pause quantum

	ethLen  = 14
	vlanLen = 4
)

// Opcode is a MAC Control opcode (IEEE 802.3 Annex 31A).
type Opcode uint16

// Opcodes this package acts on.
const (
	OpPause Opcode = 0x0001 // PAUSE (802.3 Annex 31B)
	OpPFC   Opcode = 0x0101 // priority-based flow control (802.3 Annex 31D)
)

// String returns PAUSE, PFC, or the opcode as 0x and four hex digits.
func (o Opcode) String() string {
	switch o {
	case OpPause:
		return "PAUSE"
	case OpPFC:
		return "PFC"
	}
	const digits = "0123456789abcdef"
	return string([]byte{'0', 'x', digits[o>>12], digits[o>>8&15], digits[o>>4&15], digits[o&15]})
}

// paramLen is the length of the opcode and its parameters, 0 for an
// opcode this package does not know.
func (o Opcode) paramLen() int {
	switch o {
	case OpPause:
		return 4 // opcode, pause_time
	case OpPFC:
		return 4 + 2*Priorities // opcode, enable vector, time[0..7]
	}
	return 0
}

// ReservedAddr is the destination of PAUSE and PFC frames, the reserved
// multicast address 01-80-C2-00-00-01 (IEEE 802.3 Annex 31B). Do not
// modify it.
var ReservedAddr = [6]byte{0x01, 0x80, 0xc2, 0x00, 0x00, 0x01}

// Parse errors. They are sentinels: parsing never allocates.
var (
	// ErrNotMACControl means the EtherType (after at most one 802.1Q
	// tag) is not 0x8808, or the frame ends before it.
	ErrNotMACControl = errors.New("not a mac control frame")
	// ErrTooShort means a MAC Control frame shorter than MinLen.
	ErrTooShort = errors.New("mac control frame shorter than 60 bytes")
	// ErrUnknownOpcode means a MAC Control opcode other than PAUSE and PFC.
	ErrUnknownOpcode = errors.New("unsupported mac control opcode")
)

// Frame is a parsed MAC Control frame: a view of the bytes given to
// Parse, which it does not own. A Frame that Parse accepted is Valid
// and every accessor may be used; one it refused with ErrTooShort or
// ErrUnknownOpcode gives its addresses and tag, Opcode when the opcode
// is present, and its parameters when Complete. The zero Frame is not
// MAC Control.
type Frame struct {
	b    []byte
	ctl  int // offset of the opcode; 0 when not MAC Control
	tci  uint16
	vlan bool
	err  error
}

// Parse parses frame, which starts at the Ethernet header. It checks
// the length once; the accessors of a Valid frame do not fail.
func Parse(frame []byte) (Frame, error) {
	if len(frame) < ethLen {
		return Frame{}, ErrNotMACControl
	}
	f := Frame{b: frame, ctl: ethLen}
	et := be.Uint16(frame[12:])
	if et == EtherTypeVLAN {
		if len(frame) < ethLen+vlanLen {
			return Frame{}, ErrNotMACControl
		}
		f.vlan, f.tci = true, be.Uint16(frame[14:])
		et = be.Uint16(frame[16:])
		f.ctl += vlanLen
	}
	if et != EtherType {
		return Frame{}, ErrNotMACControl
	}
	switch {
	case len(frame) < MinLen:
		f.err = ErrTooShort
	case f.Opcode().paramLen() == 0:
		f.err = ErrUnknownOpcode
	}
	return f, f.err
}

// IsMACControl reports whether the frame has EtherType 0x8808, valid or
// not: its addresses and tag may be read.
func (f Frame) IsMACControl() bool { return f.ctl != 0 }

// Valid reports whether Parse accepted the frame: a PAUSE or PFC frame
// of at least MinLen bytes.
func (f Frame) Valid() bool { return f.ctl != 0 && f.err == nil }

// Err is the error Parse returned for the frame.
func (f Frame) Err() error {
	if f.ctl == 0 {
		return ErrNotMACControl
	}
	return f.err
}

// Complete reports whether the opcode and its parameters are within the
// bytes: always for a Valid frame, also for a frame too short to be
// valid whose fields fit, as one captured on its sender before the
// padding.
func (f Frame) Complete() bool {
	if f.ctl == 0 || len(f.b) < f.ctl+2 {
		return false
	}
	n := f.Opcode().paramLen()
	return n != 0 && len(f.b) >= f.ctl+n
}

// Bytes returns the frame as given to Parse.
func (f Frame) Bytes() []byte { return f.b }

// Dst returns the destination address.
func (f Frame) Dst() [6]byte { return [6]byte(f.b[0:6]) }

// DstReserved reports whether the destination is ReservedAddr.
func (f Frame) DstReserved() bool { return f.Dst() == ReservedAddr }

// Src returns the source address.
func (f Frame) Src() [6]byte { return [6]byte(f.b[6:12]) }

// HasVLAN reports whether an 802.1Q tag precedes the EtherType.
func (f Frame) HasVLAN() bool { return f.vlan }

// VLANTCI is the tag's control information (PCP, DEI, VID), 0 without
// a tag.
func (f Frame) VLANTCI() uint16 { return f.tci }

// Opcode returns the MAC Control opcode, 0 when the frame ends before it.
func (f Frame) Opcode() Opcode {
	if f.ctl == 0 || len(f.b) < f.ctl+2 {
		return 0
	}
	return Opcode(be.Uint16(f.b[f.ctl:]))
}

// PauseTime is a PAUSE frame's pause_time in quanta.
func (f Frame) PauseTime() uint16 { return be.Uint16(f.b[f.ctl+2:]) }

// EnableVector is a PFC frame's whole priority-enable vector, its
// reserved high octet included.
func (f Frame) EnableVector() uint16 { return be.Uint16(f.b[f.ctl+2:]) }

// Enable is a PFC frame's priority-enable bits: bit n set means time[n]
// applies to priority n.
func (f Frame) Enable() uint8 { return f.b[f.ctl+3] }

// Time is a PFC frame's time[n] in quanta, for n in 0-7 (whether or not
// its enable bit is set).
func (f Frame) Time(n int) uint16 { return be.Uint16(f.b[f.ctl+4+2*n:]) }

// Pause tells what the frame asks of priority n: the time to pause it
// in quanta (0: resume), and false when the frame does not speak of it
// (a PFC frame whose enable bit n is clear, another opcode, n outside
// 0-7, a frame that is not Complete). A PAUSE frame speaks of every
// priority.
func (f Frame) Pause(n int) (quanta uint16, ok bool) {
	if uint(n) >= Priorities || !f.Complete() {
		return 0, false
	}
	switch f.Opcode() {
	case OpPause:
		return f.PauseTime(), true
	case OpPFC:
		if f.Enable()&(1<<n) == 0 {
			return 0, false
		}
		return f.Time(n), true
	}
	return 0, false
}

// Fields are the values of a MAC Control frame, for building one.
type Fields struct {
	Dst, Src  [6]byte
	HasVLAN   bool   // add an 802.1Q tag
	VLANTCI   uint16 // its tag control information
	Opcode    Opcode
	PauseTime uint16             // PAUSE: pause_time in quanta
	Enable    uint8              // PFC: priority-enable bits (the reserved octet is sent as 0)
	Times     [Priorities]uint16 // PFC: time[0..7] in quanta
}

// Fields returns the values of a Complete frame (those of the opcode
// only: a PAUSE frame gives no Times).
func (f Frame) Fields() Fields {
	v := Fields{Dst: f.Dst(), Src: f.Src(), HasVLAN: f.vlan, VLANTCI: f.tci, Opcode: f.Opcode()}
	switch v.Opcode {
	case OpPause:
		v.PauseTime = f.PauseTime()
	case OpPFC:
		v.Enable = f.Enable()
		for n := range v.Times {
			v.Times[n] = f.Time(n)
		}
	}
	return v
}

// Append appends the frame of MinLen bytes (the fields, then zero pad;
// no FCS) to dst and returns the extended slice. For an opcode other
// than PAUSE and PFC only the opcode is written, the rest is pad.
func (v *Fields) Append(dst []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, MinLen)...)
	b := dst[start:]
	copy(b[0:6], v.Dst[:])
	copy(b[6:12], v.Src[:])
	off := 12
	if v.HasVLAN {
		be.PutUint16(b[12:], EtherTypeVLAN)
		be.PutUint16(b[14:], v.VLANTCI)
		off += vlanLen
	}
	be.PutUint16(b[off:], EtherType)
	be.PutUint16(b[off+2:], uint16(v.Opcode))
	switch v.Opcode {
	case OpPause:
		be.PutUint16(b[off+4:], v.PauseTime)
	case OpPFC:
		b[off+5] = v.Enable
		for n, t := range v.Times {
			be.PutUint16(b[off+6+2*n:], t)
		}
	}
	return dst
}

// AppendPause appends a PAUSE frame from src to ReservedAddr asking for
// quanta pause quanta (0: resume), 60 bytes without FCS. src is written
// as its first six bytes, zeros for missing ones.
func AppendPause(dst []byte, src net.HardwareAddr, quanta uint16) []byte {
	v := Fields{Dst: ReservedAddr, Src: mac48(src), Opcode: OpPause, PauseTime: quanta}
	return v.Append(dst)
}

// AppendPFC appends a PFC frame from src to ReservedAddr, 60 bytes
// without FCS: priority n is to pause for quanta[n] quanta (0: resume)
// when bit n of enable is set. The eight times are written as given; a
// receiver ignores those whose enable bit is clear. src is written as in
// AppendPause.
func AppendPFC(dst []byte, src net.HardwareAddr, enable uint8, quanta [Priorities]uint16) []byte {
	v := Fields{Dst: ReservedAddr, Src: mac48(src), Opcode: OpPFC, Enable: enable, Times: quanta}
	return v.Append(dst)
}

func mac48(a net.HardwareAddr) (m [6]byte) {
	copy(m[:], a)
	return m
}

// QuantaDuration is the time of q pause quanta (512 bit times each) at
// linkBitsPerSecond, rounded up to the nanosecond so that a pause never
// ends early. An unknown speed (0) gives 0.
func QuantaDuration(q uint16, linkBitsPerSecond uint64) time.Duration {
	if linkBitsPerSecond == 0 {
		return 0
	}
	bitNs := uint64(q) * QuantumBits * uint64(time.Second) // at most 3.4e16: no overflow
	d := bitNs / linkBitsPerSecond
	if bitNs%linkBitsPerSecond != 0 {
		d++
	}
	return time.Duration(d)
}
