package oob

import (
	"errors"
	"fmt"
)

// The tools' messages are C strings of hex fields: these read and write
// them.

const hexDigits = "0123456789abcdef"

// AppendHex appends the width low hex digits of v in lower case, as C's
// "%0<width>x" prints a value of at most that many digits.
func AppendHex(b []byte, v uint64, width int) []byte {
	for i := width - 1; i >= 0; i-- {
		b = append(b, hexDigits[(v>>(4*uint(i)))&15])
	}
	return b
}

// ParseHex parses the whole of s, 1 to 16 hex digits in either case.
func ParseHex(s []byte) (uint64, error) {
	if len(s) == 0 || len(s) > 16 {
		return 0, fmt.Errorf("%d hex digits, want 1 to 16", len(s))
	}
	var v uint64
	for _, c := range s {
		x, ok := unhex(c)
		if !ok {
			return 0, fmt.Errorf("bad hex digit %q", c)
		}
		v = v<<4 | uint64(x)
	}
	return v, nil
}

// AppendGID appends the 16 bytes of gid as two lower-case hex digits
// each, each followed by sep unless sep is 0: perftest writes "%02x:" per
// byte, the pingpong tools the 32 digits alone.
func AppendGID(b []byte, gid [16]byte, sep byte) []byte {
	for _, x := range gid {
		b = append(b, hexDigits[x>>4], hexDigits[x&15])
		if sep != 0 {
			b = append(b, sep)
		}
	}
	return b
}

// gidLen returns the length of a GID as AppendGID writes it with sep.
func gidLen(sep byte) int {
	if sep != 0 {
		return 48
	}
	return 32
}

// ParseGID parses the whole of s as a GID written as AppendGID writes it
// with sep, the digits in either case.
func ParseGID(s []byte, sep byte) ([16]byte, error) {
	var gid [16]byte
	if len(s) != gidLen(sep) {
		return gid, fmt.Errorf("%d bytes, want %d", len(s), gidLen(sep))
	}
	step := gidLen(sep) / 16
	for i := range gid {
		f := s[i*step : i*step+step]
		if sep != 0 && f[2] != sep {
			return gid, errors.New("two hex digits and a separator per byte wanted")
		}
		v, err := ParseHex(f[:2])
		if err != nil {
			return gid, err
		}
		gid[i] = byte(v)
	}
	return gid, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
