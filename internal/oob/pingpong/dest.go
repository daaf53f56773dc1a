package pingpong

import (
	"errors"
	"fmt"

	"github.com/uroce/uroce/internal/oob"
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

// AppendWire appends d's 52-byte wire form ("%04x:%06x:%06x:%s" and the NUL)
// to b. QPN and PSN are cut to 24 bits.
func (d Dest) AppendWire(b []byte) []byte {
	b = oob.AppendHex(b, uint64(d.LID), 4)
	b = append(b, ':')
	b = oob.AppendHex(b, uint64(d.QPN&0xffffff), 6)
	b = append(b, ':')
	b = oob.AppendHex(b, uint64(d.PSN&0xffffff), 6)
	b = append(b, ':')
	b = oob.AppendGID(b, d.GID, 0)
	return append(b, 0)
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
	if d.GID, err = oob.ParseGID(s, 0); err != nil {
		return d, fmt.Errorf("%w: GID: %w", ErrFormat, err)
	}
	d.LID, d.QPN, d.PSN = uint16(lid), uint32(qpn), uint32(psn)
	return d, nil
}

// hexField reads exactly width hex digits followed by ':'.
func hexField(s []byte, width int) (uint64, []byte, error) {
	if len(s) < width+1 || s[width] != ':' {
		return 0, s, fmt.Errorf("want %d hex digits and ':'", width)
	}
	v, err := oob.ParseHex(s[:width])
	if err != nil {
		return 0, s, err
	}
	return v, s[width+1:], nil
}
