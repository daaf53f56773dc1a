package qp

import (
	"math/rand/v2"
	"testing"
)

// TestSGWalk checks the walk against a byte-by-byte model: every byte of
// a transfer from any offset lands at the address the list gives it.
func TestSGWalk(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for round := 0; round < 500; round++ {
		sgs := make([]SGE, 1+rng.IntN(5))
		var addrs []uint64 // the address of every byte of the list, in order
		for i := range sgs {
			sgs[i] = SGE{Addr: uint64(i+1) << 20, Length: uint32(rng.IntN(6)), LKey: uint32(i)}
			for k := uint32(0); k < sgs[i].Length; k++ {
				addrs = append(addrs, sgs[i].Addr+uint64(k))
			}
		}
		off := uint32(rng.IntN(len(addrs) + 2))
		n := uint32(1 + rng.IntN(len(addrs)+2))
		w := walkFrom(sgs, off)
		var got []uint64
		for done := uint32(0); done < n; {
			part, ok := w.next(n - done)
			if !ok {
				break
			}
			if part.Length == 0 || part.Length > n-done {
				t.Fatalf("round %d: part of %d bytes for %d wanted", round, part.Length, n-done)
			}
			if int(part.LKey) >= len(sgs) || part.Addr < sgs[part.LKey].Addr ||
				part.Addr+uint64(part.Length) > sgs[part.LKey].Addr+uint64(sgs[part.LKey].Length) {
				t.Fatalf("round %d: part %+v outside its SGE", round, part)
			}
			for k := uint32(0); k < part.Length; k++ {
				got = append(got, part.Addr+uint64(k))
			}
			done += part.Length
		}
		var want []uint64
		if int(off) < len(addrs) {
			want = addrs[off:min(int(off+n), len(addrs))]
		}
		if len(got) != len(want) {
			t.Fatalf("round %d: %d bytes walked from %d of %v, want %d", round, len(got), off, sgs, len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("round %d: byte %d at %#x, want %#x", round, i, got[i], want[i])
			}
		}
	}
}
