package stack

import (
	"testing"

	"github.com/uroce/uroce/xdp"
)

// A ring larger than the default gets a UMEM that can keep the whole
// fill ring stocked: xdp keeps at most half the frames on it.
func TestUMEMFramesFillTheRing(t *testing.T) {
	if got := umemFrames(xdp.DefaultRingSize); got != 0 {
		t.Errorf("umemFrames(default %d) = %d, want 0 (xdp's default)", xdp.DefaultRingSize, got)
	}
	for _, n := range []int{4096, 8192, 1 << 16} {
		if f := umemFrames(n); f/2 < n {
			t.Errorf("umemFrames(%d) = %d: the fill ring keeps %d of its %d entries", n, f, f/2, n)
		}
	}
}
