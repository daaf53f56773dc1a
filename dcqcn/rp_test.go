package dcqcn

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

const (
	us   = time.Microsecond
	g25  = 25_000_000_000
	g40  = 40_000_000_000
	g100 = 100_000_000_000
)

// q32 converts a Q32 alpha to float64 (exactly).
func q32(v uint64) float64 { return float64(v) / (1 << 32) }

// belowTop returns an RP on line whose target is below the line rate, so
// increases show: a CNP at 0, then a second cut at 10 µs with
// clamp_tgt_rate, so Rt is the first cut's rate (about L/2), Rc about L/4,
// and the stage counters are zero. p's own clamping applies afterwards.
func belowTop(t *testing.T, p Params, line uint64) *RP {
	t.Helper()
	q := p
	q.ClampTgtRate = true
	r := limitedRP(t, q, line, 0)
	if !r.OnCNP(10 * us) {
		t.Fatal("second cut not handled")
	}
	r.cfg.clamp = p.ClampTgtRate
	if r.Target() >= line || r.stage != (stage{}) {
		t.Fatalf("Rt %d stage %+v", r.Target(), r.stage)
	}
	return r
}

// limitedRP returns an RP on line after one CNP at t0.
func limitedRP(t *testing.T, p Params, line uint64, t0 Time) *RP {
	t.Helper()
	var r RP
	r.Init(&p, line, 0)
	if !r.OnCNP(t0) {
		t.Fatal("first CNP not handled")
	}
	return &r
}

func TestInitNotLimited(t *testing.T) {
	var r RP
	r.Init(nil, g100, 5*us)
	if r.Limited() || r.Rate() != g100 || r.Target() != g100 {
		t.Fatalf("after Init: limited %v rate %d target %d", r.Limited(), r.Rate(), r.Target())
	}
	if _, ok := r.Deadline(); ok {
		t.Error("deadline armed before any CNP")
	}
	r.OnSent(6*us, 1<<20)
	r.Advance(time.Second)
	if r.Limited() || r.Rate() != g100 {
		t.Error("sending without CNPs changed the rate")
	}
}

// The first CNP from line rate: α0 = 1023/1024, Rc = L·(1 − α0/2),
// Rt = L, α = (1019/1024)·α0 + 5/1024.
func TestFirstCNP(t *testing.T) {
	for _, tc := range []struct {
		line, rc uint64
	}{
		{g100, 50_048_828_125}, // 1e11 − 1e11·1023/2048
		{g40, 40_000_000_000 - 19_980_468_750},
		{g25, 25_000_000_000 - 12_487_792_968}, // decrease rounded down
		{1_000_000_000, 1_000_000_000 - 499_511_718},
	} {
		r := limitedRP(t, Defaults(), tc.line, 10*us)
		if !r.Limited() {
			t.Errorf("%d: not limited", tc.line)
		}
		if r.Rate() != tc.rc || r.Target() != tc.line {
			t.Errorf("%d: Rc %d Rt %d, want %d %d", tc.line, r.Rate(), r.Target(), tc.rc, tc.line)
		}
		// (1019·1023 + 5·1024)/2^20 = 1047557/2^20, exactly.
		if a, want := r.Alpha(), 1047557.0/(1<<20); a != want {
			t.Errorf("%d: α %v, want %v", tc.line, a, want)
		}
		if d, ok := r.Deadline(); !ok || d != 310*us {
			t.Errorf("%d: deadline %v %v, want 310µs", tc.line, d, ok)
		}
	}
}

// Cuts happen at most once per rate_reduce_monitor_period; CNPs between
// only raise alpha.
func TestRepeatedCNP(t *testing.T) {
	p := Defaults()
	r := limitedRP(t, p, g100, 0)
	rc1, a := r.Rate(), q32(r.alpha.v)
	g := 5.0 / 1024
	for _, tc := range []struct {
		at      Time
		handled bool
	}{
		{1 * us, false},
		{3 * us, false},
		{3*us + 999, false},
		{4 * us, true},
		{7 * us, false},
		{8 * us, true},
		{20 * us, true},
	} {
		// Alpha at the CNP: decayed over the quiet periods since the last.
		last := r.alpha.at
		k := float64((tc.at - last) / us)
		aNow := a * math.Pow(1-g, k)
		rcBefore, rtBefore := r.Rate(), r.Target()
		if got := r.OnCNP(tc.at); got != tc.handled {
			t.Fatalf("CNP at %v: handled %v, want %v", tc.at, got, tc.handled)
		}
		a = (1-g)*aNow + g
		if math.Abs(r.Alpha()-a) > 1e-8 {
			t.Errorf("CNP at %v: α %v, want %v", tc.at, r.Alpha(), a)
		}
		wantRc := rcBefore
		if tc.handled {
			wantRc = uint64(float64(rcBefore) * (1 - aNow/2))
		}
		if d := math.Abs(float64(r.Rate()) - float64(wantRc)); d > float64(wantRc)*1e-8+1 {
			t.Errorf("CNP at %v: Rc %d, want %d", tc.at, r.Rate(), wantRc)
		}
		// No increase between the cuts: the target stays at line rate.
		if r.Target() != rtBefore || r.Target() != g100 {
			t.Errorf("CNP at %v: Rt %d, want %d", tc.at, r.Target(), uint64(g100))
		}
	}
	if r.Rate() >= rc1 {
		t.Error("later cuts did not lower the rate")
	}
}

// Target clamping after the first cut, per clamp_tgt_rate and
// clamp_tgt_rate_after_time_inc and the cause of the last increase.
func TestClampTarget(t *testing.T) {
	for _, tc := range []struct {
		name         string
		clamp, ati   bool
		timer, bytes int // increase events between the two cuts
		clamped      bool
	}{
		{"default, no increase", false, true, 0, 0, false},
		{"default, timer", false, true, 1, 0, true},
		{"default, bytes", false, true, 0, 1, true},
		{"ati off, timer", false, false, 1, 0, false},
		{"ati off, bytes", false, false, 0, 1, true},
		{"ati off, bytes then timer", false, false, 1, 1, false}, // last was the timer
		{"clamp, no increase", true, false, 0, 0, true},
		{"clamp, timer", true, true, 1, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Defaults()
			p.ClampTgtRate, p.ClampTgtRateAfterTimeInc = tc.clamp, tc.ati
			r := limitedRP(t, p, g100, 0)
			now := Time(0)
			for range tc.bytes {
				now += us
				r.OnSent(now, int(p.ByteReset))
			}
			for range tc.timer {
				now, _ = r.Deadline()
				r.Advance(now)
			}
			now += 10 * us
			rc := r.Rate()
			if !r.OnCNP(now) {
				t.Fatal("second cut not handled")
			}
			want := uint64(g100)
			if tc.clamped {
				want = rc
			}
			if r.Target() != want {
				t.Errorf("Rt %d, want %d (Rc before the cut %d)", r.Target(), want, rc)
			}
		})
	}
}

// α decays by (1 − g) per dce_tcp_rtt without CNPs: after N periods it is
// (1 − g)^N times its value at the last CNP.
func TestAlphaDecay(t *testing.T) {
	for _, period := range []uint32{1, 55} {
		p := Defaults()
		p.AlphaPeriod = period
		p.TimeReset = 1_000_000 // no rate increase in the way
		per := Time(period) * us
		r := limitedRP(t, p, g100, 0)
		a1 := q32(r.alpha.v)
		for _, n := range []int{0, 1, 2, 3, 10, 100, 1000, 4000} {
			r.Advance(Time(n)*per + per/2) // mid-period: n updates so far
			want := a1 * math.Pow(1019.0/1024, float64(n))
			if d := math.Abs(r.Alpha() - want); d > 1e-8 || want > 1e-3 && d/want > 1e-7 {
				t.Errorf("period %dµs, after %d: α %v, want %v", period, n, r.Alpha(), want)
			}
		}
	}
	// One period is exactly α·1019/1024.
	r := limitedRP(t, Defaults(), g100, 0)
	r.Advance(us)
	if want := 1047557.0 * 1019 / (1 << 30); r.Alpha() != want {
		t.Errorf("one period: α %v, want %v", r.Alpha(), want)
	}
}

// Alpha decay matches step-by-step multiplication within rounding, for
// every dce_tcp_g.
func TestAlphaValue(t *testing.T) {
	for _, g := range []uint64{0, 1, 512, 1000, 1019, 1023, 1024} {
		for _, k := range []uint64{0, 1, 2, 5, 64, 777, 100000} {
			a := alpha{v: alphaOne - 12345, at: 0}
			got := a.value(Time(k)*us+us/3, us, g)
			want := q32(a.v) * math.Pow(float64(g)/1024, float64(k))
			if d := math.Abs(q32(got) - want); d > 1e-8 {
				t.Errorf("g %d k %d: %v, want %v", g, k, q32(got), want)
			}
		}
	}
	if v := raise(alphaOne, 1019); v != alphaOne {
		t.Errorf("raise(1) = %v", q32(v))
	}
	if v := raise(0, 1019); v != 5<<22 {
		t.Errorf("raise(0) = %v", q32(v))
	}
}

// Fast recovery halves the distance to the target at each event: after k
// events Rc = Rt − (Rt − Rc0)/2^k.
func TestFastRecovery(t *testing.T) {
	p := Defaults()
	p.Threshold = 5
	r := belowTop(t, p, g100)
	rt, rc0 := r.Target(), r.Rate()
	for k := 1; k <= 5; k++ {
		due, _ := r.Deadline()
		r.Advance(due)
		if want := rt - (rt-rc0)>>k; r.Rate() != want || r.Target() != rt {
			t.Errorf("after %d events: Rc %d Rt %d, want %d %d", k, r.Rate(), r.Target(), want, rt)
		}
	}
	// The sixth event (T = F) is additive.
	due, _ := r.Deadline()
	rc := r.Rate()
	r.Advance(due)
	if want := rt + 5*mbit; r.Target() != want || r.Rate() != rc+(want-rc+1)/2 {
		t.Errorf("sixth event: Rt %d Rc %d, want additive increase to %d", r.Target(), r.Rate(), want)
	}
}

// The stages with the defaults (F = 1), events of both kinds.
func TestIncreaseStages(t *testing.T) {
	const ai, hai = 5 * mbit, 50 * mbit
	p := Defaults()
	r := belowTop(t, p, g100)
	now := 10 * us
	for i, tc := range []struct {
		timer bool   // a timer event, else a byte-counter event
		inc   uint64 // expected Rt increase
		stage string
	}{
		{true, 0, "fast recovery (T 0, BC 0)"},
		{true, ai, "additive (T 1, BC 0)"},
		{false, ai, "additive (T 2, BC 0)"},
		{false, ai, "additive (T 2, BC 1)"},
		{false, hai, "hyper i=1 (T 2, BC 2)"},
		{true, hai, "hyper i=1 (T 2, BC 3)"},
		{true, 2 * hai, "hyper i=2 (T 3, BC 3)"},
		{false, 2 * hai, "hyper i=2 (T 4, BC 3)"},
		{false, 3 * hai, "hyper i=3 (T 4, BC 4)"},
		{true, 3 * hai, "hyper i=3 (T 4, BC 5)"},
	} {
		rt, rc := r.Target(), r.Rate()
		if tc.timer {
			now, _ = r.Deadline()
			r.Advance(now)
		} else {
			r.OnSent(now, int(p.ByteReset))
		}
		wantRt := rt + tc.inc
		if r.Target() != wantRt || r.Rate() != rc+(wantRt-rc+1)/2 {
			t.Errorf("event %d, %s: Rt %d Rc %d, want Rt %d Rc %d", i, tc.stage, r.Target(), r.Rate(), wantRt, rc+(wantRt-rc+1)/2)
		}
	}
}

// Without a byte counter the timer stage decides alone.
func TestNoByteCounter(t *testing.T) {
	p := Defaults()
	p.ByteReset = 0
	r := belowTop(t, p, g100)
	rt := r.Target()
	r.OnSent(11*us, 1<<30)
	if r.stage.bc != 0 || r.Target() != rt {
		t.Fatal("bytes counted with rpg_byte_reset 0")
	}
	// F = 1: fast recovery, additive, then hyper with i = T − F.
	for i, inc := range []uint64{0, 5 * mbit, 50 * mbit, 100 * mbit, 150 * mbit} {
		rt := r.Target()
		now, _ := r.Deadline()
		r.Advance(now)
		if r.Target() != rt+inc {
			t.Errorf("timer event %d: Rt %d, want %d", i, r.Target(), rt+inc)
		}
	}
}

// Byte-counter events come from OnSent, one per rpg_byte_reset bytes,
// remainders carried over.
func TestByteCounter(t *testing.T) {
	p := Defaults()
	r := limitedRP(t, p, g100, 0)
	rc := r.Rate()
	r.OnSent(us, int(p.ByteReset)-1)
	if r.Rate() != rc {
		t.Fatal("increase before rpg_byte_reset bytes")
	}
	r.OnSent(us, 1)
	if want := rc + (g100-rc+1)/2; r.Rate() != want || r.stage.bc != 1 {
		t.Fatalf("after rpg_byte_reset bytes: Rc %d BC %d, want %d 1", r.Rate(), r.stage.bc, want)
	}
	// Three events in one call equal three calls; 100 bytes carry over.
	a, b := *r, *r
	a.OnSent(2*us, 3*int(p.ByteReset)+100)
	for range 3 {
		b.OnSent(2*us, int(p.ByteReset))
	}
	b.OnSent(2*us, 100)
	if a != b {
		t.Errorf("one OnSent of 3 events + 100 differs from 4 calls:\n%+v\n%+v", a, b)
	}
	if a.stage.bytes != 100 || a.stage.bc != 4 {
		t.Errorf("BC %d bytes %d, want 4 100", a.stage.bc, a.stage.bytes)
	}
}

func TestMinRateFloor(t *testing.T) {
	p := Defaults()
	p.MinRate = 6000
	r := limitedRP(t, p, 10_000_000_000, 0)
	if r.Rate() != 6_000_000_000 {
		t.Errorf("first cut with a 6 Gbit/s floor: %d", r.Rate())
	}
	// Cut after cut, the rate stops at rpg_min_rate (1 Mbit/s).
	r = limitedRP(t, Defaults(), g100, 0)
	for i := 1; i < 100; i++ {
		r.OnCNP(Time(i) * 4 * us)
		if r.Rate() < mbit {
			t.Fatalf("cut %d: Rc %d below the floor", i, r.Rate())
		}
	}
	if r.Rate() != mbit {
		t.Errorf("after 100 cuts: Rc %d, want %d", r.Rate(), mbit)
	}
}

func TestMinDecFac(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fac, gd uint32
		line    uint64
		rc      uint64
	}{
		{"80% caps a halving", 80, 11, g100, 80_000_000_000},
		{"50% (default) does not bind α/2", 50, 11, g100, 50_048_828_125},
		{"gd 10 cuts by α, capped at 50%", 50, 10, g100, 50_000_000_000},
		{"gd 10 uncapped", 0, 10, 102_400_000_000, 100_000_000},
		{"gd 12 cuts by α/4", 0, 12, 409_600_000_000, 409_600_000_000 - 102_300_000_000},
	} {
		p := Defaults()
		p.MinDecFac, p.GD = tc.fac, tc.gd
		r := limitedRP(t, p, tc.line, 0)
		if r.Rate() != tc.rc {
			t.Errorf("%s: Rc %d, want %d", tc.name, r.Rate(), tc.rc)
		}
	}
	// 100% forbids cuts: the limiter is released at once.
	p := Defaults()
	p.MinDecFac = 100
	var r RP
	r.Init(&p, g100, 0)
	if !r.OnCNP(0) || r.Limited() || r.Rate() != g100 {
		t.Errorf("rpg_min_dec_fac 100: limited %v rate %d", r.Limited(), r.Rate())
	}
}

func TestRateOnFirstCNP(t *testing.T) {
	p := Defaults()
	p.RateOnFirstCNP = 10_000
	r := limitedRP(t, p, g100, 0)
	if r.Rate() != 10_000_000_000 || r.Target() != 10_000_000_000 {
		t.Errorf("Rc %d Rt %d, want 10 Gbit/s both", r.Rate(), r.Target())
	}
	if want := 1047557.0 / (1 << 20); r.Alpha() != want {
		t.Errorf("α %v, want %v", r.Alpha(), want)
	}
	// The next cut is a normal one.
	r.OnCNP(10 * us)
	if r.Rate() >= 10_000_000_000 || r.Target() != 10_000_000_000 {
		t.Errorf("second cut: Rc %d Rt %d", r.Rate(), r.Target())
	}
}

// Recovery ends at line rate: the limiter is released, no timer remains.
func TestRecovery(t *testing.T) {
	t.Run("sending", func(t *testing.T) {
		r := limitedRP(t, Defaults(), g100, 0)
		var pc Pacer
		pc.Init(r.Rate(), 0)
		now := Time(0)
		for r.Limited() && now < time.Second {
			pc.SetRate(r.Rate())
			now = pc.Next(now, 4096)
			if !pc.Allow(now, 4096) {
				t.Fatal("Next then Allow refused")
			}
			r.OnSent(now, 4096)
		}
		if r.Limited() || r.Rate() != g100 || r.Target() != g100 {
			t.Fatalf("after %v: limited %v Rc %d Rt %d", now, r.Limited(), r.Rate(), r.Target())
		}
		if _, ok := r.Deadline(); ok {
			t.Error("timer armed after release")
		}
		t.Logf("back at line rate after %v", now)
	})
	t.Run("idle", func(t *testing.T) {
		// Timer only, from a clamped target (about 50 Gbit/s): fast
		// recovery, then +5 Mbit/s per 300 µs, about 3 s to the line
		// rate. One Advance covers it, in closed form.
		r := belowTop(t, Defaults(), g100)
		s, m := *r, newRef(Defaults(), g100)
		m.p.ClampTgtRate = true
		m.cnp(0)
		m.cnp(10 * us)
		m.p.ClampTgtRate = false
		if d := m.same(r); d != "" {
			t.Fatalf("reference setup differs: %s", d)
		}
		r.Advance(10 * time.Second)
		if r.Limited() || r.Rate() != g100 {
			t.Fatalf("after 10 s idle: limited %v Rc %d", r.Limited(), r.Rate())
		}
		events := 0
		for s.Limited() {
			d, _ := s.Deadline()
			s.Advance(d)
			events++
		}
		s.Advance(10 * time.Second)
		if *r != s {
			t.Errorf("one Advance differs from one per event:\n%+v\n%+v", *r, s)
		}
		m.advance(10 * time.Second)
		if d := m.same(r); d != "" {
			t.Errorf("%s differs from the reference", d)
		}
		t.Logf("%d timer events", events)
	})
	t.Run("max rate", func(t *testing.T) {
		p := Defaults()
		p.MaxRate = 60_000
		r := limitedRP(t, p, g100, 0)
		if r.Target() != 60_000_000_000 {
			t.Errorf("Rt %d, want rpg_max_rate", r.Target())
		}
		for r.Limited() {
			if r.Rate() > 60_000_000_000 {
				t.Fatalf("Rc %d above rpg_max_rate", r.Rate())
			}
			d, _ := r.Deadline()
			r.Advance(d)
		}
		if r.Rate() != g100 {
			t.Errorf("released at %d, want the line rate", r.Rate())
		}
	})
}

func TestDeadline(t *testing.T) {
	r := limitedRP(t, Defaults(), g100, 7*us)
	due, ok := r.Deadline()
	if !ok || due != 307*us {
		t.Fatalf("deadline %v %v, want 307µs", due, ok)
	}
	rc := r.Rate()
	r.Advance(due - 1)
	if r.Rate() != rc {
		t.Error("increase before the deadline")
	}
	if d, _ := r.Deadline(); d != due {
		t.Error("deadline moved before it was due")
	}
	r.Advance(due)
	if r.Rate() == rc {
		t.Error("no increase at the deadline")
	}
	if d, _ := r.Deadline(); d != due+300*us {
		t.Errorf("next deadline %v, want %v", d, due+300*us)
	}
	// Late by 2 periods and a half: three more events, on the grid.
	r.Advance(due + 300*us + 650*us)
	if d, _ := r.Deadline(); d != due+4*300*us || r.stage.t != 4 {
		t.Errorf("deadline %v T %d, want %v 4", d, r.stage.t, due+4*300*us)
	}
	// A cut restarts the timer.
	r.OnCNP(2 * time.Millisecond)
	if d, _ := r.Deadline(); d != 2*time.Millisecond+300*us {
		t.Errorf("after a cut: deadline %v", d)
	}
	// An ignored CNP does not.
	r.OnCNP(2*time.Millisecond + us)
	if d, _ := r.Deadline(); d != 2*time.Millisecond+300*us {
		t.Errorf("after an ignored CNP: deadline %v", d)
	}
}

// event is one input to an RP in a scenario.
type event struct {
	at   Time
	cnp  bool
	sent int
}

// scenario makes n events over about span, CNPs with probability 1/cnp.
func scenario(rng *rand.Rand, n int, span Time, cnp int) []event {
	ev := make([]event, n)
	at := Time(0)
	for i := range ev {
		at += Time(rng.Int64N(int64(2 * span / Time(n))))
		ev[i] = event{at: at, cnp: rng.IntN(cnp) == 0, sent: 64 + rng.IntN(9000)}
	}
	return ev
}

func play(r *RP, ev []event, tick Time, end Time) {
	now := Time(0)
	for _, e := range ev {
		for tick > 0 && now+tick < e.at {
			now += tick
			r.Advance(now)
		}
		if e.cnp {
			r.OnCNP(e.at)
		} else {
			r.OnSent(e.at, e.sent)
		}
		now = e.at
	}
	r.Advance(end)
}

// Calling Advance often or rarely gives the same state, equal to the
// reference model's.
func TestAdvanceCoarseFine(t *testing.T) {
	// Once after 1 ms equals every µs for 1 ms.
	a := limitedRP(t, Defaults(), g100, 0)
	b := *a
	a.Advance(time.Millisecond)
	for now := Time(0); now <= time.Millisecond; now += us {
		b.Advance(now)
	}
	if *a != b {
		t.Fatalf("1 ms at once differs from every µs:\n%+v\n%+v", *a, b)
	}

	variants := []func(*Params){
		func(*Params) {},
		func(p *Params) { p.Threshold, p.ByteReset = 5, 100_000 },
		func(p *Params) { p.ByteReset = 0 },
		func(p *Params) { p.TimeReset, p.RateReducePeriod, p.AlphaPeriod = 55, 50, 55 },
		func(p *Params) { p.ClampTgtRate, p.GD, p.MinDecFac = true, 10, 30 },
	}
	// Dense: 5000 events in 20 ms. Sparse: 60 events in 2 s, CNPs one in
	// three, so recoveries from clamped targets run long in one Advance.
	for i, mod := range append(variants, variants...) {
		p := Defaults()
		mod(&p)
		rng := rand.New(rand.NewPCG(1, uint64(i)))
		ev := scenario(rng, 5000, 20*time.Millisecond, 20)
		if i >= len(variants) {
			ev = scenario(rng, 60, 2*time.Second, 3)
		}
		end := ev[len(ev)-1].at + 50*time.Millisecond
		var coarse, fine, random RP
		coarse.Init(&p, g100, 0)
		fine.Init(&p, g100, 0)
		random.Init(&p, g100, 0)
		play(&coarse, ev, 0, end)
		play(&fine, ev, us, end)
		play(&random, ev, 37*us+123, end)
		if coarse != fine || coarse != random {
			t.Errorf("variant %d: states differ:\n%+v\n%+v\n%+v", i, coarse, fine, random)
		}
		m := newRef(p, g100)
		for _, e := range ev {
			if e.cnp {
				m.cnp(e.at)
			} else {
				m.sent(e.at, e.sent)
			}
			m.advance(e.at)
		}
		m.advance(end)
		if d := m.same(&coarse); d != "" {
			t.Errorf("variant %d: %s differs from the reference", i, d)
		}
	}
}
