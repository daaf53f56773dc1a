package fault

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/internal/frametest"
	"github.com/uroce/uroce/link"
	"github.com/uroce/uroce/link/pipe"
)

// pump sends n numbered frames through tx (a fault link over a pipe) and
// returns the sequence numbers b receives, -1 for frames that do not
// parse, and how many received frames fail the ICRC.
func faultRun(t *testing.T, cfg Config, dir Dir, n int, clock *fakeClock) (seqs []int, icrcBad int, st Stats) {
	t.Helper()
	a, b := pipe.New(pipe.Config{MTU: 1500, Slots: 4096})
	cfg.Dir = dir
	cfg.Clock = clock
	var tx, rxl link.Link = a, b
	var fl *Link
	if dir == Transmit {
		fl = Wrap(a, cfg)
		tx = fl
	} else {
		fl = Wrap(b, cfg)
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
				seqs = append(seqs, frametest.Seq(f))
			}
			rxl.Release()
			if k == 0 {
				return
			}
		}
	}
	for i := 0; i < n; i++ {
		f := frametest.UD(t, uint32(i), 0x11, 64)
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
	for _, dir := range []Dir{Transmit, Receive} {
		cfg := Config{Seed: 42, Drop: 0.05, Dup: 0.02, Reorder: 0.02, Corrupt: 0.01}
		const n = 5000
		seqs, bad, st := faultRun(t, cfg, dir, n, &fakeClock{})
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
		seqs2, _, _ := faultRun(t, cfg, dir, n, &fakeClock{})
		if !slices.Equal(seqs, seqs2) {
			t.Errorf("dir %d: a second run with the same seed differs", dir)
		}
	}
}

// TestFaultsOnly: with Only, the frames it picks are harmed (here all
// dropped and delayed) and the others pass at once, untouched, both ways.
func TestFaultsOnly(t *testing.T) {
	for _, dir := range []Dir{Transmit, Receive} {
		odd := func(f []byte) bool { return frametest.Seq(f)%2 == 1 }
		seqs, _, st := faultRun(t, Config{Drop: 1, Delay: time.Second, Only: odd}, dir, 10, &fakeClock{})
		if want := []int{0, 2, 4, 6, 8}; !slices.Equal(seqs, want) {
			t.Errorf("dir %d: received %v, want %v", dir, seqs, want)
		}
		if st.Frames != 10 || st.Dropped != 5 || st.Delayed != 0 {
			t.Errorf("dir %d: stats %+v", dir, st)
		}
	}
}

func TestFaultsDelay(t *testing.T) {
	clock := &fakeClock{}
	a, b := pipe.New(pipe.Config{MTU: 1500})
	fl := Wrap(a, Config{Delay: 50 * time.Microsecond, Clock: clock})
	if fl.Transmit([][]byte{frametest.UD(t, 1, 0x11, 10)}) != 1 {
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
	if n := b.Receive(rx); n != 1 || frametest.Seq(rx[0]) != 1 {
		t.Fatalf("delayed frame: got %d frames", n)
	}
	b.Release()
	if _, ok := fl.Due(); ok {
		t.Fatal("nothing should be held")
	}
}

func TestFaultsBackpressureKeepsFrames(t *testing.T) {
	a, b := pipe.New(pipe.Config{MTU: 1500, Slots: 4})
	fl := Wrap(a, Config{Seed: 1, Clock: &fakeClock{}})
	frames := make([][]byte, 10)
	for i := range frames {
		frames[i] = frametest.UD(t, uint32(i), 0x11, 10)
	}
	var got []int
	rx := make([][]byte, 4)
	sent := 0
	for len(got) < 10 {
		sent += fl.Transmit(frames[sent:])
		n := b.Receive(rx)
		for _, f := range rx[:n] {
			got = append(got, frametest.Seq(f))
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

// fakeClock is a clock that moves only when told to.
type fakeClock struct{ t link.Time }

func (c *fakeClock) Now() link.Time { return c.t }

func (c *fakeClock) Advance(d time.Duration) { c.t += d }

// TestMarkCE: the fault link marks ECN-capable IPv4 and IPv6 frames CE,
// tagged or not, keeping the IPv4 header checksum right and the ICRC
// (which masks the traffic class) valid; Not-ECT frames are left alone.
func TestMarkCE(t *testing.T) {
	pa, _ := pipe.New(pipe.Config{})
	fl := Wrap(pa, Config{MarkCE: 1})
	for _, c := range []struct {
		src, dst netip.Addr
		vlan     bool
		tc, want uint8
	}{
		{frametest.IPA, frametest.IPB, false, 26<<2 | 2, 26<<2 | 3},
		{frametest.IPA, frametest.IPB, true, 26<<2 | 1, 26<<2 | 3},
		{frametest.IPA, frametest.IPB, false, 26 << 2, 26 << 2}, // Not-ECT: not marked
		{ip6A, ip6B, false, 46<<2 | 2, 46<<2 | 3},
		{ip6A, ip6B, true, 0, 0},
	} {
		h := &bth.Headers{L2L3: bth.L2L3{SrcMAC: frametest.MACA, DstMAC: frametest.MACB, SrcIP: c.src, DstIP: c.dst, TrafficClass: c.tc,
			HasVLAN: c.vlan, VLANTCI: 3<<13 | 100}, BTH: bth.BTHFields{Opcode: bth.OpSendOnly, PKey: 0xffff, DestQP: 0x11}}
		buf := make([]byte, h.FrameLen(32))
		n, err := bth.Encode(buf, h, make([]byte, 32))
		if err != nil {
			t.Fatal(err)
		}
		fl.markCE(buf[:n])
		var p bth.Packet
		if err := bth.Parse(buf[:n], &p); err != nil {
			t.Fatal(err)
		}
		if p.TrafficClass() != c.want || !p.IPv4ChecksumOK() || !p.ICRCOK() {
			t.Errorf("%v vlan %v tc %#x: now %#x, ip checksum ok %v, icrc ok %v", c.src, c.vlan, c.tc,
				p.TrafficClass(), p.IPv4ChecksumOK(), p.ICRCOK())
		}
	}
	if got := fl.Stats().MarkedCE; got != 3 {
		t.Errorf("%d frames counted marked, want 3", got)
	}
}

var (
	ip6A = netip.MustParseAddr("2001:db8::a")
	ip6B = netip.MustParseAddr("2001:db8::b")
)
