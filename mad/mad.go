// Package mad holds the wire formats of InfiniBand management datagrams
// (MADs) as RoCE carries them: the MAD common header and the attributes
// of the communication management (CM) class, with which RDMA CM sets up
// and tears down connections, plus the IP addressing header that rdma_cm
// puts at the start of a REQ's private data.
//
// Like package bth, everything here is a view over caller-owned bytes:
// one length check at ingress (Parse, FromPacket), then accessors that
// do not fail and do not allocate. Each view has a Fields struct whose
// Encode builds the same bytes back; decoding and encoding a captured
// MAD gives it back byte for byte, reserved bits included. There is no
// I/O and no state here: the CM state machine is not part of this
// package.
//
// References: InfiniBand Architecture Specification vol. 1, chapter 12
// (communication management; §12.6 and its tables 106-120 give the
// messages), chapter 13 (§13.4, the MAD format; the GSI on QP1), Annex
// A11 (RDMA IP CM Service).
package mad

import (
	"encoding/binary"
	"errors"

	"github.com/uroce/uroce/bth"
)

var be = binary.BigEndian

// Sizes of a MAD and its parts (IBTA §13.4: a MAD is always 256 bytes).
const (
	Len       = 256             // a whole MAD
	HeaderLen = 24              // the common header
	DataLen   = Len - HeaderLen // the attribute data after it
)

// GSI addressing: MADs of every class but subnet management travel as
// UD SENDs to QP1, the general services interface, with its well-known
// Q_Key (IBTA ch. 13, the general services interface; seen on
// rdma_rxe and ConnectX).
const (
	GSIQPN  = 1
	GSIQKey = 0x80010000
)

// Errors of Parse.
var (
	// ErrTruncated means fewer than 256 bytes were given.
	ErrTruncated = errors.New("mad shorter than 256 bytes")
)

// Class is a management class (IBTA §13.4, MgmtClass values).
type Class uint8

// Management classes.
const (
	ClassSubnLID    Class = 0x01 // subnet management, LID routed
	ClassSubnAdm    Class = 0x03 // subnet administration
	ClassPerf       Class = 0x04 // performance management
	ClassBM         Class = 0x05 // baseboard management
	ClassDevMgt     Class = 0x06 // device management
	ClassCM         Class = 0x07 // communication management
	ClassSNMP       Class = 0x08 // SNMP tunneling
	ClassSubnDirect Class = 0x81 // subnet management, directed route
	ClassCongestion Class = 0x21 // congestion control
)

var classNames = map[Class]string{ClassSubnLID: "SM", ClassSubnAdm: "SA", ClassPerf: "PerfMgt",
	ClassBM: "BM", ClassDevMgt: "DevMgt", ClassCM: "CM", ClassSNMP: "SNMP", ClassSubnDirect: "SM_DR",
	ClassCongestion: "CC"}

func (c Class) String() string {
	if s, ok := classNames[c]; ok {
		return s
	}
	return "Class_0x" + hexDigits(uint64(c), 2)
}

// Versions.
const (
	BaseVersion    = 1 // the MAD base version
	CMClassVersion = 2 // the CM class version (seen on rdma_rxe and ConnectX)
)

const methodResponseBit = 0x80

// Method is the method byte of a MAD: the R (response) bit and a 7-bit
// method number.
type Method uint8

// Methods common to all classes (IBTA §13.4, table of common methods).
// CM messages all use Send; ClassPortInfo uses Get and GetResp.
const (
	MethodGet     Method = 0x01
	MethodSet     Method = 0x02
	MethodSend    Method = 0x03
	MethodTrap    Method = 0x05
	MethodReport  Method = 0x06
	MethodTrapRep Method = 0x07
	MethodGetResp Method = 0x81
	MethodRepResp Method = 0x86
)

// Response reports whether the R bit is set.
func (m Method) Response() bool { return m&methodResponseBit != 0 }

var methodNames = map[Method]string{MethodGet: "Get", MethodSet: "Set", MethodSend: "Send",
	MethodTrap: "Trap", MethodReport: "Report", MethodTrapRep: "TrapRepress",
	MethodGetResp: "GetResp", MethodRepResp: "ReportResp"}

func (m Method) String() string {
	if s, ok := methodNames[m]; ok {
		return s
	}
	return "Method_0x" + hexDigits(uint64(m), 2)
}

// AttrID is a MAD attribute ID. For the CM class it names the message.
type AttrID uint16

// Attribute IDs of the CM class (IBTA §12.6, CM attributes).
const (
	AttrClassPortInfo AttrID = 0x0001
	AttrREQ           AttrID = 0x0010 // request for communication
	AttrMRA           AttrID = 0x0011 // message receipt acknowledgement
	AttrREJ           AttrID = 0x0012 // reject
	AttrREP           AttrID = 0x0013 // reply to request for communication
	AttrRTU           AttrID = 0x0014 // ready to use
	AttrDREQ          AttrID = 0x0015 // request for communication release
	AttrDREP          AttrID = 0x0016 // reply to request for communication release
	AttrSIDRREQ       AttrID = 0x0017 // service ID resolution request
	AttrSIDRREP       AttrID = 0x0018 // service ID resolution response
	AttrLAP           AttrID = 0x0019 // load alternate path
	AttrAPR           AttrID = 0x001a // alternate path response
)

var cmAttrNames = [...]string{
	AttrREQ: "REQ", AttrMRA: "MRA", AttrREJ: "REJ", AttrREP: "REP", AttrRTU: "RTU",
	AttrDREQ: "DREQ", AttrDREP: "DREP", AttrSIDRREQ: "SIDR_REQ", AttrSIDRREP: "SIDR_REP",
	AttrLAP: "LAP", AttrAPR: "APR",
}

// CMName returns the CM message name of a CM-class attribute ("REQ"), or
// "" for an attribute that is not a CM message.
func (a AttrID) CMName() string {
	if int(a) < len(cmAttrNames) {
		return cmAttrNames[a]
	}
	return ""
}

// String names a CM-class attribute ("REQ", "ClassPortInfo") or gives
// its number ("Attr_0x0042").
func (a AttrID) String() string {
	if a == AttrClassPortInfo {
		return "ClassPortInfo"
	}
	if s := a.CMName(); s != "" {
		return s
	}
	return "Attr_0x" + hexDigits(uint64(a), 4)
}

// MAD is a view of a 256-byte management datagram: the common header
// (IBTA §13.4, MAD base format) and 232 bytes of class data.
//
//	 0               1               2               3
//	+---------------+---------------+---------------+-+-------------+
//	|  BaseVersion  |   MgmtClass   | ClassVersion  |R|   Method    |
//	+---------------+---------------+---------------+-+-------------+
//	|            Status             |         ClassSpecific         |
//	+-------------------------------+-------------------------------+
//	|                         TransactionID                         |
//	|                                                               |
//	+-------------------------------+-------------------------------+
//	|          AttributeID          |           Reserved            |
//	+-------------------------------+-------------------------------+
//	|                       AttributeModifier                       |
//	+---------------------------------------------------------------+
//	|                     Data (232 bytes) ...                      |
//
// Accessors assume len(m) >= Len; Parse and FromPacket check that once.
type MAD []byte

// Parse returns the MAD at the start of b (b may be longer, as a UD
// payload with a pad is). It does not allocate.
func Parse(b []byte) (MAD, error) {
	if len(b) < Len {
		return nil, ErrTruncated
	}
	return MAD(b[:Len:Len]), nil
}

// FromPacket returns the MAD a parsed RoCE packet carries, if it carries
// one: a UD SEND_ONLY to QP1 with the GSI Q_Key and a payload of 256
// bytes. p is what bth.Parse or bth.ParseTransport filled, whatever
// they returned: only a packet whose headers and 256 payload bytes are
// all there is taken. The view aliases p.Frame.
func FromPacket(p *bth.Packet) (MAD, bool) {
	if p.Info == nil || p.Opcode() != bth.OpUDSendOnly || p.PayloadN != Len ||
		p.PayloadAt+p.PayloadN > len(p.Frame) || p.BTH().DestQP() != GSIQPN {
		return nil, false
	}
	d := p.DETH()
	if d == nil || d.QKey() != GSIQKey {
		return nil, false
	}
	return MAD(p.Frame[p.PayloadAt : p.PayloadAt+Len : p.PayloadAt+Len]), true
}

// BaseVersion is the MAD format version (1).
func (m MAD) BaseVersion() uint8 { return m[0] }

// Class is the management class.
func (m MAD) Class() Class { return Class(m[1]) }

// ClassVersion is the version of the class's own format (2 for CM).
func (m MAD) ClassVersion() uint8 { return m[2] }

// Method is the method byte, R bit included.
func (m MAD) Method() Method { return Method(m[3]) }

// Status is the status field (meaningful in responses).
func (m MAD) Status() uint16 { return be.Uint16(m[4:]) }

// ClassSpecific is the class-specific field.
func (m MAD) ClassSpecific() uint16 { return be.Uint16(m[6:]) }

// TID is the transaction ID.
func (m MAD) TID() uint64 { return be.Uint64(m[8:]) }

// AttrID is the attribute ID.
func (m MAD) AttrID() AttrID { return AttrID(be.Uint16(m[16:])) }

// Reserved returns bytes 18-19, reserved.
func (m MAD) Reserved() uint16 { return be.Uint16(m[18:]) }

// AttrModifier is the attribute modifier.
func (m MAD) AttrModifier() uint32 { return be.Uint32(m[20:]) }

// Data returns the 232 bytes of class data after the header: the CM
// message for the CM class.
func (m MAD) Data() []byte { return m[HeaderLen:Len:Len] }

// IsCM reports whether m belongs to the CM class.
func (m MAD) IsCM() bool { return m.Class() == ClassCM }

// HeaderFields are the values of a MAD common header, for building one.
type HeaderFields struct {
	BaseVersion   uint8
	Class         Class
	ClassVersion  uint8
	Method        Method
	Status        uint16
	ClassSpecific uint16
	TID           uint64
	AttrID        AttrID
	Reserved      uint16 // zero when sending
	AttrModifier  uint32
}

// CMHeader returns the header of a CM message: base version 1, class
// CM, class version 2, method Send.
func CMHeader(attr AttrID, tid uint64) HeaderFields {
	return HeaderFields{BaseVersion: BaseVersion, Class: ClassCM, ClassVersion: CMClassVersion,
		Method: MethodSend, TID: tid, AttrID: attr}
}

// Header returns the header's values.
func (m MAD) Header() HeaderFields {
	return HeaderFields{BaseVersion: m.BaseVersion(), Class: m.Class(), ClassVersion: m.ClassVersion(),
		Method: m.Method(), Status: m.Status(), ClassSpecific: m.ClassSpecific(), TID: m.TID(),
		AttrID: m.AttrID(), Reserved: m.Reserved(), AttrModifier: m.AttrModifier()}
}

// Encode writes the header into b[:HeaderLen].
func (f *HeaderFields) Encode(b []byte) {
	_ = b[HeaderLen-1]
	b[0] = f.BaseVersion
	b[1] = byte(f.Class)
	b[2] = f.ClassVersion
	b[3] = byte(f.Method)
	be.PutUint16(b[4:], f.Status)
	be.PutUint16(b[6:], f.ClassSpecific)
	be.PutUint64(b[8:], f.TID)
	be.PutUint16(b[16:], uint16(f.AttrID))
	be.PutUint16(b[18:], f.Reserved)
	be.PutUint32(b[20:], f.AttrModifier)
}

func hexDigits(v uint64, w int) string {
	const digits = "0123456789abcdef"
	var buf [16]byte
	i := len(buf)
	for v != 0 || len(buf)-i < w {
		i--
		buf[i] = digits[v&15]
		v >>= 4
	}
	return string(buf[i:])
}
