package rocelayer

import (
	"bytes"
	"fmt"
	"math/bits"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/uroce/uroce/bth"
)

// tsharkFields are the tshark fields TestDecodeMatchesTshark compares, in
// the order of the columns tsharkDecode returns.
var tsharkFields = []string{
	"frame.number",
	"infiniband.bth.opcode", "infiniband.bth.se", "infiniband.bth.m", "infiniband.bth.padcnt",
	"infiniband.bth.tver", "infiniband.bth.p_key", "infiniband.bth.destqp", "infiniband.bth.a",
	"infiniband.bth.reserved7", "infiniband.bth.psn",
	"infiniband.reth.va", "infiniband.reth.r_key", "infiniband.reth.dmalen",
	"infiniband.aeth.syndrome", "infiniband.aeth.msn",
	"infiniband.deth.q_key", "infiniband.deth.srcqp",
	"infiniband.immdt", "infiniband.ieth",
	"infiniband.atomiceth.swapdt", "infiniband.atomiceth.cmpdt", "infiniband.atomicacketh.origremdt",
	"infiniband.invariant.crc", "data.len",
	"infiniband.grh.tclass", "infiniband.grh.flowlabel", "infiniband.grh.paylen",
	"infiniband.grh.nxthdr", "infiniband.grh.hoplmt", "infiniband.grh.sgid", "infiniband.grh.dgid",
}

// tsharkHeuristics are tshark's heuristic dissectors of InfiniBand
// payloads (tshark 4.0 names; the Ethernet-over-IB one takes a payload
// that starts like an EtherType). tshark runs with them off so that it
// hands every payload to its data dissector and reports its length
// (data.len). TFTP is off too, or it would take the Huawei packets, which
// come from UDP source port 69.
var tsharkHeuristics = []string{"eth_over_ib", "fc_infiniband", "iser_infiniband", "lnet_ib", "rpcrdma_infiniband",
	"sdp_infiniband", "smb_direct_infiniband", "smcr_infiniband", "nvme_rdma", "mellanox_eoib"}

// tsharkDecode runs tshark on a capture and returns, by frame number, the
// values of tsharkFields for every frame its InfiniBand dissector decodes
// (an empty string where a field is absent). It skips the test when
// tshark is not installed.
func tsharkDecode(t *testing.T, path string) map[int]map[string]string {
	t.Helper()
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not on PATH (Debian package tshark)")
	}
	args := []string{"-r", path, "-n", "-d", "udp.port==4791,infiniband", "-Y", "infiniband",
		"-T", "fields", "-E", "separator=|", "-E", "occurrence=f"}
	args = append(args, "--disable-protocol", "tftp")
	for _, h := range tsharkHeuristics {
		args = append(args, "--disable-heuristic", h)
	}
	for _, f := range tsharkFields {
		args = append(args, "-e", f)
	}
	cmd := exec.Command(tshark, args...)
	// An empty home, so that no user preferences change the decoding.
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark %s: %v: %s", path, err, stderr.Bytes())
	}
	rows := map[int]map[string]string{}
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if line == "" {
			continue
		}
		cols := strings.Split(line, "|")
		if len(cols) != len(tsharkFields) {
			t.Fatalf("tshark %s: %d columns in %q, want %d", path, len(cols), line, len(tsharkFields))
		}
		row := map[string]string{}
		for i, f := range tsharkFields {
			row[f] = cols[i]
		}
		n, err := strconv.Atoi(row["frame.number"])
		if err != nil {
			t.Fatalf("tshark %s: frame number %q", path, row["frame.number"])
		}
		rows[n] = row
	}
	return rows
}

// tsharkNum parses a numeric tshark field (decimal, 0x hex, or the plain
// hex of a byte field when hexBytes is set); ok is false when it is absent.
func tsharkNum(t *testing.T, row map[string]string, field string, hexBytes bool) (v uint64, ok bool) {
	t.Helper()
	s := row[field]
	if s == "" {
		return 0, false
	}
	var err error
	switch {
	case hexBytes:
		v, err = strconv.ParseUint(strings.ReplaceAll(s, ":", ""), 16, 64)
	case s == "True":
		v = 1
	case s == "False":
		v = 0
	default:
		v, err = strconv.ParseUint(s, 0, 64)
	}
	if err != nil {
		t.Fatalf("tshark field %s: %q: %v", field, s, err)
	}
	return v, true
}

// TestDecodeMatchesTshark decodes every frame of the committed captures
// (and of the shared ones when present) with gopacket and with tshark's
// InfiniBand dissector, an implementation independent of package bth,
// and compares every field both report: the same frames are RoCE, and
// BTH, RETH, AETH, DETH, ImmDt, IETH, AtomicETH, AtomicAckETH, payload
// length, ICRC and, for RoCEv1, the GRH agree. It skips without tshark.
func TestDecodeMatchesTshark(t *testing.T) {
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("tshark not on PATH (Debian package tshark)")
	}
	files, _ := filepath.Glob(filepath.Join(committedPcaps, "*.pcap"))
	if len(files) == 0 {
		t.Fatalf("no captures in %s", committedPcaps)
	}
	filepath.Walk(sharedPcaps, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && strings.HasSuffix(path, ".pcap") {
			files = append(files, path)
		}
		return nil
	})
	var total atomic.Int64
	// One tshark per capture, in parallel.
	t.Run("captures", func(t *testing.T) {
		for _, path := range files {
			t.Run(filepath.Base(path), func(t *testing.T) {
				t.Parallel()
				rows := tsharkDecode(t, path)
				for i, data := range readPcap(t, path) {
					n := i + 1
					pkt := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
					r, ok := pkt.Layer(LayerTypeRoCE).(*RoCE)
					row := rows[n]
					if ok != (row != nil) {
						t.Errorf("frame %d: roce layer %v, tshark infiniband %v", n, ok, row != nil)
						continue
					}
					if !ok {
						continue
					}
					total.Add(1)
					for _, d := range compareTshark(t, pkt, r, row) {
						t.Errorf("frame %d (%s): %s", n, r.Info.Name, d)
					}
				}
			})
		}
	})
	if total.Load() == 0 {
		t.Fatal("no roce packets compared")
	}
	t.Logf("%d roce packets in %d captures agree with tshark", total.Load(), len(files))
}

// compareTshark returns the differences between the layer r of pkt and
// tshark's decoding row of the same frame.
func compareTshark(t *testing.T, pkt gopacket.Packet, r *RoCE, row map[string]string) []string {
	t.Helper()
	var diffs []string
	check := func(field string, hexBytes bool, present bool, got uint64) {
		want, ok := tsharkNum(t, row, field, hexBytes)
		switch {
		case ok != present:
			diffs = append(diffs, fmt.Sprintf("%s present %v, tshark %v", field, present, ok))
		case ok && want != got:
			diffs = append(diffs, fmt.Sprintf("%s %#x, tshark %#x", field, got, want))
		}
	}
	b2u := func(v bool) uint64 {
		if v {
			return 1
		}
		return 0
	}
	b := r.BTH
	check("infiniband.bth.opcode", false, true, uint64(b.Opcode))
	check("infiniband.bth.se", false, true, b2u(b.SE))
	check("infiniband.bth.m", false, true, b2u(b.MigReq))
	check("infiniband.bth.padcnt", false, true, uint64(b.PadCount))
	check("infiniband.bth.tver", false, true, uint64(b.TVer))
	check("infiniband.bth.p_key", false, true, uint64(b.PKey))
	check("infiniband.bth.destqp", false, true, uint64(b.DestQP))
	check("infiniband.bth.a", false, true, b2u(b.AckReq))
	check("infiniband.bth.reserved7", false, true, uint64(b.Resv7))
	check("infiniband.bth.psn", false, true, uint64(b.PSN))
	if g, ok := pkt.Layer(LayerTypeGRH).(*GRH); ok {
		check("infiniband.grh.tclass", false, true, uint64(g.TrafficClass))
		check("infiniband.grh.flowlabel", false, true, uint64(g.FlowLabel))
		check("infiniband.grh.paylen", false, true, uint64(g.PayloadLength))
		check("infiniband.grh.nxthdr", false, true, uint64(g.NextHeader))
		check("infiniband.grh.hoplmt", false, true, uint64(g.HopLimit))
		sgid, _ := netip.ParseAddr(row["infiniband.grh.sgid"])
		dgid, _ := netip.ParseAddr(row["infiniband.grh.dgid"])
		if sgid != netip.AddrFrom16([16]byte(g.SGID)) || dgid != netip.AddrFrom16([16]byte(g.DGID)) {
			diffs = append(diffs, fmt.Sprintf("gids %v %v, tshark %s %s", g.SGID, g.DGID, row["infiniband.grh.sgid"], row["infiniband.grh.dgid"]))
		}
	}
	if r.Truncated {
		// The capture cut the packet: the layer decodes only the BTH.
		return diffs
	}
	if r.DCETH != nil {
		// tshark does not know the ConnectX DC layout: it reads the DCETH
		// of these RD opcodes as an RDETH and a DETH.
		return diffs
	}
	// tshark shows an AtomicETH's address and R_Key in the RETH fields.
	switch {
	case r.AtomicETH != nil:
		check("infiniband.reth.va", false, true, r.AtomicETH.VA())
		check("infiniband.reth.r_key", false, true, uint64(r.AtomicETH.RKey()))
		check("infiniband.atomiceth.swapdt", false, true, r.AtomicETH.SwapAdd())
		check("infiniband.atomiceth.cmpdt", false, true, r.AtomicETH.Compare())
	case r.RETH != nil:
		check("infiniband.reth.va", false, true, r.RETH.VA())
		check("infiniband.reth.r_key", false, true, uint64(r.RETH.RKey()))
		check("infiniband.reth.dmalen", false, true, uint64(r.RETH.DMALen()))
	default:
		check("infiniband.reth.va", false, false, 0)
	}
	var v uint64
	if r.AETH != nil {
		check("infiniband.aeth.syndrome", false, true, uint64(r.AETH.Syndrome()))
		v = uint64(r.AETH.MSN())
	}
	check("infiniband.aeth.msn", false, r.AETH != nil, v)
	if r.DETH != nil {
		check("infiniband.deth.q_key", false, true, uint64(r.DETH.QKey()))
		v = uint64(r.DETH.SrcQP())
	}
	check("infiniband.deth.srcqp", false, r.DETH != nil, v)
	if r.ImmDt != nil {
		v = uint64(r.ImmDt.Value())
	}
	check("infiniband.immdt", true, r.ImmDt != nil, v)
	if r.IETH != nil {
		v = uint64(r.IETH.RKey())
	}
	check("infiniband.ieth", true, r.IETH != nil, v)
	if r.AtomicAck != nil {
		v = r.AtomicAck.Orig()
	}
	check("infiniband.atomicacketh.origremdt", false, r.AtomicAck != nil, v)
	// tshark shows the ICRC bytes as a big-endian number; the layer keeps
	// them least-significant byte first.
	// tshark does not show the ICRC of a CNP.
	if b.Opcode != bth.OpCNP {
		check("infiniband.invariant.crc", false, true, uint64(bits.ReverseBytes32(r.ICRC)))
	}
	// tshark's data.len counts the pad. It is absent for MADs (QP1), which
	// tshark decodes, and for CNPs, whose 16 reserved bytes are no payload
	// to tshark.
	if b.DestQP != 1 && b.Opcode != bth.OpCNP {
		check("data.len", false, len(r.Payload)+len(r.Pad) > 0, uint64(len(r.Payload)+len(r.Pad)))
	}
	return diffs
}
