package bth

// PSN is a 24-bit packet sequence number. Arithmetic wraps modulo 2^24 and
// comparisons are made within half the sequence space (IBTA 9.7.1), so
// PSN 0x000001 is after 0xffffff.
type PSN uint32

// PSNMask keeps the low 24 bits.
const PSNMask = 1<<24 - 1

// psnHalf is half the PSN space: the window in which order is defined.
const psnHalf = 1 << 23

// MakePSN reduces v to 24 bits.
func MakePSN(v uint32) PSN { return PSN(v & PSNMask) }

// Add returns p+n modulo 2^24. n may be negative.
func (p PSN) Add(n int) PSN { return PSN((uint32(p) + uint32(n)) & PSNMask) }

// Next returns p+1 modulo 2^24.
func (p PSN) Next() PSN { return PSN((uint32(p) + 1) & PSNMask) }

// Sub returns the signed distance p-q, in [-2^23, 2^23).
func (p PSN) Sub(q PSN) int {
	d := (uint32(p) - uint32(q)) & PSNMask
	if d >= psnHalf {
		return int(d) - (1 << 24)
	}
	return int(d)
}

// Less reports whether p comes before q.
func (p PSN) Less(q PSN) bool { return p.Sub(q) < 0 }

// LessEq reports whether p comes before q or equals it.
func (p PSN) LessEq(q PSN) bool { return p.Sub(q) <= 0 }

// InWindow reports whether p lies in [start, start+n).
func (p PSN) InWindow(start PSN, n int) bool {
	d := (uint32(p) - uint32(start)) & PSNMask
	return n > 0 && d < uint32(n)
}
