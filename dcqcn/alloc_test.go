package dcqcn

import (
	"testing"
	"time"
)

// The per-event methods never allocate.
func TestNoAllocs(t *testing.T) {
	var r RP
	r.Init(nil, g100, 0)
	var p Pacer
	p.Init(g100, 0)
	var n NP
	n.Init(nil)
	now := Time(0)
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"OnCNP", func() { now += us; r.OnCNP(now) }},
		{"OnSent", func() { now += 100; r.OnSent(now, 4096) }},
		{"Advance", func() { now += 50 * us; r.Advance(now) }},
		{"Allow", func() { now += 100; p.Allow(now, 4096) }},
		{"Next", func() { p.Next(now, 4096) }},
		{"SetRate", func() { p.SetRate(uint64(now)) }},
		{"OnCE", func() { now += us; n.OnCE(now) }},
	} {
		if a := testing.AllocsPerRun(1000, tc.f); a != 0 {
			t.Errorf("%s: %v allocations", tc.name, a)
		}
	}
}

// BenchmarkPacketPath is what an engine does per packet on a limited QP:
// pace, send, count the bytes; a CNP every 256 packets keeps it limited.
func BenchmarkPacketPath(b *testing.B) {
	const size = 4096
	var r RP
	r.Init(nil, g100, 0)
	r.OnCNP(0)
	var p Pacer
	p.Init(r.Rate(), 0)
	now := Time(0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.Advance(now)
		p.SetRate(r.Rate())
		if !p.Allow(now, size) {
			now = p.Next(now, size)
			p.Allow(now, size)
		}
		r.OnSent(now, size)
		if i&255 == 255 {
			r.OnCNP(now)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mpps")
}

// BenchmarkUnlimited is the per-packet cost on a QP that is not limited.
func BenchmarkUnlimited(b *testing.B) {
	var r RP
	r.Init(nil, g100, 0)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		now := Time(i) * 330
		r.Advance(now)
		if r.Limited() {
			b.Fatal("limited")
		}
		r.OnSent(now, 4096)
	}
}

func BenchmarkOnCNP(b *testing.B) {
	var r RP
	r.Init(nil, g100, 0)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r.OnCNP(Time(i) * 3 * time.Microsecond)
	}
}

func BenchmarkOnCE(b *testing.B) {
	var n NP
	n.Init(nil)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		n.OnCE(Time(i) * 100)
	}
}
