package pcaptool

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/internal/pcaptool/pcaptest"
	"github.com/uroce/uroce/mad"
)

// cm returns a CM MAD from A (192.0.2.2) or B (192.0.2.1), QP1 to QP1.
func (r *rig) cm(fromA bool, attr mad.AttrID, tid uint64, data interface{ Encode([]byte) }) []byte {
	r.t.Helper()
	var m [mad.Len]byte
	h := mad.CMHeader(attr, tid)
	h.Encode(m[:])
	data.Encode(m[mad.HeaderLen:])
	psn := &r.madPSN[0]
	if !fromA && !r.loop { // a host has one QP1
		psn = &r.madPSN[1]
	}
	f := r.frame(fromA, bth.BTHFields{Opcode: bth.OpUDSendOnly, DestQP: mad.GSIQPN, PSN: *psn, AckReq: true}, m[:], func(h *bth.Headers) {
		h.QKey, h.SrcQP, h.SrcPort = mad.GSIQKey, mad.GSIQPN, bth.UDSourcePort(mad.GSIQPN)
	})
	*psn = psn.Next()
	return f
}

// cmExchange is an rdma_cm connection from A (active, QP 0x11) to B
// (passive, QP 0x12): the messages that set it up and tear it down.
// A's requests start at the REP's PSN, the rig's first one.
type cmExchange struct {
	tid, dtid uint64
	req       mad.REQFields
	rep       mad.REPFields
	rtu       mad.RTUFields
	dreq      mad.DREQFields
	drep      mad.DREPFields
}

func newExchange(r *rig) *cmExchange {
	x := &cmExchange{tid: 0x21c9ff5db, dtid: 0x21c9ff5db}
	x.req = mad.REQFields{LocalCommID: 0xa1a1a1a1, ServiceID: mad.MakeServiceID(mad.PortSpaceTCP, 7174), LocalCAGUID: 0x505400fffe000202,
		LocalQPN: 0x11, ResponderResources: 1, InitiatorDepth: 1, RemoteCMResponseTimeout: 20, StartingPSN: 0x7094bb,
		LocalCMResponseTimeout: 20, RetryCount: 7, PKey: 0xffff, PathMTU: mad.MTU1024, RNRRetryCount: 7, MaxCMRetries: 15,
		Primary: mad.PathFields{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: netip.MustParseAddr("192.0.2.2"),
			RemoteGID: netip.MustParseAddr("192.0.2.1"), HopLimit: 64, LocalACKTimeout: 19}}
	h := mad.CMAHeaderFields{IPVersion: 4, SrcPort: 47877, SrcIP: netip.MustParseAddr("192.0.2.2"), DstIP: netip.MustParseAddr("192.0.2.1")}
	h.Encode(x.req.PrivateData[:])
	x.rep = mad.REPFields{LocalCommID: 0xb1b1b1b1, RemoteCommID: 0xa1a1a1a1, LocalQPN: 0x12, StartingPSN: r.psn,
		ResponderResources: 1, InitiatorDepth: 1, TargetACKDelay: 15, RNRRetryCount: 7, LocalCAGUID: 0x505400fffe000201}
	x.rtu = mad.RTUFields{LocalCommID: 0xa1a1a1a1, RemoteCommID: 0xb1b1b1b1}
	x.dreq = mad.DREQFields{LocalCommID: 0xa1a1a1a1, RemoteCommID: 0xb1b1b1b1, RemoteQPN: 0x12}
	x.drep = mad.DREPFields{LocalCommID: 0xb1b1b1b1, RemoteCommID: 0xa1a1a1a1}
	return x
}

// setup returns REQ, REP and RTU; teardown DREQ and DREP.
func (x *cmExchange) setup(r *rig) [][]byte {
	return [][]byte{r.cm(true, mad.AttrREQ, x.tid, &x.req), r.cm(false, mad.AttrREP, x.tid, &x.rep), r.cm(true, mad.AttrRTU, x.tid, &x.rtu)}
}

func (x *cmExchange) teardown(r *rig) [][]byte {
	return [][]byte{r.cm(true, mad.AttrDREQ, x.dtid, &x.dreq), r.cm(false, mad.AttrDREP, x.dtid, &x.drep)}
}

// traffic is a SEND from A and its ACK.
func traffic(r *rig) [][]byte {
	s := r.send(64, 1024)
	return append(s, r.ack(r.psn.Add(-1), bth.ACKSyndrome(31), 1))
}

// verifyCM verifies frames as a capture, Finish included, and returns
// the findings of the CM checks. (Crafted captures that leave a message
// out or put one elsewhere have PSN gaps on QP1 too.)
func verifyCM(t *testing.T, frames [][]byte) ([]*Finding, Counts) {
	t.Helper()
	var got []*Finding
	v := NewVerifier(func(f *Finding) {
		if strings.HasPrefix(f.Check, "cm") {
			got = append(got, f)
		}
	})
	if err := readFile(pcaptest.WritePcap(t, pcaptest.Frames(frames...)), v.Frame); err != nil {
		t.Fatal(err)
	}
	v.Finish()
	v.Finish() // a second call adds nothing
	return got, v.Counts
}

func TestCMVerifyClean(t *testing.T) {
	r := newRig(t)
	x := newExchange(r)
	frames := flat(x.setup(r), traffic(r), x.teardown(r))
	got, c := verifyCM(t, frames)
	checkFindings(t, got, nil)
	if c.Flow != 0 || c.Notes != 0 || c.Errors != 0 {
		t.Errorf("counts %+v", c) // no finding of any check
	}
	// With an MRA for the REQ, resends of REQ and DREQ, and the passive
	// side closing the connection: still complete.
	r = newRig(t)
	x = newExchange(r)
	x.dreq, x.drep = mad.DREQFields{LocalCommID: 0xb1b1b1b1, RemoteCommID: 0xa1a1a1a1, RemoteQPN: 0x11}, mad.DREPFields{LocalCommID: 0xa1a1a1a1, RemoteCommID: 0xb1b1b1b1}
	s := x.setup(r)
	mra := r.cm(false, mad.AttrMRA, x.tid, &mad.MRAFields{LocalCommID: 0xb1b1b1b1, RemoteCommID: 0xa1a1a1a1, MessageMRAed: mad.MsgREQ, ServiceTimeout: 20})
	frames = flat([][]byte{s[0], mra, r.cm(true, mad.AttrREQ, x.tid, &x.req)}, s[1:], traffic(r),
		[][]byte{r.cm(false, mad.AttrDREQ, 7, &x.dreq), r.cm(false, mad.AttrDREQ, 7, &x.dreq), r.cm(true, mad.AttrDREP, 7, &x.drep)})
	got, _ = verifyCM(t, frames)
	checkFindings(t, got, []wantFinding{
		{3, SevNote, "cm", "REQ resent (first at frame 1)"},
		{9, SevNote, "cm", "DREQ resent (first at frame 8)"},
	})
}

// TestCMVerifyLoopback follows a connection whose two sides are one
// host: the communication IDs, not the addresses, tell them apart.
func TestCMVerifyLoopback(t *testing.T) {
	r := newRig(t)
	r.loop = true
	x := newExchange(r)
	x.req.Primary.RemoteGID = x.req.Primary.LocalGID
	frames := flat(x.setup(r), traffic(r), x.teardown(r))
	got, c := verifyCM(t, frames)
	checkFindings(t, got, nil)
	if c.Flow != 0 || c.Notes != 0 {
		t.Errorf("counts %+v", c)
	}
	r = newRig(t)
	r.loop = true
	x = newExchange(r)
	x.req.Primary.RemoteGID = x.req.Primary.LocalGID
	x.rep.StartingPSN++
	got, _ = verifyCM(t, flat(x.setup(r), traffic(r), x.teardown(r)[:1]))
	checkFindings(t, got, []wantFinding{
		{4, SevFlow, "cm_traffic", "first request at psn 0xfffffd, the REP at frame 2 set starting psn 0xfffffe"},
		{6, SevFlow, "cm", "DREQ (local comm ID 0xa1a1a1a1) got no DREP"},
	})
}

func TestCMVerifyReject(t *testing.T) {
	// A REQ to a port nobody listens on, rejected as rping's first one
	// is (local comm ID 0), then a second REQ that is accepted.
	r := newRig(t)
	x := newExchange(r)
	first := x.req
	first.LocalCommID, first.LocalQPN = 0xa0a0a0a0, 0x10
	rej := mad.REJFields{RemoteCommID: 0xa0a0a0a0, MessageRejected: mad.MsgREQ, Reason: mad.RejInvalidServiceID}
	frames := flat([][]byte{r.cm(true, mad.AttrREQ, x.tid-1, &first), r.cm(false, mad.AttrREJ, x.tid-1, &rej)}, x.setup(r), traffic(r), x.teardown(r))
	got, _ := verifyCM(t, frames)
	checkFindings(t, got, nil)

	// The active side rejects the REP instead of sending an RTU.
	r = newRig(t)
	x = newExchange(r)
	s := x.setup(r)
	rej = mad.REJFields{LocalCommID: 0xa1a1a1a1, RemoteCommID: 0xb1b1b1b1, MessageRejected: mad.MsgREP, Reason: mad.RejConsumer}
	got, _ = verifyCM(t, [][]byte{s[0], s[1], r.cm(true, mad.AttrREJ, x.tid, &rej)})
	checkFindings(t, got, nil)
}

// TestCMVerifyInconsistent crafts exchanges that break one rule each.
func TestCMVerifyInconsistent(t *testing.T) {
	for _, c := range []struct {
		name   string
		frames func(r *rig, x *cmExchange) [][]byte
		want   []wantFinding
	}{
		{"no answer", func(r *rig, x *cmExchange) [][]byte { return x.setup(r)[:1] },
			[]wantFinding{{1, SevFlow, "cm", "REQ (local comm ID 0xa1a1a1a1) got neither REP nor REJ"}}},
		{"no RTU", func(r *rig, x *cmExchange) [][]byte { return x.setup(r)[:2] },
			[]wantFinding{{2, SevFlow, "cm", "REP (local comm ID 0xb1b1b1b1) got no RTU"}}},
		{"no DREP", func(r *rig, x *cmExchange) [][]byte { return flat(x.setup(r), x.teardown(r)[:1]) },
			[]wantFinding{{4, SevFlow, "cm", "DREQ (local comm ID 0xa1a1a1a1) got no DREP"}}},
		{"REP transaction ID", func(r *rig, x *cmExchange) [][]byte {
			s := x.setup(r)
			s[1] = r.cm(false, mad.AttrREP, x.tid+1, &x.rep)
			return s
		}, []wantFinding{{2, SevFlow, "cm", "REP transaction ID 0x000000021c9ff5dc, the REQ at frame 1 has 0x000000021c9ff5db"}}},
		{"RTU transaction ID", func(r *rig, x *cmExchange) [][]byte {
			s := x.setup(r)
			s[2] = r.cm(true, mad.AttrRTU, 5, &x.rtu)
			return s
		}, []wantFinding{{3, SevFlow, "cm", "RTU transaction ID 0x0000000000000005"}}},
		{"DREP transaction ID", func(r *rig, x *cmExchange) [][]byte {
			t := x.teardown(r)
			t[1] = r.cm(false, mad.AttrDREP, 9, &x.drep)
			return flat(x.setup(r), t)
		}, []wantFinding{
			{4, SevFlow, "cm", "DREQ (local comm ID 0xa1a1a1a1) got no DREP"},
			{5, SevFlow, "cm", "DREP transaction ID 0x0000000000000009, the DREQ at frame 4 has"},
		}},
		{"REP to an unknown comm ID", func(r *rig, x *cmExchange) [][]byte {
			x.rep.RemoteCommID = 0xdead
			return x.setup(r)
		}, []wantFinding{
			{1, SevFlow, "cm", "REQ (local comm ID 0xa1a1a1a1) got neither REP nor REJ"},
			{2, SevFlow, "cm", "REP to remote comm ID 0x0000dead answers no REQ"},
			{3, SevFlow, "cm", "RTU to remote comm ID 0xb1b1b1b1 belongs to no connection"},
		}},
		{"RTU local comm ID", func(r *rig, x *cmExchange) [][]byte {
			x.rtu.LocalCommID = 0xa2
			return x.setup(r)
		}, []wantFinding{{3, SevFlow, "cm", "RTU local comm ID 0x000000a2, the sender's is 0xa1a1a1a1"}}},
		{"DREQ remote QPN", func(r *rig, x *cmExchange) [][]byte {
			x.dreq.RemoteQPN = 0x13
			return flat(x.setup(r), x.teardown(r))
		}, []wantFinding{{4, SevFlow, "cm", "DREQ names remote QPN 0x000013, the receiver's QPN is 0x000012"}}},
		{"DREP without DREQ", func(r *rig, x *cmExchange) [][]byte { return flat(x.setup(r), x.teardown(r)[1:]) },
			[]wantFinding{{4, SevFlow, "cm", "DREP answers no DREQ"}}},
		{"DREQ before the REP", func(r *rig, x *cmExchange) [][]byte {
			s := x.setup(r)
			return [][]byte{s[0], r.cm(true, mad.AttrREJ, x.tid, &mad.REJFields{LocalCommID: 0xa1a1a1a1, RemoteCommID: 0xb1, MessageRejected: mad.MsgOther, Reason: mad.RejTimeout}),
				r.cm(false, mad.AttrDREQ, 3, &mad.DREQFields{LocalCommID: 0xb1, RemoteCommID: 0xa1a1a1a1, RemoteQPN: 0x11})}
		}, []wantFinding{
			{1, SevFlow, "cm", "REQ (local comm ID 0xa1a1a1a1) got neither REP nor REJ"},
			{2, SevFlow, "cm", "REJ to remote comm ID 0x000000b1 belongs to no connection"},
			{3, SevFlow, "cm", "DREQ for a connection that was not established"},
			{3, SevFlow, "cm", "DREQ (local comm ID 0x000000b1) got no DREP"},
		}},
		{"active side rejects its own REQ", func(r *rig, x *cmExchange) [][]byte {
			s := x.setup(r)
			return [][]byte{s[0], s[1], r.cm(true, mad.AttrREJ, x.tid, &mad.REJFields{LocalCommID: 0xa1a1a1a1, RemoteCommID: 0xb1b1b1b1, MessageRejected: mad.MsgREQ})}
		}, []wantFinding{{3, SevFlow, "cm", "the active side rejects a REQ"}}},
		{"MRA from the wrong side", func(r *rig, x *cmExchange) [][]byte {
			s := x.setup(r)
			mra := r.cm(true, mad.AttrMRA, x.tid, &mad.MRAFields{LocalCommID: 0xa1a1a1a1, RemoteCommID: 0xb1b1b1b1, MessageMRAed: mad.MsgREQ})
			return [][]byte{s[0], s[1], mra, s[2]}
		}, []wantFinding{{3, SevFlow, "cm", "the active side acknowledges a REQ with an MRA"}}},
		{"REP gives more initiator depth", func(r *rig, x *cmExchange) [][]byte {
			x.rep.InitiatorDepth = 4
			return x.setup(r)
		}, []wantFinding{{2, SevFlow, "cm", "REP initiator depth 4 exceeds the responder resources 1 of the REQ at frame 1"}}},
		{"REQ GIDs", func(r *rig, x *cmExchange) [][]byte {
			x.req.Primary.RemoteGID = netip.MustParseAddr("192.0.2.9")
			return x.setup(r)
		}, []wantFinding{{1, SevFlow, "cm", "REQ primary path GIDs are not the packet's addresses 192.0.2.2 > 192.0.2.1"}}},
		{"class version", func(r *rig, x *cmExchange) [][]byte {
			s := x.setup(r)
			s[2] = bytes.Clone(s[2])
			var p bth.Packet
			bth.Parse(s[2], &p)
			p.Frame[p.PayloadAt+2] = 1
			reseal(&p)
			return s
		}, []wantFinding{{3, SevFlow, "cm", "RTU with class version 1 and method Send"}}},
		{"second REP", func(r *rig, x *cmExchange) [][]byte {
			s := x.setup(r)
			rep2 := x.rep
			rep2.LocalCommID = 0xb2
			return [][]byte{s[0], s[1], r.cm(false, mad.AttrREP, x.tid, &rep2), s[2]}
		}, []wantFinding{{3, SevFlow, "cm", "second REP for the REQ at frame 1 (the first at frame 2)"}}},
		{"REQ reusing a comm ID", func(r *rig, x *cmExchange) [][]byte {
			return flat(x.setup(r), x.teardown(r), [][]byte{r.cm(true, mad.AttrREQ, x.tid+9, &x.req)})
		}, []wantFinding{
			{6, SevFlow, "cm", "REQ reuses local comm ID 0xa1a1a1a1 of the REQ at frame 1"},
			{6, SevFlow, "cm", "got neither REP nor REJ"},
		}},
		// The traffic of the connection.
		{"A starts at another PSN", func(r *rig, x *cmExchange) [][]byte {
			x.rep.StartingPSN = 0x123456
			return flat(x.setup(r), traffic(r))
		}, []wantFinding{{4, SevFlow, "cm_traffic", "first request at psn 0xfffffd, the REP at frame 2 set starting psn 0x123456"}}},
		{"B starts at another PSN", func(r *rig, x *cmExchange) [][]byte {
			s := x.setup(r)
			f := r.frame(false, bth.BTHFields{Opcode: bth.OpSendOnly, DestQP: 0x11, PSN: 0x7094bc, AckReq: true}, []byte("b"), nil)
			return flat(s, [][]byte{f})
		}, []wantFinding{{4, SevFlow, "cm_traffic", "first request at psn 0x7094bc, the REQ at frame 1 set starting psn 0x7094bb"}}},
		{"traffic to another QP", func(r *rig, x *cmExchange) [][]byte {
			x.rep.LocalQPN = 0x13
			x.dreq.RemoteQPN = 0x13
			return flat(x.setup(r), traffic(r))
		}, []wantFinding{{4, SevFlow, "cm_traffic", "packets to qp 0x000012, which no CM exchange in the capture set up between these hosts"}}},
		{"UC traffic on an RC connection", func(r *rig, x *cmExchange) [][]byte {
			s := x.setup(r)
			f := r.frame(true, bth.BTHFields{Opcode: bth.OpSendOnly.On(bth.TransportUC), DestQP: 0x12, PSN: r.psn}, []byte("a"), nil)
			return flat(s, [][]byte{f})
		}, []wantFinding{{4, SevFlow, "cm_traffic", "UC traffic on a connection the REQ at frame 1 asked for as RC"}}},
		{"path MTU", func(r *rig, x *cmExchange) [][]byte {
			x.req.PathMTU = mad.MTU2048
			return flat(x.setup(r), r.send(3000, 1024))
		}, []wantFinding{{4, SevFlow, "cm_traffic", "path mtu 1024, the REQ at frame 1 set 2048"}}},
		{"SIDR", func(r *rig, x *cmExchange) [][]byte {
			q := mad.SIDRREQFields{RequestID: 0x51, PKey: 0xffff, ServiceID: mad.MakeServiceID(mad.PortSpaceUDP, 7471)}
			p := mad.SIDRREPFields{RequestID: 0x51, QPN: 0x20, QKey: 0x1234, ServiceID: q.ServiceID}
			p2 := p
			p2.RequestID = 0x52
			return [][]byte{r.cm(true, mad.AttrSIDRREQ, 1, &q), r.cm(false, mad.AttrSIDRREP, 1, &p),
				r.cm(true, mad.AttrSIDRREQ, 2, &mad.SIDRREQFields{RequestID: 0x53}), r.cm(false, mad.AttrSIDRREP, 3, &p2)}
		}, []wantFinding{
			{3, SevFlow, "cm", "SIDR_REQ (request ID 0x00000053) got no SIDR_REP"},
			{4, SevFlow, "cm", "SIDR_REP for request ID 0x00000052 answers no SIDR_REQ"},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			x := newExchange(r)
			got, _ := verifyCM(t, c.frames(r, x))
			checkFindings(t, got, c.want)
		})
	}
}

// reseal recomputes the ICRC of a parsed frame whose bytes changed.
func reseal(p *bth.Packet) {
	binary.LittleEndian.PutUint32(p.Frame[p.End-bth.ICRCLen:], p.ComputeICRC())
}

// TestCMVerifyStrictExit checks that an inconsistent exchange fails
// `verify --strict` and not plain verify.
func TestCMVerifyStrictExit(t *testing.T) {
	r := newRig(t)
	x := newExchange(r)
	path := pcaptest.WritePcap(t, pcaptest.Frames(x.setup(r)[:2]...))
	if code, lines, _ := verify(t, VerifyOptions{}, path); code != ExitOK || len(findings(lines, "cm")) != 1 {
		t.Errorf("verify: exit %d\n%s", code, strings.Join(lines, "\n"))
	}
	if code, lines, _ := verify(t, VerifyOptions{Strict: true}, path); code != ExitFound {
		t.Errorf("verify --strict: exit %d\n%s", code, strings.Join(lines, "\n"))
	}
}

func TestCMDecodeCrafted(t *testing.T) {
	r := newRig(t)
	x := newExchange(r)
	rej := mad.REJFields{LocalCommID: 0, RemoteCommID: 0xa1a1a1a1, MessageRejected: mad.MsgREQ, Reason: mad.RejInvalidServiceID}
	mra := mad.MRAFields{LocalCommID: 0xb1b1b1b1, RemoteCommID: 0xa1a1a1a1, MessageMRAed: mad.MsgREQ, ServiceTimeout: 21}
	sidr := mad.SIDRREPFields{RequestID: 0x51, QPN: 0x20, QKey: 0x1234, ServiceID: mad.MakeServiceID(mad.PortSpaceUDP, 7471)}
	frames := flat(x.setup(r), x.teardown(r), [][]byte{r.cm(false, mad.AttrREJ, 3, &rej), r.cm(false, mad.AttrMRA, 4, &mra),
		r.cm(false, mad.AttrSIDRREP, 5, &sidr)})
	path := pcaptest.WritePcap(t, pcaptest.Frames(frames...))
	var out, errOut bytes.Buffer
	if code := RunDecode(&out, &errOut, []string{path}, false); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		" DETH(qkey=0x80010000 srcqp=0x000001) payload=256 CM_REQ(tid=0x000000021c9ff5db local_comm=0xa1a1a1a1 qpn=0x000011 psn=0x7094bb service_id=0x0000000001061c06 ps=tcp port=7174 mtu=1024 src=192.0.2.2:47877 dst=192.0.2.1:7174) icrc=",
		" CM_REP(tid=0x000000021c9ff5db local_comm=0xb1b1b1b1 remote_comm=0xa1a1a1a1 qpn=0x000012 psn=0xfffffd) icrc=",
		" CM_RTU(tid=0x000000021c9ff5db local_comm=0xa1a1a1a1 remote_comm=0xb1b1b1b1) icrc=",
		" CM_DREQ(tid=0x000000021c9ff5db local_comm=0xa1a1a1a1 remote_comm=0xb1b1b1b1 remote_qpn=0x000012) icrc=",
		" CM_DREP(tid=0x000000021c9ff5db local_comm=0xb1b1b1b1 remote_comm=0xa1a1a1a1) icrc=",
		" CM_REJ(tid=0x0000000000000003 local_comm=0x00000000 remote_comm=0xa1a1a1a1 rejected=REQ reason=8 (invalid_service_id)) icrc=",
		" CM_MRA(tid=0x0000000000000004 local_comm=0xb1b1b1b1 remote_comm=0xa1a1a1a1 mraed=REQ service_timeout=21) icrc=",
		" CM_SIDR_REP(tid=0x0000000000000005 request_id=0x00000051 status=valid qpn=0x000020 qkey=0x00001234 service_id=0x0000000001111d2f ps=udp port=7471) icrc=",
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines:\n%s", len(lines), out.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) || !strings.HasSuffix(lines[i], " ok") {
			t.Errorf("line %d:\n%s\nwant it to hold\n%s", i+1, lines[i], w)
		}
	}
	objs := decodeJSON(t, path)
	req := objs[0]["mad"].(map[string]any)
	cm := req["cm"].(map[string]any)
	if num(t, req, "tid") != 0x21c9ff5db || num(t, req, "attr_id") != 0x10 || num(t, req, "class") != 7 || cm["message"] != "REQ" ||
		num(t, cm, "local_comm_id") != 0xa1a1a1a1 || num(t, cm, "local_qpn") != 0x11 || num(t, cm, "starting_psn") != 0x7094bb ||
		cm["port_space"] != "tcp" || num(t, cm, "port") != 7174 || cm["src_ip"] != "192.0.2.2" || num(t, cm, "src_port") != 47877 ||
		cm["dst_ip"] != "192.0.2.1" || num(t, cm, "dst_port") != 7174 || num(t, cm, "path_mtu") != 1024 || cm["local_gid"] != "::ffff:192.0.2.2" {
		t.Errorf("REQ: %v", req)
	}
	rep := objs[1]["mad"].(map[string]any)["cm"].(map[string]any)
	if rep["message"] != "REP" || num(t, rep, "remote_comm_id") != 0xa1a1a1a1 || num(t, rep, "local_qpn") != 0x12 || num(t, rep, "starting_psn") != 0xfffffd {
		t.Errorf("REP: %v", rep)
	}
	rj := objs[5]["mad"].(map[string]any)["cm"].(map[string]any)
	if rj["reason_name"] != "invalid_service_id" || num(t, rj, "reason") != 8 || rj["message_rejected"] != "REQ" {
		t.Errorf("REJ: %v", rj)
	}
	// A packet that is not a MAD has no "mad" member.
	if _, ok := decodeJSON(t, pcaptest.WritePcap(t, pcaptest.Frames(traffic(newRig(t))...)))[0]["mad"]; ok {
		t.Error("mad in an RC SEND")
	}
}

// rxeCM lists the rdma_rxe captures with RDMA CM exchanges: how many CM
// messages each holds (by name) and lines of its decoding.
var rxeCM = []struct {
	file  string
	count map[string]int
	lines map[int]string // by frame: a part of its decoded line
}{
	{"rping.pcap", map[string]int{"REQ": 2, "REJ": 1, "REP": 1, "RTU": 1, "DREQ": 1, "DREP": 1}, map[int]string{
		3: "CM_REQ(tid=0x000000021c9ff5da local_comm=0xdaf59f1c qpn=0x000011 psn=0x051912 service_id=0x0000000001061c06 ps=tcp port=7174 mtu=1024 src=192.0.2.2:50074 dst=192.0.2.1:7174)",
		4: "CM_REJ(tid=0x000000021c9ff5da local_comm=0x00000000 remote_comm=0xdaf59f1c rejected=REQ reason=8 (invalid_service_id))",
		5: "CM_REQ(tid=0x000000021c9ff5db local_comm=0xdbf59f1c qpn=0x000012 psn=0x7094bb service_id=0x0000000001061c06 ps=tcp port=7174 mtu=1024 src=192.0.2.2:47877 dst=192.0.2.1:7174)",
		6: "CM_REP(tid=0x000000021c9ff5db local_comm=0xb3beadc9 remote_comm=0xdbf59f1c qpn=0x000011 psn=0x34557d)",
		7: "CM_RTU(tid=0x000000021c9ff5db local_comm=0xdbf59f1c remote_comm=0xb3beadc9)",
		// The first SEND of the active side starts at the REP's PSN, the
		// passive side's first READ at the REQ's.
		8:  "RC_SEND_ONLY psn=0x34557d qp=0x000011",
		10: "RC_RDMA_READ_REQUEST psn=0x7094bb qp=0x000012",
		44: "CM_DREQ(tid=0x000000021c9ff5db local_comm=0xdbf59f1c remote_comm=0xb3beadc9 remote_qpn=0x000011)",
		45: "CM_DREP(tid=0x000000021c9ff5db local_comm=0xb3beadc9 remote_comm=0xdbf59f1c)",
	}},
	{"ucmatose.pcap", map[string]int{"REQ": 1, "REP": 1, "RTU": 1, "DREQ": 1, "DREP": 1}, map[int]string{
		3:  "CM_REQ(tid=0x00000002ed208ea3 local_comm=0xa38e20ed qpn=0x000011 psn=0xc21cca service_id=0x0000000001061d2f ps=tcp port=7471 mtu=1024 src=192.0.2.2:",
		4:  "CM_REP(tid=0x00000002ed208ea3 local_comm=0xa90a3be9 remote_comm=0xa38e20ed qpn=0x000011 psn=0xaec021)",
		14: "192.0.2.1:55410 > 192.0.2.2:4791 UD_SEND_ONLY", // the passive side disconnects
		15: "CM_DREP(tid=0x00000002e93b0aa9 local_comm=0xa38e20ed remote_comm=0xa90a3be9)",
	}},
	{"write_bw_cm.pcap", map[string]int{"REQ": 2, "REP": 2, "RTU": 2, "DREQ": 2, "DREP": 2}, map[int]string{
		3:  "CM_REQ(tid=0x00000002fccdb461 local_comm=0x61b4cdfc qpn=0x000011 psn=0x9b0372 service_id=0x0000000001064853 ps=tcp port=18515 mtu=1024 src=192.0.2.2:51182 dst=192.0.2.1:18515)",
		27: "CM_REP(tid=0x00000002fccdb460 local_comm=0xd1dc2f6c remote_comm=0x60b4cdfc qpn=0x000012 psn=0xee92cf)",
		96: "CM_DREP(tid=0x00000002fccdb461 local_comm=0xd3dc2f6c remote_comm=0x61b4cdfc)",
	}},
}

// TestCMRxeCaptures decodes the rdma_rxe captures with RDMA CM (rping,
// ucmatose, ib_write_bw -R) and verifies them: every exchange is
// complete and consistent, and the traffic after it uses the QPNs and
// PSNs it agreed on, so strict verification finds nothing.
func TestCMRxeCaptures(t *testing.T) {
	dir := filepath.Join(sharedDir(t), "rxe-6.1")
	for _, c := range rxeCM {
		path := filepath.Join(dir, c.file)
		var out, errOut bytes.Buffer
		if code := RunDecode(&out, &errOut, []string{path}, false); code != ExitOK {
			t.Fatalf("%s: decode exit %d: %s", c.file, code, errOut.String())
		}
		count := map[string]int{}
		byFrame := map[int]string{}
		for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			n, _, _ := strings.Cut(l, " ")
			byFrame[atoi(n)] = l
			if i := strings.Index(l, " CM_"); i >= 0 {
				name, _, _ := strings.Cut(l[i+4:], "(")
				count[name]++
			}
		}
		if !mapsEqual(count, c.count) {
			t.Errorf("%s: CM messages %v, want %v", c.file, count, c.count)
		}
		for n, w := range c.lines {
			if !strings.Contains(byFrame[n], w) {
				t.Errorf("%s frame %d:\n%s\nwant it to hold\n%s", c.file, n, byFrame[n], w)
			}
		}
		code, lines, _ := verify(t, VerifyOptions{Strict: true}, path)
		if code != ExitOK || len(lines) != 1 {
			t.Errorf("%s: verify --strict exit %d:\n%s", c.file, code, strings.Join(lines, "\n"))
		}
	}
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestCMRxeMutated breaks the CM exchanges of rping.pcap (and one of
// write_bw_cm.pcap) in one place at a time, resealing the ICRC, and
// checks that verification sees it.
func TestCMRxeMutated(t *testing.T) {
	dir := filepath.Join(sharedDir(t), "rxe-6.1")
	for _, c := range []struct {
		name   string
		mutate func(frames [][]byte) [][]byte
		want   []wantFinding
		file   string // rping.pcap when empty
	}{
		{"REP starting PSN", func(f [][]byte) [][]byte {
			mutateCM(t, f, 6, func(d []byte) { d[22]++ }) // REP starting PSN, bytes 20-22
			return f
		}, []wantFinding{{8, SevFlow, "cm_traffic", "first request at psn 0x34557d, the REP at frame 6 set starting psn 0x34557e"}}, ""},
		{"REQ starting PSN", func(f [][]byte) [][]byte {
			mutateCM(t, f, 5, func(d []byte) { d[46]++ }) // REQ starting PSN, bytes 44-46
			return f
		}, []wantFinding{{10, SevFlow, "cm_traffic", "first request at psn 0x7094bb, the REQ at frame 5 set starting psn 0x7094bc"}}, ""},
		{"REP QPN", func(f [][]byte) [][]byte {
			mutateCM(t, f, 6, func(d []byte) { d[14] = 0x21 }) // REP local QPN, bytes 12-14
			return f
		}, []wantFinding{
			{8, SevFlow, "cm_traffic", "packets to qp 0x000011, which no CM exchange"},
			{44, SevFlow, "cm", "DREQ names remote QPN 0x000011, the receiver's QPN is 0x000021"},
		}, ""},
		{"RTU lost", func(f [][]byte) [][]byte { return slicesDelete(f, 7) },
			[]wantFinding{{6, SevFlow, "cm", "REP (local comm ID 0xb3beadc9) got no RTU"}}, ""},
		{"DREP lost", func(f [][]byte) [][]byte { return f[:44] },
			[]wantFinding{{44, SevFlow, "cm", "DREQ (local comm ID 0xdbf59f1c) got no DREP"}}, ""},
		{"REJ lost", func(f [][]byte) [][]byte { return slicesDelete(f, 4) },
			[]wantFinding{{3, SevFlow, "cm", "REQ (local comm ID 0xdaf59f1c) got neither REP nor REJ"}}, ""},
		{"RTU transaction ID", func(f [][]byte) [][]byte {
			mutateCM(t, f, 7, func(d []byte) {}, func(m []byte) { m[15]++ })
			return f
		}, []wantFinding{{7, SevFlow, "cm", "RTU transaction ID 0x000000021c9ff5dc, the REQ at frame 5 has 0x000000021c9ff5db"}}, ""},
		{"REQ path MTU", func(f [][]byte) [][]byte {
			mutateCM(t, f, 26, func(d []byte) { d[50] = d[50]&0x0f | byte(mad.MTU2048)<<4 }) // REQ path MTU, byte 50
			return f
		}, []wantFinding{{45, SevFlow, "cm_traffic", "path mtu 1024, the REQ at frame 26 set 2048"}}, "write_bw_cm.pcap"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.file == "" {
				c.file = "rping.pcap"
			}
			orig, err := readAll(t, mustRead(t, filepath.Join(dir, c.file)))
			if err != nil {
				t.Fatal(err)
			}
			frames := make([][]byte, len(orig))
			for i := range orig {
				frames[i] = bytes.Clone(orig[i].Data)
			}
			frames = c.mutate(frames)
			got, _ := verifyCM(t, frames)
			checkFindings(t, got, c.want)
		})
	}
}

// mutateCM changes the CM data (and, with mh, the whole MAD) of frame n
// (1-based) and reseals the frame's ICRC.
func mutateCM(t *testing.T, frames [][]byte, n int, md func(d []byte), mh ...func(m []byte)) {
	t.Helper()
	var p bth.Packet
	if err := bth.Parse(frames[n-1], &p); err != nil {
		t.Fatal(err)
	}
	m, ok := mad.FromPacket(&p)
	if !ok {
		t.Fatalf("frame %d is not a MAD", n)
	}
	md(m.Data())
	for _, f := range mh {
		f(m)
	}
	reseal(&p)
}

// slicesDelete removes frame n (1-based); the frames after it move up.
func slicesDelete(f [][]byte, n int) [][]byte { return append(f[:n-1:n-1], f[n:]...) }

// TestCMDecodeAllocs checks that decoding a CM MAD and writing its text
// and JSON forms into a buffer with room does not allocate.
func TestCMDecodeAllocs(t *testing.T) {
	r := newRig(t)
	x := newExchange(r)
	frames := flat(x.setup(r), x.teardown(r))
	var rec Record
	line := make([]byte, 0, 4096)
	n := testing.AllocsPerRun(50, func() {
		for i, data := range frames {
			f := Frame{Data: data, CapLen: len(data), OrigLen: len(data)}
			if !Decode(i+1, &f, &rec) || rec.MAD == nil {
				t.Fatal("no MAD")
			}
			line = rec.AppendText(line[:0])
			line = rec.AppendJSON(line[:0])
		}
	})
	if n != 0 {
		t.Errorf("%v allocations", n)
	}
}
