package bth

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

// seedFrames returns frames of every shape for the fuzz corpora: random
// headers (IPv4 with and without options, IPv6, RoCEv1, VLAN, DC) with
// short payloads.
func seedFrames() [][]byte {
	rng := rand.New(rand.NewPCG(42, 42))
	var out [][]byte
	for i := 0; i < 24; i++ {
		out = append(out, randomFrame(rng))
	}
	for _, op := range []Opcode{OpCNP, OpAck, OpReadRequest, OpSendOnly} {
		h := testHeaders(op == OpSendOnly, op)
		buf := make([]byte, h.FrameLen(5))
		Encode(buf, &h, []byte("fuzz!"))
		out = append(out, buf)
	}
	return out
}

// canonical reports whether Encode(Headers(p)) must give p's bytes back:
// checksums and ICRC valid, the pad what the payload length implies, and
// no reserved byte set outside the BTH (those are not kept in Headers).
func canonical(p *Packet) bool {
	if !p.Info.Valid || !p.ICRCOK() || !p.IPv4ChecksumOK() || !p.UDPChecksumOK() || p.Pad != -p.PayloadN&3 {
		return false
	}
	if p.Version == 1 && p.Frame[p.L3]>>4 != 6 {
		return false
	}
	f := p.Frame
	for _, c := range []struct {
		h   Hdr
		off int
	}{{HdrDETH, 4}, {HdrRDETH, 0}, {HdrXRCETH, 0}} {
		if o := p.Info.Offset(c.h); o >= 0 && f[p.BTHOff+o+c.off] != 0 {
			return false
		}
	}
	if o := p.Info.Offset(HdrCNPPad); o >= 0 && !bytes.Equal(f[p.BTHOff+o:p.BTHOff+o+CNPPadLen], make([]byte, CNPPadLen)) {
		return false
	}
	return true
}

// FuzzParse parses arbitrary frames. Parse must not panic; a frame it
// accepts must give working accessors and survive decode, encode and
// parse again with the same headers, a valid ICRC and checksums, and
// the encoding must be stable; a canonical frame must come back byte
// for byte.
func FuzzParse(f *testing.F) {
	for _, fr := range seedFrames() {
		f.Add(fr)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		var p Packet
		err := Parse(frame, &p)
		if err != nil && !errors.Is(err, ErrBadOpcode) {
			return
		}
		touchAll(&p)
		var h Headers
		p.Headers(&h)
		buf := make([]byte, h.FrameLen(p.PayloadN))
		n, err := Encode(buf, &h, p.Payload())
		if err != nil {
			t.Fatalf("encode of a parsed frame: %v", err)
		}
		var q Packet
		if err := Parse(buf[:n], &q); err != nil && !errors.Is(err, ErrBadOpcode) {
			t.Fatalf("re-parse: %v", err)
		}
		if !q.ICRCOK() || !q.IPv4ChecksumOK() || !q.UDPChecksumOK() {
			t.Fatal("re-encoded frame has a bad ICRC or checksum")
		}
		var h2 Headers
		q.Headers(&h2)
		h.BTH.PadCount, h2.BTH.PadCount = 0, 0
		if h != h2 {
			t.Fatalf("headers changed:\n%+v\n%+v", h, h2)
		}
		if !bytes.Equal(q.Payload(), p.Payload()) {
			t.Fatal("payload changed")
		}
		q.Headers(&h2)
		buf2 := make([]byte, n)
		if m, err := Encode(buf2, &h2, q.Payload()); err != nil || !bytes.Equal(buf2[:m], buf[:n]) {
			t.Fatal("encoding is not stable")
		}
		if canonical(&p) && !bytes.Equal(buf[:n], frame[:p.End]) {
			t.Fatalf("canonical frame not re-encoded byte for byte:\n got % x\nwant % x", buf[:n], frame[:p.End])
		}
	})
}

// FuzzICRC compares the fast ICRC with the bitwise reference on arbitrary
// bytes laid out as IPv4 (any IHL), IPv6 or RoCEv1.
func FuzzICRC(f *testing.F) {
	for i, fr := range seedFrames() {
		f.Add(uint8(i), fr[14:])
	}
	f.Fuzz(func(t *testing.T, kind uint8, l3 []byte) {
		l3 = bytes.Clone(l3)
		switch kind % 3 {
		case 0:
			if len(l3) < 1 {
				return
			}
			ihl := int(l3[0] & 0x0f)
			if ihl < 5 {
				ihl = 5
			}
			l3[0] = 0x40 | byte(ihl)
			if len(l3) < ihl*4+udpLen+BTHLen {
				return
			}
			if got, want := ICRCv4(l3, l3[ihl*4:], l3[ihl*4+udpLen:]), NaiveICRC(l3, false); got != want {
				t.Fatalf("ipv4: fast %08x, naive %08x", got, want)
			}
		case 1:
			if len(l3) < ipv6Len+udpLen+BTHLen {
				return
			}
			l3[0] = 0x60 | l3[0]&0x0f
			if got, want := ICRCv6(l3, l3[ipv6Len:], l3[ipv6Len+udpLen:]), NaiveICRC(l3, false); got != want {
				t.Fatalf("ipv6: fast %08x, naive %08x", got, want)
			}
		default:
			if len(l3) < ipv6Len+BTHLen {
				return
			}
			if got, want := ICRCv6(l3, nil, l3[ipv6Len:]), NaiveICRC(l3, true); got != want {
				t.Fatalf("roce v1: fast %08x, naive %08x", got, want)
			}
		}
	})
}
