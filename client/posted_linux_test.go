package client

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/uroce/uroce/proto"
	"github.com/uroce/uroce/stack"
)

// TestPostRecvWaitsForTheDaemon: a receive is posted when post_recv
// returns (verbs' rule, which the peer's SEND right after relies on):
// postRecvRing returns only after the daemon has marked the request
// posted. The daemon here is a goroutine that marks it a while after it
// sees it; the order of the two events is checked, not the time.
func TestPostRecvWaitsForTheDaemon(t *testing.T) {
	size := proto.RecvSlotBytes(1)
	r, ok := proto.NewRing(make([]byte, proto.RingBytes(4, size)), 4, size)
	if !ok {
		t.Fatal("ring")
	}
	r.Init()
	var order atomic.Int32
	go func() {
		for r.Producer() == 0 {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
		order.Add(1)
		r.SetPosted(1)
	}()
	if err := postRecvRing(&Device{}, &r, 1, &stack.RecvWR{ID: 7, SG: []stack.SGE{{Addr: 0x1000, Length: 64, LKey: 5}}}); err != nil {
		t.Fatal(err)
	}
	returnedAt := order.Add(1)
	if r.Posted() != 1 || returnedAt < 2 {
		t.Fatalf("post_recv returned before the daemon posted the receive (posted %d)", r.Posted())
	}
}
