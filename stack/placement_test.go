package stack

import (
	"encoding/binary"
	"testing"

	"github.com/uroce/uroce/link/fault"
)

// ATOMIC_WRITE, FLUSH and a READ of what was written, between two
// devices over the pipe, on a clean link and on one that drops,
// duplicates and reorders (duplicates are answered, not executed twice).
func TestPlacementOps(t *testing.T) {
	for _, faults := range []*fault.Config{nil, {Seed: 7, Drop: 0.1, Dup: 0.1, Reorder: 0.1}} {
		s := newSimPair(t, 1500, faults)
		A := newSide(t, s.a, 1<<16, 64)
		B := newSide(t, s.b, 1<<16, 64)
		flushable, err := B.pd.RegisterMR(make([]byte, 4096),
			AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessFlushGlobal|AccessFlushPersistent)
		if err != nil {
			t.Fatal(err)
		}
		qa, err := A.pd.CreateQP(QPInit{Type: RC, SendCQ: A.cq, RecvCQ: A.cq, MaxSendWR: 64, MaxRecvWR: 64,
			MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 64})
		if err != nil {
			t.Fatal(err)
		}
		qb := B.qp(t, RC)
		connect(t, qa, qb, 1, 100, 200, AccessRemoteWrite|AccessRemoteRead|AccessFlushGlobal|AccessFlushPersistent)
		const rounds = 50
		var wcs []WC
		for i := range rounds {
			off := uint64(8 * (i % 64))
			binary.LittleEndian.PutUint64(A.buf[off:], uint64(i)*0x0101010101010101)
			at := RemoteAddr{flushable.Addr() + off, flushable.RKey()}
			wrs := []SendWR{
				{ID: uint64(3 * i), Op: OpAtomicWrite, Flags: SendSignaled, SG: []SGE{A.mr.SGE(off, 8)}, Remote: at},
				{ID: uint64(3*i + 1), Op: OpFlush, Flags: SendSignaled, Remote: at, FlushType: FlushPersistent, FlushLen: 8},
				{ID: uint64(3*i + 2), Op: OpRead, Flags: SendSignaled, SG: []SGE{A.mr.SGE(8192+off, 8)}, Remote: at},
			}
			if i%5 == 0 {
				// Inline data, and a FLUSH of the whole region.
				wrs[0].SG, wrs[0].Flags, wrs[0].Inline = nil, SendSignaled|SendInline, A.buf[off:off+8]
				wrs[1].FlushLevel, wrs[1].FlushType, wrs[1].FlushLen = FlushMR, FlushGlobal|FlushPersistent, 0
			}
			for k := range wrs {
				if err := qa.PostSend(&wrs[k]); err != nil {
					t.Fatal(err)
				}
			}
			if i%16 == 15 || i == rounds-1 {
				got := pollN(t, s, A.cq, 3*(i%16+1))
				for _, wc := range got {
					k := int(wc.ID) % 3
					wantOp := [3]uint8{uint8(WCAtomicWrite), uint8(WCFlush), uint8(WCRDMARead)}[k]
					if wc.ID != uint64(len(wcs)) || wc.Status != WCSuccess || uint8(wc.Opcode) != wantOp {
						t.Fatalf("faults %v: completion %d: %+v", faults != nil, len(wcs), wc)
					}
					wcs = append(wcs, wc)
				}
			}
		}
		if len(wcs) != 3*rounds {
			t.Fatalf("%d completions", len(wcs))
		}
		for i := range rounds {
			off := 8 * (i % 64)
			if got, want := binary.LittleEndian.Uint64(A.buf[8192+off:]), uint64(i)*0x0101010101010101; got != want {
				t.Fatalf("faults %v: round %d read back %#x, want %#x", faults != nil, i, got, want)
			}
		}
		if qa.State() != StateRTS || qb.State() != StateRTS {
			t.Fatalf("states %s %s", qa.State(), qb.State())
		}
	}
}

// A FLUSH of a region without the placement type's right is refused
// with a remote access error; one the QP does not grant with an invalid
// request.
func TestPlacementRefused(t *testing.T) {
	for _, c := range []struct {
		qpAccess Access
		want     WCStatus
	}{
		{AccessRemoteWrite | AccessFlushGlobal | AccessFlushPersistent, WCRemAccessErr},
		{AccessRemoteWrite | AccessFlushGlobal, WCRemInvReqErr},
	} {
		s := newSimPair(t, 1500, nil)
		A, B := newSide(t, s.a, 1<<16, 64), newSide(t, s.b, 1<<16, 64)
		qa, qb := A.qp(t, RC), B.qp(t, RC)
		connect(t, qa, qb, 1, 100, 200, c.qpAccess)
		// B.mr grants remote write, read and atomics, no flush rights.
		wr := SendWR{ID: 1, Op: OpFlush, Flags: SendSignaled, Remote: RemoteAddr{B.mr.Addr(), B.mr.RKey()},
			FlushType: FlushPersistent, FlushLen: 64}
		if err := qa.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
		wcs := pollN(t, s, A.cq, 1)
		if wcs[0].Status != c.want || uint8(wcs[0].Opcode) != uint8(WCFlush) {
			t.Fatalf("qp access %#x: %+v, want status %d", c.qpAccess, wcs[0], c.want)
		}
	}
}
