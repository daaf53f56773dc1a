package stack

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"testing"

	"github.com/uroce/uroce/link/pipe"
)

// TestMRReadAt reads a region between the engine's batches: the bytes
// at the offset, io.EOF past the end, an error for a bad offset.
func TestMRReadAt(t *testing.T) {
	pa, _ := pipe.New(pipe.Config{MTU: 1500, Slots: 64})
	d := openManual(t, pa, macA, []netip.Addr{ipA}, NewFakeClock(0))
	A := newSide(t, d, 4096, 16)
	fill(A.buf, 5)
	got := make([]byte, 100)
	if n, err := A.mr.ReadAt(got, 1000); n != 100 || err != nil || !bytes.Equal(got, A.buf[1000:1100]) {
		t.Fatalf("ReadAt(1000) = %d, %v", n, err)
	}
	if n, err := A.mr.ReadAt(got, 4050); n != 46 || err != io.EOF {
		t.Fatalf("ReadAt past the end = %d, %v", n, err)
	}
	if _, err := A.mr.ReadAt(got, -1); !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("ReadAt(-1): %v", err)
	}
}
