package bth

import (
	"net/netip"
	"testing"
)

func TestFETH(t *testing.T) {
	for _, c := range []struct{ plt, sel uint8 }{{1, 0}, {2, 1}, {3, 1}, {0, 0}} {
		h := Headers{BTH: BTHFields{Opcode: OpFlush, PKey: 0xffff, DestQP: 7, PSN: 9, AckReq: true},
			FETH: FETHValue(c.plt, c.sel), VA: 0x1000, RKey: 5, DMALen: 64}
		h.SrcIP, h.DstIP = netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.1")
		buf := make([]byte, h.FrameLen(0))
		n, err := Encode(buf, &h, nil)
		if err != nil {
			t.Fatal(err)
		}
		var p Packet
		if err := Parse(buf[:n], &p); err != nil {
			t.Fatal(err)
		}
		f := p.FETH()
		if f.Placement() != c.plt || f.Selectivity() != c.sel || p.RETH().DMALen() != 64 || p.PayloadN != 0 {
			t.Errorf("%+v: placement %d selectivity %d", c, f.Placement(), f.Selectivity())
		}
		// rdma_rxe's layout: selectivity in bits 5-4, placement in 3-0.
		if w := uint32(f[0])<<24 | uint32(f[1])<<16 | uint32(f[2])<<8 | uint32(f[3]); w != uint32(c.sel)<<4|uint32(c.plt) {
			t.Errorf("%+v: FETH %#x", c, w)
		}
	}
}
