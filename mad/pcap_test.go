package mad

import (
	"bytes"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/uroce/uroce/internal/pcaptool/pcaptest"

	"github.com/uroce/uroce/bth"
)

// sharedDir is where the reference captures are, beside the repository.
var sharedDir = filepath.Join("..", "..", "shared", "pcaps")

// sharedPcaps returns the reference captures, or skips the test when
// they are absent.
func sharedPcaps(t *testing.T) []string { return pcaptest.Shared(t, sharedDir, true) }

func readFrames(t *testing.T, path string) [][]byte { return pcaptest.ReadFrames(t, path) }

// capturedMAD is a MAD found in a capture.
type capturedMAD struct {
	frame    int // 1-based
	m        MAD
	src, dst netip.Addr
}

// capturedMADs returns the MADs of a capture.
func capturedMADs(t *testing.T, path string) []capturedMAD {
	t.Helper()
	var out []capturedMAD
	for i, data := range readFrames(t, path) {
		var p bth.Packet
		if bth.Parse(data, &p) != nil {
			continue
		}
		if m, ok := FromPacket(&p); ok {
			out = append(out, capturedMAD{i + 1, m, p.SrcIP(), p.DstIP()})
		}
	}
	return out
}

// reencode decodes m into its Fields and encodes them again: the header
// and the attribute data of every CM message this package knows.
func reencode(t *testing.T, m MAD) []byte {
	t.Helper()
	out := make([]byte, Len)
	h := m.Header()
	h.Encode(out)
	if !encodeData(m.AttrID(), m.Data(), out[HeaderLen:]) {
		t.Fatalf("attribute %v is not a CM message", m.AttrID())
	}
	return out
}

// encodeData decodes data as the CM message attr names and encodes its
// Fields into out. It reports false for an attribute that is no message.
func encodeData(attr AttrID, data, out []byte) bool {
	switch attr {
	case AttrREQ:
		f := REQ(data).Fields()
		f.Encode(out)
	case AttrMRA:
		f := MRA(data).Fields()
		f.Encode(out)
	case AttrREJ:
		f := REJ(data).Fields()
		f.Encode(out)
	case AttrREP:
		f := REP(data).Fields()
		f.Encode(out)
	case AttrRTU:
		f := RTU(data).Fields()
		f.Encode(out)
	case AttrDREQ:
		f := DREQ(data).Fields()
		f.Encode(out)
	case AttrDREP:
		f := DREP(data).Fields()
		f.Encode(out)
	case AttrSIDRREQ:
		f := SIDRREQ(data).Fields()
		f.Encode(out)
	case AttrSIDRREP:
		f := SIDRREP(data).Fields()
		f.Encode(out)
	case AttrLAP:
		f := LAP(data).Fields()
		f.Encode(out)
	case AttrAPR:
		f := APR(data).Fields()
		f.Encode(out)
	default:
		return false
	}
	return true
}

// TestCapturedCM decodes every CM MAD of the reference captures: rdma_rxe
// (rping, ucmatose, ib_write_bw -R), ConnectX (ibdump, NVMe-oF) and the
// rdma_rxe lab captures. Each MAD decodes into Fields that encode back
// to the captured 256 bytes, and the fields that rdma_cm sets are what
// it sets on RoCE: LIDs 0xffff, GIDs the packet's own addresses, a
// private data header naming them, and an rdma_cm service ID.
func TestCapturedCM(t *testing.T) {
	total := 0
	for _, path := range sharedPcaps(t) {
		mads := capturedMADs(t, path)
		if len(mads) == 0 {
			continue
		}
		counts := map[string]int{}
		for _, c := range mads {
			m := c.m
			name := m.AttrID().String()
			counts[name]++
			if !m.IsCM() || m.BaseVersion() != BaseVersion || m.ClassVersion() != CMClassVersion || m.Method() != MethodSend {
				t.Errorf("%s:%d: header %+v", path, c.frame, m.Header())
			}
			if got := reencode(t, m); !bytes.Equal(got, m) {
				t.Errorf("%s:%d: %s re-encodes differently:\n got %x\nwant %x", path, c.frame, name, got, []byte(m))
			}
			if m.AttrID() == AttrREQ {
				checkCapturedREQ(t, path, c)
			}
		}
		t.Logf("%s: %d CM MADs decoded and re-encoded byte for byte: %v", filepath.Base(path), len(mads), counts)
		total += len(mads)
	}
	if total == 0 {
		t.Fatal("no CM MAD in the reference captures")
	}
	t.Logf("%d CM MADs in all", total)
}

func checkCapturedREQ(t *testing.T, path string, c capturedMAD) {
	t.Helper()
	r := REQ(c.m.Data())
	p := r.Primary()
	if p.LocalLID() != 0xffff || p.RemoteLID() != 0xffff || p.LocalGID().Unmap() != c.src || p.RemoteGID().Unmap() != c.dst {
		t.Errorf("%s:%d: primary path %+v, packet %v > %v", path, c.frame, p.Fields(), c.src, c.dst)
	}
	if r.TransportType() != TransportRC || r.PathMTU().Bytes() == 0 || r.LocalQPN() == 0 {
		t.Errorf("%s:%d: REQ %+v", path, c.frame, r.Fields())
	}
	if ps, ok := r.ServiceID().PortSpace(); !ok || ps != PortSpaceTCP {
		t.Errorf("%s:%d: service ID %v", path, c.frame, r.ServiceID())
	}
	h, ok := r.CMAHeader()
	if !ok || h.IPVersion() != 4 || h.SrcIP() != c.src || h.DstIP() != c.dst || h.SrcPort() == 0 {
		t.Errorf("%s:%d: CMA header %v %+v", path, c.frame, ok, h.Fields())
		return
	}
	var b [CMAHeaderLen]byte
	f := h.Fields()
	f.Encode(b[:])
	if !bytes.Equal(b[:], h) {
		t.Errorf("%s:%d: CMA header re-encodes as %x, want %x", path, c.frame, b, []byte(h))
	}
}

// TestCapturedNotMAD checks that FromPacket takes no other packet for a
// MAD: of the ConnectX DC packets, whose RD opcodes tshark decodes as
// MADs, and of everything else in the captures, only UD SENDs to QP1
// with the GSI Q_Key and 256 bytes are.
func TestCapturedNotMAD(t *testing.T) {
	for _, path := range sharedPcaps(t) {
		for i, data := range readFrames(t, path) {
			var p bth.Packet
			if bth.Parse(data, &p) != nil {
				continue
			}
			_, ok := FromPacket(&p)
			want := p.Opcode() == bth.OpUDSendOnly && p.BTH().DestQP() == 1 && p.DETH().QKey() == GSIQKey
			if ok != want {
				t.Errorf("%s:%d: %s to qp %d: mad %v", path, i+1, p.Info.Name, p.BTH().DestQP(), ok)
			}
		}
	}
}
