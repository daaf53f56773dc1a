// Package pcaptool decodes and verifies RoCE captures: the library behind
// `uroce pcap decode` and `uroce pcap verify`.
//
// Reader reads pcap and pcapng files (gzip-compressed too) with bounded
// allocations: a damaged file gives an error, never a panic or a huge
// buffer. Decoder turns each RoCE frame into a Record and writes it as a
// text line or a JSON object, the CM messages on QP1 decoded. Verifier
// checks every RoCE packet (ICRC, lengths, pad, reserved bits, opcode,
// header presence), follows each QP's packet flow (PSN gaps,
// retransmissions, duplicates, NAKs, READ responses, MSN progress) and,
// at the end of a capture, each RDMA CM exchange and the traffic of the
// connections it set up.
package pcaptool

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// MaxRecord is the largest captured record the reader accepts. libpcap
// never writes more than 262144 bytes per packet.
const MaxRecord = 1 << 20

// Link types the reader turns into Ethernet frames.
const (
	LinkEthernet = 1
	LinkRaw      = 101 // raw IPv4 or IPv6
	LinkSLL      = 113 // Linux cooked capture
	LinkIPv4     = 228
	LinkIPv6     = 229
	LinkSLL2     = 276 // Linux cooked capture v2
	linkRawBSD   = 12
	linkRawBSD2  = 14
)

// Errors of the reader.
var (
	// ErrFormat means the file is not a pcap or pcapng capture.
	ErrFormat = errors.New("not a pcap or pcapng file")
	// ErrCorrupt means a header or block of the file is inconsistent.
	ErrCorrupt = errors.New("corrupt capture file")
	// ErrCutShort means the file ends in the middle of a record.
	ErrCutShort = errors.New("capture file cut short in the middle of a record")
	// ErrLinkType means the frame's link type has no Ethernet form here.
	ErrLinkType = errors.New("unsupported link type")
)

// Frame is one captured packet.
type Frame struct {
	// Data is the frame from its Ethernet header, as captured (other link
	// types are given a synthetic Ethernet header). It is valid until the
	// next call to Next.
	Data []byte
	// CapLen and OrigLen are the captured and original lengths of the
	// record, in the file's own link type.
	CapLen, OrigLen int
	// Time is the capture timestamp (zero when the file has none).
	Time time.Time
	// LinkType is the record's link type.
	LinkType int
}

// Truncated reports whether the capture cut the frame (snap length).
func (f *Frame) Truncated() bool { return f.CapLen < f.OrigLen }

// Reader reads the frames of a pcap or pcapng file.
type Reader struct {
	r      *bufio.Reader
	ng     bool
	order  binary.ByteOrder
	link   int   // pcap link type
	nanos  int64 // pcap: nanoseconds per timestamp fraction unit
	ifaces []ngIface
	buf    []byte // record data
	eth    []byte // synthetic Ethernet frames
	hdr    [28]byte
}

type ngIface struct {
	link  int
	scale int64 // timestamp units per second
}

// NewReader reads the file header of a pcap or pcapng stream.
func NewReader(rd io.Reader) (*Reader, error) {
	br := bufio.NewReaderSize(rd, 1<<16)
	if m, err := br.Peek(2); err == nil && m[0] == 0x1f && m[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("open capture: %w", err)
		}
		br = bufio.NewReaderSize(zr, 1<<16)
	}
	m, err := br.Peek(4)
	if err != nil {
		return nil, fmt.Errorf("open capture: %w", ErrFormat)
	}
	r := &Reader{r: br}
	switch binary.LittleEndian.Uint32(m) {
	case 0x0a0d0d0a:
		r.ng = true
		return r, nil // the section header is read as the first block
	case 0xa1b2c3d4:
		r.order, r.nanos = binary.LittleEndian, 1000
	case 0xa1b23c4d:
		r.order, r.nanos = binary.LittleEndian, 1
	case 0xd4c3b2a1:
		r.order, r.nanos = binary.BigEndian, 1000
	case 0x4d3cb2a1:
		r.order, r.nanos = binary.BigEndian, 1
	default:
		return nil, fmt.Errorf("open capture: %w", ErrFormat)
	}
	var h [24]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return nil, fmt.Errorf("open capture: file header: %w", ErrCutShort)
	}
	if major := r.order.Uint16(h[4:]); major != 2 {
		return nil, fmt.Errorf("open capture: pcap version %d: %w", major, ErrCorrupt)
	}
	r.link = int(r.order.Uint32(h[20:]) & 0x0fffffff) // the top bits carry FCS flags
	return r, nil
}

// Next returns the next frame, or io.EOF at the end of the file. A frame
// whose link type cannot be turned into Ethernet is returned with Data
// nil and an error wrapping ErrLinkType; reading can go on after it.
func (r *Reader) Next() (Frame, error) {
	var f Frame
	var data []byte
	var err error
	if r.ng {
		data, err = r.nextNG(&f)
	} else {
		data, err = r.nextPcap(&f)
	}
	if err != nil {
		return Frame{}, err
	}
	f.Data, err = r.ethernet(f.LinkType, data)
	return f, err
}

func (r *Reader) nextPcap(f *Frame) ([]byte, error) {
	h := r.hdr[:16]
	if _, err := io.ReadFull(r.r, h); err != nil {
		if err == io.EOF {
			return nil, io.EOF
		}
		return nil, ErrCutShort
	}
	sec, frac := r.order.Uint32(h[0:]), r.order.Uint32(h[4:])
	f.CapLen, f.OrigLen = int(r.order.Uint32(h[8:])), int(r.order.Uint32(h[12:]))
	if f.CapLen > MaxRecord {
		return nil, fmt.Errorf("record of %d bytes: %w", f.CapLen, ErrCorrupt)
	}
	if f.OrigLen < f.CapLen {
		f.OrigLen = f.CapLen
	}
	f.Time = time.Unix(int64(sec), int64(frac)*r.nanos).UTC()
	f.LinkType = r.link
	return r.read(f.CapLen)
}

// read returns the next n bytes of the file in r.buf.
func (r *Reader) read(n int) ([]byte, error) {
	if cap(r.buf) < n {
		r.buf = make([]byte, n, max(n, 2048))
	}
	b := r.buf[:n]
	if _, err := io.ReadFull(r.r, b); err != nil {
		return nil, ErrCutShort
	}
	return b, nil
}

// pcapng block types.
const (
	ngSHB = 0x0a0d0d0a
	ngIDB = 0x00000001
	ngPB  = 0x00000002 // obsolete packet block
	ngSPB = 0x00000003
	ngEPB = 0x00000006
)

func (r *Reader) nextNG(f *Frame) ([]byte, error) {
	for {
		h := r.hdr[:8]
		if _, err := io.ReadFull(r.r, h); err != nil {
			if err == io.EOF {
				return nil, io.EOF
			}
			return nil, ErrCutShort
		}
		typ := binary.LittleEndian.Uint32(h)
		if typ == ngSHB {
			// A new section: its byte-order magic sets the order of
			// everything up to the next section.
			var bom [4]byte
			if _, err := io.ReadFull(r.r, bom[:]); err != nil {
				return nil, ErrCutShort
			}
			switch binary.LittleEndian.Uint32(bom[:]) {
			case 0x1a2b3c4d:
				r.order = binary.LittleEndian
			case 0x4d3c2b1a:
				r.order = binary.BigEndian
			default:
				return nil, fmt.Errorf("section header byte order: %w", ErrCorrupt)
			}
			blen := int(r.order.Uint32(h[4:]))
			if blen < 28 || blen%4 != 0 || blen > MaxRecord {
				return nil, fmt.Errorf("section header length %d: %w", blen, ErrCorrupt)
			}
			if _, err := r.read(blen - 12); err != nil {
				return nil, err
			}
			r.ifaces = r.ifaces[:0]
			continue
		}
		if r.order == nil {
			return nil, fmt.Errorf("block before the section header: %w", ErrCorrupt)
		}
		typ = r.order.Uint32(h)
		blen := int(r.order.Uint32(h[4:]))
		if blen < 12 || blen%4 != 0 || blen > MaxRecord+64 {
			return nil, fmt.Errorf("block length %d: %w", blen, ErrCorrupt)
		}
		body, err := r.read(blen - 8) // body and the trailing length
		if err != nil {
			return nil, err
		}
		body = body[:blen-12]
		switch typ {
		case ngIDB:
			if len(body) < 8 {
				return nil, fmt.Errorf("interface block: %w", ErrCorrupt)
			}
			r.ifaces = append(r.ifaces, ngIface{link: int(r.order.Uint16(body)), scale: ngTimeScale(r.order, body[8:])})
		case ngEPB, ngPB:
			if len(body) < 20 {
				return nil, fmt.Errorf("packet block: %w", ErrCorrupt)
			}
			var id int
			if typ == ngEPB {
				id = int(r.order.Uint32(body))
			} else {
				id = int(r.order.Uint16(body))
			}
			if id >= len(r.ifaces) {
				return nil, fmt.Errorf("packet on undeclared interface %d: %w", id, ErrCorrupt)
			}
			ts := uint64(r.order.Uint32(body[4:]))<<32 | uint64(r.order.Uint32(body[8:]))
			f.CapLen, f.OrigLen = int(r.order.Uint32(body[12:])), int(r.order.Uint32(body[16:]))
			if f.CapLen > len(body)-20 {
				return nil, fmt.Errorf("packet block: captured length %d exceeds block: %w", f.CapLen, ErrCorrupt)
			}
			if f.OrigLen < f.CapLen {
				f.OrigLen = f.CapLen
			}
			iface := r.ifaces[id]
			f.LinkType = iface.link
			sec := int64(ts / uint64(iface.scale))
			rem := int64(ts % uint64(iface.scale))
			f.Time = time.Unix(sec, rem*(1e9/iface.scale)).UTC()
			return body[20 : 20+f.CapLen], nil
		case ngSPB:
			if len(r.ifaces) == 0 || len(body) < 4 {
				return nil, fmt.Errorf("simple packet block: %w", ErrCorrupt)
			}
			f.OrigLen = int(r.order.Uint32(body))
			f.CapLen = min(f.OrigLen, len(body)-4)
			f.LinkType = r.ifaces[0].link
			return body[4 : 4+f.CapLen], nil
		}
		// Statistics, name resolution and unknown blocks are skipped.
	}
}

// ngTimeScale returns the timestamp units per second of an interface from
// its if_tsresol option (default microseconds).
func ngTimeScale(order binary.ByteOrder, opts []byte) int64 {
	for len(opts) >= 4 {
		code, n := order.Uint16(opts), int(order.Uint16(opts[2:]))
		if code == 0 || 4+n > len(opts) {
			break
		}
		if code == 9 && n >= 1 {
			v := opts[4]
			var s int64 = 1
			if v&0x80 == 0 && v <= 9 {
				for i := 0; i < int(v); i++ {
					s *= 10
				}
				return s
			}
			if v&0x80 != 0 && v&0x7f <= 29 {
				return 1 << (v & 0x7f)
			}
			return 1e6
		}
		opts = opts[4+(n+3)&^3:]
	}
	return 1e6
}

// ethernet returns data as an Ethernet frame, synthesizing the Ethernet
// header for cooked and raw IP captures.
func (r *Reader) ethernet(link int, data []byte) ([]byte, error) {
	var et uint16
	var payload []byte
	switch link {
	case LinkEthernet:
		return data, nil
	case LinkSLL:
		if len(data) < 16 {
			return r.synth(0, nil), nil
		}
		et, payload = binary.BigEndian.Uint16(data[14:]), data[16:]
	case LinkSLL2:
		if len(data) < 20 {
			return r.synth(0, nil), nil
		}
		et, payload = binary.BigEndian.Uint16(data), data[20:]
	case LinkRaw, LinkIPv4, LinkIPv6, linkRawBSD, linkRawBSD2:
		payload = data
		if len(data) > 0 && data[0]>>4 == 6 {
			et = 0x86dd
		} else {
			et = 0x0800
		}
	default:
		return nil, fmt.Errorf("link type %d: %w", link, ErrLinkType)
	}
	return r.synth(et, payload), nil
}

// synth builds an Ethernet frame with zero addresses, EtherType et and
// payload.
func (r *Reader) synth(et uint16, payload []byte) []byte {
	n := 14 + len(payload)
	if cap(r.eth) < n {
		r.eth = make([]byte, n, max(n, 2048))
	}
	b := r.eth[:n]
	clear(b[:12])
	binary.BigEndian.PutUint16(b[12:], et)
	copy(b[14:], payload)
	return b
}
