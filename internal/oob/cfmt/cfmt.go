// Package cfmt formats numbers the way glibc's printf does in the few
// conversions the stock RDMA tools use where Go's fmt differs: infinities and
// NaNs ("inf", "-nan"), the alternate hex form "%#0Nx" (no "0x" for zero),
// and inet_ntop's IPv6 text.
package cfmt

import (
	"math"
	"strconv"
	"strings"
)

// Float formats x as "%.<prec>f" would.
func Float(x float64, prec int) string {
	switch {
	case math.IsInf(x, 1):
		return "inf"
	case math.IsInf(x, -1):
		return "-inf"
	case math.IsNaN(x):
		if math.Signbit(x) {
			return "-nan"
		}
		return "nan"
	}
	return strconv.FormatFloat(x, 'f', prec, 64)
}

// LeftFloat formats x as "%-<width>.<prec>f" would: left-justified, padded
// with spaces to width.
func LeftFloat(x float64, width, prec int) string {
	return PadRight(Float(x, prec), width)
}

// PadRight pads s with spaces up to width ("%-<width>s").
func PadRight(s string, width int) string {
	if len(s) >= width {
		return s
	}
	return s + strings.Repeat(" ", width-len(s))
}

// AltHex formats v as "%#0<width>x" would: "0x" and lower-case hex digits,
// zero-padded so that prefix and digits fill width; zero has no prefix and is
// printed as width zeros.
func AltHex(v uint64, width int) string {
	digits := strconv.FormatUint(v, 16)
	if v == 0 {
		return strings.Repeat("0", max(width-len(digits), 0)) + digits
	}
	if pad := width - 2 - len(digits); pad > 0 {
		digits = strings.Repeat("0", pad) + digits
	}
	return "0x" + digits
}

// IPv6 formats a 16-byte address as glibc's inet_ntop(AF_INET6) does: the
// first longest run of two or more zero groups becomes "::", hex without
// leading zeros, and the last 32 bits in dotted decimal for IPv4-mapped
// (::ffff:a.b.c.d) and IPv4-compatible (::a.b.c.d, but not ::1-style ::x)
// addresses.
func IPv6(a [16]byte) string {
	var words [8]uint16
	for i := range words {
		words[i] = uint16(a[2*i])<<8 | uint16(a[2*i+1])
	}
	bestBase, bestLen := -1, 0
	curBase, curLen := -1, 0
	for i, w := range words {
		if w == 0 {
			if curBase == -1 {
				curBase, curLen = i, 1
			} else {
				curLen++
			}
			continue
		}
		if curBase != -1 {
			if bestBase == -1 || curLen > bestLen {
				bestBase, bestLen = curBase, curLen
			}
			curBase = -1
		}
	}
	if curBase != -1 && (bestBase == -1 || curLen > bestLen) {
		bestBase, bestLen = curBase, curLen
	}
	if bestBase != -1 && bestLen < 2 {
		bestBase = -1
	}
	var b strings.Builder
	for i := 0; i < 8; i++ {
		if bestBase != -1 && i >= bestBase && i < bestBase+bestLen {
			if i == bestBase {
				b.WriteByte(':')
			}
			continue
		}
		if i != 0 {
			b.WriteByte(':')
		}
		if i == 6 && bestBase == 0 && (bestLen == 6 || (bestLen == 5 && words[5] == 0xffff)) {
			for j, x := range a[12:] {
				if j > 0 {
					b.WriteByte('.')
				}
				b.WriteString(strconv.Itoa(int(x)))
			}
			return b.String()
		}
		b.WriteString(strconv.FormatUint(uint64(words[i]), 16))
	}
	if bestBase != -1 && bestBase+bestLen == 8 {
		b.WriteByte(':')
	}
	return b.String()
}
