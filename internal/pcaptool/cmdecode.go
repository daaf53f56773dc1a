package pcaptool

import (
	"net/netip"
	"strconv"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/mad"
)

// appendMADText appends the text form of a MAD: for a CM message its
// name and what ties an exchange together, for instance
//
//	CM_REQ(tid=0x000000021c9ff5db local_comm=0xdbf59f1c qpn=0x000012 psn=0x7094bb
//	  service_id=0x0000000001061c06 ps=tcp port=7174 mtu=1024 src=192.0.2.2:47877 dst=192.0.2.1:7174)
//
// (on one line). The destination port of src/dst is the service ID's:
// rdma_cm's private data header carries only the source port.
func appendMADText(b []byte, m mad.MAD) []byte {
	if !m.IsCM() {
		b = append(b, " MAD(class="...)
		b = append(b, m.Class().String()...)
		b = append(b, " method="...)
		b = append(b, m.Method().String()...)
		b = append(b, " attr="...)
		b = appendHex(b, uint64(m.AttrID()), 4)
		b = append(b, " tid="...)
		b = appendHex(b, m.TID(), 16)
		return append(b, ')')
	}
	name := m.AttrID().CMName()
	if name == "" {
		b = append(b, " CM(attr="...)
		b = append(b, m.AttrID().String()...)
		b = append(b, " method="...)
		b = append(b, m.Method().String()...)
		b = append(b, " tid="...)
		b = appendHex(b, m.TID(), 16)
		return append(b, ')')
	}
	b = append(b, " CM_"...)
	b = append(b, name...)
	b = append(b, "(tid="...)
	b = appendHex(b, m.TID(), 16)
	d := m.Data()
	switch m.AttrID() {
	case mad.AttrREQ:
		r := mad.REQ(d)
		b = appendComm(b, "local_comm=", r.LocalCommID())
		b = appendQPNPSN(b, r.LocalQPN(), r.StartingPSN())
		b = appendServiceID(b, r.ServiceID())
		if r.TransportType() != mad.TransportRC {
			b = append(b, " transport="...)
			b = append(b, r.TransportType().String()...)
		}
		b = append(b, " mtu="...)
		b = strconv.AppendInt(b, int64(r.PathMTU().Bytes()), 10)
		if h, ok := r.CMAHeader(); ok {
			b = appendCMA(b, h, r.ServiceID().Port())
		}
	case mad.AttrREP:
		r := mad.REP(d)
		b = appendComms(b, r.LocalCommID(), r.RemoteCommID())
		b = appendQPNPSN(b, r.LocalQPN(), r.StartingPSN())
	case mad.AttrREJ:
		r := mad.REJ(d)
		b = appendComms(b, r.LocalCommID(), r.RemoteCommID())
		b = append(b, " rejected="...)
		b = append(b, r.MessageRejected().String()...)
		b = append(b, " reason="...)
		b = strconv.AppendInt(b, int64(r.Reason()), 10)
		b = append(b, " ("...)
		b = append(b, r.Reason().String()...)
		b = append(b, ')')
	case mad.AttrMRA:
		r := mad.MRA(d)
		b = appendComms(b, r.LocalCommID(), r.RemoteCommID())
		b = append(b, " mraed="...)
		b = append(b, r.MessageMRAed().String()...)
		b = append(b, " service_timeout="...)
		b = strconv.AppendInt(b, int64(r.ServiceTimeout()), 10)
	case mad.AttrRTU:
		r := mad.RTU(d)
		b = appendComms(b, r.LocalCommID(), r.RemoteCommID())
	case mad.AttrDREQ:
		r := mad.DREQ(d)
		b = appendComms(b, r.LocalCommID(), r.RemoteCommID())
		b = append(b, " remote_qpn="...)
		b = appendHex(b, uint64(r.RemoteQPN()), 6)
	case mad.AttrDREP:
		r := mad.DREP(d)
		b = appendComms(b, r.LocalCommID(), r.RemoteCommID())
	case mad.AttrLAP:
		r := mad.LAP(d)
		b = appendComms(b, r.LocalCommID(), r.RemoteCommID())
		b = append(b, " remote_qpn="...)
		b = appendHex(b, uint64(r.RemoteQPN()), 6)
	case mad.AttrAPR:
		r := mad.APR(d)
		b = appendComms(b, r.LocalCommID(), r.RemoteCommID())
		b = append(b, " status="...)
		b = strconv.AppendInt(b, int64(r.Status()), 10)
	case mad.AttrSIDRREQ:
		r := mad.SIDRREQ(d)
		b = appendComm(b, "request_id=", r.RequestID())
		b = appendServiceID(b, r.ServiceID())
		if h, ok := r.CMAHeader(); ok {
			b = appendCMA(b, h, r.ServiceID().Port())
		}
	case mad.AttrSIDRREP:
		r := mad.SIDRREP(d)
		b = appendComm(b, "request_id=", r.RequestID())
		b = append(b, " status="...)
		b = append(b, r.Status().String()...)
		b = append(b, " qpn="...)
		b = appendHex(b, uint64(r.QPN()), 6)
		b = append(b, " qkey="...)
		b = appendHex(b, uint64(r.QKey()), 8)
		b = appendServiceID(b, r.ServiceID())
	}
	if m.Method() != mad.MethodSend {
		b = append(b, " method="...)
		b = append(b, m.Method().String()...)
	}
	if m.Status() != 0 {
		b = append(b, " status="...)
		b = appendHex(b, uint64(m.Status()), 4)
	}
	return append(b, ')')
}

func appendComm(b []byte, key string, id uint32) []byte {
	b = append(b, ' ')
	b = append(b, key...)
	return appendHex(b, uint64(id), 8)
}

func appendComms(b []byte, local, remote uint32) []byte {
	b = appendComm(b, "local_comm=", local)
	return appendComm(b, "remote_comm=", remote)
}

func appendQPNPSN(b []byte, qpn uint32, psn bth.PSN) []byte {
	b = append(b, " qpn="...)
	b = appendHex(b, uint64(qpn), 6)
	b = append(b, " psn="...)
	return appendHex(b, uint64(psn), 6)
}

func appendServiceID(b []byte, s mad.ServiceID) []byte {
	b = append(b, " service_id="...)
	b = appendHex(b, uint64(s), 16)
	if ps, ok := s.PortSpace(); ok {
		b = append(b, " ps="...)
		b = append(b, ps.String()...)
		b = append(b, " port="...)
		b = strconv.AppendUint(b, uint64(s.Port()), 10)
	}
	return b
}

func appendCMA(b []byte, h mad.CMAHeader, dport uint16) []byte {
	b = append(b, " src="...)
	b = appendAddrPort(b, h.SrcIP(), h.SrcPort())
	b = append(b, " dst="...)
	return appendAddrPort(b, h.DstIP(), dport)
}

// appendMADJSON appends the "mad" member of a record's JSON object:
// the common header (base_version, class, class_version, method,
// status, class_specific, tid, attr_id, attr_mod) and, for a CM
// message, a "cm" object with its name ("message": "REQ") and fields.
func appendMADJSON(b []byte, m mad.MAD) []byte {
	b = append(b, `,"mad":{"base_version":`...)
	b = strconv.AppendUint(b, uint64(m.BaseVersion()), 10)
	b = appendKeyInt(b, "class", uint64(m.Class()))
	b = appendKeyInt(b, "class_version", uint64(m.ClassVersion()))
	b = appendKeyInt(b, "method", uint64(m.Method()))
	b = appendKeyInt(b, "status", uint64(m.Status()))
	b = appendKeyInt(b, "class_specific", uint64(m.ClassSpecific()))
	b = appendKeyInt(b, "tid", m.TID())
	b = appendKeyInt(b, "attr_id", uint64(m.AttrID()))
	b = appendKeyInt(b, "attr_mod", uint64(m.AttrModifier()))
	if name := m.AttrID().CMName(); m.IsCM() && name != "" {
		b = append(b, `,"cm":{"message":`...)
		b = strconv.AppendQuote(b, name)
		b = appendCMJSON(b, m)
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendCMJSON appends the members of a CM message's JSON object,
// each with a leading comma.
func appendCMJSON(b []byte, m mad.MAD) []byte {
	d := m.Data()
	switch m.AttrID() {
	case mad.AttrREQ:
		r := mad.REQ(d)
		b = appendKeyInt(b, "local_comm_id", uint64(r.LocalCommID()))
		b = appendServiceIDJSON(b, r.ServiceID())
		b = appendKeyInt(b, "local_qpn", uint64(r.LocalQPN()))
		b = appendKeyInt(b, "starting_psn", uint64(r.StartingPSN()))
		b = appendKeyStr(b, "transport", r.TransportType().String())
		b = appendKeyInt(b, "path_mtu", uint64(r.PathMTU().Bytes()))
		b = appendKeyInt(b, "responder_resources", uint64(r.ResponderResources()))
		b = appendKeyInt(b, "initiator_depth", uint64(r.InitiatorDepth()))
		b = appendKeyInt(b, "retry_count", uint64(r.RetryCount()))
		b = appendKeyInt(b, "rnr_retry_count", uint64(r.RNRRetryCount()))
		b = appendKeyInt(b, "local_ca_guid", r.LocalCAGUID())
		p := r.Primary()
		b = appendKeyAddr(b, "local_gid", p.LocalGID())
		b = appendKeyAddr(b, "remote_gid", p.RemoteGID())
		if h, ok := r.CMAHeader(); ok {
			b = appendCMAJSON(b, h, r.ServiceID().Port())
		}
	case mad.AttrREP:
		r := mad.REP(d)
		b = appendCommsJSON(b, r.LocalCommID(), r.RemoteCommID())
		b = appendKeyInt(b, "local_qpn", uint64(r.LocalQPN()))
		b = appendKeyInt(b, "starting_psn", uint64(r.StartingPSN()))
		b = appendKeyInt(b, "responder_resources", uint64(r.ResponderResources()))
		b = appendKeyInt(b, "initiator_depth", uint64(r.InitiatorDepth()))
		b = appendKeyInt(b, "rnr_retry_count", uint64(r.RNRRetryCount()))
		b = appendKeyInt(b, "local_ca_guid", r.LocalCAGUID())
	case mad.AttrREJ:
		r := mad.REJ(d)
		b = appendCommsJSON(b, r.LocalCommID(), r.RemoteCommID())
		b = appendKeyStr(b, "message_rejected", r.MessageRejected().String())
		b = appendKeyInt(b, "reason", uint64(r.Reason()))
		b = appendKeyStr(b, "reason_name", r.Reason().String())
	case mad.AttrMRA:
		r := mad.MRA(d)
		b = appendCommsJSON(b, r.LocalCommID(), r.RemoteCommID())
		b = appendKeyStr(b, "message_mraed", r.MessageMRAed().String())
		b = appendKeyInt(b, "service_timeout", uint64(r.ServiceTimeout()))
	case mad.AttrRTU:
		r := mad.RTU(d)
		b = appendCommsJSON(b, r.LocalCommID(), r.RemoteCommID())
	case mad.AttrDREQ:
		r := mad.DREQ(d)
		b = appendCommsJSON(b, r.LocalCommID(), r.RemoteCommID())
		b = appendKeyInt(b, "remote_qpn", uint64(r.RemoteQPN()))
	case mad.AttrDREP:
		r := mad.DREP(d)
		b = appendCommsJSON(b, r.LocalCommID(), r.RemoteCommID())
	case mad.AttrLAP:
		r := mad.LAP(d)
		b = appendCommsJSON(b, r.LocalCommID(), r.RemoteCommID())
		b = appendKeyInt(b, "remote_qpn", uint64(r.RemoteQPN()))
	case mad.AttrAPR:
		r := mad.APR(d)
		b = appendCommsJSON(b, r.LocalCommID(), r.RemoteCommID())
		b = appendKeyInt(b, "status", uint64(r.Status()))
	case mad.AttrSIDRREQ:
		r := mad.SIDRREQ(d)
		b = appendKeyInt(b, "request_id", uint64(r.RequestID()))
		b = appendServiceIDJSON(b, r.ServiceID())
		b = appendKeyInt(b, "pkey", uint64(r.PKey()))
		if h, ok := r.CMAHeader(); ok {
			b = appendCMAJSON(b, h, r.ServiceID().Port())
		}
	case mad.AttrSIDRREP:
		r := mad.SIDRREP(d)
		b = appendKeyInt(b, "request_id", uint64(r.RequestID()))
		b = appendKeyInt(b, "status", uint64(r.Status()))
		b = appendKeyStr(b, "status_name", r.Status().String())
		b = appendKeyInt(b, "qpn", uint64(r.QPN()))
		b = appendKeyInt(b, "qkey", uint64(r.QKey()))
		b = appendServiceIDJSON(b, r.ServiceID())
	}
	return b
}

func appendCommsJSON(b []byte, local, remote uint32) []byte {
	b = appendKeyInt(b, "local_comm_id", uint64(local))
	return appendKeyInt(b, "remote_comm_id", uint64(remote))
}

func appendServiceIDJSON(b []byte, s mad.ServiceID) []byte {
	b = appendKeyInt(b, "service_id", uint64(s))
	if ps, ok := s.PortSpace(); ok {
		b = appendKeyStr(b, "port_space", ps.String())
		b = appendKeyInt(b, "port", uint64(s.Port()))
	}
	return b
}

func appendCMAJSON(b []byte, h mad.CMAHeader, dport uint16) []byte {
	b = appendKeyAddr(b, "src_ip", h.SrcIP())
	b = appendKeyInt(b, "src_port", uint64(h.SrcPort()))
	b = appendKeyAddr(b, "dst_ip", h.DstIP())
	return appendKeyInt(b, "dst_port", uint64(dport))
}

func appendKeyStr(b []byte, k, v string) []byte {
	b = append(b, ',', '"')
	b = append(b, k...)
	b = append(b, `":`...)
	return strconv.AppendQuote(b, v)
}

func appendKeyAddr(b []byte, k string, a netip.Addr) []byte {
	b = append(b, ',', '"')
	b = append(b, k...)
	b = append(b, `":"`...)
	b = appendAddr(b, a)
	return append(b, '"')
}
