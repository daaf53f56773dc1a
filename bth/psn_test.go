package bth

import "testing"

func TestPSNArithmetic(t *testing.T) {
	tests := []struct {
		p, q PSN
		sub  int // p - q
	}{
		{0, 0, 0},
		{1, 0, 1},
		{0, 1, -1},
		{0, 0xffffff, 1}, // 0 follows 0xffffff
		{0xffffff, 0, -1},
		{5, 0xfffffb, 10},
		{0xfffffb, 5, -10},
		{0x7fffff, 0, 0x7fffff},  // the farthest "after"
		{0x800000, 0, -0x800000}, // half the space away counts as before
		{0, 0x800000, -0x800000}, // and so does the opposite
		{0x800001, 0x000001, -1 << 23},
		{0x123456, 0x123455, 1},
	}
	for _, tt := range tests {
		if got := tt.p.Sub(tt.q); got != tt.sub {
			t.Errorf("%#x.Sub(%#x) = %d, want %d", tt.p, tt.q, got, tt.sub)
		}
		if got := tt.p.Less(tt.q); got != (tt.sub < 0) {
			t.Errorf("%#x.Less(%#x) = %v", tt.p, tt.q, got)
		}
		if got := tt.p.LessEq(tt.q); got != (tt.sub <= 0) {
			t.Errorf("%#x.LessEq(%#x) = %v", tt.p, tt.q, got)
		}
		if tt.sub > -1<<23 {
			if got := tt.q.Add(tt.sub); got != tt.p {
				t.Errorf("%#x.Add(%d) = %#x, want %#x", tt.q, tt.sub, got, tt.p)
			}
		}
	}
}

func TestPSNAddNext(t *testing.T) {
	tests := []struct {
		p    PSN
		n    int
		want PSN
	}{
		{0xffffff, 1, 0},
		{0xfffffe, 3, 1},
		{0, -1, 0xffffff},
		{2, -5, 0xfffffd},
		{0x000010, 1 << 24, 0x000010},
		{0xabcdef, 0, 0xabcdef},
	}
	for _, tt := range tests {
		if got := tt.p.Add(tt.n); got != tt.want {
			t.Errorf("%#x.Add(%d) = %#x, want %#x", tt.p, tt.n, got, tt.want)
		}
	}
	if PSN(0xffffff).Next() != 0 || PSN(7).Next() != 8 {
		t.Error("Next does not wrap at 2^24")
	}
	if MakePSN(0x1234567) != 0x234567 || MakePSN(0xffffffff) != 0xffffff {
		t.Error("MakePSN does not keep 24 bits")
	}
}

func TestPSNInWindow(t *testing.T) {
	tests := []struct {
		p, start PSN
		n        int
		want     bool
	}{
		{5, 5, 1, true},
		{5, 5, 0, false},
		{6, 5, 1, false},
		{4, 5, 10, false},
		{0, 0xfffffe, 3, true}, // window across the wrap
		{1, 0xfffffe, 3, false},
		{0xfffffe, 0xfffffe, 3, true},
		{0xfffffd, 0xfffffe, 3, false},
		{0x7fffff, 0, 1 << 23, true},
		{0x800000, 0, 1 << 23, false},
		{3, 0, -1, false},
	}
	for _, tt := range tests {
		if got := tt.p.InWindow(tt.start, tt.n); got != tt.want {
			t.Errorf("%#x.InWindow(%#x, %d) = %v, want %v", tt.p, tt.start, tt.n, got, tt.want)
		}
	}
}
