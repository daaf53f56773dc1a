package dcqcn

import (
	"testing"
	"time"
)

// fuzzParams derives a valid parameter set and a line rate from the first
// 8 bytes of a fuzz input (all zero: the defaults on 100 Gbit/s), so the
// fuzzer explores the parameter space too. It returns the rest as ops.
func fuzzParams(b []byte) (Params, uint64, []byte) {
	var h [8]byte
	copy(h[:], b)
	rest := b[min(len(b), len(h)):]
	p := Defaults()
	p.Threshold = [...]uint32{1, 2, 5, 31}[h[0]&3]
	p.ByteReset = [...]uint32{32767, 0, 1024, 100_000}[h[0]>>2&3]
	p.ClampTgtRate = h[0]&0x10 != 0
	p.ClampTgtRateAfterTimeInc = h[0]&0x20 == 0
	p.GD = [...]uint32{11, 10, 12, 15}[h[1]&3]
	p.MinDecFac = [...]uint32{50, 0, 80, 100}[h[1]>>2&3]
	p.TimeReset = [...]uint32{300, 1, 5, 55}[h[1]>>4&3]
	p.RateReducePeriod = [...]uint32{4, 1, 50, 300}[h[1]>>6&3]
	p.AlphaPeriod = [...]uint32{1, 3, 55, 1000}[h[2]&3]
	p.AlphaG = [...]uint32{1019, 0, 512, 1023}[h[2]>>2&3]
	p.InitialAlpha = [...]uint32{1023, 1, 512, 900}[h[2]>>4&3]
	p.AIRate = [...]uint32{5, 1, 20, 1000}[h[3]&3]
	p.HAIRate = [...]uint32{50, 0, 5, 2000}[h[3]>>2&3]
	p.MinRate = [...]uint32{1, 100, 1000, 10_000}[h[4]&3]
	line := [...]uint64{g100, 1_000_000_000, g25, 400_000_000_000}[h[4]>>2&3]
	if line < mbps(p.MinRate) {
		p.MinRate = 1
	}
	switch h[4] >> 4 & 3 {
	case 1:
		p.MaxRate = uint32(line / mbit / 2)
	case 2:
		p.MaxRate = uint32(line/mbit) + 1000
	}
	if p.MaxRate != 0 && p.MinRate > p.MaxRate {
		p.MinRate = 1
	}
	if h[4]&0x40 != 0 {
		p.RateOnFirstCNP = max(uint32(line/mbit/10), p.MinRate)
	}
	return p, line, rest
}

// FuzzRP drives an RP and a Pacer with arbitrary events and checks that
// the RP stays within its bounds, agrees with the reference model, and
// that the Pacer keeps its promises. After the 8 parameter bytes, each op
// byte is, modulo 4: 0 a CNP; 1 n: n·64+1 bytes sent; 2 hi lo: a time
// step of hi·256+lo ns (µs if the op byte has bit 2 set); 3 n: Advance,
// then a packet of n·32+1 bytes through the Pacer.
func FuzzRP(f *testing.F) {
	hdr := func(b ...byte) []byte { return append(b, make([]byte, 8-len(b))...) }
	seed := func(h []byte, ops ...byte) { f.Add(append(h, ops...)) }
	// Defaults: a CNP, sends, short steps, paced packets.
	seed(hdr(), 0, 1, 10, 2, 0, 16, 1, 200, 3, 127, 2, 1, 0, 3, 127)
	// A CNP every few µs: cuts, and one CNP within the monitor period.
	seed(hdr(), 0, 6, 0, 4, 0, 6, 0, 4, 0, 6, 0, 1, 0, 6, 0, 3, 0, 6, 0, 4, 0)
	// Long idle steps (65 ms) after a cut: timer-only recovery.
	seed(hdr(), 0, 6, 255, 255, 3, 0, 6, 255, 255, 3, 0, 6, 255, 255, 3, 0)
	// 1 KiB byte counter, F = 2, big hyper steps, 5 µs timer.
	seed(hdr(0x09, 0x20, 0, 0x0c), 0, 1, 255, 1, 255, 6, 0, 5, 1, 255, 3, 255, 6, 0, 20, 1, 255, 0, 1, 255)
	// No byte counter, clamping, rpg_gd 10, rate_to_set_on_first_cnp.
	seed(hdr(0x14, 0x05, 0x11, 0x01, 0x44), 0, 1, 64, 6, 1, 0, 0, 3, 0, 6, 4, 0, 0)
	f.Fuzz(fuzzRP)
}

// fuzzRP is FuzzRP's body.
func fuzzRP(t *testing.T, data []byte) {
	p, line, ops := fuzzParams(data)
	if err := p.ValidateFor(line); err != nil {
		t.Fatalf("fuzzParams made invalid parameters: %v", err)
	}
	var r RP
	r.Init(&p, line, 0)
	m := newRef(p, line)
	m.budget = 100_000 // stepping 1 µs timers one by one is slow
	var pc Pacer
	pc.Init(r.Rate(), 0)
	top := line
	if p.MaxRate != 0 {
		top = min(top, mbps(p.MaxRate))
	}
	floor := min(mbps(p.MinRate), top)
	now := Time(0)
	arg := func(i int) int {
		if i < len(ops) {
			return int(ops[i])
		}
		return 0
	}
	for i := 0; i < len(ops) && i < 4000; i++ {
		switch ops[i] % 4 {
		case 0:
			if r.OnCNP(now) != m.cnp(now) && !m.Over() {
				t.Fatalf("op %d: OnCNP result differs from the reference", i)
			}
		case 1:
			n := arg(i+1)<<6 | 1
			i++
			r.OnSent(now, n)
			m.sent(now, n)
		case 2:
			// Up to 65 ms in 1 µs units, or ns for small steps.
			d := Time(arg(i+1)<<8 | arg(i+2))
			if ops[i]&4 != 0 {
				d *= time.Microsecond
			}
			i += 2
			now += d
		case 3:
			r.Advance(now)
			m.advance(now)
			pc.SetRate(r.Rate())
			n := arg(i+1)<<5 | 1
			i++
			next := pc.Next(now, n)
			if next < now {
				t.Fatalf("op %d: Pacer.Next %v before now %v", i, next, now)
			}
			probe := pc
			if !probe.Allow(next, n) {
				t.Fatalf("op %d: Pacer refused at its own Next", i)
			}
			if next > now && pc.Allow(now, n) {
				t.Fatalf("op %d: Pacer allowed before Next", i)
			}
			if pc.Allow(next, n) {
				r.OnSent(next, n)
				m.sent(next, n)
			}
			now = max(now, next)
		}
		if d := m.same(&r); d != "" && !m.Over() {
			t.Fatalf("op %d: %s differs from the reference: rp %+v ref %+v", i, d, r, *m)
		}
		rc, rt, a := r.Rate(), r.Target(), r.Alpha()
		if r.Limited() {
			if rc < floor || rc > rt || rt > top || rc >= top {
				t.Fatalf("op %d: floor %d ≤ Rc %d ≤ Rt %d ≤ top %d violated", i, floor, rc, rt, top)
			}
			if due, ok := r.Deadline(); !ok || due <= r.now-Time(p.TimeReset)*time.Microsecond {
				t.Fatalf("op %d: deadline %v %v at %v", i, due, ok, r.now)
			}
		} else if rc != line || rt != line {
			t.Fatalf("op %d: not limited but Rc %d Rt %d, line %d", i, rc, rt, line)
		}
		if a < 0 || a > 1 {
			t.Fatalf("op %d: α %v", i, a)
		}
	}
}
