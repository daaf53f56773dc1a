package perftest

import (
	"errors"
	"fmt"

	"github.com/uroce/uroce/internal/oob"
)

// Sizes of the key messages: with the GID (RoCE, or -x on InfiniBand) and
// without it.
const (
	KeySize      = 108 // "%04x:%04x:%06x:%06x:%08x:%016llx:" 16×"%02x:" "%08x:" NUL
	KeySizeNoGID = 59  // "%04x:%04x:%06x:%06x:%08x:%016llx:%08x" NUL
)

// Dest is one queue pair's connection data as perftest exchanges it in its
// key messages (struct pingpong_dest).
type Dest struct {
	LID      uint16
	OutReads uint16 // responder resources for RDMA READ and atomics
	QPN      uint32 // 24 bits
	PSN      uint32 // 24 bits
	RKey     uint32
	VAddr    uint64
	GID      [16]byte // network byte order
	SRQN     uint32   // XRC and DC only; 0 otherwise
}

// ErrFormat is returned (wrapped) for a key message that does not parse.
var ErrFormat = errors.New("malformed perftest key message")

// appendHead appends the fields both forms share, each followed by ':'.
func (d Dest) appendHead(b []byte) []byte {
	b = oob.AppendHex(b, uint64(d.LID), 4)
	b = append(b, ':')
	b = oob.AppendHex(b, uint64(d.OutReads), 4)
	b = append(b, ':')
	b = oob.AppendHex(b, uint64(d.QPN&0xffffff), 6)
	b = append(b, ':')
	b = oob.AppendHex(b, uint64(d.PSN&0xffffff), 6)
	b = append(b, ':')
	b = oob.AppendHex(b, uint64(d.RKey), 8)
	b = append(b, ':')
	b = oob.AppendHex(b, d.VAddr, 16)
	return append(b, ':')
}

// AppendKey appends d's 108-byte key message with GID to b.
func (d Dest) AppendKey(b []byte) []byte {
	b = d.appendHead(b)
	b = oob.AppendGID(b, d.GID, ':')
	b = oob.AppendHex(b, uint64(d.SRQN), 8)
	return append(b, ':', 0)
}

// AppendKeyNoGID appends d's 59-byte key message without GID to b.
func (d Dest) AppendKeyNoGID(b []byte) []byte {
	b = d.appendHead(b)
	b = oob.AppendHex(b, uint64(d.SRQN), 8)
	return append(b, 0)
}

// ParseKey parses a key message of either form, told apart by its length
// (KeySize or KeySizeNoGID). Hex digits may be in either case; every field
// has the width the format gives it.
func ParseKey(msg []byte) (Dest, error) {
	var d Dest
	withGID := false
	switch len(msg) {
	case KeySize:
		withGID = true
	case KeySizeNoGID:
	default:
		return d, fmt.Errorf("%w: %d bytes, want %d or %d", ErrFormat, len(msg), KeySize, KeySizeNoGID)
	}
	if msg[len(msg)-1] != 0 {
		return d, fmt.Errorf("%w: no terminating NUL", ErrFormat)
	}
	s := msg[:len(msg)-1]
	var err error
	field := func(name string, width int, sep bool) uint64 {
		if err != nil {
			return 0
		}
		n := width
		if sep {
			n++
		}
		if len(s) < n || (sep && s[width] != ':') {
			err = fmt.Errorf("%w: %s: want %d hex digits", ErrFormat, name, width)
			return 0
		}
		v, herr := oob.ParseHex(s[:width])
		if herr != nil {
			err = fmt.Errorf("%w: %s: %w", ErrFormat, name, herr)
			return 0
		}
		s = s[n:]
		return v
	}
	d.LID = uint16(field("LID", 4, true))
	d.OutReads = uint16(field("out_reads", 4, true))
	d.QPN = uint32(field("QPN", 6, true))
	d.PSN = uint32(field("PSN", 6, true))
	d.RKey = uint32(field("R_Key", 8, true))
	d.VAddr = field("VA", 16, true)
	if withGID {
		const gidLen = 16 * 3 // "%02x:" per byte
		if err == nil {
			var gerr error
			if d.GID, gerr = oob.ParseGID(s[:min(gidLen, len(s))], ':'); gerr != nil {
				err = fmt.Errorf("%w: GID: %w", ErrFormat, gerr)
			}
			s = s[min(gidLen, len(s)):]
		}
		d.SRQN = uint32(field("SRQN", 8, true))
	} else {
		d.SRQN = uint32(field("SRQN", 8, false))
	}
	if err != nil {
		return Dest{}, err
	}
	if len(s) != 0 {
		return Dest{}, fmt.Errorf("%w: %d trailing bytes", ErrFormat, len(s))
	}
	return d, nil
}
