package mad

// LAP is a view of the data of a LAP, the request to load a new
// alternate path into an established connection (IBTA §12.6, table 115).
// Its path has a layout of its own:
//
//	    0               1               2               3
//	    0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//	   +---------------------------------------------------------------+
//	 0 |                     Local Communication ID                    |
//	   +---------------------------------------------------------------+
//	 4 |                    Remote Communication ID                    |
//	   +---------------------------------------------------------------+
//	 8 |                            Reserved                           |
//	   +-----------------------------------------------+---------+-----+
//	12 |                Remote QPN/EECN                |   RCMT  | Rsv |
//	   +-----------------------------------------------+---------+-----+
//	16 |                            Reserved                           |
//	   +-------------------------------+-------------------------------+
//	20 |       Alt Local Port LID      |      Alt Remote Port LID      |
//	   +-------------------------------+-------------------------------+
//	24 |                 Alternate Local Port GID (128)                |
//	   +---------------------------------------------------------------+
//	40 |                Alternate Remote Port GID (128)                |
//	   +---------------------------------------+-------+---------------+
//	56 |          Alternate Flow Label         |  Rsv  | Traffic Class |
//	   +---------------+---+-----------+-------+-+-----+---------+-----+
//	60 |   Hop Limit   | R |    Rate   |   SL  |L| Rsv |   ACKT  | Rsv |
//	   +---------------+---+-----------+-------+-+-----+---------+-----+
//	64 |                    Private Data (168 bytes)                   |
//	   +---------------------------------------------------------------+
//
// RCMT is the remote CM response timeout, L subnet local, ACKT the
// local ACK timeout.
type LAP []byte

// LocalCommID is the sender's communication ID.
func (l LAP) LocalCommID() uint32 { return be.Uint32(l[0:]) }

// RemoteCommID is the receiver's communication ID.
func (l LAP) RemoteCommID() uint32 { return be.Uint32(l[4:]) }

// RemoteQPN is the receiver's QP (or EE context) number.
func (l LAP) RemoteQPN() uint32 { return get24(l[12:]) }

// RemoteCMResponseTimeout is the 5-bit code of how long the sender
// waits for the APR.
func (l LAP) RemoteCMResponseTimeout() uint8 { return l[15] >> 3 }

// Alternate returns the alternate path's values (Reserved0 packs the 4
// reserved bits after the flow label above the 2 before the rate).
func (l LAP) Alternate() PathFields {
	return PathFields{LocalLID: be.Uint16(l[20:]), RemoteLID: be.Uint16(l[22:]), LocalGID: gid(l[24:]),
		RemoteGID: gid(l[40:]), FlowLabel: be.Uint32(l[56:]) >> 12, TrafficClass: l[59], HopLimit: l[60],
		PacketRate: l[61] & 0x3f, SL: l[62] >> 4, SubnetLocal: l[62]&0x08 != 0, LocalACKTimeout: l[63] >> 3,
		Reserved0: l[58]&0x0f<<2 | l[61]>>6, Reserved1: l[62] & 7, Reserved2: l[63] & 7}
}

// PrivateData returns the 168 bytes of private data.
func (l LAP) PrivateData() []byte { return l[64:232:232] }

// LAPFields are the values of a LAP, for building one.
type LAPFields struct {
	LocalCommID             uint32
	RemoteCommID            uint32
	RemoteQPN               uint32 // 24 bits
	RemoteCMResponseTimeout uint8  // 5 bits
	Alternate               PathFields
	PrivateData             [LAPPrivateLen]byte
	Reserved8               uint32 // bytes 8-11; zero when sending
	Reserved15              uint8  // the 3 bits after RemoteCMResponseTimeout; zero when sending
	Reserved16              uint32 // bytes 16-19; zero when sending
}

// Fields returns the LAP's values.
func (l LAP) Fields() LAPFields {
	f := LAPFields{LocalCommID: l.LocalCommID(), RemoteCommID: l.RemoteCommID(), RemoteQPN: l.RemoteQPN(),
		RemoteCMResponseTimeout: l.RemoteCMResponseTimeout(), Alternate: l.Alternate(),
		Reserved8: be.Uint32(l[8:]), Reserved15: l[15] & 7, Reserved16: be.Uint32(l[16:])}
	copy(f.PrivateData[:], l.PrivateData())
	return f
}

// Encode writes f into b[:DataLen].
func (f *LAPFields) Encode(b []byte) {
	_ = b[DataLen-1]
	be.PutUint32(b[0:], f.LocalCommID)
	be.PutUint32(b[4:], f.RemoteCommID)
	be.PutUint32(b[8:], f.Reserved8)
	put24(b[12:], f.RemoteQPN)
	b[15] = f.RemoteCMResponseTimeout<<3 | f.Reserved15&7
	be.PutUint32(b[16:], f.Reserved16)
	a := &f.Alternate
	be.PutUint16(b[20:], a.LocalLID)
	be.PutUint16(b[22:], a.RemoteLID)
	putGID(b[24:], a.LocalGID)
	putGID(b[40:], a.RemoteGID)
	be.PutUint32(b[56:], a.FlowLabel<<12|uint32(a.Reserved0>>2&0x0f)<<8|uint32(a.TrafficClass))
	b[60] = a.HopLimit
	b[61] = (a.Reserved0&3)<<6 | a.PacketRate&0x3f
	b[62] = a.SL<<4 | bit(a.SubnetLocal, 0x08) | a.Reserved1&7
	b[63] = a.LocalACKTimeout<<3 | a.Reserved2&7
	copy(b[64:DataLen], f.PrivateData[:])
}

// APR is a view of the data of an APR, the answer to a LAP (IBTA §12.6,
// table 116):
//
//	    0               1               2               3
//	    0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//	   +---------------------------------------------------------------+
//	 0 |                     Local Communication ID                    |
//	   +---------------------------------------------------------------+
//	 4 |                    Remote Communication ID                    |
//	   +---------------+---------------+-------------------------------+
//	 8 |  Add Info Len |   AP Status   |            Reserved           |
//	   +---------------+---------------+-------------------------------+
//	12 |               Additional Information (72 bytes)               |
//	   +---------------------------------------------------------------+
//	84 |                    Private Data (148 bytes)                   |
//	   +---------------------------------------------------------------+
type APR []byte

// LocalCommID is the sender's communication ID.
func (a APR) LocalCommID() uint32 { return be.Uint32(a[0:]) }

// RemoteCommID is the receiver's communication ID.
func (a APR) RemoteCommID() uint32 { return be.Uint32(a[4:]) }

// AddInfoLength is the length of the additional information in bytes.
func (a APR) AddInfoLength() uint8 { return a[8] }

// Status is the alternate path status (0: the path was loaded).
func (a APR) Status() uint8 { return a[9] }

// AddInfo returns the 72 bytes of additional information.
func (a APR) AddInfo() []byte { return a[12:84:84] }

// PrivateData returns the 148 bytes of private data.
func (a APR) PrivateData() []byte { return a[84:232:232] }

// APRFields are the values of an APR, for building one.
type APRFields struct {
	LocalCommID   uint32
	RemoteCommID  uint32
	AddInfoLength uint8
	Status        uint8
	AddInfo       [APRInfoLen]byte
	PrivateData   [APRPrivateLen]byte
	Reserved10    uint16 // bytes 10-11; zero when sending
}

// Fields returns the APR's values.
func (a APR) Fields() APRFields {
	f := APRFields{LocalCommID: a.LocalCommID(), RemoteCommID: a.RemoteCommID(), AddInfoLength: a.AddInfoLength(),
		Status: a.Status(), Reserved10: be.Uint16(a[10:])}
	copy(f.AddInfo[:], a.AddInfo())
	copy(f.PrivateData[:], a.PrivateData())
	return f
}

// Encode writes f into b[:DataLen].
func (f *APRFields) Encode(b []byte) {
	_ = b[DataLen-1]
	be.PutUint32(b[0:], f.LocalCommID)
	be.PutUint32(b[4:], f.RemoteCommID)
	b[8] = f.AddInfoLength
	b[9] = f.Status
	be.PutUint16(b[10:], f.Reserved10)
	copy(b[12:84], f.AddInfo[:])
	copy(b[84:DataLen], f.PrivateData[:])
}

// SIDRREQ is a view of the data of a SIDR_REQ, which asks the QPN and
// Q_Key of a UD service (IBTA ch. 12, table 119). rdma_cm's UDP port
// space uses it, with a CMAHeader at the start of the private data.
//
//	    0               1               2               3
//	    0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//	   +---------------------------------------------------------------+
//	 0 |                           Request ID                          |
//	   +-------------------------------+-------------------------------+
//	 4 |             P_Key             |            Reserved           |
//	   +-------------------------------+-------------------------------+
//	 8 |                        Service ID (64)                        |
//	   +---------------------------------------------------------------+
//	16 |                    Private Data (216 bytes)                   |
//	   +---------------------------------------------------------------+
type SIDRREQ []byte

// RequestID identifies the request; the SIDR_REP repeats it.
func (s SIDRREQ) RequestID() uint32 { return be.Uint32(s[0:]) }

// PKey is the partition key.
func (s SIDRREQ) PKey() uint16 { return be.Uint16(s[4:]) }

// ServiceID names the service asked for.
func (s SIDRREQ) ServiceID() ServiceID { return ServiceID(be.Uint64(s[8:])) }

// PrivateData returns the 216 bytes of private data.
func (s SIDRREQ) PrivateData() []byte { return s[16:232:232] }

// CMAHeader returns the rdma_cm IP addressing header at the start of
// the private data, as for a REQ.
func (s SIDRREQ) CMAHeader() (CMAHeader, bool) {
	if !s.ServiceID().IsIP() {
		return nil, false
	}
	return ParseCMAHeader(s.PrivateData())
}

// SIDRREQFields are the values of a SIDR_REQ, for building one.
type SIDRREQFields struct {
	RequestID   uint32
	PKey        uint16
	ServiceID   ServiceID
	PrivateData [SIDRREQPrivateLen]byte
	Reserved6   uint16 // bytes 6-7; zero when sending
}

// Fields returns the SIDR_REQ's values.
func (s SIDRREQ) Fields() SIDRREQFields {
	f := SIDRREQFields{RequestID: s.RequestID(), PKey: s.PKey(), ServiceID: s.ServiceID(), Reserved6: be.Uint16(s[6:])}
	copy(f.PrivateData[:], s.PrivateData())
	return f
}

// Encode writes f into b[:DataLen].
func (f *SIDRREQFields) Encode(b []byte) {
	_ = b[DataLen-1]
	be.PutUint32(b[0:], f.RequestID)
	be.PutUint16(b[4:], f.PKey)
	be.PutUint16(b[6:], f.Reserved6)
	be.PutUint64(b[8:], uint64(f.ServiceID))
	copy(b[16:DataLen], f.PrivateData[:])
}

// SIDRStatus is the status of a SIDR_REP.
type SIDRStatus uint8

// SIDR_REP statuses (IBTA ch. 12, table 120).
const (
	SIDRValid              SIDRStatus = 0 // QPN and Q_Key are valid
	SIDRServiceIDUnknown   SIDRStatus = 1 // service ID not supported
	SIDRRejected           SIDRStatus = 2 // the service provider rejected the request
	SIDRNoQP               SIDRStatus = 3 // no QP available
	SIDRRedirect           SIDRStatus = 4 // the additional information holds a ClassPortInfo to retry at
	SIDRUnsupportedVersion SIDRStatus = 5 // class version not supported
	numSIDRStatus                     = 6
)

var sidrStatusNames = [numSIDRStatus]string{"valid", "service_id_not_supported", "rejected", "no_qp",
	"redirect", "unsupported_class_version"}

func (s SIDRStatus) String() string {
	if s < numSIDRStatus {
		return sidrStatusNames[s]
	}
	return "reserved"
}

// SIDRREP is a view of the data of a SIDR_REP, the answer to a SIDR_REQ
// (IBTA ch. 12, table 120):
//
//	    0               1               2               3
//	    0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//	   +---------------------------------------------------------------+
//	 0 |                           Request ID                          |
//	   +---------------+---------------+-------------------------------+
//	 4 |     Status    |  Add Info Len |          Vendor ID H          |
//	   +---------------+---------------+---------------+---------------+
//	 8 |                      QPN                      |  Vendor ID L  |
//	   +-----------------------------------------------+---------------+
//	12 |                        Service ID (64)                        |
//	   +---------------------------------------------------------------+
//	20 |                             Q_Key                             |
//	   +---------------------------------------------------------------+
//	24 |               Additional Information (72 bytes)               |
//	   +---------------------------------------------------------------+
//	96 |                    Private Data (136 bytes)                   |
//	   +---------------------------------------------------------------+
type SIDRREP []byte

// RequestID is the request ID of the SIDR_REQ answered.
func (s SIDRREP) RequestID() uint32 { return be.Uint32(s[0:]) }

// Status is the outcome.
func (s SIDRREP) Status() SIDRStatus { return SIDRStatus(s[4]) }

// AddInfoLength is the length of the additional information in bytes.
func (s SIDRREP) AddInfoLength() uint8 { return s[5] }

// VendorID is the 24-bit vendor ID of enhanced connection establishment.
func (s SIDRREP) VendorID() uint32 { return uint32(be.Uint16(s[6:]))<<8 | uint32(s[11]) }

// QPN is the service's UD QP number.
func (s SIDRREP) QPN() uint32 { return get24(s[8:]) }

// ServiceID is the service ID of the SIDR_REQ answered.
func (s SIDRREP) ServiceID() ServiceID { return ServiceID(be.Uint64(s[12:])) }

// QKey is the service's Q_Key.
func (s SIDRREP) QKey() uint32 { return be.Uint32(s[20:]) }

// AddInfo returns the 72 bytes of additional information.
func (s SIDRREP) AddInfo() []byte { return s[24:96:96] }

// PrivateData returns the 136 bytes of private data.
func (s SIDRREP) PrivateData() []byte { return s[96:232:232] }

// SIDRREPFields are the values of a SIDR_REP, for building one.
type SIDRREPFields struct {
	RequestID     uint32
	Status        SIDRStatus
	AddInfoLength uint8
	VendorID      uint32 // 24 bits
	QPN           uint32 // 24 bits
	ServiceID     ServiceID
	QKey          uint32
	AddInfo       [SIDRREPInfoLen]byte
	PrivateData   [SIDRREPPrivateLen]byte
}

// Fields returns the SIDR_REP's values.
func (s SIDRREP) Fields() SIDRREPFields {
	f := SIDRREPFields{RequestID: s.RequestID(), Status: s.Status(), AddInfoLength: s.AddInfoLength(),
		VendorID: s.VendorID(), QPN: s.QPN(), ServiceID: s.ServiceID(), QKey: s.QKey()}
	copy(f.AddInfo[:], s.AddInfo())
	copy(f.PrivateData[:], s.PrivateData())
	return f
}

// Encode writes f into b[:DataLen].
func (f *SIDRREPFields) Encode(b []byte) {
	_ = b[DataLen-1]
	be.PutUint32(b[0:], f.RequestID)
	b[4] = byte(f.Status)
	b[5] = f.AddInfoLength
	be.PutUint16(b[6:], uint16(f.VendorID>>8))
	put24(b[8:], f.QPN)
	b[11] = byte(f.VendorID)
	be.PutUint64(b[12:], uint64(f.ServiceID))
	be.PutUint32(b[20:], f.QKey)
	copy(b[24:96], f.AddInfo[:])
	copy(b[96:DataLen], f.PrivateData[:])
}
