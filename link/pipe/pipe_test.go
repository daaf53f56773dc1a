package pipe

import (
	"bytes"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/frametest"
)

func TestPipeOrderAndCopy(t *testing.T) {
	a, b := New(Config{MTU: 1500, Slots: 8})
	f := frametest.UD(t, 7, 0x11, 100)
	orig := append([]byte(nil), f...)
	if n := a.Transmit([][]byte{f}); n != 1 {
		t.Fatalf("transmit took %d", n)
	}
	f[20] ^= 0xff // the pipe must have copied
	rx := make([][]byte, 4)
	if n := b.Receive(rx); n != 1 || !bytes.Equal(rx[0], orig) {
		t.Fatalf("receive: n=%d, frame equal=%v", n, n == 1 && bytes.Equal(rx[0], orig))
	}
	b.Release()
	if n := b.Receive(rx); n != 0 {
		t.Fatalf("second receive got %d frames", n)
	}
	b.Release()
	// Order over many frames, through ring wrap-around.
	next := 0
	for i := 0; i < 100; i++ {
		frames := [][]byte{frametest.UD(t, uint32(2*i), 0x11, 10), frametest.UD(t, uint32(2*i+1), 0x11, 10)}
		if n := a.Transmit(frames); n != 2 {
			t.Fatalf("transmit took %d", n)
		}
		n := b.Receive(rx)
		for _, g := range rx[:n] {
			if s := frametest.Seq(g); s != next {
				t.Fatalf("got frame %d, want %d", s, next)
			}
			next++
		}
		b.Release()
	}
	if next != 200 {
		t.Fatalf("received %d frames, want 200", next)
	}
	if s := a.Stats(); s.TxFrames != 201 {
		t.Errorf("tx frames %d, want 201", s.TxFrames)
	}
}

func TestPipeBackpressure(t *testing.T) {
	a, b := New(Config{MTU: 1500, Slots: 4})
	frames := make([][]byte, 6)
	for i := range frames {
		frames[i] = frametest.UD(t, uint32(i), 0x11, 10)
	}
	if n := a.Transmit(frames); n != 4 {
		t.Fatalf("transmit into 4 slots took %d", n)
	}
	// Without a timeout, Poll returns only when signalled: here, by b
	// freeing slots.
	done := make(chan struct{})
	go func() {
		a.Poll(-1)
		close(done)
	}()
	rx := make([][]byte, 2)
	if n := b.Receive(rx); n != 2 {
		t.Fatalf("receive %d", n)
	}
	b.Release()
	select {
	case <-done:
	case <-time.After(time.Minute):
		a.Wake()
		t.Fatal("poll did not return after the peer released slots")
	}
	if n := a.Transmit(frames[4:]); n != 2 {
		t.Fatalf("transmit after release took %d", n)
	}
}

func TestPipeOversizeAndClose(t *testing.T) {
	a, b := New(Config{MTU: 500})
	big := frametest.UD(t, 1, 0x11, 600)
	if n := a.Transmit([][]byte{big}); n != 1 {
		t.Fatalf("oversize frame not taken: %d", n)
	}
	if a.Stats().TxOversize != 1 || b.Receive(make([][]byte, 1)) != 0 {
		t.Fatal("oversize frame not dropped")
	}
	b.Release()
	done := make(chan struct{})
	go func() { b.Poll(-1); close(done) }()
	b.Wake()
	<-done
	b.Close()
	if n := a.Transmit([][]byte{frametest.UD(t, 1, 0x11, 10)}); n != 1 {
		t.Fatal("transmit to a closed end should drop, not push back")
	}
	b.Poll(-1) // a closed end never blocks
}

func TestPipeNoAllocs(t *testing.T) {
	a, b := New(Config{MTU: 9000, Slots: 64})
	frames := [][]byte{frametest.UD(t, 1, 0x11, 4000), frametest.UD(t, 2, 0x11, 64)}
	rx := make([][]byte, 8)
	for i := 0; i < 100; i++ { // warm the slot buffers
		a.Transmit(frames)
		b.Receive(rx)
		b.Release()
	}
	allocs := testing.AllocsPerRun(1000, func() {
		a.Transmit(frames)
		b.Receive(rx)
		b.Release()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per transmit/receive", allocs)
	}
}
