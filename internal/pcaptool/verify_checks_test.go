package pcaptool

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/internal/pcaptool/pcaptest"
)

// wantFinding is a finding a test expects: its frame, severity, check
// and a part of its message.
type wantFinding struct {
	frame int
	sev   Severity
	check string
	msg   string
}

// verifyFrames writes frames as a pcap file and verifies it, returning
// the findings and the counts.
func verifyFrames(t *testing.T, frames [][]byte) ([]*Finding, Counts) {
	t.Helper()
	var got []*Finding
	v := NewVerifier(func(f *Finding) { got = append(got, f) })
	if err := readFile(pcaptest.WritePcap(t, pcaptest.Frames(frames...)), v.Frame); err != nil {
		t.Fatal(err)
	}
	return got, v.Counts
}

// checkFindings checks that got holds exactly the findings of want, in
// order.
func checkFindings(t *testing.T, got []*Finding, want []wantFinding) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		g, w := got[i], want[i]
		ok = g.Frame == w.frame && g.Severity == w.sev && g.Check == w.check && strings.Contains(g.Message, w.msg)
	}
	if ok {
		return
	}
	var b strings.Builder
	for _, g := range got {
		b.WriteString("\n\t" + itoa(g.Frame) + ": " + g.Severity.String() + ": " + g.Check + ": " + g.Message)
	}
	for _, w := range want {
		b.WriteString("\n\twant " + itoa(w.frame) + ": " + w.sev.String() + ": " + w.check + ": ..." + w.msg + "...")
	}
	t.Errorf("findings:%s", b.String())
}

// req returns A's request packet op with n payload bytes at the next
// PSN. The RETH fields are set for the opcodes that carry one.
func (r *rig) req(op bth.Opcode, n int) []byte {
	r.t.Helper()
	f := r.frame(true, bth.BTHFields{Opcode: op, DestQP: 0x12, PSN: r.psn}, bytes.Repeat([]byte{0x5a}, n), func(h *bth.Headers) {
		h.VA, h.RKey, h.DMALen = 0x7f0000000000, 0x1234, uint32(n)
	})
	r.psn = r.psn.Next()
	return f
}

// atomic returns A's atomic request op (compare and swap or fetch and
// add) at the next PSN.
func (r *rig) atomic(op bth.Opcode) []byte {
	r.t.Helper()
	f := r.frame(true, bth.BTHFields{Opcode: op, DestQP: 0x12, PSN: r.psn, AckReq: true}, nil, func(h *bth.Headers) {
		h.AtomicVA, h.AtomicRKey, h.SwapAdd, h.Compare = 0x1000, 0x42, 1, 0
	})
	r.psn = r.psn.Next()
	return f
}

// atomicAck returns B's atomic acknowledgement of psn.
func (r *rig) atomicAck(psn bth.PSN, msn uint32) []byte {
	r.t.Helper()
	return r.frame(false, bth.BTHFields{Opcode: bth.OpAtomicAck, DestQP: 0x11, PSN: psn}, nil, func(h *bth.Headers) {
		h.Syndrome, h.MSN, h.AtomicAckOrig = bth.ACKSyndrome(31), msn, 0xfeedface
	})
}

// fixICRC rewrites the ICRC of frame f to match its bytes.
func fixICRC(t *testing.T, f []byte) {
	t.Helper()
	var p bth.Packet
	if err := bth.Parse(f, &p); err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(f[p.End-bth.ICRCLen:], p.ComputeICRC())
}

func TestVerifySequence(t *testing.T) {
	ack := bth.ACKSyndrome(31)
	tests := []struct {
		name   string
		frames func(r *rig) [][]byte
		want   []wantFinding
	}{
		{"first while unfinished", func(r *rig) [][]byte {
			return [][]byte{r.req(bth.OpSendFirst, 1024), r.req(bth.OpSendOnly, 64)}
		}, []wantFinding{{2, SevFlow, "sequence", "RC_SEND_ONLY at psn 0xfffffe while a send message is unfinished"}}},
		{"middle without first", func(r *rig) [][]byte {
			return [][]byte{r.req(bth.OpSendOnly, 64), r.req(bth.OpSendMiddle, 1024)}
		}, []wantFinding{{2, SevFlow, "sequence", "RC_SEND_MIDDLE at psn 0xfffffe without a first packet"}}},
		{"last after a whole message", func(r *rig) [][]byte {
			return append(r.send(2500, 1024), r.req(bth.OpSendLast, 64))
		}, []wantFinding{{4, SevFlow, "sequence", "RC_SEND_LAST at psn 0x000000 without a first packet"}}},
		{"write continues a send", func(r *rig) [][]byte {
			return [][]byte{r.req(bth.OpSendFirst, 1024), r.req(bth.OpWriteLast, 64)}
		}, []wantFinding{{2, SevFlow, "sequence", "RC_RDMA_WRITE_LAST continues a send message"}}},
		{"first middle last", func(r *rig) [][]byte {
			f := r.send(2500, 1024)
			f = append(f, r.ack(r.psn.Add(-1), ack, 1))
			return append(f, r.send(64, 1024)...)
		}, nil},
		{"write then send", func(r *rig) [][]byte {
			return [][]byte{r.req(bth.OpWriteFirst, 1024), r.req(bth.OpWriteMiddle, 1024), r.req(bth.OpWriteLast, 64), r.req(bth.OpSendOnly, 64)}
		}, nil},
		{"capture starts inside a message", func(r *rig) [][]byte {
			return [][]byte{r.req(bth.OpSendMiddle, 1024), r.req(bth.OpSendLast, 64), r.req(bth.OpSendOnly, 64)}
		}, nil},
		{"gap inside a message", func(r *rig) [][]byte {
			f := r.send(2500, 1024)
			return [][]byte{f[0], f[2]}
		}, []wantFinding{{2, SevFlow, "psn_gap", "expected 0xfffffe, got 0xffffff (1 missing)"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := verifyFrames(t, tt.frames(newRig(t)))
			checkFindings(t, got, tt.want)
		})
	}
}

func TestVerifyMTU(t *testing.T) {
	tests := []struct {
		name   string
		frames func(r *rig) [][]byte
		want   []wantFinding
	}{
		{"first packet not a path mtu", func(r *rig) [][]byte {
			return [][]byte{r.req(bth.OpSendFirst, 1000), r.req(bth.OpSendLast, 64)}
		}, []wantFinding{{1, SevFlow, "mtu", "RC_SEND_FIRST carries 1000 bytes, not a path mtu"}}},
		{"middle packet short", func(r *rig) [][]byte {
			return [][]byte{r.req(bth.OpSendFirst, 1024), r.req(bth.OpSendMiddle, 512), r.req(bth.OpSendLast, 64)}
		}, []wantFinding{{2, SevFlow, "mtu", "RC_SEND_MIDDLE carries 512 bytes, the path mtu is 1024 (from frame 1)"}}},
		{"only packet above the mtu", func(r *rig) [][]byte {
			return append(r.send(2500, 1024), r.req(bth.OpSendOnly, 2048))
		}, []wantFinding{{4, SevFlow, "mtu", "RC_SEND_ONLY carries 2048 bytes, more than the path mtu 1024 (from frame 1)"}}},
		{"above the mtu of a read's psn count", func(r *rig) [][]byte {
			req, _ := r.read(3000, 1024)
			return [][]byte{req, r.req(bth.OpSendOnly, 2048)}
		}, []wantFinding{{2, SevFlow, "mtu", "RC_SEND_ONLY carries 2048 bytes, more than the path mtu 1024 (from frame 1)"}}},
		{"read responses not a path mtu", func(r *rig) [][]byte {
			req, resp := r.read(3000, 1000)
			return append([][]byte{req}, resp...)
		}, []wantFinding{
			{2, SevFlow, "mtu", "RC_RDMA_READ_RESPONSE_FIRST carries 1000 bytes, not a path mtu"},
			{3, SevFlow, "mtu", "RC_RDMA_READ_RESPONSE_MIDDLE carries 1000 bytes, not a path mtu"},
		}},
		{"only packet at the mtu", func(r *rig) [][]byte {
			return append(r.send(2500, 1024), r.req(bth.OpSendOnly, 1024))
		}, nil},
		{"at the mtu of a read's psn count", func(r *rig) [][]byte {
			req, _ := r.read(3000, 1024)
			return [][]byte{req, r.req(bth.OpSendOnly, 1024)}
		}, nil},
		{"read responses at the mtu", func(r *rig) [][]byte {
			req, resp := r.read(3000, 1024)
			return append(append([][]byte{req}, resp...), r.req(bth.OpSendOnly, 1024))
		}, nil},
		{"first packet of 4096", func(r *rig) [][]byte {
			return [][]byte{r.req(bth.OpWriteFirst, 4096), r.req(bth.OpWriteLast, 4096)}
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := verifyFrames(t, tt.frames(newRig(t)))
			checkFindings(t, got, tt.want)
		})
	}
}

func TestVerifyAckBack(t *testing.T) {
	ack := bth.ACKSyndrome(31)
	tests := []struct {
		name   string
		frames func(r *rig) [][]byte
		want   []wantFinding
	}{
		{"ack behind", func(r *rig) [][]byte {
			f := flat(r.send(64, 1024), [][]byte{r.ack(0xfffffd, ack, 1)}, r.send(64, 1024))
			return append(f, r.ack(0xfffffe, ack, 2), r.ack(0xfffffd, ack, 2))
		}, []wantFinding{{5, SevFlow, "ack", "ack for psn 0xfffffd is behind the previous ack (0xfffffe)"}}},
		{"ack behind across the wrap", func(r *rig) [][]byte {
			f := flat(r.send(64, 1024), r.send(64, 1024), r.send(64, 1024), r.send(64, 1024))
			return append(f, r.ack(0x000000, ack, 4), r.ack(0xffffff, ack, 4))
		}, []wantFinding{{6, SevFlow, "ack", "ack for psn 0xffffff is behind the previous ack (0x000000)"}}},
		{"msn back", func(r *rig) [][]byte {
			f := flat(r.send(64, 1024), [][]byte{r.ack(0xfffffd, ack, 1)}, r.send(64, 1024), [][]byte{r.ack(0xfffffe, ack, 2)}, r.send(64, 1024))
			return append(f, r.ack(0xffffff, ack, 1))
		}, []wantFinding{{6, SevFlow, "msn", "msn went back from 2 (frame 4) to 1"}}},
		{"acks in order", func(r *rig) [][]byte {
			f := flat(r.send(64, 1024), [][]byte{r.ack(0xfffffd, ack, 1)}, r.send(64, 1024))
			return append(f, r.ack(0xfffffe, ack, 2))
		}, nil},
		{"ack repeated", func(r *rig) [][]byte {
			return append(r.send(64, 1024), r.ack(0xfffffd, ack, 1), r.ack(0xfffffd, ack, 1))
		}, nil},
		{"acks across the wrap", func(r *rig) [][]byte {
			f := flat(r.send(64, 1024), r.send(64, 1024), r.send(64, 1024), r.send(64, 1024))
			return append(f, r.ack(0xffffff, ack, 3), r.ack(0x000000, ack, 4))
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := verifyFrames(t, tt.frames(newRig(t)))
			checkFindings(t, got, tt.want)
		})
	}
}

func TestVerifyAtomicAck(t *testing.T) {
	ack := bth.ACKSyndrome(31)
	tests := []struct {
		name   string
		frames func(r *rig) [][]byte
		want   []wantFinding
	}{
		{"atomic ack for a send", func(r *rig) [][]byte {
			f := flat(r.send(64, 1024), r.send(64, 1024))
			return append(f, r.ack(0xfffffd, ack, 1), r.atomicAck(0xfffffe, 2))
		}, []wantFinding{{4, SevFlow, "atomic", "atomic acknowledge for psn 0xfffffe matches no atomic request"}}},
		{"atomic ack past the atomic", func(r *rig) [][]byte {
			f := [][]byte{r.atomic(bth.OpFetchAdd), r.atomicAck(0xfffffd, 1), r.atomic(bth.OpCompareSwap)}
			return append(f, r.atomicAck(0xffffff, 2))
		}, []wantFinding{{4, SevFlow, "atomic", "atomic acknowledge for psn 0xffffff matches no atomic request"}}},
		{"fetch add answered", func(r *rig) [][]byte {
			return [][]byte{r.atomic(bth.OpFetchAdd), r.atomicAck(0xfffffd, 1)}
		}, nil},
		{"compare swap after a send", func(r *rig) [][]byte {
			f := append(r.send(64, 1024), r.ack(0xfffffd, ack, 1), r.atomic(bth.OpCompareSwap))
			return append(f, r.atomicAck(0xfffffe, 2))
		}, nil},
		{"two atomics answered", func(r *rig) [][]byte {
			f := [][]byte{r.atomic(bth.OpFetchAdd), r.atomicAck(0xfffffd, 1), r.atomic(bth.OpCompareSwap)}
			return append(f, r.atomicAck(0xfffffe, 2))
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := verifyFrames(t, tt.frames(newRig(t)))
			checkFindings(t, got, tt.want)
		})
	}
}

func TestVerifyIPv4Checksum(t *testing.T) {
	const ip = 14 // the IPv4 header, after the Ethernet header
	fixChecksum := func(f []byte) {
		f[ip+10], f[ip+11] = 0, 0
		binary.BigEndian.PutUint16(f[ip+10:], ^csum(f[ip:ip+20]))
	}
	tests := []struct {
		name string
		edit func(f []byte)
		bad  bool
	}{
		{"checksum flipped", func(f []byte) { f[ip+11] ^= 0x01 }, true},
		{"ttl changed, checksum stale", func(f []byte) { f[ip+8]-- }, true},
		{"tos changed, checksum stale", func(f []byte) { f[ip+1] |= 0x03 }, true},
		{"as encoded", func(f []byte) {}, false},
		{"ttl changed, checksum updated", func(f []byte) { f[ip+8]--; fixChecksum(f) }, false},
		{"tos changed, checksum updated", func(f []byte) { f[ip+1] |= 0x03; fixChecksum(f) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			frames := append(r.send(64, 1024), r.ack(0xfffffd, bth.ACKSyndrome(31), 1))
			tt.edit(frames[1])
			got, c := verifyFrames(t, frames)
			var want []wantFinding
			if tt.bad {
				want = []wantFinding{{2, SevError, "checksum", "bad ipv4 header checksum"}}
			}
			checkFindings(t, got, want)
			// TOS, TTL and the header checksum are left out of the ICRC.
			if c.ICRCOK != 2 || c.ICRCBad != 0 {
				t.Errorf("%d icrc ok, %d bad, want 2 ok", c.ICRCOK, c.ICRCBad)
			}
			wantBad := 0
			if tt.bad {
				wantBad = 1
			}
			if c.Malformed != wantBad || c.Errors != wantBad {
				t.Errorf("%d malformed, %d errors, want %d", c.Malformed, c.Errors, wantBad)
			}
		})
	}
}

func TestVerifyUDPChecksum(t *testing.T) {
	v6 := func(h *bth.Headers) {
		h.SrcIP, h.DstIP = netip.MustParseAddr("2001:db8::2"), netip.MustParseAddr("2001:db8::1")
	}
	tests := []struct {
		name     string
		checksum bool // compute the UDP checksum
		ipv6     bool
		edit     func(t *testing.T, f []byte, p *bth.Packet)
		bad      bool
	}{
		{"checksum flipped", true, false, func(t *testing.T, f []byte, p *bth.Packet) { f[p.L4+7] ^= 0x01 }, true},
		{"checksum flipped over ipv6", true, true, func(t *testing.T, f []byte, p *bth.Packet) { f[p.L4+7] ^= 0x01 }, true},
		{"payload changed, icrc updated, checksum stale", true, false, func(t *testing.T, f []byte, p *bth.Packet) {
			f[p.PayloadAt] ^= 0xff
			fixICRC(t, f)
		}, true},
		{"checksum computed", true, false, func(t *testing.T, f []byte, p *bth.Packet) {}, false},
		{"checksum computed over ipv6", true, true, func(t *testing.T, f []byte, p *bth.Packet) {}, false},
		{"checksum zero", false, false, func(t *testing.T, f []byte, p *bth.Packet) {}, false},
		{"checksum zero, payload changed, icrc updated", false, false, func(t *testing.T, f []byte, p *bth.Packet) {
			f[p.PayloadAt] ^= 0xff
			fixICRC(t, f)
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			f := r.frame(true, bth.BTHFields{Opcode: bth.OpSendOnly, DestQP: 0x12, PSN: r.psn, AckReq: true}, bytes.Repeat([]byte{0xa5}, 64),
				func(h *bth.Headers) {
					h.UDPChecksum = tt.checksum
					if tt.ipv6 {
						v6(h)
					}
				})
			var p bth.Packet
			if err := bth.Parse(f, &p); err != nil {
				t.Fatal(err)
			}
			if stored := binary.BigEndian.Uint16(f[p.L4+6:]); (stored != 0) != tt.checksum {
				t.Fatalf("udp checksum field 0x%04x", stored)
			}
			tt.edit(t, f, &p)
			got, c := verifyFrames(t, [][]byte{f})
			var want []wantFinding
			if tt.bad {
				want = []wantFinding{{1, SevError, "checksum", "bad udp checksum"}}
			}
			checkFindings(t, got, want)
			// The UDP checksum is left out of the ICRC.
			if c.ICRCOK != 1 || c.ICRCBad != 0 {
				t.Errorf("%d icrc ok, %d bad, want 1 ok", c.ICRCOK, c.ICRCBad)
			}
			code, lines, _ := verify(t, VerifyOptions{}, pcaptest.WritePcap(t, pcaptest.Frames(f)))
			wantCode := ExitOK
			if tt.bad {
				wantCode = ExitFound
			}
			if code != wantCode {
				t.Errorf("exit %d, want %d: %q", code, wantCode, lines)
			}
		})
	}
}

// FLUSH and ATOMIC_WRITE are answered by a READ response ONLY of no
// bytes, as rdma_rxe answers them.
func TestVerifyPlacement(t *testing.T) {
	placedResp := func(r *rig, psn bth.PSN, msn uint32) []byte {
		return r.frame(false, bth.BTHFields{Opcode: bth.OpReadRespOnly, DestQP: 0x11, PSN: psn}, nil, func(h *bth.Headers) {
			h.Syndrome, h.MSN = bth.ACKSyndrome(31), msn
		})
	}
	flush := func(r *rig) []byte {
		f := r.frame(true, bth.BTHFields{Opcode: bth.OpFlush, DestQP: 0x12, PSN: r.psn, AckReq: true}, nil, func(h *bth.Headers) {
			h.FETH, h.VA, h.RKey, h.DMALen = bth.FETHValue(1, 0), 0x1000, 0x42, 64
		})
		r.psn = r.psn.Next()
		return f
	}
	aw := func(r *rig) []byte {
		f := r.frame(true, bth.BTHFields{Opcode: bth.OpAtomicWrite, DestQP: 0x12, PSN: r.psn, AckReq: true}, make([]byte, 8), func(h *bth.Headers) {
			h.VA, h.RKey, h.DMALen = 0x1000, 0x42, 8
		})
		r.psn = r.psn.Next()
		return f
	}
	tests := []struct {
		name   string
		frames func(r *rig) [][]byte
		want   []wantFinding
	}{
		{"both answered", func(r *rig) [][]byte {
			return [][]byte{aw(r), placedResp(r, 0xfffffd, 1), flush(r), placedResp(r, 0xfffffe, 2)}
		}, nil},
		{"answered twice", func(r *rig) [][]byte {
			return [][]byte{aw(r), placedResp(r, 0xfffffd, 1), placedResp(r, 0xfffffd, 1)}
		}, []wantFinding{{3, SevFlow, "duplicate", "answered again"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := verifyFrames(t, tt.frames(newRig(t)))
			checkFindings(t, got, tt.want)
		})
	}
}
