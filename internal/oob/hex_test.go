package oob

import (
	"strings"
	"testing"
)

func TestHex(t *testing.T) {
	for _, c := range []struct {
		v     uint64
		width int
		want  string
	}{{0, 4, "0000"}, {0xabc, 6, "000abc"}, {0x1234567, 6, "234567"}, {^uint64(0), 16, "ffffffffffffffff"}} {
		got := string(AppendHex([]byte("x"), c.v, c.width))
		if got != "x"+c.want {
			t.Errorf("AppendHex(%#x, %d) = %q, want %q", c.v, c.width, got, "x"+c.want)
		}
		v, err := ParseHex([]byte(strings.ToUpper(c.want)))
		if mask := uint64(1)<<(4*c.width) - 1; err != nil || (c.width < 16 && v != c.v&mask) || (c.width == 16 && v != c.v) {
			t.Errorf("ParseHex(%q) = %#x, %v", c.want, v, err)
		}
	}
	for _, s := range []string{"", "12g4", "0x12", " 1", "12345678901234567"} {
		if v, err := ParseHex([]byte(s)); err == nil {
			t.Errorf("ParseHex(%q) = %#x, want an error", s, v)
		}
	}
}

func TestGID(t *testing.T) {
	gid := [16]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 0xab}
	for _, c := range []struct {
		sep  byte
		want string
	}{
		{':', "00:00:00:00:00:00:00:00:00:00:ff:ff:c0:00:02:ab:"},
		{0, "00000000000000000000ffffc00002ab"},
	} {
		b := AppendGID(nil, gid, c.sep)
		if string(b) != c.want {
			t.Errorf("sep %q: AppendGID = %q, want %q", c.sep, b, c.want)
		}
		got, err := ParseGID([]byte(strings.ToUpper(c.want)), c.sep)
		if err != nil || got != gid {
			t.Errorf("sep %q: ParseGID = %x, %v", c.sep, got, err)
		}
		bad := []string{c.want[1:], c.want + "0", strings.Replace(c.want, "c0", "cg", 1)}
		if c.sep != 0 {
			bad = append(bad, strings.Replace(c.want, "ff:c0", "ff;c0", 1))
		}
		for _, s := range bad {
			if _, err := ParseGID([]byte(s), c.sep); err == nil {
				t.Errorf("sep %q: ParseGID(%q) accepted", c.sep, s)
			}
		}
	}
}
