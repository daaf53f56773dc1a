package perftest

import (
	"encoding/binary"
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

// CMKeySize is the size of a key message over rdma_cm: struct
// pingpong_dest as laid out on x86-64, its integers big-endian.
//
//	 0 LID        4 out_reads   8 QPN        12 PSN
//	16 R_Key     20 (padding)  24 VA (8 bytes)
//	32 GID (16 bytes)          48 SRQN       52 GID index
const CMKeySize = 56

// AppendCMKey appends d's 56-byte binary key message to b, as perftest's
// rdma_write_keys sends it over the exchange QP with -R or -z. The padding
// and the GID index are zero.
func (d Dest) AppendCMKey(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(d.LID))
	b = binary.BigEndian.AppendUint32(b, uint32(d.OutReads))
	b = binary.BigEndian.AppendUint32(b, d.QPN&0xffffff)
	b = binary.BigEndian.AppendUint32(b, d.PSN&0xffffff)
	b = binary.BigEndian.AppendUint32(b, d.RKey)
	b = append(b, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint64(b, d.VAddr)
	b = append(b, d.GID[:]...)
	b = binary.BigEndian.AppendUint32(b, d.SRQN)
	return append(b, 0, 0, 0, 0)
}

// ParseCMKey parses a binary key message (CMKeySize bytes). perftest's
// reader ignores the padding, the SRQN and the GID index; the SRQN is
// returned all the same.
func ParseCMKey(msg []byte) (Dest, error) {
	if len(msg) != CMKeySize {
		return Dest{}, fmt.Errorf("%w: %d bytes, want %d", ErrFormat, len(msg), CMKeySize)
	}
	var d Dest
	d.LID = uint16(binary.BigEndian.Uint32(msg[0:]))
	d.OutReads = uint16(binary.BigEndian.Uint32(msg[4:]))
	d.QPN = binary.BigEndian.Uint32(msg[8:]) & 0xffffff
	d.PSN = binary.BigEndian.Uint32(msg[12:]) & 0xffffff
	d.RKey = binary.BigEndian.Uint32(msg[16:])
	d.VAddr = binary.BigEndian.Uint64(msg[24:])
	copy(d.GID[:], msg[32:48])
	d.SRQN = binary.BigEndian.Uint32(msg[48:])
	return d, nil
}
