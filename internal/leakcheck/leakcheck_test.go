package leakcheck

import (
	"bytes"
	"testing"
	"time"
)

func parked(stop <-chan struct{}) { <-stop }

// TestLeftAfter: a goroutine started after the snapshot is reported
// while it runs, with its stack, and no longer once it ended; those of
// the snapshot are not.
func TestLeftAfter(t *testing.T) {
	old := make(chan struct{})
	go parked(old)
	defer close(old)
	time.Sleep(10 * time.Millisecond)
	before := ids(stacks())
	stop := make(chan struct{})
	go parked(stop)
	left := leftAfter(before, 50*time.Millisecond)
	if len(left) != 1 || !bytes.Contains(left[0], []byte("leakcheck.parked(")) {
		t.Fatalf("left: %q", left)
	}
	close(stop)
	if left := leftAfter(before, 5*time.Second); len(left) != 0 {
		t.Fatalf("left after the goroutine ended: %q", left)
	}
}
