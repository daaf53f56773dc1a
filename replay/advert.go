package replay

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/uroce/uroce/bth"
)

// AdvertFormat is how the SENDs of a conversation name buffers for the
// other end's RDMA requests (an advert: R_Key, VA and, by format, more).
// Tools that set their connections up with RDMA CM have no TCP exchange
// and send these on the RC QP itself.
type AdvertFormat uint8

const (
	// AdvertNone: the SENDs name no buffers.
	AdvertNone AdvertFormat = iota
	// AdvertRping is rping's struct rping_rdma_info, 16 bytes, big
	// endian:
	//
	//	0       8      12     16
	//	| buf VA | R_Key | size |
	//
	// The client sends one before each of the server's RDMA READ (its
	// source buffer) and WRITE (its sink buffer); the server's SENDs
	// that answer them are all zeros.
	AdvertRping
	// AdvertPerftest is perftest's struct pingpong_dest as it goes in
	// a SEND with -R (rdma_write_keys in perftest_communication.c),
	// 56 bytes, big endian:
	//
	//	0     4          8     12    16      20    24    32    48     52
	//	| lid | out_reads | qpn | psn | R_Key | pad | VA  | GID | srqn | gid_index |
	//
	// It goes on the first RDMA CM connection, the one perftest keeps
	// for its exchanges; the QPN, PSN, R_Key and VA are those of the
	// test's QP, another conversation.
	AdvertPerftest
)

func (f AdvertFormat) String() string {
	switch f {
	case AdvertRping:
		return "rping"
	case AdvertPerftest:
		return "perftest"
	}
	return "none"
}

// Advert is a buffer one end names in a SEND: its R_Key and VA, and
// what else the format carries (zero where it carries nothing).
type Advert struct {
	RKey uint32
	VA   uint64
	Size uint32   // rping: the buffer's length
	QPN  uint32   // perftest: the QP the buffer is for,
	PSN  bth.PSN  // its first PSN
	GID  [16]byte // and its GID
}

func (a Advert) String() string {
	s := fmt.Sprintf("rkey %#x va %#x", a.RKey, a.VA)
	if a.Size > 0 {
		s += fmt.Sprintf(" size %d", a.Size)
	}
	if a.QPN != 0 {
		s += fmt.Sprintf(" qp %#x psn %#x", a.QPN, uint32(a.PSN))
	}
	return s
}

// Contains reports whether va lies in the buffer (any va when the
// format gives no size).
func (a Advert) Contains(va uint64) bool {
	return a.Size == 0 || (va >= a.VA && va-a.VA < uint64(a.Size))
}

// ParseAdvert reads an advert of format f from a SEND's payload. A
// payload of the wrong length, or one naming no buffer (rping's all-zero
// answers, perftest's messages before its buffers exist), is none.
func ParseAdvert(f AdvertFormat, b []byte) (Advert, bool) {
	var a Advert
	switch f {
	case AdvertRping:
		if len(b) != 16 {
			return a, false
		}
		a.VA, a.RKey, a.Size = binary.BigEndian.Uint64(b), binary.BigEndian.Uint32(b[8:]), binary.BigEndian.Uint32(b[12:])
	case AdvertPerftest:
		if len(b) != 56 {
			return a, false
		}
		a.QPN, a.PSN = binary.BigEndian.Uint32(b[8:]), bth.PSN(binary.BigEndian.Uint32(b[12:]))&bth.PSNMask
		a.RKey, a.VA = binary.BigEndian.Uint32(b[16:]), binary.BigEndian.Uint64(b[24:])
		copy(a.GID[:], b[32:48])
	default:
		return a, false
	}
	return a, a.RKey != 0 || a.VA != 0
}

// put writes a's fields into b, an advert of format f, leaving the
// others as they are.
func (a *Advert) put(f AdvertFormat, b []byte) {
	switch f {
	case AdvertRping:
		binary.BigEndian.PutUint64(b, a.VA)
		binary.BigEndian.PutUint32(b[8:], a.RKey)
		binary.BigEndian.PutUint32(b[12:], a.Size)
	case AdvertPerftest:
		binary.BigEndian.PutUint32(b[8:], a.QPN)
		binary.BigEndian.PutUint32(b[12:], uint32(a.PSN))
		binary.BigEndian.PutUint32(b[16:], a.RKey)
		binary.BigEndian.PutUint64(b[24:], a.VA)
		copy(b[32:48], a.GID[:])
	}
}

// maskAdvert returns b, an advert of format f, with the fields that
// differ from run to run zeroed (those put writes, and perftest's
// padding, which holds whatever was on its stack): what is left must be
// the same live as recorded.
func maskAdvert(f AdvertFormat, b []byte) []byte {
	m := append([]byte(nil), b...)
	switch f {
	case AdvertRping:
		clear(m[:12])
	case AdvertPerftest:
		clear(m[8:48])
	}
	return m
}

// gidOf is the GID of an address: IPv4 as ::ffff:a.b.c.d.
func gidOf(ip netip.Addr) [16]byte { return ip.As16() }

// Region maps a buffer that one end advertised as recorded to the same
// buffer live: an RDMA request naming the recorded one names the live
// one instead, at the same offset.
type Region struct{ Recorded, Live Advert }

// detectAdverts finds the format of c's adverts: rping's when a 16-byte
// SEND names a buffer the other end's RDMA requests then use, perftest's
// when 56-byte SENDs carry their sender's own GID where perftest has
// it.
func detectAdverts(c *Conversation) AdvertFormat {
	if c.Transport != bth.TransportRC {
		return AdvertNone
	}
	for i := range c.Packets {
		p := &c.Packets[i]
		if p.H.Info().Kind != bth.KindSend || !p.H.Info().Request {
			continue
		}
		if a, ok := ParseAdvert(AdvertPerftest, p.Payload); ok && a.GID == gidOf(c.Ends[p.From].IP) {
			return AdvertPerftest
		}
		a, ok := ParseAdvert(AdvertRping, p.Payload)
		if !ok {
			continue
		}
		for j := i + 1; j < len(c.Packets); j++ {
			q := &c.Packets[j]
			if q.From != p.From && q.H.Info().Has(bth.HdrRETH) && q.H.RKey == a.RKey && a.Contains(q.H.VA) {
				return AdvertRping
			}
		}
	}
	return AdvertNone
}

// Related returns the conversations of convs whose adverts name a QP of
// c's ends (perftest's exchange conversation for its test conversation),
// in capture order.
func Related(convs []*Conversation, c *Conversation) []*Conversation {
	var out []*Conversation
	for _, d := range convs {
		if d == c || d.Adverts != AdvertPerftest {
			continue
		}
	find:
		for i := range d.Packets {
			p := &d.Packets[i]
			a, ok := ParseAdvert(d.Adverts, p.Payload)
			if !ok || p.H.Info().Kind != bth.KindSend {
				continue
			}
			for k := 0; k < 2; k++ {
				if d.Ends[p.From].IP == c.Ends[k].IP && a.QPN == c.Ends[k].QPN {
					out = append(out, d)
					break find
				}
			}
		}
	}
	return out
}
