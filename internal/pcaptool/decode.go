package pcaptool

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net/netip"
	"strconv"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/mad"
	"github.com/uroce/uroce/pfc"
)

// Status says how far a RoCE frame could be decoded.
type Status uint8

// Frame statuses.
const (
	StatusOK        Status = iota // complete; ICRC checked
	StatusTruncated               // cut by the capture's snap length: ICRC not checked
	StatusMalformed               // lengths or headers inconsistent
)

// Record is one decoded RoCE packet. Decode fills it without allocating;
// its slices alias the frame.
type Record struct {
	Frame   int // 1-based index in the file
	Time    time.Time
	Status  Status
	Problem string // why the packet is malformed, when it is
	Err     error  // the bth.Parse error, if any
	CapLen  int
	OrigLen int
	P       bth.Packet
	// HeadersOK tells that every extended header the opcode carries is
	// in the captured bytes (the header accessors of P may be used).
	HeadersOK bool
	// PayloadLen is the payload length the lengths announce, also for a
	// truncated packet (-1 when the headers do not fit).
	PayloadLen int
	ICRCOK     bool
	// MAD is the management datagram the packet carries (a UD SEND to
	// QP1 with the GSI Q_Key, see mad.FromPacket), nil when none; it
	// aliases the frame.
	MAD mad.MAD
}

// Decode decodes frame number n (1-based) of a file. It returns false
// when the frame is not RoCE.
func Decode(n int, f *Frame, rec *Record) bool {
	*rec = Record{Frame: n, Time: f.Time, CapLen: f.CapLen, OrigLen: f.OrigLen, PayloadLen: -1}
	if f.Data == nil {
		return false
	}
	p := &rec.P
	err := bth.Parse(f.Data, p)
	rec.Err = err
	switch {
	case err == nil:
	case errors.Is(err, bth.ErrNotRoCE):
		return false
	case errors.Is(err, bth.ErrTruncated):
		// Some sniffers write the cut length as the original length too.
		// A frame whose headers agree with each other (the UDP length was
		// checked by Parse, the IPv4 header checksum is checked here) was
		// cut by the capture; one that does not is damaged.
		if f.Truncated() || p.L3+20 > len(f.Data) || p.IPv4ChecksumOK() {
			rec.Status = StatusTruncated
			rec.OrigLen = max(rec.OrigLen, p.End)
		} else {
			rec.Status = StatusMalformed
			rec.Problem = "ip length " + strconv.Itoa(p.End-p.L3) + " exceeds the frame (" + strconv.Itoa(len(f.Data)-p.L3) + " bytes after the ethernet header)"
		}
	case errors.Is(err, bth.ErrBadOpcode):
		rec.Status = StatusMalformed
		rec.Problem = "reserved opcode"
	default:
		rec.Status = StatusMalformed
		rec.Problem = malformedReason(p)
	}
	if p.Info != nil && p.Info.Valid && p.End >= p.BTHOff+int(p.Info.HdrLen)+bth.ICRCLen {
		rec.PayloadLen = p.End - bth.ICRCLen - p.BTHOff - int(p.Info.HdrLen) - p.BTH().PadCount()
		rec.HeadersOK = p.BTHOff+int(p.Info.HdrLen) <= len(f.Data)
		if rec.PayloadLen < 0 {
			rec.PayloadLen = -1
			rec.HeadersOK = false
		}
	}
	if p.Info != nil && !p.Info.Valid && p.End >= p.BTHOff+bth.BTHLen+bth.ICRCLen {
		rec.PayloadLen = p.End - bth.ICRCLen - p.BTHOff - bth.BTHLen
	}
	if rec.Status != StatusTruncated && p.Info != nil && p.End <= len(f.Data) && p.End >= p.BTHOff+bth.BTHLen+bth.ICRCLen {
		rec.ICRCOK = p.ICRCOK()
	}
	if rec.Status == StatusOK {
		rec.MAD, _ = mad.FromPacket(p)
	}
	return true
}

// ICRCChecked reports whether the ICRC could be computed.
func (r *Record) ICRCChecked() bool {
	p := &r.P
	return r.Status != StatusTruncated && p.Info != nil && p.End <= len(p.Frame) && p.End >= p.BTHOff+bth.BTHLen+bth.ICRCLen
}

// HasBTH reports whether the BTH was captured.
func (r *Record) HasBTH() bool { return r.P.Info != nil }

func malformedReason(p *bth.Packet) string {
	f := p.Frame
	itoa := strconv.Itoa
	switch {
	case p.BTHOff == 0 && p.L4 == 0:
		return "grh next header is not 0x1b"
	case p.BTHOff == 0 && p.IPv6:
		return "ipv6 payload length " + itoa(p.End-p.L4) + " is shorter than a udp header"
	case p.BTHOff == 0:
		return "ip total length " + itoa(p.End-p.L3) + " is shorter than the ip and udp headers"
	case p.Version == 2 && int(binary.BigEndian.Uint16(f[p.L4+4:])) != p.End-p.L4:
		return "udp length " + itoa(int(binary.BigEndian.Uint16(f[p.L4+4:]))) + " disagrees with the ip length (" + itoa(p.End-p.L4) + ")"
	case p.End < p.BTHOff+bth.BTHLen+bth.ICRCLen:
		return "transport packet of " + itoa(max(p.End-p.BTHOff, 0)) + " bytes is shorter than a bth and an icrc"
	case p.Info != nil && p.End < p.BTHOff+int(p.Info.HdrLen)+bth.ICRCLen:
		return p.Info.Name + " needs " + itoa(int(p.Info.HdrLen)) + " header bytes, the packet has " + itoa(p.End-p.BTHOff-bth.ICRCLen)
	case p.Info != nil:
		return "pad count " + itoa(p.BTH().PadCount()) + " exceeds the payload"
	}
	return "inconsistent lengths"
}

// hdr reports whether extended header h is present and captured.
func (r *Record) hdr(h bth.Hdr) bool { return r.HeadersOK && r.P.Info.Has(h) }

// AppendText appends the one-line text form of r (no newline).
func (r *Record) AppendText(b []byte) []byte {
	p := &r.P
	b = strconv.AppendInt(b, int64(r.Frame), 10)
	b = append(b, ' ')
	if p.Version == 1 {
		b = append(b, "RoCEv1 "...)
		b = appendAddr(b, p.SrcIP())
		b = append(b, " > "...)
		b = appendAddr(b, p.DstIP())
	} else {
		b = appendAddrPort(b, p.SrcIP(), p.SrcPort())
		b = append(b, " > "...)
		b = appendAddrPort(b, p.DstIP(), p.DstPort())
	}
	if p.HasVLAN {
		b = append(b, " vlan="...)
		b = strconv.AppendInt(b, int64(p.VLANTCI&0xfff), 10)
	}
	if ecn := p.ECN(); ecn != 0 {
		b = append(b, " ecn="...)
		b = append(b, [4]string{"", "ect1", "ect0", "ce"}[ecn]...)
	}
	if !r.HasBTH() {
		return r.appendStatus(b)
	}
	bt := p.BTH()
	b = append(b, ' ')
	b = append(b, p.Info.Name...)
	if !p.Info.Valid {
		b = append(b, p.Opcode().String()...)
	}
	b = append(b, " psn="...)
	b = appendHex(b, uint64(bt.PSN()), 6)
	b = append(b, " qp="...)
	b = appendHex(b, uint64(bt.DestQP()), 6)
	b = append(b, " A="...)
	b = appendBit(b, bt.AckReq())
	b = append(b, " SE="...)
	b = appendBit(b, bt.SE())
	b = append(b, " M="...)
	b = appendBit(b, bt.MigReq())
	b = append(b, " pad="...)
	b = strconv.AppendInt(b, int64(bt.PadCount()), 10)
	if bt.FECN() {
		b = append(b, " FECN"...)
	}
	if bt.BECN() {
		b = append(b, " BECN"...)
	}
	if bt.PKey() != 0xffff {
		b = append(b, " pkey="...)
		b = appendHex(b, uint64(bt.PKey()), 4)
	}
	if bt.TVer() != 0 {
		b = append(b, " tver="...)
		b = strconv.AppendInt(b, int64(bt.TVer()), 10)
	}
	b = r.appendExtText(b)
	if r.PayloadLen >= 0 {
		b = append(b, " payload="...)
		b = strconv.AppendInt(b, int64(r.PayloadLen), 10)
	}
	if r.MAD != nil {
		b = appendMADText(b, r.MAD)
	}
	return r.appendStatus(b)
}

func (r *Record) appendStatus(b []byte) []byte {
	switch r.Status {
	case StatusTruncated:
		return appendTruncated(b, r.CapLen, r.OrigLen)
	case StatusMalformed:
		b = append(b, " MALFORMED ("...)
		b = append(b, r.Problem...)
		b = append(b, ')')
	}
	if r.ICRCChecked() {
		b = append(b, " icrc="...)
		b = appendHex(b, uint64(r.P.ICRC()), 8)
		if r.ICRCOK {
			b = append(b, " ok"...)
		} else {
			b = append(b, " BAD (computed "...)
			b = appendHex(b, uint64(r.P.ComputeICRC()), 8)
			b = append(b, ')')
		}
	}
	return b
}

func (r *Record) appendExtText(b []byte) []byte {
	p := &r.P
	if r.hdr(bth.HdrDCETH) {
		d := p.DCETH()
		b = append(b, " DCETH("...)
		b = hex.AppendEncode(b, d)
		b = append(b, ')')
	}
	if r.hdr(bth.HdrRDETH) {
		b = append(b, " RDETH(ee="...)
		b = appendHex(b, uint64(p.RDETH().EEContext()), 6)
		b = append(b, ')')
	}
	if r.hdr(bth.HdrDETH) {
		d := p.DETH()
		b = append(b, " DETH(qkey="...)
		b = appendHex(b, uint64(d.QKey()), 8)
		b = append(b, " srcqp="...)
		b = appendHex(b, uint64(d.SrcQP()), 6)
		b = append(b, ')')
	}
	if r.hdr(bth.HdrXRCETH) {
		b = append(b, " XRCETH(srq="...)
		b = appendHex(b, uint64(p.XRCETH().XRCSRQ()), 6)
		b = append(b, ')')
	}
	if r.hdr(bth.HdrFETH) {
		b = append(b, " FETH("...)
		b = appendHex(b, uint64(binary.BigEndian.Uint32(p.Frame[p.BTHOff+p.Info.Offset(bth.HdrFETH):])), 8)
		b = append(b, ')')
	}
	if r.hdr(bth.HdrRETH) {
		e := p.RETH()
		b = append(b, " RETH(va="...)
		b = appendHex(b, e.VA(), 0)
		b = append(b, " rkey="...)
		b = appendHex(b, uint64(e.RKey()), 8)
		b = append(b, " len="...)
		b = strconv.AppendUint(b, uint64(e.DMALen()), 10)
		b = append(b, ')')
	}
	if r.hdr(bth.HdrAtomicETH) {
		e := p.AtomicETH()
		b = append(b, " AtomicETH(va="...)
		b = appendHex(b, e.VA(), 0)
		b = append(b, " rkey="...)
		b = appendHex(b, uint64(e.RKey()), 8)
		b = append(b, " swap_add="...)
		b = appendHex(b, e.SwapAdd(), 0)
		b = append(b, " compare="...)
		b = appendHex(b, e.Compare(), 0)
		b = append(b, ')')
	}
	if r.hdr(bth.HdrAETH) {
		e := p.AETH()
		s := e.Syndrome()
		b = append(b, " AETH("...)
		b = append(b, s.Kind().String()...)
		switch s.Kind() {
		case bth.AckKindACK:
			b = append(b, " credits="...)
			b = strconv.AppendInt(b, int64(s.Value()), 10)
		case bth.AckKindRNR:
			b = append(b, " timer="...)
			b = strconv.AppendInt(b, int64(s.Value()), 10)
			b = append(b, " ("...)
			b = strconv.AppendFloat(b, float64(bth.RNRTimerMicros[s.Value()])/1000, 'f', -1, 64)
			b = append(b, "ms)"...)
		case bth.AckKindNAK:
			b = append(b, ' ')
			b = append(b, s.CodeName()...)
		default:
			b = append(b, " syndrome="...)
			b = appendHex(b, uint64(s), 2)
		}
		b = append(b, " msn="...)
		b = strconv.AppendUint(b, uint64(e.MSN()), 10)
		b = append(b, ')')
	}
	if r.hdr(bth.HdrAtomicAck) {
		b = append(b, " AtomicAckETH(orig="...)
		b = appendHex(b, p.AtomicAck().Orig(), 0)
		b = append(b, ')')
	}
	if r.hdr(bth.HdrImmDt) {
		b = append(b, " ImmDt("...)
		b = appendHex(b, uint64(p.ImmDt().Value()), 8)
		b = append(b, ')')
	}
	if r.hdr(bth.HdrIETH) {
		b = append(b, " IETH(rkey="...)
		b = appendHex(b, uint64(p.IETH().RKey()), 8)
		b = append(b, ')')
	}
	return b
}

// AppendJSON appends r as one JSON object (no newline). Keys: frame,
// time, version, src_mac, dst_mac, vlan, src_ip, dst_ip, src_port,
// dst_port, tclass, opcode, opcode_name, transport, se, migreq, pad,
// tver, pkey, fecn, becn, resv6, dest_qp, ack_req, resv7, psn, the
// extended headers present (dceth, rdeth, deth, xrceth, feth, reth,
// atomic_eth, aeth, atomic_ack, immdt, ieth), payload_len, mad (for a
// management datagram, see appendMADJSON), icrc, icrc_ok, and truncated
// or malformed when so. icrc and icrc_ok are null when the ICRC could
// not be checked.
func (r *Record) AppendJSON(b []byte) []byte {
	p := &r.P
	b = append(b, `{"frame":`...)
	b = strconv.AppendInt(b, int64(r.Frame), 10)
	b = appendJSONTime(b, r.Time)
	b = append(b, `,"version":`...)
	b = strconv.AppendInt(b, int64(p.Version), 10)
	b = append(b, `,"src_mac":"`...)
	b = appendMAC(b, p.SrcMAC())
	b = append(b, `","dst_mac":"`...)
	b = appendMAC(b, p.DstMAC())
	b = append(b, '"')
	if p.HasVLAN {
		b = append(b, `,"vlan":{"pcp":`...)
		b = strconv.AppendInt(b, int64(p.VLANTCI>>13), 10)
		b = append(b, `,"vid":`...)
		b = strconv.AppendInt(b, int64(p.VLANTCI&0xfff), 10)
		b = append(b, '}')
	}
	b = append(b, `,"src_ip":"`...)
	b = appendAddr(b, p.SrcIP())
	b = append(b, `","dst_ip":"`...)
	b = appendAddr(b, p.DstIP())
	b = append(b, '"')
	b = appendKeyInt(b, "src_port", uint64(p.SrcPort()))
	b = appendKeyInt(b, "dst_port", uint64(p.DstPort()))
	b = appendKeyInt(b, "tclass", uint64(p.TrafficClass()))
	if r.HasBTH() {
		bt := p.BTH()
		b = appendKeyInt(b, "opcode", uint64(bt.Opcode()))
		b = append(b, `,"opcode_name":"`...)
		if p.Info.Valid {
			b = append(b, p.Info.Name...)
		} else {
			b = append(b, bt.Opcode().String()...)
		}
		b = append(b, `","transport":"`...)
		if p.Info.Has(bth.HdrDCETH) {
			b = append(b, "DC"...)
		} else {
			b = append(b, bt.Opcode().Transport().String()...)
		}
		b = append(b, '"')
		b = appendKeyBool(b, "se", bt.SE())
		b = appendKeyBool(b, "migreq", bt.MigReq())
		b = appendKeyInt(b, "pad", uint64(bt.PadCount()))
		b = appendKeyInt(b, "tver", uint64(bt.TVer()))
		b = appendKeyInt(b, "pkey", uint64(bt.PKey()))
		b = appendKeyBool(b, "fecn", bt.FECN())
		b = appendKeyBool(b, "becn", bt.BECN())
		b = appendKeyInt(b, "resv6", uint64(bt.Resv6()))
		b = appendKeyInt(b, "dest_qp", uint64(bt.DestQP()))
		b = appendKeyBool(b, "ack_req", bt.AckReq())
		b = appendKeyInt(b, "resv7", uint64(bt.Resv7()))
		b = appendKeyInt(b, "psn", uint64(bt.PSN()))
		b = r.appendExtJSON(b)
	}
	if r.PayloadLen >= 0 {
		b = appendKeyInt(b, "payload_len", uint64(r.PayloadLen))
	}
	if r.MAD != nil {
		b = appendMADJSON(b, r.MAD)
	}
	if r.ICRCChecked() {
		b = appendKeyInt(b, "icrc", uint64(p.ICRC()))
		b = appendKeyBool(b, "icrc_ok", r.ICRCOK)
		if !r.ICRCOK {
			b = appendKeyInt(b, "icrc_computed", uint64(p.ComputeICRC()))
		}
	} else {
		b = append(b, `,"icrc":null,"icrc_ok":null`...)
	}
	switch r.Status {
	case StatusTruncated:
		b = appendTruncatedJSON(b, r.CapLen, r.OrigLen)
	case StatusMalformed:
		b = append(b, `,"malformed":`...)
		b = strconv.AppendQuote(b, r.Problem)
	}
	return append(b, '}')
}

func (r *Record) appendExtJSON(b []byte) []byte {
	p := &r.P
	if r.hdr(bth.HdrDCETH) {
		d := p.DCETH()
		b = append(b, `,"dceth":{"raw":"`...)
		b = hex.AppendEncode(b, d)
		b = append(b, '"')
		b = appendKeyInt(b, "flags", uint64(d.Flags()))
		b = appendKeyInt(b, "sender_qp", uint64(d.SenderQP()))
		b = appendKeyInt(b, "conn", uint64(d.Conn()))
		b = append(b, '}')
	}
	if r.hdr(bth.HdrRDETH) {
		b = append(b, `,"rdeth":{"ee_context":`...)
		b = strconv.AppendUint(b, uint64(p.RDETH().EEContext()), 10)
		b = append(b, '}')
	}
	if r.hdr(bth.HdrDETH) {
		d := p.DETH()
		b = append(b, `,"deth":{"qkey":`...)
		b = strconv.AppendUint(b, uint64(d.QKey()), 10)
		b = appendKeyInt(b, "src_qp", uint64(d.SrcQP()))
		b = append(b, '}')
	}
	if r.hdr(bth.HdrXRCETH) {
		b = append(b, `,"xrceth":{"xrc_srq":`...)
		b = strconv.AppendUint(b, uint64(p.XRCETH().XRCSRQ()), 10)
		b = append(b, '}')
	}
	if r.hdr(bth.HdrFETH) {
		b = appendKeyInt(b, "feth", uint64(binary.BigEndian.Uint32(p.Frame[p.BTHOff+p.Info.Offset(bth.HdrFETH):])))
	}
	if r.hdr(bth.HdrRETH) {
		e := p.RETH()
		b = append(b, `,"reth":{"va":`...)
		b = strconv.AppendUint(b, e.VA(), 10)
		b = appendKeyInt(b, "rkey", uint64(e.RKey()))
		b = appendKeyInt(b, "dma_len", uint64(e.DMALen()))
		b = append(b, '}')
	}
	if r.hdr(bth.HdrAtomicETH) {
		e := p.AtomicETH()
		b = append(b, `,"atomic_eth":{"va":`...)
		b = strconv.AppendUint(b, e.VA(), 10)
		b = appendKeyInt(b, "rkey", uint64(e.RKey()))
		b = appendKeyInt(b, "swap_add", e.SwapAdd())
		b = appendKeyInt(b, "compare", e.Compare())
		b = append(b, '}')
	}
	if r.hdr(bth.HdrAETH) {
		e := p.AETH()
		s := e.Syndrome()
		b = append(b, `,"aeth":{"syndrome":`...)
		b = strconv.AppendUint(b, uint64(s), 10)
		b = appendKeyInt(b, "msn", uint64(e.MSN()))
		b = append(b, `,"kind":"`...)
		b = append(b, s.Kind().String()...)
		b = append(b, '"')
		b = appendKeyInt(b, "code", uint64(s.Value()))
		b = append(b, `,"code_name":"`...)
		b = append(b, s.CodeName()...)
		b = append(b, '"')
		if s.Kind() == bth.AckKindRNR {
			b = appendKeyInt(b, "rnr_timer_us", uint64(bth.RNRTimerMicros[s.Value()]))
		}
		b = append(b, '}')
	}
	if r.hdr(bth.HdrAtomicAck) {
		b = append(b, `,"atomic_ack":{"orig":`...)
		b = strconv.AppendUint(b, p.AtomicAck().Orig(), 10)
		b = append(b, '}')
	}
	if r.hdr(bth.HdrImmDt) {
		b = appendKeyInt(b, "immdt", uint64(p.ImmDt().Value()))
	}
	if r.hdr(bth.HdrIETH) {
		b = appendKeyInt(b, "ieth", uint64(p.IETH().RKey()))
	}
	return b
}

// MACControl is one decoded MAC Control frame (EtherType 0x8808, with
// or without an 802.1Q tag): an IEEE 802.3x PAUSE, an 802.1Qbb PFC
// frame, or one of another opcode. DecodeMACControl fills it without
// allocating; F aliases the frame.
type MACControl struct {
	Frame   int // 1-based index in the file
	Time    time.Time
	Status  Status // StatusOK also for an opcode other than PAUSE and PFC
	CapLen  int
	OrigLen int
	// Len is the frame's length on the wire, from its Ethernet header.
	Len int
	F   pfc.Frame
}

// DecodeMACControl decodes frame number n (1-based) of a file as a MAC
// Control frame. It returns false when the frame is not one. A frame
// shorter than the 60-byte minimum is StatusMalformed (a receiver drops
// it), or StatusTruncated when only the capture cut it.
func DecodeMACControl(n int, f *Frame, rec *MACControl) bool {
	fr, err := pfc.Parse(f.Data)
	if err == pfc.ErrNotMACControl {
		return false
	}
	*rec = MACControl{Frame: n, Time: f.Time, CapLen: f.CapLen, OrigLen: f.OrigLen, Len: len(f.Data) + max(f.OrigLen-f.CapLen, 0), F: fr}
	if err == pfc.ErrTooShort {
		rec.Status = StatusMalformed
		if f.Truncated() && rec.Len >= pfc.MinLen {
			rec.Status = StatusTruncated
		}
	}
	return true
}

// AppendText appends the one-line text form of r (no newline): frame
// number, source MAC (then "> destination" when it is not the reserved
// 01:80:c2:00:00:01), vlan=VID when tagged, and
// "PAUSE quanta=N", "PFC prioN=Q ... (enable 0xEE)" naming the
// priorities whose enable bit is set, or "MAC_CONTROL opcode=0xNNNN
// (unsupported)"; then truncated or MALFORMED as for RoCE packets.
func (r *MACControl) AppendText(b []byte) []byte {
	f := &r.F
	b = strconv.AppendInt(b, int64(r.Frame), 10)
	b = append(b, ' ')
	b = appendMAC(b, f.Src())
	if !f.DstReserved() {
		b = append(b, " > "...)
		b = appendMAC(b, f.Dst())
	}
	if f.HasVLAN() {
		b = append(b, " vlan="...)
		b = strconv.AppendInt(b, int64(f.VLANTCI()&0xfff), 10)
	}
	switch op := f.Opcode(); {
	case op == pfc.OpPause:
		b = append(b, " PAUSE"...)
		if f.Complete() {
			b = append(b, " quanta="...)
			b = strconv.AppendUint(b, uint64(f.PauseTime()), 10)
		}
	case op == pfc.OpPFC:
		b = append(b, " PFC"...)
		if f.Complete() {
			for n := range pfc.Priorities {
				if q, ok := f.Pause(n); ok {
					b = append(b, " prio"...)
					b = strconv.AppendInt(b, int64(n), 10)
					b = append(b, '=')
					b = strconv.AppendUint(b, uint64(q), 10)
				}
			}
			b = append(b, " (enable "...)
			b = appendHex(b, uint64(f.Enable()), 2)
			b = append(b, ')')
		}
	case op == 0 && f.Err() != pfc.ErrUnknownOpcode: // cut before the opcode
		b = append(b, " MAC_CONTROL"...)
	default:
		b = append(b, " MAC_CONTROL opcode="...)
		b = appendHex(b, uint64(op), 4)
		b = append(b, " (unsupported)"...)
	}
	switch r.Status {
	case StatusTruncated:
		b = appendTruncated(b, r.CapLen, r.OrigLen)
	case StatusMalformed:
		b = append(b, " MALFORMED ("...)
		b = r.appendProblem(b)
		b = append(b, ')')
	}
	return b
}

// appendProblem appends why a malformed frame is: plain ASCII, no
// character JSON would escape.
func (r *MACControl) appendProblem(b []byte) []byte {
	b = append(b, "frame of "...)
	b = strconv.AppendInt(b, int64(r.Len), 10)
	b = append(b, " bytes is shorter than the "...)
	b = strconv.AppendInt(b, pfc.MinLen, 10)
	return append(b, "-byte minimum"...)
}

// AppendJSON appends r as one JSON object (no newline). Keys: frame,
// time, src_mac, dst_mac, vlan, mac_control (an object: opcode when
// captured, name PAUSE, PFC or unsupported; for PAUSE quanta, for PFC
// enable and prio_quanta, the eight times, when captured), and
// truncated (with cap_len, orig_len) or malformed when so. The key
// mac_control tells these objects from those of RoCE packets.
func (r *MACControl) AppendJSON(b []byte) []byte {
	f := &r.F
	b = append(b, `{"frame":`...)
	b = strconv.AppendInt(b, int64(r.Frame), 10)
	b = appendJSONTime(b, r.Time)
	b = append(b, `,"src_mac":"`...)
	b = appendMAC(b, f.Src())
	b = append(b, `","dst_mac":"`...)
	b = appendMAC(b, f.Dst())
	b = append(b, '"')
	if f.HasVLAN() {
		b = append(b, `,"vlan":{"pcp":`...)
		b = strconv.AppendInt(b, int64(f.VLANTCI()>>13), 10)
		b = append(b, `,"vid":`...)
		b = strconv.AppendInt(b, int64(f.VLANTCI()&0xfff), 10)
		b = append(b, '}')
	}
	b = append(b, `,"mac_control":{`...)
	switch op := f.Opcode(); {
	case op == 0 && f.Err() != pfc.ErrUnknownOpcode:
	case op == pfc.OpPause:
		b = append(b, `"opcode":1,"name":"PAUSE"`...)
		if f.Complete() {
			b = appendKeyInt(b, "quanta", uint64(f.PauseTime()))
		}
	case op == pfc.OpPFC:
		b = append(b, `"opcode":257,"name":"PFC"`...)
		if f.Complete() {
			b = appendKeyInt(b, "enable", uint64(f.Enable()))
			b = append(b, `,"prio_quanta":[`...)
			for n := range pfc.Priorities {
				if n > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendUint(b, uint64(f.Time(n)), 10)
			}
			b = append(b, ']')
		}
	default:
		b = append(b, `"opcode":`...)
		b = strconv.AppendUint(b, uint64(op), 10)
		b = append(b, `,"name":"unsupported"`...)
	}
	b = append(b, '}')
	switch r.Status {
	case StatusTruncated:
		b = appendTruncatedJSON(b, r.CapLen, r.OrigLen)
	case StatusMalformed:
		b = append(b, `,"malformed":"`...)
		b = r.appendProblem(b)
		b = append(b, '"')
	}
	return append(b, '}')
}

// appendJSONTime appends the "time" key, unless t is zero: seconds with
// nanosecond digits, written exactly (a float64 holds about 16
// significant digits, a timestamp needs 19).
func appendJSONTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return b
	}
	b = append(b, `,"time":`...)
	sec, ns := t.Unix(), t.Nanosecond()
	if sec < 0 && ns > 0 {
		b = append(b, '-')
		sec, ns = -sec-1, 1e9-ns
	}
	b = strconv.AppendInt(b, sec, 10)
	b = append(b, '.')
	var tmp [16]byte
	frac := strconv.AppendInt(tmp[:0], int64(ns)+1e9, 10)
	return append(b, frac[1:]...)
}

func appendKeyInt(b []byte, k string, v uint64) []byte {
	b = append(b, ',', '"')
	b = append(b, k...)
	b = append(b, '"', ':')
	return strconv.AppendUint(b, v, 10)
}

func appendKeyBool(b []byte, k string, v bool) []byte {
	b = append(b, ',', '"')
	b = append(b, k...)
	b = append(b, '"', ':')
	return strconv.AppendBool(b, v)
}

func appendBit(b []byte, v bool) []byte {
	if v {
		return append(b, '1')
	}
	return append(b, '0')
}

// appendHex appends v as 0x and at least w hex digits.
func appendHex(b []byte, v uint64, w int) []byte {
	const digits = "0123456789abcdef"
	b = append(b, '0', 'x')
	n := 1
	for x := v >> 4; x != 0; x >>= 4 {
		n++
	}
	for i := n; i < w; i++ {
		b = append(b, '0')
	}
	for i := n - 1; i >= 0; i-- {
		b = append(b, digits[v>>(4*uint(i))&15])
	}
	return b
}

func appendMAC(b []byte, m [6]byte) []byte {
	const digits = "0123456789abcdef"
	for i, c := range m {
		if i > 0 {
			b = append(b, ':')
		}
		b = append(b, digits[c>>4], digits[c&15])
	}
	return b
}

// appendAddr appends an address; IPv4-mapped GIDs keep their ::ffff: form.
func appendAddr(b []byte, a netip.Addr) []byte { return a.AppendTo(b) }

func appendAddrPort(b []byte, a netip.Addr, port uint16) []byte {
	if a.Is6() {
		b = append(b, '[')
		b = a.AppendTo(b)
		b = append(b, ']')
	} else {
		b = a.AppendTo(b)
	}
	b = append(b, ':')
	return strconv.AppendUint(b, uint64(port), 10)
}

// appendTruncated appends the status of a frame the capture cut short.
func appendTruncated(b []byte, capLen, origLen int) []byte {
	b = append(b, " truncated ("...)
	b = strconv.AppendInt(b, int64(capLen), 10)
	b = append(b, " of "...)
	b = strconv.AppendInt(b, int64(origLen), 10)
	return append(b, " bytes captured)"...)
}

// appendTruncatedJSON appends the JSON keys of a frame the capture cut
// short.
func appendTruncatedJSON(b []byte, capLen, origLen int) []byte {
	b = append(b, `,"truncated":true,"cap_len":`...)
	b = strconv.AppendInt(b, int64(capLen), 10)
	b = append(b, `,"orig_len":`...)
	return strconv.AppendInt(b, int64(origLen), 10)
}
