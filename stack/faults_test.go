package stack

import (
	"slices"
	"testing"
	"time"

	"github.com/uroce/uroce/bth"
)

// pump sends n numbered frames through tx (a fault link over a pipe) and
// returns the sequence numbers b receives, -1 for frames that do not
// parse, and how many received frames fail the ICRC.
func faultRun(t *testing.T, cfg FaultConfig, dir FaultDir, n int, clock *FakeClock) (seqs []int, icrcBad int, st FaultStats) {
	t.Helper()
	a, b := NewPipe(PipeConfig{MTU: 1500, Slots: 4096})
	cfg.Dir = dir
	cfg.Clock = clock
	var tx, rxl Link = a, b
	var fl *FaultLink
	if dir == FaultTransmit {
		fl = WithFaults(a, cfg)
		tx = fl
	} else {
		fl = WithFaults(b, cfg)
		rxl = fl
	}
	rx := make([][]byte, 16)
	var p bth.Packet
	collect := func() {
		for {
			k := rxl.Receive(rx)
			for _, f := range rx[:k] {
				if err := bth.Parse(f, &p); err == nil && !p.ICRCOK() {
					icrcBad++
				}
				seqs = append(seqs, frameSeq(f))
			}
			rxl.Release()
			if k == 0 {
				return
			}
		}
	}
	for i := 0; i < n; i++ {
		f := testFrame(t, uint32(i), 0x11, 64)
		if k := tx.Transmit([][]byte{f}); k != 1 {
			t.Fatalf("transmit refused frame %d", i)
		}
		clock.Advance(time.Microsecond)
		collect()
	}
	// Let held frames go.
	for i := 0; i < 100; i++ {
		clock.Advance(time.Millisecond)
		tx.Transmit(nil)
		collect()
	}
	return seqs, icrcBad, fl.Stats()
}

func TestFaultsDropDupReorderCorrupt(t *testing.T) {
	for _, dir := range []FaultDir{FaultTransmit, FaultReceive} {
		cfg := FaultConfig{Seed: 42, Drop: 0.05, Dup: 0.02, Reorder: 0.02, Corrupt: 0.01}
		const n = 5000
		seqs, bad, st := faultRun(t, cfg, dir, n, NewFakeClock(0))
		if st.Frames != n {
			t.Fatalf("dir %d: %d frames seen, want %d", dir, st.Frames, n)
		}
		// Loose statistical bounds; the seed is fixed, so this is exact.
		for name, c := range map[string]struct {
			got  uint64
			want float64
		}{"drop": {st.Dropped, 0.05}, "dup": {st.Duplicated, 0.02}, "reorder": {st.Reordered, 0.02}, "corrupt": {st.Corrupted, 0.01}} {
			if lo, hi := uint64(c.want*n/2), uint64(c.want*n*2); c.got < lo || c.got > hi {
				t.Errorf("dir %d: %s %d, want about %.0f", dir, name, c.got, c.want*n)
			}
		}
		if want := n - int(st.Dropped) + int(st.Duplicated); len(seqs) != want {
			t.Errorf("dir %d: received %d frames, want %d", dir, len(seqs), want)
		}
		if bad != int(st.Corrupted) {
			t.Errorf("dir %d: %d frames fail the ICRC, %d corrupted", dir, bad, st.Corrupted)
		}
		inversions := 0
		for i := 1; i < len(seqs); i++ {
			if seqs[i] >= 0 && seqs[i-1] > seqs[i] {
				inversions++
			}
		}
		if inversions == 0 {
			t.Errorf("dir %d: no frame out of order", dir)
		}
		// Same seed, same run.
		seqs2, _, _ := faultRun(t, cfg, dir, n, NewFakeClock(0))
		if !slices.Equal(seqs, seqs2) {
			t.Errorf("dir %d: a second run with the same seed differs", dir)
		}
	}
}

func TestFaultsDelay(t *testing.T) {
	clock := NewFakeClock(0)
	a, b := NewPipe(PipeConfig{MTU: 1500})
	fl := WithFaults(a, FaultConfig{Delay: 50 * time.Microsecond, Clock: clock})
	if fl.Transmit([][]byte{testFrame(t, 1, 0x11, 10)}) != 1 {
		t.Fatal("transmit refused")
	}
	rx := make([][]byte, 4)
	if b.Receive(rx) != 0 {
		t.Fatal("frame arrived before its delay")
	}
	b.Release()
	if d, ok := fl.Due(); !ok || d != 50*time.Microsecond {
		t.Fatalf("due %v %v, want 50µs", d, ok)
	}
	clock.Advance(49 * time.Microsecond)
	fl.Receive(rx[:0])
	if b.Receive(rx) != 0 {
		t.Fatal("frame arrived early")
	}
	b.Release()
	clock.Advance(time.Microsecond)
	fl.Receive(rx[:0]) // the engine calls Receive every step: held frames move on
	fl.Release()
	if n := b.Receive(rx); n != 1 || frameSeq(rx[0]) != 1 {
		t.Fatalf("delayed frame: got %d frames", n)
	}
	b.Release()
	if _, ok := fl.Due(); ok {
		t.Fatal("nothing should be held")
	}
}

func TestFaultsBackpressureKeepsFrames(t *testing.T) {
	a, b := NewPipe(PipeConfig{MTU: 1500, Slots: 4})
	fl := WithFaults(a, FaultConfig{Seed: 1, Clock: NewFakeClock(0)})
	frames := make([][]byte, 10)
	for i := range frames {
		frames[i] = testFrame(t, uint32(i), 0x11, 10)
	}
	var got []int
	rx := make([][]byte, 4)
	sent := 0
	for len(got) < 10 {
		sent += fl.Transmit(frames[sent:])
		n := b.Receive(rx)
		for _, f := range rx[:n] {
			got = append(got, frameSeq(f))
		}
		b.Release()
		if n == 0 && sent == len(frames) {
			fl.Transmit(nil)
		}
	}
	if !slices.Equal(got, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Fatalf("got %v", got)
	}
}
