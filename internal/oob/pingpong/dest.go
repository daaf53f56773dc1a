package pingpong

import (
	"errors"
	"fmt"
)

// MessageSize is the size of one address message on the wire: the text
// "LLLL:QQQQQQ:PPPPPP:" followed by 32 hex digits of GID and a NUL.
const MessageSize = 52

// SRQMessages is how many address messages ibv_srq_pingpong sends each way,
// whatever its -q: one per slot of its fixed QP table (MAX_QP), the slots
// beyond the QPs in use all zero.
const SRQMessages = 256

// DoneMsg is the message the client sends after it has read the server's
// address.
var DoneMsg = []byte("done\x00")

// Dest is one queue pair's address as the pingpong tools exchange it.
type Dest struct {
	LID uint16
	QPN uint32 // 24 bits
	PSN uint32 // 24 bits
	// GID in network byte order (for RoCEv2 over IPv4, ::ffff:a.b.c.d).
	GID [16]byte
}

// ErrFormat is returned (wrapped) for an address message that does not
// parse.
var ErrFormat = errors.New("malformed pingpong address message")

const hexDigits = "0123456789abcdef"

// AppendWire appends d's 52-byte wire form ("%04x:%06x:%06x:%s" and the NUL)
// to b. QPN and PSN are cut to 24 bits.
func (d Dest) AppendWire(b []byte) []byte {
	b = appendHex(b, uint64(d.LID), 4)
	b = append(b, ':')
	b = appendHex(b, uint64(d.QPN&0xffffff), 6)
	b = append(b, ':')
	b = appendHex(b, uint64(d.PSN&0xffffff), 6)
	b = append(b, ':')
	for _, x := range d.GID {
		b = append(b, hexDigits[x>>4], hexDigits[x&15])
	}
	return append(b, 0)
}

func appendHex(b []byte, v uint64, width int) []byte {
	for i := width - 1; i >= 0; i-- {
		b = append(b, hexDigits[(v>>(4*uint(i)))&15])
	}
	return b
}

// ParseDest parses one 52-byte address message. It accepts what the stock
// tools send: four colon-separated lower- or upper-case hex fields, the GID
// as exactly 32 digits, then a NUL.
func ParseDest(msg []byte) (Dest, error) {
	var d Dest
	if len(msg) != MessageSize {
		return d, fmt.Errorf("%w: %d bytes, want %d", ErrFormat, len(msg), MessageSize)
	}
	if msg[MessageSize-1] != 0 {
		return d, fmt.Errorf("%w: no terminating NUL", ErrFormat)
	}
	s := msg[:MessageSize-1]
	lid, s, err := hexField(s, 4)
	if err != nil {
		return d, fmt.Errorf("%w: LID: %w", ErrFormat, err)
	}
	qpn, s, err := hexField(s, 6)
	if err != nil {
		return d, fmt.Errorf("%w: QPN: %w", ErrFormat, err)
	}
	psn, s, err := hexField(s, 6)
	if err != nil {
		return d, fmt.Errorf("%w: PSN: %w", ErrFormat, err)
	}
	if len(s) != 32 {
		return d, fmt.Errorf("%w: GID has %d digits, want 32", ErrFormat, len(s))
	}
	for i := range d.GID {
		hi, ok1 := unhex(s[2*i])
		lo, ok2 := unhex(s[2*i+1])
		if !ok1 || !ok2 {
			return d, fmt.Errorf("%w: GID: bad hex digit", ErrFormat)
		}
		d.GID[i] = hi<<4 | lo
	}
	d.LID, d.QPN, d.PSN = uint16(lid), uint32(qpn), uint32(psn)
	return d, nil
}

// hexField reads exactly width hex digits followed by ':'.
func hexField(s []byte, width int) (uint64, []byte, error) {
	if len(s) < width+1 || s[width] != ':' {
		return 0, s, fmt.Errorf("want %d hex digits and ':'", width)
	}
	var v uint64
	for _, c := range s[:width] {
		x, ok := unhex(c)
		if !ok {
			return 0, s, fmt.Errorf("bad hex digit %q", c)
		}
		v = v<<4 | uint64(x)
	}
	return v, s[width+1:], nil
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
