package cfmt

import (
	"encoding/hex"
	"math"
	"testing"
)

// The expected strings below were produced by glibc's inet_ntop and printf.

func TestIPv6(t *testing.T) {
	for _, tc := range []struct{ hex, want string }{
		{"00000000000000000000ffffc0000201", "::ffff:192.0.2.1"},
		{"00000000000000000000000000000000", "::"},
		{"00000000000000000000000000000001", "::1"},
		{"000000000000000000000000c0000201", "::192.0.2.1"},
		{"fe80000000000000505400fffe000201", "fe80::5054:ff:fe00:201"},
		{"20010db8000000000001000000000001", "2001:db8::1:0:0:1"},
		{"00010000000000020000000000000003", "1:0:0:2::3"},
		{"000000000000000000000001c0000201", "::1:c000:201"},
		{"00000000000000000000ffff00000000", "::ffff:0.0.0.0"},
		{"00000000000000000000c00002010000", "::c000:201:0"},
		{"00010000000000000000000000000000", "1::"},
		{"00010002000300040005000600070008", "1:2:3:4:5:6:7:8"},
		{"0000000000000000ffff0001c0000201", "::ffff:1:c000:201"},
		{"00000000000100000000000000000000", "0:0:1::"},
	} {
		var a [16]byte
		if _, err := hex.Decode(a[:], []byte(tc.hex)); err != nil {
			t.Fatal(err)
		}
		if got := IPv6(a); got != tc.want {
			t.Errorf("IPv6(%s) = %q, want %q", tc.hex, got, tc.want)
		}
	}
}

func TestAltHex(t *testing.T) {
	for _, tc := range []struct {
		v     uint64
		width int
		want  string
	}{
		{0x0, 4, "0000"}, {0x0, 6, "000000"}, {0x0, 8, "00000000"},
		{0x1, 4, "0x01"}, {0x1, 6, "0x0001"}, {0x1, 8, "0x000001"},
		{0x11, 4, "0x11"}, {0x11, 6, "0x0011"}, {0x11, 8, "0x000011"},
		{0xff, 4, "0xff"}, {0xff, 6, "0x00ff"}, {0xff, 8, "0x0000ff"},
		{0x100, 4, "0x100"}, {0x100, 6, "0x0100"}, {0x100, 8, "0x000100"},
		{0x2ec, 4, "0x2ec"}, {0x2ec, 6, "0x02ec"}, {0x2ec, 8, "0x0002ec"},
		{0x21030e, 4, "0x21030e"}, {0x21030e, 6, "0x21030e"}, {0x21030e, 8, "0x21030e"},
		{0x12345678, 4, "0x12345678"}, {0x12345678, 6, "0x12345678"}, {0x12345678, 8, "0x12345678"},
		{0x0, 16, "0000000000000000"},
		{0x555d8ecb3000, 16, "0x00555d8ecb3000"},
		{0x7fffffffffff, 16, "0x007fffffffffff"},
		{0xffffffffffffffff, 16, "0xffffffffffffffff"},
	} {
		if got := AltHex(tc.v, tc.width); got != tc.want {
			t.Errorf("AltHex(%#x, %d) = %q, want %q", tc.v, tc.width, got, tc.want)
		}
	}
}

func TestFloat(t *testing.T) {
	for _, tc := range []struct {
		x    float64
		prec int
		want string
	}{
		{1.005, 2, "1.00"}, // 1.005 is below 1.005 in binary
		{2.675, 2, "2.67"},
		{0.125, 2, "0.12"}, // exact tie: round half to even
		{0.375, 2, "0.38"},
		{1234.5, 0, "1234"},
		{math.Inf(1), 2, "inf"},
		{math.Inf(-1), 2, "-inf"},
		{math.Copysign(math.NaN(), -1), 2, "-nan"},
		{math.NaN(), 2, "nan"},
	} {
		if got := Float(tc.x, tc.prec); got != tc.want {
			t.Errorf("Float(%v, %d) = %q, want %q", tc.x, tc.prec, got, tc.want)
		}
	}
	if got := LeftFloat(3.5, 7, 2); got != "3.50   " {
		t.Errorf("LeftFloat = %q", got)
	}
	if got := LeftFloat(12345.678, 7, 2); got != "12345.68" {
		t.Errorf("LeftFloat = %q", got)
	}
}
