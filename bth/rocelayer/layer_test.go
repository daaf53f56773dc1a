package rocelayer

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/uroce/uroce/internal/pcaptool/pcaptest"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

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

// readPcap returns the frames of a capture file.
func readPcap(t *testing.T, path string) [][]byte { return pcaptest.ReadFrames(t, path) }

// Capture folders: the committed captures of uroce against rdma_rxe, and
// the reference captures beside the repository (not always present).
var (
	committedPcaps = filepath.Join("..", "..", "pcaps", "rxe-6.1")
	sharedPcaps    = filepath.Join("..", "..", "..", "shared", "pcaps")
)

// capturePath returns the path of a committed capture, or of a shared
// one; it skips the test when a shared capture is absent.
func capturePath(t *testing.T, shared bool, name string) string {
	t.Helper()
	if !shared {
		return filepath.Join(committedPcaps, name)
	}
	path := filepath.Join(sharedPcaps, name)
	if _, err := os.Stat(path); err != nil {
		t.Skipf("reference capture absent: %v", err)
	}
	return path
}

func ptr[T any](v T) *T { return &v }

type rethWant struct {
	va         uint64
	rkey, dlen uint32
}

type aethWant struct {
	syndrome bth.Syndrome
	msn      uint32
}

type dethWant struct{ qkey, srcQP uint32 }

type atomicWant struct {
	va            uint64
	rkey          uint32
	swap, compare uint64
}

// knownFrames holds field values of specific captured frames as tshark
// 4.0 (its own InfiniBand dissector, with -d udp.port==4791,infiniband)
// decodes them, with
//
//	tshark -r FILE -d udp.port==4791,infiniband -T fields -e frame.number \
//	  -e infiniband.bth.opcode -e infiniband.bth.se -e infiniband.bth.m \
//	  -e infiniband.bth.padcnt -e infiniband.bth.p_key -e infiniband.bth.destqp \
//	  -e infiniband.bth.a -e infiniband.bth.psn -e infiniband.reth.va \
//	  -e infiniband.reth.r_key -e infiniband.reth.dmalen -e infiniband.aeth.syndrome \
//	  -e infiniband.aeth.msn -e infiniband.deth.q_key -e infiniband.deth.srcqp \
//	  -e infiniband.immdt -e infiniband.atomiceth.swapdt -e infiniband.atomiceth.cmpdt \
//	  -e infiniband.atomicacketh.origremdt -e data.len
//
// tshark shows an AtomicETH's address and R_Key in the reth fields, and
// its data.len counts the pad, so payload here is data.len minus the pad
// count. A nil header means the opcode does not carry it.
var knownFrames = []struct {
	shared  bool // in ../shared/pcaps rather than the committed pcaps/rxe-6.1
	file    string
	frame   int // 1-based, as tshark numbers frames
	v1      bool
	op      bth.Opcode
	se, m   bool
	a       bool
	pad     int
	pkey    uint16
	destQP  uint32
	psn     bth.PSN
	reth    *rethWant
	aeth    *aethWant
	deth    *dethWant
	atomic  *atomicWant
	orig    *uint64 // AtomicAckETH
	imm     *uint32
	payload int
}{
	{file: "rc_pingpong-uroce_client.pcap", frame: 18, op: bth.OpSendOnly, a: true, pad: 3, pkey: 0xffff, destQP: 0x11, psn: 1642579, payload: 13},
	{file: "rc_pingpong-uroce_client.pcap", frame: 15, op: bth.OpAck, pkey: 0xffff, destQP: 0x11, psn: 3593830, aeth: &aethWant{31, 1}},
	{file: "write_bw-uroce_client.pcap", frame: 21, op: bth.OpWriteFirst, pkey: 0xffff, destQP: 0x1a, psn: 10440393,
		reth: &rethWant{0x000055e403e6a000, 0x00000aaf, 3000}, payload: 1024},
	{file: "write_bw-uroce_client.pcap", frame: 23, op: bth.OpWriteLast, a: true, pkey: 0xffff, destQP: 0x1a, psn: 10440395, payload: 952},
	{file: "write_bw-mtu4096-uroce_server.pcap", frame: 22, op: bth.OpWriteFirst, pkey: 0xffff, destQP: 0x11, psn: 8364672,
		reth: &rethWant{0x00001305b33ca710, 0xbbce40e5, 10000}, payload: 4096},
	{file: "read_bw-uroce_server.pcap", frame: 20, op: bth.OpReadRequest, a: true, pkey: 0xffff, destQP: 0x11, psn: 9468662,
		reth: &rethWant{0x00001ce22013d000, 0xa79f24d6, 3000}},
	{file: "read_bw-uroce_server.pcap", frame: 21, op: bth.OpReadRespFirst, pkey: 0xffff, destQP: 0x1b, psn: 9468662, aeth: &aethWant{31, 1}, payload: 1024},
	{file: "read_bw-uroce_server.pcap", frame: 22, op: bth.OpReadRespMiddle, pkey: 0xffff, destQP: 0x1b, psn: 9468663, payload: 1024},
	{file: "read_bw-uroce_server.pcap", frame: 23, op: bth.OpReadRespLast, pkey: 0xffff, destQP: 0x1b, psn: 9468664, aeth: &aethWant{31, 1}, payload: 952},
	{file: "atomic_bw-uroce_server.pcap", frame: 20, op: bth.OpFetchAdd, a: true, pkey: 0xffff, destQP: 0x11, psn: 1395113,
		atomic: &atomicWant{0x000001cd5ccd9000, 0x182bc673, 1, 0}},
	{file: "atomic_bw-uroce_server.pcap", frame: 21, op: bth.OpAtomicAck, pkey: 0xffff, destQP: 0x1c, psn: 1395113,
		aeth: &aethWant{31, 1}, orig: ptr(uint64(4095131455307845363))},
	{file: "ud_pingpong-uroce_server.pcap", frame: 12, op: bth.OpUDSendOnly, pkey: 0xffff, destQP: 0x11, psn: 8452588,
		deth: &dethWant{0x11111111, 0x17}, payload: 64},
	{file: "ud_pingpong-uroce_server.pcap", frame: 13, op: bth.OpUDSendOnly, pkey: 0xffff, destQP: 0x17, psn: 11679609,
		deth: &dethWant{0x11111111, 0x11}, payload: 64},
	// RNR NAK, timer 12 (syndrome 0x2c), and NAK remote access error (0x62).
	{file: "rnr-uroce_receiver.pcap", frame: 23, op: bth.OpAck, pkey: 0xffff, destQP: 0x1e, psn: 11766621, aeth: &aethWant{44, 0}},
	{file: "bad_rkey-uroce_target.pcap", frame: 25, op: bth.OpAck, pkey: 0xffff, destQP: 0x1f, psn: 2693698, aeth: &aethWant{98, 0}},
	// Huawei: immediate data, MigReq set.
	{shared: true, file: "public/oferby_proxy__roce.pcap", frame: 18, op: bth.OpSendLastImm, m: true, a: true, pkey: 0xffff, destQP: 0x45, psn: 1,
		imm: ptr(uint32(1)), payload: 1024},
	{shared: true, file: "public/oferby_proxy__roce.pcap", frame: 122, op: bth.OpSendOnlyImm, m: true, a: true, pkey: 0xffff, destQP: 0x45, psn: 66,
		imm: ptr(uint32(0)), payload: 4},
	// ConnectX, RoCEv2 and RoCEv1.
	{shared: true, file: "public/magnate3_linux-riscv-dev__soft-roce_mellanox_doc_rocev2_test.pcap", frame: 1, op: bth.OpSendFirst, m: true, a: true,
		pkey: 0xffff, destQP: 0x147, psn: 1917083, payload: 1024},
	{shared: true, file: "public/magnate3_linux-riscv-dev__soft-roce_mellanox_doc_rocev2_test.pcap", frame: 17, op: bth.OpAck, m: true,
		pkey: 0xffff, destQP: 0x123, psn: 1715112, aeth: &aethWant{31, 0}},
	{shared: true, file: "public/magnate3_linux-riscv-dev__soft-roce_mellanox_doc_rocev1_test.pcap", frame: 1, v1: true, op: bth.OpSendFirst, m: true, a: true,
		pkey: 0xffff, destQP: 0x127, psn: 10304747, payload: 1024},
	{shared: true, file: "public/magnate3_linux-riscv-dev__soft-roce_mellanox_doc_rocev1_test.pcap", frame: 103, v1: true, op: bth.OpAck, m: true,
		pkey: 0xffff, destQP: 0x128, psn: 16700022, aeth: &aethWant{31, 0}},
	{shared: true, file: "public/scapy_roce_uts__hw_hex_vectors.pcap", frame: 2, v1: true, op: bth.OpWriteOnly, m: true, a: true, pad: 3,
		pkey: 0xffff, destQP: 0x10a, psn: 10979516, reth: &rethWant{0x000055d4c0726000, 0x000047b3, 5}, payload: 5},
	{shared: true, file: "public/scapy_roce_uts__hw_hex_vectors.pcap", frame: 3, v1: true, op: bth.OpAck, m: true,
		pkey: 0xffff, destQP: 0x109, psn: 10979520, aeth: &aethWant{0, 5}},
}

// TestDecodeKnownFields decodes captured frames through gopacket and
// compares every field the layer exposes with the values tshark's
// dissector gives for the same frames (knownFrames). tshark is a separate
// decoder, so unlike a comparison with bth.Parse, which the layer calls
// itself, a field read from the wrong offset or swapped with another
// shows here.
func TestDecodeKnownFields(t *testing.T) {
	for _, w := range knownFrames {
		t.Run(fmt.Sprintf("%s#%d", filepath.Base(w.file), w.frame), func(t *testing.T) {
			frames := readPcap(t, capturePath(t, w.shared, w.file))
			if w.frame > len(frames) {
				t.Fatalf("%d frames, want frame %d", len(frames), w.frame)
			}
			pkt := gopacket.NewPacket(frames[w.frame-1], layers.LayerTypeEthernet, gopacket.Default)
			r, ok := pkt.Layer(LayerTypeRoCE).(*RoCE)
			if !ok {
				t.Fatalf("no roce layer: %v", pkt)
			}
			if _, grh := pkt.Layer(LayerTypeGRH).(*GRH); grh != w.v1 {
				t.Errorf("grh layer %v, want %v", grh, w.v1)
			}
			b := r.BTH
			if b.Opcode != w.op || r.Info != w.op.Info() {
				t.Errorf("opcode %v (info %s), want %v", b.Opcode, r.Info.Name, w.op)
			}
			if b.SE != w.se || b.MigReq != w.m || b.AckReq != w.a {
				t.Errorf("se %v m %v a %v, want %v %v %v", b.SE, b.MigReq, b.AckReq, w.se, w.m, w.a)
			}
			if int(b.PadCount) != w.pad || len(r.Pad) != w.pad {
				t.Errorf("pad count %d, pad %d bytes, want %d", b.PadCount, len(r.Pad), w.pad)
			}
			if b.PKey != w.pkey || b.DestQP != w.destQP || b.PSN != w.psn || b.TVer != 0 {
				t.Errorf("p_key %#x dest qp %#x psn %d tver %d, want %#x %#x %d 0", b.PKey, b.DestQP, b.PSN, b.TVer, w.pkey, w.destQP, w.psn)
			}
			if (r.RETH != nil) != (w.reth != nil) {
				t.Errorf("reth present %v, want %v", r.RETH != nil, w.reth != nil)
			} else if w.reth != nil && (r.RETH.VA() != w.reth.va || r.RETH.RKey() != w.reth.rkey || r.RETH.DMALen() != w.reth.dlen) {
				t.Errorf("reth va %#x rkey %#x len %d, want %+v", r.RETH.VA(), r.RETH.RKey(), r.RETH.DMALen(), *w.reth)
			}
			if (r.AETH != nil) != (w.aeth != nil) {
				t.Errorf("aeth present %v, want %v", r.AETH != nil, w.aeth != nil)
			} else if w.aeth != nil && (r.AETH.Syndrome() != w.aeth.syndrome || r.AETH.MSN() != w.aeth.msn) {
				t.Errorf("aeth syndrome %#x msn %d, want %#x %d", r.AETH.Syndrome(), r.AETH.MSN(), w.aeth.syndrome, w.aeth.msn)
			}
			if (r.DETH != nil) != (w.deth != nil) {
				t.Errorf("deth present %v, want %v", r.DETH != nil, w.deth != nil)
			} else if w.deth != nil && (r.DETH.QKey() != w.deth.qkey || r.DETH.SrcQP() != w.deth.srcQP) {
				t.Errorf("deth qkey %#x src qp %#x, want %#x %#x", r.DETH.QKey(), r.DETH.SrcQP(), w.deth.qkey, w.deth.srcQP)
			}
			if (r.AtomicETH != nil) != (w.atomic != nil) {
				t.Errorf("atomiceth present %v, want %v", r.AtomicETH != nil, w.atomic != nil)
			} else if a := r.AtomicETH; a != nil && (a.VA() != w.atomic.va || a.RKey() != w.atomic.rkey || a.SwapAdd() != w.atomic.swap || a.Compare() != w.atomic.compare) {
				t.Errorf("atomiceth va %#x rkey %#x swap %d compare %d, want %+v", a.VA(), a.RKey(), a.SwapAdd(), a.Compare(), *w.atomic)
			}
			if (r.AtomicAck != nil) != (w.orig != nil) {
				t.Errorf("atomicacketh present %v, want %v", r.AtomicAck != nil, w.orig != nil)
			} else if w.orig != nil && r.AtomicAck.Orig() != *w.orig {
				t.Errorf("atomicacketh orig %d, want %d", r.AtomicAck.Orig(), *w.orig)
			}
			if (r.ImmDt != nil) != (w.imm != nil) {
				t.Errorf("immdt present %v, want %v", r.ImmDt != nil, w.imm != nil)
			} else if w.imm != nil && r.ImmDt.Value() != *w.imm {
				t.Errorf("immdt %#x, want %#x", r.ImmDt.Value(), *w.imm)
			}
			if r.IETH != nil || r.RDETH != nil || r.XRCETH != nil || r.DCETH != nil {
				t.Error("ieth, rdeth, xrceth or dceth on a frame without them")
			}
			if len(r.Payload) != w.payload {
				t.Errorf("payload %d bytes, want %d", len(r.Payload), w.payload)
			}
			if !r.ICRCOK(pkt) {
				t.Error("icrc does not verify")
			}
		})
	}
}

// TestDecodeCaptures decodes whole captures with gopacket: every frame
// that gopacket's own layers show as UDP to port 4791 or as EtherType
// 0x8915 has a RoCE layer, none else has one, and every RoCE layer's ICRC
// matches the one stored in the frame.
func TestDecodeCaptures(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(committedPcaps, "*.pcap"))
	for _, name := range []string{"rxe-6.1/read_bw.pcap", "rxe-6.1/atomic_bw.pcap", "rxe-6.1/ud_pingpong.pcap",
		"public/magnate3_linux-riscv-dev__soft-roce_mellanox_doc_rocev1_test.pcap",
		"public/scapy_roce_uts__hw_hex_vectors.pcap"} {
		if path := filepath.Join(sharedPcaps, name); fileExists(path) {
			files = append(files, path)
		}
	}
	if len(files) == 0 {
		t.Fatalf("no captures in %s", committedPcaps)
	}
	n := 0
	for _, path := range files {
		for i, data := range readPcap(t, path) {
			pkt := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
			eth, _ := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
			udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
			roce := (udp != nil && udp.DstPort == layers.UDPPort(bth.UDPPort)) || (eth != nil && eth.EthernetType == bth.EtherTypeRoCEv1)
			r, ok := pkt.Layer(LayerTypeRoCE).(*RoCE)
			if ok != roce {
				t.Errorf("%s frame %d: roce layer %v, roce port or ethertype %v", filepath.Base(path), i+1, ok, roce)
				continue
			}
			if !ok {
				continue
			}
			n++
			if !r.ICRCOK(pkt) {
				t.Errorf("%s frame %d: %s icrc does not verify", filepath.Base(path), i+1, r.Info.Name)
			}
		}
	}
	if n == 0 {
		t.Fatal("no roce packets decoded")
	}
	t.Logf("%d roce packets decoded through gopacket", n)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
