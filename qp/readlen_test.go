package qp

import (
	"bytes"
	"testing"

	"github.com/uroce/uroce/bth"
)

// READ responses must add up to the length requested: each packet but
// the last carries one path MTU, the last the remainder (IBTA 9.7.5.1.4).
// A response of another length completes the READ with a bad response
// error, and nothing is written beyond the request.
func TestReadResponseLengths(t *testing.T) {
	type resp struct {
		op bth.Opcode
		n  int
	}
	cases := []struct {
		name   string
		length uint32
		resps  []resp
		st     WCStatus
	}{
		{"exact", 3000, []resp{{bth.OpReadRespFirst, 1024}, {bth.OpReadRespMiddle, 1024}, {bth.OpReadRespLast, 952}}, WCSuccess},
		{"short last", 3000, []resp{{bth.OpReadRespFirst, 1024}, {bth.OpReadRespMiddle, 1024}, {bth.OpReadRespLast, 951}}, WCBadRespErr},
		{"empty last", 3000, []resp{{bth.OpReadRespFirst, 1024}, {bth.OpReadRespMiddle, 1024}, {bth.OpReadRespLast, 0}}, WCBadRespErr},
		{"long last", 3000, []resp{{bth.OpReadRespFirst, 1024}, {bth.OpReadRespMiddle, 1024}, {bth.OpReadRespLast, 953}}, WCBadRespErr},
		{"short first", 3000, []resp{{bth.OpReadRespFirst, 1000}}, WCBadRespErr},
		{"short middle", 3000, []resp{{bth.OpReadRespFirst, 1024}, {bth.OpReadRespMiddle, 1023}}, WCBadRespErr},
		{"long middle", 3000, []resp{{bth.OpReadRespFirst, 1024}, {bth.OpReadRespMiddle, 1025}}, WCBadRespErr},
		{"ends early", 3000, []resp{{bth.OpReadRespFirst, 1024}, {bth.OpReadRespLast, 1024}}, WCBadRespErr},
		{"only exact", 500, []resp{{bth.OpReadRespOnly, 500}}, WCSuccess},
		{"only short", 500, []resp{{bth.OpReadRespOnly, 499}}, WCBadRespErr},
		{"only long", 500, []resp{{bth.OpReadRespOnly, 501}}, WCBadRespErr},
		{"only of one mtu exact", 1024, []resp{{bth.OpReadRespOnly, 1024}}, WCSuccess},
		{"only where more is due", 1025, []resp{{bth.OpReadRespOnly, 1024}}, WCBadRespErr},
		{"zero length", 0, []resp{{bth.OpReadRespOnly, 0}}, WCSuccess},
		{"zero length with data", 0, []resp{{bth.OpReadRespOnly, 4}}, WCBadRespErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := single(t, Caps{}, defaultConn())
			// The request's buffer sits inside a larger region whose
			// other bytes are guards.
			const guard = 64
			local, key := n.buf(int(c.length)+2*guard, 0x10000, 0)
			before := bytes.Clone(local)
			sg := SGE{Addr: 0x10000 + guard, Length: c.length, LKey: key}
			n.post(t, SendWR{ID: 1, Opcode: WRRead, Flags: SendSignaled, SG: []SGE{sg}, RemoteAddr: 0x70000, RKey: 9})
			n.qp.Pump(0)
			n.out.take()
			var sent []byte
			for i, r := range c.resps {
				h := hdr(r.op, bth.PSN(i))
				if r.op == bth.OpReadRespFirst || r.op == bth.OpReadRespLast || r.op == bth.OpReadRespOnly {
					h.Syndrome, h.MSN = bth.SyndromeACKNoCredits, 1
				}
				payload := bytes.Repeat([]byte{byte(0x40 + i)}, r.n)
				sent = append(sent, payload...)
				n.qp.Receive(0, craft(t, h, payload))
			}
			wantWC(t, "read", n.sink.send, WC{ID: 1, Status: c.st, Opcode: WCRDMARead})
			if !bytes.Equal(local[:guard], before[:guard]) || !bytes.Equal(local[guard+int(c.length):], before[guard+int(c.length):]) {
				t.Error("bytes beyond the request were written")
			}
			if c.st == WCSuccess && !bytes.Equal(local[guard:guard+int(c.length)], sent) {
				t.Error("data differs")
			}
			if c.st != WCSuccess && n.qp.State() != StateErr {
				t.Errorf("state %s after a bad response", n.qp.State())
			}
		})
	}
}

// A duplicate READ is executed again only within the READ it repeats:
// its responses within the saved PSN range, the same R_Key, and bytes of
// the original request. Anything else is dropped and counted, and
// answered with nothing, as rdma_rxe does.
func TestResponderDuplicateReadBounds(t *testing.T) {
	// The READ is of 3000 bytes in the middle of a larger region: what
	// lies around it is accessible memory, so only the rule stops a
	// duplicate from reading it.
	const va = 0x20000 + 1024
	cases := []struct {
		name    string
		psn     bth.PSN
		va      uint64
		length  uint32
		other   bool // the R_Key of another region of the QP's PD
		want    []pkt
		dropped bool
	}{
		{"the whole read", 10, va, 3000, false,
			[]pkt{{bth.OpReadRespFirst, 10, false, 1024}, {bth.OpReadRespMiddle, 11, false, 1024}, {bth.OpReadRespLast, 12, false, 952}}, false},
		{"the rest from the second packet", 11, va + 1024, 1976, false,
			[]pkt{{bth.OpReadRespFirst, 11, false, 1024}, {bth.OpReadRespLast, 12, false, 952}}, false},
		{"the last packet only", 12, va + 2048, 952, false, []pkt{{bth.OpReadRespOnly, 12, false, 952}}, false},
		{"a part at the start", 10, va, 100, false, []pkt{{bth.OpReadRespOnly, 10, false, 100}}, false},
		{"the last byte", 12, va + 2999, 1, false, []pkt{{bth.OpReadRespOnly, 12, false, 1}}, false},
		{"zero length", 12, 0, 0, false, []pkt{{bth.OpReadRespOnly, 12, false, 0}}, false},
		{"one byte past the end", 12, va + 2048, 953, false, nil, true},
		{"starts past the end", 12, va + 3000, 1, false, nil, true},
		{"starts before", 10, va - 1, 10, false, nil, true},
		{"more packets than saved", 11, va + 1024, 3000, false, nil, true},
		{"another r_key", 10, va, 3000, true, nil, true},
		{"psn of no saved read", 13, va, 8, false, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := respNode(t, 10)
			region, key := n.buf(8192, 0x20000, 1)
			src := region[va-0x20000:]
			_, otherKey := n.buf(8192, 0x20000, 2) // the same addresses, another region
			n.qp.Receive(0, req(t, bth.OpReadRequest, 10, true, nil, reth(va, key, 3000)))
			n.out.take()
			// A SEND after the READ, so that PSN 13 is a duplicate too.
			_, rk := n.buf(64, 0x10000, 0)
			n.recv(t, 1, 0x10000, 64, rk)
			n.qp.Receive(0, req(t, bth.OpSendOnly, 13, true, []byte{1}, nil))
			n.out.take()
			dropped := n.qp.Counters().DroppedPkts
			k := key
			if c.other {
				k = otherKey
			}
			n.qp.Receive(0, req(t, bth.OpReadRequest, c.psn, true, nil, reth(c.va, k, c.length)))
			ps := n.out.take()
			if c.dropped {
				if len(ps) != 0 {
					t.Fatalf("answered with %v", describe(ps))
				}
				if n.qp.Counters().DroppedPkts != dropped+1 {
					t.Errorf("dropped_pkts %d, want %d", n.qp.Counters().DroppedPkts, dropped+1)
				}
			} else {
				wantPkts(t, ps, c.want...)
				var got []byte
				for _, p := range ps {
					got = append(got, p.Payload()...)
				}
				if c.length > 0 && !bytes.Equal(got, src[c.va-va:c.va-va+uint64(c.length)]) {
					t.Error("data differs")
				}
				if ps[0].AETH().MSN() != 1 {
					t.Errorf("msn %d, want the READ's own 1", ps[0].AETH().MSN())
				}
			}
			if n.qp.State() != StateRTS {
				t.Errorf("state %s", n.qp.State())
			}
		})
	}
}
