package pcaptool

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/uroce/uroce/bth"
)

// sharedDir returns ../shared/pcaps beside the repository, or skips.
func sharedDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join("..", "..", "..", "shared", "pcaps")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("reference captures absent: %v", err)
	}
	return dir
}

// sharedFiles lists every capture under ../shared/pcaps.
func sharedFiles(t testing.TB) []string {
	dir := sharedDir(t)
	var files []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".pcap") || strings.HasSuffix(p, ".pcapng")) {
			files = append(files, p)
		}
		return nil
	})
	return files
}

// rig builds RoCE frames between two documentation addresses: host A
// (192.0.2.2, QP 0x11) is the requester, host B (192.0.2.1, QP 0x12)
// the responder.
type rig struct {
	t        testing.TB
	ipID     uint16
	psn      bth.PSN // next request PSN
	msn      uint32
	requests int
	madPSN   [2]bth.PSN // next PSN of QP1 at A and at B
	loop     bool       // A and B are one host, 192.0.2.2
}

func newRig(t testing.TB) *rig { return &rig{t: t, psn: 0xfffffd} }

func (r *rig) frame(fromA bool, f bth.BTHFields, payload []byte, set func(h *bth.Headers)) []byte {
	r.t.Helper()
	h := bth.Headers{L2L3: bth.L2L3{
		DstMAC: [6]byte{0x52, 0x54, 0, 0, 0, 1}, SrcMAC: [6]byte{0x52, 0x54, 0, 0, 0, 2},
		SrcIP: netip.MustParseAddr("192.0.2.2"), DstIP: netip.MustParseAddr("192.0.2.1"),
		SrcPort: bth.SourcePort(0, 0x11, 0x12), IPID: r.ipID,
	}, BTH: f}
	r.ipID++
	h.BTH.PKey = 0xffff
	if !fromA {
		h.SrcIP, h.DstIP = h.DstIP, h.SrcIP
		h.SrcMAC, h.DstMAC = h.DstMAC, h.SrcMAC
	}
	if r.loop {
		h.SrcIP, h.DstIP = netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.2")
	}
	if set != nil {
		set(&h)
	}
	buf := make([]byte, h.FrameLen(len(payload)))
	if _, err := bth.Encode(buf, &h, payload); err != nil {
		r.t.Fatal(err)
	}
	return buf
}

// send returns the packets of a SEND of n bytes at path MTU mtu, from A.
func (r *rig) send(n, mtu int) [][]byte {
	var out [][]byte
	data := bytes.Repeat([]byte{0xa5}, n)
	for off := 0; off == 0 || off < n; off += mtu {
		chunk := data[off:min(off+mtu, n)]
		var op bth.Opcode
		switch {
		case n <= mtu:
			op = bth.OpSendOnly
		case off == 0:
			op = bth.OpSendFirst
		case off+mtu >= n:
			op = bth.OpSendLast
		default:
			op = bth.OpSendMiddle
		}
		last := op == bth.OpSendOnly || op == bth.OpSendLast
		out = append(out, r.frame(true, bth.BTHFields{Opcode: op, DestQP: 0x12, PSN: r.psn, AckReq: last}, chunk, nil))
		r.psn = r.psn.Next()
	}
	r.requests++
	return out
}

// ack returns B's acknowledgement of psn with syndrome syn.
func (r *rig) ack(psn bth.PSN, syn bth.Syndrome, msn uint32) []byte {
	return r.frame(false, bth.BTHFields{Opcode: bth.OpAck, DestQP: 0x11, PSN: psn}, nil, func(h *bth.Headers) {
		h.Syndrome, h.MSN = syn, msn
	})
}

// read returns A's READ request for n bytes (consuming its PSNs at mtu)
// and B's responses.
func (r *rig) read(n, mtu int) (req []byte, resp [][]byte) {
	start := r.psn
	req = r.frame(true, bth.BTHFields{Opcode: bth.OpReadRequest, DestQP: 0x12, PSN: start, AckReq: true}, nil, func(h *bth.Headers) {
		h.VA, h.RKey, h.DMALen = 0x7f0000000000, 0x1234, uint32(n)
	})
	r.msn++
	psn := start
	for off := 0; off == 0 || off < n; off += mtu {
		var op bth.Opcode
		switch {
		case n <= mtu:
			op = bth.OpReadRespOnly
		case off == 0:
			op = bth.OpReadRespFirst
		case off+mtu >= n:
			op = bth.OpReadRespLast
		default:
			op = bth.OpReadRespMiddle
		}
		msn := r.msn
		resp = append(resp, r.frame(false, bth.BTHFields{Opcode: op, DestQP: 0x11, PSN: psn}, make([]byte, min(mtu, n-off)),
			func(h *bth.Headers) { h.Syndrome, h.MSN = bth.ACKSyndrome(31), msn }))
		psn = psn.Next()
	}
	r.psn = psn
	return req, resp
}

func flat(groups ...[][]byte) [][]byte {
	var out [][]byte
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}
