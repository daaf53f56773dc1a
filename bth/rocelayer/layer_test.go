package rocelayer

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/uroce/uroce/bth"
)

func encode(t *testing.T, h *bth.Headers, payload []byte) []byte {
	t.Helper()
	buf := make([]byte, h.FrameLen(len(payload)))
	if _, err := bth.Encode(buf, h, payload); err != nil {
		t.Fatal(err)
	}
	return buf
}

func TestDecodeBuiltFrames(t *testing.T) {
	h := bth.Headers{L2L3: bth.L2L3{
		SrcIP: netip.MustParseAddr("192.0.2.2"), DstIP: netip.MustParseAddr("192.0.2.1"), SrcPort: 49441,
	}, BTH: bth.BTHFields{Opcode: bth.OpWriteOnlyImm, PKey: 0xffff, DestQP: 0x11, PSN: 0x123456, AckReq: true},
		VA: 0x1000, RKey: 0x42, DMALen: 5, Imm: 0xcafe}
	for _, v := range []uint8{2, 1} {
		h.Version = v
		if v == 1 {
			h.SrcIP, h.DstIP = netip.MustParseAddr("::ffff:192.0.2.2"), netip.MustParseAddr("::ffff:192.0.2.1")
		}
		frame := encode(t, &h, []byte("hello"))
		pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
		r, ok := pkt.Layer(LayerTypeRoCE).(*RoCE)
		if !ok {
			t.Fatalf("v%d: no RoCE layer in %v", v, pkt)
		}
		if r.Info.Name != "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE" || r.BTH.PSN != 0x123456 || r.BTH.DestQP != 0x11 || !r.BTH.AckReq {
			t.Errorf("v%d: %s %+v", v, r.Info.Name, r.BTH)
		}
		if r.RETH == nil || r.RETH.RKey() != 0x42 || r.RETH.DMALen() != 5 || r.ImmDt.Value() != 0xcafe || r.AETH != nil {
			t.Error("extended headers")
		}
		if !bytes.Equal(r.Payload, []byte("hello")) || len(r.Pad) != 3 || len(r.Contents) != 32 {
			t.Errorf("payload %q pad %d contents %d", r.Payload, len(r.Pad), len(r.Contents))
		}
		if app := pkt.ApplicationLayer(); app == nil || !bytes.Equal(app.Payload(), []byte("hello")) {
			t.Error("application layer")
		}
		if !r.ICRCOK(pkt) {
			t.Errorf("v%d: ICRC does not verify", v)
		}
		if v == 1 {
			g, ok := pkt.Layer(LayerTypeGRH).(*GRH)
			if !ok || g.NextHeader != 0x1b || !g.SGID.Equal(netip.MustParseAddr("::ffff:192.0.2.2").AsSlice()) {
				t.Errorf("GRH %+v", g)
			}
			if pkt.NetworkLayer() == nil || pkt.NetworkLayer().LayerType() != LayerTypeGRH {
				t.Error("GRH is not the network layer")
			}
		}
		// A corrupt payload byte fails the ICRC.
		frame[len(frame)-6] ^= 1
		pkt = gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
		if pkt.Layer(LayerTypeRoCE).(*RoCE).ICRCOK(pkt) {
			t.Errorf("v%d: corrupt packet verifies", v)
		}
	}
}

func TestDecodeTruncated(t *testing.T) {
	h := bth.Headers{L2L3: bth.L2L3{SrcIP: netip.MustParseAddr("192.0.2.2"), DstIP: netip.MustParseAddr("192.0.2.1")},
		BTH: bth.BTHFields{Opcode: bth.OpSendOnly, PSN: 9}}
	frame := encode(t, &h, make([]byte, 200))
	for _, cut := range []int{50, 60, 100, len(frame) - 1} {
		pkt := gopacket.NewPacket(frame[:cut], layers.LayerTypeEthernet, gopacket.Default)
		r, ok := pkt.Layer(LayerTypeRoCE).(*RoCE)
		if cut < 42+12 {
			if ok {
				t.Errorf("cut %d: RoCE layer without a whole BTH", cut)
			}
			continue
		}
		if !ok || !r.Truncated || r.BTH.PSN != 9 || r.ICRCOK(pkt) {
			t.Errorf("cut %d: %+v", cut, r)
		}
	}
}

// TestDecodeCaptures decodes reference captures with gopacket and checks
// every RoCE packet against bth.Parse.
func TestDecodeCaptures(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "shared", "pcaps")
	files := []string{"rxe-6.1/read_bw.pcap", "rxe-6.1/atomic_bw.pcap", "rxe-6.1/ud_pingpong.pcap",
		"public/magnate3_linux-riscv-dev__soft-roce_mellanox_doc_rocev1_test.pcap",
		"public/scapy_roce_uts__hw_hex_vectors.pcap"}
	n := 0
	for _, name := range files {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Skipf("reference captures absent: %v", err)
		}
		r, err := pcapgo.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		for {
			data, _, err := r.ReadPacketData()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			var p bth.Packet
			perr := bth.Parse(data, &p)
			pkt := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
			rl, ok := pkt.Layer(LayerTypeRoCE).(*RoCE)
			if perr != nil {
				if ok {
					t.Errorf("%s: gopacket found RoCE where bth did not (%v)", name, perr)
				}
				continue
			}
			if !ok {
				t.Fatalf("%s: no RoCE layer: %v", name, pkt)
			}
			n++
			if rl.Info != p.Info || rl.BTH != p.BTH().Fields() || !bytes.Equal(rl.Payload, p.Payload()) {
				t.Errorf("%s: %s differs from bth.Parse", name, rl.Info.Name)
			}
			if !rl.ICRCOK(pkt) {
				t.Errorf("%s: %s ICRC does not verify", name, rl.Info.Name)
			}
			if (rl.AETH == nil) != (p.AETH() == nil) || (rl.AtomicAck == nil) != (p.AtomicAck() == nil) || (rl.DETH == nil) != (p.DETH() == nil) {
				t.Errorf("%s: %s headers differ", name, rl.Info.Name)
			}
		}
		f.Close()
	}
	if n == 0 {
		t.Fatal("no RoCE packets decoded")
	}
	t.Logf("%d RoCE packets decoded through gopacket", n)
}
