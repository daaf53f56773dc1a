package pcaptool

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math/bits"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/internal/pcaptool/pcaptest"
	"github.com/uroce/uroce/pfc"
)

// decodeJSON runs RunDecode --json on paths and returns the objects.
func decodeJSON(t *testing.T, paths ...string) []map[string]any {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := RunDecode(&out, &errOut, paths, true); code != ExitOK {
		t.Fatalf("decode exit %d: %s", code, errOut.String())
	}
	var objs []map[string]any
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		d := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		d.UseNumber()
		if err := d.Decode(&m); err != nil {
			t.Fatalf("invalid JSON %q: %v", sc.Text(), err)
		}
		objs = append(objs, m)
	}
	return objs
}

func num(t *testing.T, m map[string]any, path ...string) uint64 {
	t.Helper()
	var v any = m
	for _, k := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("no %v in %v", path, m)
		}
		v = mm[k]
	}
	n, ok := v.(json.Number)
	if !ok {
		t.Fatalf("%v is %T %v in %v", path, v, v, m)
	}
	u, err := strconv.ParseUint(string(n), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

var requiredKeys = []string{"frame", "src_ip", "dst_ip", "src_port", "dst_port", "opcode", "opcode_name",
	"se", "migreq", "pad", "tver", "pkey", "fecn", "becn", "dest_qp", "ack_req", "psn", "icrc", "icrc_ok", "payload_len"}

func TestDecodeJSONCrafted(t *testing.T) {
	r := newRig(t)
	var frames [][]byte
	frames = append(frames, r.send(13, 1024)...)
	frames = append(frames, r.ack(r.psn.Add(-1), bth.NAKSyndrome(bth.NAKRemoteAccessError), 7))
	req, resp := r.read(100, 1024)
	frames = append(frames, req, resp[0])
	frames = append(frames, r.frame(true, bth.BTHFields{Opcode: bth.OpFetchAdd, DestQP: 0x12, PSN: 5}, nil, func(h *bth.Headers) {
		h.AtomicVA, h.AtomicRKey, h.SwapAdd, h.Compare = 0x1000, 0x42, 3, 9
	}))
	frames = append(frames, r.frame(false, bth.BTHFields{Opcode: bth.OpAtomicAck, DestQP: 0x11, PSN: 5}, nil, func(h *bth.Headers) {
		h.Syndrome, h.MSN, h.AtomicAckOrig = bth.ACKSyndrome(31), 2, 0xfeedface
	}))
	frames = append(frames, r.frame(true, bth.BTHFields{Opcode: bth.OpUDSendOnlyImm, DestQP: 1, SE: true}, []byte("mad"), func(h *bth.Headers) {
		h.QKey, h.SrcQP, h.Imm = 0x80010000, 0x11, 0xabcd
		h.HasVLAN, h.VLANTCI = true, 0xa064
	}))
	frames = append(frames, r.frame(true, bth.BTHFields{Opcode: bth.OpSendLastInv, DestQP: 0x12, PSN: 6, MigReq: true}, []byte("x"), func(h *bth.Headers) {
		h.InvKey = 0x77
		h.SrcIP, h.DstIP = netip.AddrFrom16(h.SrcIP.As16()), netip.AddrFrom16(h.DstIP.As16())
	}))
	ps := pcaptest.Frames(frames...)
	ps = append(ps, pcaptest.Frame{Data: frames[0][:60], OrigLen: len(frames[0])})
	objs := decodeJSON(t, pcaptest.WritePcap(t, ps))
	if len(objs) != len(ps) {
		t.Fatalf("%d objects for %d frames", len(objs), len(ps))
	}
	for i, m := range objs {
		for _, k := range requiredKeys {
			if _, ok := m[k]; !ok && !(i == len(objs)-1 && k == "payload_len") {
				t.Errorf("object %d lacks %q: %v", i, k, m)
			}
		}
		if num(t, m, "frame") != uint64(i+1) {
			t.Errorf("object %d: frame %v", i, m["frame"])
		}
	}
	send := objs[0]
	if send["opcode_name"] != "RC_SEND_ONLY" || num(t, send, "opcode") != 4 || num(t, send, "pad") != 3 || num(t, send, "payload_len") != 13 ||
		send["ack_req"] != true || num(t, send, "psn") != 0xfffffd || num(t, send, "dest_qp") != 0x12 || send["icrc_ok"] != true ||
		send["src_ip"] != "192.0.2.2" || num(t, send, "dst_port") != 4791 || num(t, send, "pkey") != 0xffff {
		t.Errorf("send: %v", send)
	}
	var p bth.Packet
	bth.Parse(frames[0], &p)
	if num(t, send, "icrc") != uint64(p.ICRC()) {
		t.Errorf("icrc %v, want %d", send["icrc"], p.ICRC())
	}
	nak := objs[1]
	if num(t, nak, "aeth", "syndrome") != 0x62 || num(t, nak, "aeth", "msn") != 7 || nak["aeth"].(map[string]any)["kind"] != "nak" ||
		num(t, nak, "aeth", "code") != 2 || nak["aeth"].(map[string]any)["code_name"] != "remote_access_error" {
		t.Errorf("nak: %v", nak["aeth"])
	}
	if num(t, objs[2], "reth", "dma_len") != 100 || num(t, objs[2], "reth", "rkey") != 0x1234 || num(t, objs[2], "reth", "va") != 0x7f0000000000 {
		t.Errorf("read request: %v", objs[2]["reth"])
	}
	if num(t, objs[3], "payload_len") != 100 || num(t, objs[3], "aeth", "syndrome") != 31 {
		t.Errorf("read response: %v", objs[3])
	}
	if num(t, objs[4], "atomic_eth", "swap_add") != 3 || num(t, objs[4], "atomic_eth", "compare") != 9 || num(t, objs[4], "atomic_eth", "rkey") != 0x42 {
		t.Errorf("fetch add: %v", objs[4]["atomic_eth"])
	}
	if num(t, objs[5], "atomic_ack", "orig") != 0xfeedface {
		t.Errorf("atomic ack: %v", objs[5])
	}
	ud := objs[6]
	if num(t, ud, "deth", "qkey") != 0x80010000 || num(t, ud, "deth", "src_qp") != 0x11 || num(t, ud, "immdt") != 0xabcd || ud["se"] != true ||
		num(t, ud, "vlan", "vid") != 100 || num(t, ud, "vlan", "pcp") != 5 {
		t.Errorf("ud: %v", ud)
	}
	inv := objs[7]
	if num(t, inv, "ieth") != 0x77 || inv["migreq"] != true || inv["src_ip"] != "::ffff:192.0.2.2" {
		t.Errorf("send with invalidate over IPv6: %v", inv)
	}
	cut := objs[8]
	if cut["truncated"] != true || cut["icrc"] != nil || cut["icrc_ok"] != nil || num(t, cut, "psn") != 0xfffffd {
		t.Errorf("truncated: %v", cut)
	}
}

func TestDecodeText(t *testing.T) {
	r := newRig(t)
	frames := flat(r.send(13, 1024), [][]byte{r.ack(0xfffffd, bth.RNRSyndrome(14), 3)})
	frames[0] = bytes.Clone(frames[0])
	frames[0][len(frames[0])-6] ^= 1
	var out, errOut bytes.Buffer
	if code := RunDecode(&out, &errOut, []string{pcaptest.WritePcap(t, pcaptest.Frames(frames...))}, false); code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		"1 192.0.2.2:" + strconv.Itoa(int(bth.SourcePort(0, 0x11, 0x12))) + " > 192.0.2.1:4791 RC_SEND_ONLY psn=0xfffffd qp=0x000012 A=1 SE=0 M=0 pad=3 payload=13 icrc=0x",
		"2 192.0.2.1:",
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d %q, want prefix %q", i+1, lines[i], w)
		}
	}
	if !strings.Contains(lines[0], " BAD (computed 0x") || !strings.Contains(lines[1], "AETH(rnr_nak timer=14 (1.28ms) msn=3) payload=0 icrc=0x") ||
		!strings.HasSuffix(lines[1], " ok") {
		t.Errorf("lines:\n%s", out.String())
	}
}

// TestDecodeShared decodes every reference capture and checks each object
// against bth.Parse.
func TestDecodeShared(t *testing.T) {
	files := sharedFiles(t)
	n := 0
	for _, path := range files {
		objs := decodeJSON(t, path)
		frames, err := readAll(t, mustRead(t, path))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range objs {
			if _, ok := m["mac_control"]; ok {
				continue // PAUSE or PFC: not RoCE
			}
			i := int(num(t, m, "frame")) - 1
			var p bth.Packet
			err := bth.Parse(frames[i].Data, &p)
			if err != nil {
				if m["truncated"] != true {
					t.Errorf("%s frame %d: %v but not reported truncated", path, i+1, err)
				}
				continue
			}
			n++
			if num(t, m, "psn") != uint64(p.BTH().PSN()) || num(t, m, "opcode") != uint64(p.Opcode()) || m["icrc_ok"] != p.ICRCOK() ||
				num(t, m, "payload_len") != uint64(p.PayloadN) {
				t.Errorf("%s frame %d: %v", path, i+1, m)
			}
		}
	}
	if n < 5000 {
		t.Errorf("only %d complete RoCE packets decoded", n)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestDecodeAgainstTshark compares opcode, PSN, destination QP, the A
// and SE bits, pad count, DMA length, AETH syndrome and MSN, DETH source
// QP and the ICRC with tshark's dissection, frame by frame, when tshark
// is installed.
func TestDecodeAgainstTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed")
	}
	dir := sharedDir(t)
	files := []string{"rxe-6.1/read_bw.pcap", "rxe-6.1/atomic_bw.pcap", "rxe-6.1/write_bw_cm.pcap", "rxe-6.1/rc_pingpong_pad.pcap",
		"public/magnate3_linux-riscv-dev__soft-roce_mellanox_doc_rocev1_test.pcap", "public/oferby_proxy__roce.pcap",
		"public/sniffer-sport-fixed/magnate3_linux-riscv-dev__soft-roce_rdma-ping_dc_dc-small2.sport-fixed.pcap",
		"public/sniffer-sport-fixed/magnate3_linux-riscv-dev__soft-roce_rdma-ping_uccl_uccl-mini_p2p-test2_rdma-nccl2.sport-fixed.pcap",
		"public/scapy_roce_uts__hw_hex_vectors.pcap"}
	fields := []string{"frame.number", "infiniband.bth.opcode", "infiniband.bth.psn", "infiniband.bth.destqp", "infiniband.bth.a",
		"infiniband.bth.se", "infiniband.bth.padcnt", "infiniband.reth.dmalen", "infiniband.aeth.syndrome", "infiniband.aeth.msn",
		"infiniband.deth.srcqp", "infiniband.invariant.crc"}
	compared := 0
	for _, name := range files {
		path := filepath.Join(dir, name)
		args := []string{"-r", path, "-d", "udp.port==4791,infiniband", "-Y", "infiniband", "-T", "fields", "-E", "separator=\t", "-E", "occurrence=f"}
		for _, f := range fields {
			args = append(args, "-e", f)
		}
		out, err := exec.Command(tshark, args...).Output()
		if err != nil {
			t.Fatalf("tshark %s: %v", name, err)
		}
		ours := map[uint64]map[string]any{}
		for _, m := range decodeJSON(t, path) {
			if _, ok := m["mac_control"]; !ok {
				ours[num(t, m, "frame")] = m
			}
		}
		rows := strings.Split(strings.TrimSpace(string(out)), "\n")
		seen := map[uint64]bool{}
		for _, row := range rows {
			f, _ := strconv.ParseUint(strings.SplitN(row, "\t", 2)[0], 10, 64)
			seen[f] = true
		}
		for f, m := range ours {
			// tshark gives a UDP packet to the dissector of its lower
			// port: Huawei's source port 69 makes it TFTP.
			if !seen[f] && num(t, m, "src_port") >= 1024 {
				t.Errorf("%s frame %d: we decode RoCE, tshark does not", name, f)
			}
		}
		for _, row := range rows {
			col := strings.Split(row, "\t")
			frame, _ := strconv.ParseUint(col[0], 10, 64)
			m := ours[frame]
			if m == nil {
				t.Errorf("%s frame %d: tshark decodes it, we do not", name, frame)
				continue
			}
			check := func(i int, ours uint64, what string) {
				if col[i] == "" {
					return
				}
				var v uint64
				var err error
				switch s := col[i]; {
				case s == "True":
					v = 1
				case s == "False":
					v = 0
				case strings.HasPrefix(s, "0x"):
					v, err = strconv.ParseUint(s[2:], 16, 64)
				default:
					v, err = strconv.ParseUint(s, 10, 64)
				}
				if err != nil || v != ours {
					t.Errorf("%s frame %d: %s tshark %q, ours %d", name, frame, what, col[i], ours)
				}
			}
			b := func(k string) uint64 {
				if m[k] == true {
					return 1
				}
				return 0
			}
			check(1, num(t, m, "opcode"), "opcode")
			check(2, num(t, m, "psn"), "psn")
			check(3, num(t, m, "dest_qp"), "dest qp")
			check(4, b("ack_req"), "ack request")
			check(5, b("se"), "solicited event")
			check(6, num(t, m, "pad"), "pad count")
			if _, dc := m["dceth"]; dc {
				// tshark lays ConnectX DC packets out as standard RD: its
				// extended headers are read from the DCETH bytes.
				compared++
				continue
			}
			if _, ok := m["reth"]; ok {
				check(7, num(t, m, "reth", "dma_len"), "dma length")
			}
			if _, ok := m["aeth"]; ok {
				check(8, num(t, m, "aeth", "syndrome"), "syndrome")
				check(9, num(t, m, "aeth", "msn"), "msn")
			}
			if _, ok := m["deth"]; ok {
				check(10, num(t, m, "deth", "src_qp"), "source qp")
			}
			if m["icrc"] != nil && len(col) > 11 {
				// tshark shows the four ICRC bytes as a big-endian number.
				check(11, uint64(bits.ReverseBytes32(uint32(num(t, m, "icrc")))), "icrc")
			}
			compared++
		}
	}
	t.Logf("%d packets compared with tshark", compared)
	if compared == 0 {
		t.Fatal("nothing compared")
	}
}

// macControlFrames returns a crafted mix of RoCE and MAC Control frames
// and the text line `uroce pcap decode` gives for each ("" for a frame
// it skips).
func macControlFrames(t testing.TB) ([]pcaptest.Frame, []string) {
	r := newRig(t)
	src := net.HardwareAddr{0x52, 0x54, 0, 0, 0, 2}
	pfcFrame := pfc.AppendPFC(nil, src, 0x28, [8]uint16{3: 0xffff, 5: 0, 6: 7}) // time[6] without its enable bit
	tagged := pfc.Fields{Dst: pfc.ReservedAddr, Src: [6]byte(src), HasVLAN: true, VLANTCI: 0x6064, Opcode: pfc.OpPFC, Enable: 0x01, Times: [8]uint16{0: 10}}
	unicast := pfc.AppendPause(nil, src, 0)
	copy(unicast, []byte{0x52, 0x54, 0, 0, 0, 1})
	gate := pfc.AppendPause(nil, src, 1)
	gate[15] = 0x02
	withFCS := append(pfc.AppendPause(nil, src, 0x1234), 0xde, 0xad, 0xbe, 0xef)
	arp := make([]byte, 60)
	copy(arp, pfcFrame[:12])
	arp[12], arp[13] = 0x08, 0x06
	pause := pfc.AppendPause(nil, src, 0xffff)
	frames := []pcaptest.Frame{
		{Data: r.send(13, 1024)[0]},
		{Data: pfcFrame},
		{Data: pause},
		{Data: tagged.Append(nil)},
		{Data: unicast},
		{Data: gate},
		{Data: pfcFrame[:34]},                   // sent without its pad
		{Data: pause[:16], OrigLen: len(pause)}, // cut by the snap length
		{Data: pfc.AppendPFC(nil, src, 0, [8]uint16{1, 2, 3, 4, 5, 6, 7, 8})},
		{Data: arp},
		{Data: withFCS},
		{Data: pfcFrame[:15]}, // cut in the opcode
	}
	m := "52:54:00:00:00:02"
	want := []string{
		"1 192.0.2.2:",
		"2 " + m + " PFC prio3=65535 prio5=0 (enable 0x28)",
		"3 " + m + " PAUSE quanta=65535",
		"4 " + m + " vlan=100 PFC prio0=10 (enable 0x01)",
		"5 " + m + " > 52:54:00:00:00:01 PAUSE quanta=0",
		"6 " + m + " MAC_CONTROL opcode=0x0002 (unsupported)",
		"7 " + m + " PFC prio3=65535 prio5=0 (enable 0x28) MALFORMED (frame of 34 bytes is shorter than the 60-byte minimum)",
		"8 " + m + " PAUSE truncated (16 of 60 bytes captured)",
		"9 " + m + " PFC (enable 0x00)",
		"",
		"11 " + m + " PAUSE quanta=4660",
		"12 " + m + " MAC_CONTROL MALFORMED (frame of 15 bytes is shorter than the 60-byte minimum)",
	}
	return frames, want
}

func TestDecodeMACControlText(t *testing.T) {
	frames, want := macControlFrames(t)
	for _, path := range []string{pcaptest.WritePcap(t, frames), pcaptest.WritePcapng(t, frames)} {
		var out, errOut bytes.Buffer
		if code := RunDecode(&out, &errOut, []string{path}, false); code != ExitOK || errOut.Len() > 0 {
			t.Fatalf("exit %d: %s", code, errOut.String())
		}
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		var wantLines []string
		for _, w := range want {
			if w != "" {
				wantLines = append(wantLines, w)
			}
		}
		if len(lines) != len(wantLines) {
			t.Fatalf("%s: %d lines, want %d:\n%s", filepath.Ext(path), len(lines), len(wantLines), out.String())
		}
		for i, w := range wantLines {
			if i == 0 && strings.HasPrefix(lines[i], w) && strings.HasSuffix(lines[i], " ok") {
				continue // the RoCE packet, as TestDecodeText checks it
			}
			if lines[i] != w {
				t.Errorf("%s line %d:\n got %q\nwant %q", filepath.Ext(path), i+1, lines[i], w)
			}
		}
	}
}

func TestDecodeMACControlJSON(t *testing.T) {
	frames, _ := macControlFrames(t)
	objs := decodeJSON(t, pcaptest.WritePcap(t, frames))
	byFrame := map[uint64]map[string]any{}
	for _, m := range objs {
		byFrame[num(t, m, "frame")] = m
	}
	if len(objs) != len(frames)-1 || byFrame[10] != nil {
		t.Fatalf("%d objects for %d frames (one not decoded)", len(objs), len(frames))
	}
	if _, ok := byFrame[1]["mac_control"]; ok || byFrame[1]["opcode_name"] != "RC_SEND_ONLY" {
		t.Errorf("RoCE packet: %v", byFrame[1])
	}
	mc := func(i uint64) map[string]any {
		t.Helper()
		c, ok := byFrame[i]["mac_control"].(map[string]any)
		if !ok {
			t.Fatalf("frame %d: no mac_control in %v", i, byFrame[i])
		}
		return c
	}
	prioQuanta := func(i uint64) []uint64 {
		t.Helper()
		a, _ := mc(i)["prio_quanta"].([]any)
		var out []uint64
		for _, v := range a {
			n, _ := strconv.ParseUint(string(v.(json.Number)), 10, 64)
			out = append(out, n)
		}
		return out
	}
	if c := mc(2); c["name"] != "PFC" || num(t, c, "opcode") != 0x0101 || num(t, c, "enable") != 0x28 ||
		!slices.Equal(prioQuanta(2), []uint64{0, 0, 0, 65535, 0, 0, 7, 0}) {
		t.Errorf("pfc: %v", c)
	}
	if m := byFrame[2]; m["src_mac"] != "52:54:00:00:00:02" || m["dst_mac"] != "01:80:c2:00:00:01" || m["time"] == nil || m["malformed"] != nil {
		t.Errorf("pfc: %v", m)
	}
	if c := mc(3); c["name"] != "PAUSE" || num(t, c, "opcode") != 1 || num(t, c, "quanta") != 65535 {
		t.Errorf("pause: %v", c)
	}
	if num(t, byFrame[4], "vlan", "vid") != 100 || num(t, byFrame[4], "vlan", "pcp") != 3 || num(t, mc(4), "enable") != 1 {
		t.Errorf("tagged: %v", byFrame[4])
	}
	if byFrame[5]["dst_mac"] != "52:54:00:00:00:01" || num(t, mc(5), "quanta") != 0 {
		t.Errorf("unicast: %v", byFrame[5])
	}
	if c := mc(6); c["name"] != "unsupported" || num(t, c, "opcode") != 2 || byFrame[6]["malformed"] != nil {
		t.Errorf("gate: %v", byFrame[6])
	}
	if m := byFrame[7]; m["malformed"] != "frame of 34 bytes is shorter than the 60-byte minimum" || num(t, mc(7), "enable") != 0x28 {
		t.Errorf("short: %v", m)
	}
	if m := byFrame[8]; m["truncated"] != true || num(t, m, "cap_len") != 16 || num(t, m, "orig_len") != 60 || mc(8)["quanta"] != nil {
		t.Errorf("cut: %v", m)
	}
	if len(mc(12)) != 0 || byFrame[12]["malformed"] == nil {
		t.Errorf("cut in the opcode: %v", byFrame[12])
	}
}

// TestDecodeMACControlAgainstTshark compares the opcode, PAUSE time,
// PFC enable vector and the eight PFC times with tshark's dissection,
// when tshark is installed.
func TestDecodeMACControlAgainstTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed")
	}
	frames, _ := macControlFrames(t)
	path := pcaptest.WritePcap(t, frames)
	fields := []string{"frame.number", "macc.opcode", "macc.pause_time", "macc.cbfc.enbv"}
	for n := range 8 {
		fields = append(fields, "macc.cbfc.pause_time.c"+strconv.Itoa(n))
	}
	args := []string{"-r", path, "-Y", "macc", "-T", "fields", "-E", "separator=\t"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command(tshark, args...).Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	ours := map[uint64]map[string]any{}
	for _, m := range decodeJSON(t, path) {
		ours[num(t, m, "frame")] = m
	}
	compared := 0
	for _, row := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		col := strings.Split(row, "\t")
		frame, _ := strconv.ParseUint(col[0], 10, 64)
		m := ours[frame]
		c, ok := m["mac_control"].(map[string]any)
		if !ok || m["malformed"] != nil || m["truncated"] != nil {
			continue // tshark dissects what fits of frames a receiver drops
		}
		parse := func(s string) uint64 {
			v, err := strconv.ParseUint(s, 0, 64) // decimal, or 0x and hex digits
			if err != nil {
				t.Fatalf("frame %d: tshark value %q", frame, s)
			}
			return v
		}
		if parse(col[1]) != num(t, c, "opcode") {
			t.Errorf("frame %d: opcode tshark %s, ours %v", frame, col[1], c["opcode"])
		}
		switch c["name"] {
		case "PAUSE":
			if parse(col[2]) != num(t, c, "quanta") {
				t.Errorf("frame %d: pause time tshark %s, ours %v", frame, col[2], c["quanta"])
			}
		case "PFC":
			if parse(col[3]) != num(t, c, "enable") {
				t.Errorf("frame %d: enable vector tshark %s, ours %v", frame, col[3], c["enable"])
			}
			q := c["prio_quanta"].([]any)
			for n := range 8 {
				if ts := col[4+n]; ts != "" && ts != string(q[n].(json.Number)) {
					t.Errorf("frame %d: time[%d] tshark %s, ours %v", frame, n, ts, q[n])
				}
			}
		}
		compared++
	}
	if compared < 6 {
		t.Errorf("%d frames compared with tshark:\n%s", compared, out)
	}
}
