package xdp

import "testing"

// A ring larger than the default gets a UMEM that can keep the whole
// fill ring stocked: at most half the frames go on it.
func TestFramesFillTheRing(t *testing.T) {
	c, err := Config{}.withDefaults()
	if err != nil || c.Frames != DefaultFrames {
		t.Errorf("defaults: %d frames, %v; want %d", c.Frames, err, DefaultFrames)
	}
	for _, n := range []int{4096, 8192, 1 << 16} {
		c, err := Config{RingSize: n}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		if got := c.rxChunks(); got < n {
			t.Errorf("ring of %d: %d frames, the fill ring keeps %d of its %d entries", n, c.Frames, got, n)
		}
	}
}
