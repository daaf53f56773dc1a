package main

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/internal/pcaptool/pcaptest"
	"github.com/uroce/uroce/mad"
)

// cmFrame returns a CM MAD as rdma_cm sends it on QP1, from 192.0.2.2
// (or from 192.0.2.1 when back is set).
func cmFrame(t *testing.T, back bool, psn bth.PSN, attr mad.AttrID, data interface{ Encode([]byte) }) []byte {
	t.Helper()
	var m [mad.Len]byte
	h := mad.CMHeader(attr, 0x21c9ff5db)
	h.Encode(m[:])
	data.Encode(m[mad.HeaderLen:])
	hd := bth.Headers{L2L3: bth.L2L3{SrcIP: netip.MustParseAddr("192.0.2.2"), DstIP: netip.MustParseAddr("192.0.2.1"), SrcPort: bth.UDSourcePort(1)},
		BTH: bth.BTHFields{Opcode: bth.OpUDSendOnly, PKey: 0xffff, DestQP: mad.GSIQPN, PSN: psn, AckReq: true}, QKey: mad.GSIQKey, SrcQP: mad.GSIQPN}
	if back {
		hd.SrcIP, hd.DstIP = hd.DstIP, hd.SrcIP
	}
	buf := make([]byte, hd.FrameLen(mad.Len))
	if _, err := bth.Encode(buf, &hd, m[:]); err != nil {
		t.Fatal(err)
	}
	return buf
}

// TestPcapCM decodes and verifies a REQ answered by a REP that no RTU
// follows: decode shows both messages, verify reports the unfinished
// exchange as a flow anomaly (failing only with --strict).
func TestPcapCM(t *testing.T) {
	req := mad.REQFields{LocalCommID: 0xa1, ServiceID: mad.MakeServiceID(mad.PortSpaceTCP, 7174), LocalQPN: 0x11, StartingPSN: 0x100,
		PathMTU: mad.MTU1024, Primary: mad.PathFields{LocalGID: netip.MustParseAddr("192.0.2.2"), RemoteGID: netip.MustParseAddr("192.0.2.1")}}
	cma := mad.CMAHeaderFields{IPVersion: 4, SrcPort: 40000, SrcIP: netip.MustParseAddr("192.0.2.2"), DstIP: netip.MustParseAddr("192.0.2.1")}
	cma.Encode(req.PrivateData[:])
	rep := mad.REPFields{LocalCommID: 0xb1, RemoteCommID: 0xa1, LocalQPN: 0x12, StartingPSN: 0x200}
	path := pcaptest.WritePcap(t, pcaptest.Frames(cmFrame(t, false, 0, mad.AttrREQ, &req), cmFrame(t, true, 0, mad.AttrREP, &rep)))

	code, out, _ := runArgs("pcap", "decode", path)
	if code != 0 || !strings.Contains(out, " CM_REQ(tid=0x000000021c9ff5db local_comm=0x000000a1 qpn=0x000011 psn=0x000100 service_id=0x0000000001061c06 ps=tcp port=7174 mtu=1024 src=192.0.2.2:40000 dst=192.0.2.1:7174) ") ||
		!strings.Contains(out, " CM_REP(tid=0x000000021c9ff5db local_comm=0x000000b1 remote_comm=0x000000a1 qpn=0x000012 psn=0x000200) ") {
		t.Errorf("decode: exit %d\n%s", code, out)
	}
	const last = "2 packets, 2 roce, 2 icrc_ok, 0 icrc_bad, 0 malformed"
	code, out, _ = runArgs("pcap", "verify", path)
	if code != 0 || lastLine(out) != last || !strings.Contains(out, ":2: flow: cm: REP (local comm ID 0x000000b1) got no RTU") {
		t.Errorf("verify: exit %d\n%s", code, out)
	}
	if code, out, _ = runArgs("pcap", "verify", "--strict", path); code != 1 {
		t.Errorf("verify --strict: exit %d\n%s", code, out)
	}
}

// TestPcapCMRxe verifies the rdma_rxe captures of RDMA CM strictly: no
// finding at all.
func TestPcapCMRxe(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "shared", "pcaps", "rxe-6.1")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("reference captures absent: %v", err)
	}
	for _, name := range []string{"rping.pcap", "ucmatose.pcap", "write_bw_cm.pcap"} {
		path := filepath.Join(dir, name)
		code, out, errOut := runArgs("pcap", "verify", "--strict", path)
		if code != 0 || strings.Count(out, "\n") != 1 {
			t.Errorf("%s: exit %d\n%s%s", name, code, out, errOut)
		}
		code, out, _ = runArgs("pcap", "decode", path)
		if code != 0 || !strings.Contains(out, " CM_REQ(") || !strings.Contains(out, " CM_DREP(") {
			t.Errorf("%s: decode exit %d", name, code)
		}
	}
}
