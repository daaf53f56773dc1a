package dcqcn

import (
	"math/rand/v2"
	"testing"
	"time"
)

// Sending as soon as Next allows, the long-run rate is the configured one.
func TestPacerRate(t *testing.T) {
	for _, tc := range []struct {
		rate uint64
		size int
	}{
		{1_000_000, 64}, // the rate floor, small packets
		{10_000_000, 1024},
		{1_000_000_000, 1500},
		{10_000_000_000, 4096},
		{g25, 4154},
		{g100, 4096},
	} {
		var p Pacer
		p.Init(tc.rate, 0)
		var sent uint64
		now := Time(0)
		for {
			now = p.Next(now, tc.size)
			if now >= time.Second {
				break
			}
			if !p.Allow(now, tc.size) {
				t.Fatalf("%d bit/s: Allow(Next) refused at %v", tc.rate, now)
			}
			sent += uint64(tc.size)
		}
		// One second at the rate, plus the initial burst.
		want := float64(tc.rate)/8 + DefaultBurst
		if got := float64(sent); got < want*0.99 || got > want+float64(tc.size) {
			t.Errorf("%d bit/s, %d-byte packets: %d bytes in 1 s, want %.0f", tc.rate, tc.size, sent, want)
		}
	}
}

// An engine that polls at a coarse or jittery interval and sends what is
// allowed still gets the rate, as long as the burst covers its gaps.
func TestPacerPolling(t *testing.T) {
	for _, tc := range []struct {
		rate   uint64
		burst  int
		tick   Time
		jitter bool
	}{
		// Gaps up to twice the tick; the burst must hold a gap's bytes.
		{10_000_000_000, 0, us, false},           // 8 KiB = 6.5 µs
		{10_000_000_000, 16 << 10, 5 * us, true}, // 13 µs
		{g100, 128 << 10, 5 * us, true},          // 10.5 µs
		{100_000_000, 0, 50 * us, true},          // 655 µs
	} {
		var p Pacer
		p.Init(tc.rate, tc.burst)
		rng := rand.New(rand.NewPCG(3, 4))
		const size = 1024
		var sent uint64
		for now := Time(0); now < time.Second; {
			for p.Allow(now, size) {
				sent += size
			}
			step := tc.tick
			if tc.jitter {
				step = Time(rng.Int64N(int64(2*tc.tick))) + 1
			}
			now += step
		}
		want := float64(tc.rate) / 8
		if got := float64(sent); got < want*0.99 || got > want*1.01+float64(p.Burst()) {
			t.Errorf("%d bit/s, tick %v: %d bytes in 1 s, want %.0f", tc.rate, tc.tick, sent, want)
		}
	}
}

// After an idle period the bucket lets exactly the burst through at once.
func TestPacerBurst(t *testing.T) {
	for _, tc := range []struct {
		burst, size, n int
	}{
		{0, 1024, DefaultBurst / 1024},
		{0, 4096, 2},
		{0, 4154, 2}, // 4096-MTU frames with headers
		{3000, 1000, 3},
		{3000, 9000, 1}, // larger than the burst: one, when full
		{1, 64, 1},
	} {
		var p Pacer
		p.Init(1_000_000_000, tc.burst)
		now := time.Second
		n := 0
		for p.Allow(now, tc.size) {
			n++
			if n > 100 {
				break
			}
		}
		if n != tc.n {
			t.Errorf("burst %d, %d-byte packets: %d allowed at once, want %d", tc.burst, tc.size, n, tc.n)
		}
		// Much later, the bucket is full again, never fuller.
		now += time.Second
		m := 0
		for p.Allow(now, tc.size) {
			m++
		}
		if m != tc.n {
			t.Errorf("burst %d, %d-byte packets: %d after refill, want %d", tc.burst, tc.size, m, tc.n)
		}
	}
}

func TestPacerNext(t *testing.T) {
	var p Pacer
	p.Init(1_000_000_000, 2048) // 8 ns per byte
	now := time.Millisecond
	if p.Next(now, 1000) != now {
		t.Fatal("full bucket: Next is not now")
	}
	for p.Allow(now, 1000) {
	}
	// 2048-byte bucket after two 1000-byte packets holds 48 bytes: the
	// next 1000 bytes need 952 bytes more, 7616 ns.
	next := p.Next(now, 1000)
	if next != now+7616 {
		t.Errorf("Next %v, want %v", next, now+7616)
	}
	if p.Allow(next-1, 1000) {
		t.Error("allowed before Next")
	}
	if !p.Allow(next, 1000) {
		t.Error("refused at Next")
	}
	// The bucket is empty at next: 64 bytes need 512 ns, whenever asked.
	if got := p.Next(0, 64); got != next+512 {
		t.Errorf("Next(0, 64) = %v, want %v", got, next+512)
	}
	if got := p.Next(time.Hour, 64); got != time.Hour {
		t.Errorf("Next(later) = %v, want now", got)
	}
}

func TestPacerSetRate(t *testing.T) {
	var p Pacer
	p.Init(10_000_000_000, 0)
	now := Time(0)
	var sent uint64
	for now < 10*time.Millisecond {
		now = p.Next(now, 1000)
		p.Allow(now, 1000)
		sent += 1000
	}
	p.SetRate(1_000_000_000)
	if p.Rate() != 1_000_000_000 {
		t.Fatal("rate not set")
	}
	start, sent := now, uint64(0)
	for now < start+10*time.Millisecond {
		now = p.Next(now, 1000)
		p.Allow(now, 1000)
		sent += 1000
	}
	// 10 ms at 1 Gbit/s = 1.25 MB: the bucket was empty, no burst.
	if sent < 1_240_000 || sent > 1_260_000 {
		t.Errorf("after SetRate: %d bytes in 10 ms, want 1250000", sent)
	}
}

func TestPacerZeroRate(t *testing.T) {
	var p Pacer
	p.Init(0, 0)
	if p.Allow(time.Second, 1) {
		t.Error("rate 0 allowed a packet")
	}
	if p.Next(time.Second, 1) != maxTime {
		t.Error("rate 0: Next is not never")
	}
	p.SetRate(1_000_000)
	if !p.Allow(time.Second, 1) {
		t.Error("refused after SetRate")
	}
}

// A sender that waits for Next(now, 0) and takes each packet after
// sending it (Take) keeps the rate, and exceeds the burst by at most one
// packet.
func TestPacerTake(t *testing.T) {
	for _, tc := range []struct {
		rate  uint64
		sizes []int
	}{
		{1_000_000_000, []int{64, 1500, 4154}},
		{10_000_000_000, []int{4154}},
		{g100, []int{100, 9000}},
	} {
		var p Pacer
		p.Init(tc.rate, 0)
		var sent uint64
		now, i := Time(0), 0
		for {
			now = p.Next(now, 0)
			if now >= time.Second {
				break
			}
			n := tc.sizes[i%len(tc.sizes)]
			i++
			p.Take(now, n)
			sent += uint64(n)
		}
		want := float64(tc.rate)/8 + DefaultBurst
		if got := float64(sent); got < want*0.99 || got > want+9000 {
			t.Errorf("%d bit/s: %d bytes in 1 s, want %.0f", tc.rate, sent, want)
		}
	}
	// From a full bucket, at once: the burst and one packet more.
	var p Pacer
	p.Init(1_000_000, 0)
	n := 0
	for p.Next(0, 0) == 0 {
		p.Take(0, 1000)
		n += 1000
	}
	if n < DefaultBurst || n > DefaultBurst+1000 {
		t.Errorf("%d bytes at once, burst %d", n, DefaultBurst)
	}
}
