package perftest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"syscall"

	"github.com/uroce/uroce/internal/oob"
)

// Version is the version string Debian 12's perftest 4.5-0.17 advertises
// (its configure.ac says 6.06), and the default here.
const Version = "6.06"

// VersionSize is the size of the version message: the string, NUL-padded.
const VersionSize = 16

// The range of versions this package can speak as: perftest refuses peers
// below 5.70, and from 6.28 on it exchanges a binary parameter block, which
// is not implemented here (a 6.28+ peer skips it for a peer that advertises
// less).
const (
	minVersion = 5.70
	maxVersion = 6.28
)

// ErrVersion is returned (wrapped) when the peer's version is one perftest
// 4.5 would refuse (below 5.70) or when Params asks for one this package
// cannot speak as.
var ErrVersion = errors.New("incompatible perftest version")

// Role is the side of the connection: the client is the one given a server
// name and it writes first in every exchange.
type Role int

// The two roles.
const (
	Client Role = iota
	Server
)

func (r Role) String() string {
	if r == Client {
		return "client"
	}
	return "server"
}

// MTU is the InfiniBand path MTU enumeration (enum ibv_mtu) that perftest
// sends as decimal text.
type MTU int

// The path MTUs.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Valid reports whether m is one of the five path MTUs.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

// Bytes returns the MTU in bytes (0 if invalid).
func (m MTU) Bytes() int {
	if !m.Valid() {
		return 0
	}
	return 128 << m
}

// MTUFromBytes returns the path MTU of n bytes (256, 512, … 4096), or 0.
func MTUFromBytes(n int) MTU {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m
		}
	}
	return 0
}

// Params are what this side advertises before the keys.
type Params struct {
	// Version is the version string sent (default Version). It must be at
	// least 5.70 and below 6.28.
	Version string
	// CycleBuffer is the page size (default 4096); both sides use the larger.
	CycleBuffer uint32
	// CacheLineSize defaults to 64; both sides use the larger.
	CacheLineSize uint32
	// MTU is this side's active path MTU (required); both use the smaller.
	MTU MTU
}

// Agreed is the outcome of Negotiate.
type Agreed struct {
	RemoteVersion string
	CycleBuffer   uint32
	CacheLineSize uint32
	// MTU is the path MTU both sides use: the smaller of the two, as
	// perftest takes the peer's when it is valid and smaller.
	MTU MTU
	// RemoteMTU is what the peer advertised.
	RemoteMTU MTU
}

// Report is the bandwidth report (struct bw_report_data) the bw tools
// exchange after the test: the server prints the client's. Bandwidths are in
// MB/s (2^20 bytes per second) or Gb/s, as the report format says; MsgRate
// in millions of messages per second. The stock server sends uninitialised
// memory for its own report in the one-way tests.
type Report struct {
	Size    uint64 // message size
	Iters   uint64 // iterations × QPs
	BWPeak  float64
	BWAvg   float64
	MsgRate float64
}

// Conn speaks perftest's out-of-band protocol on one TCP connection: each
// method is one exchange, in which the client writes first and the server
// reads first.
type Conn struct {
	nc   net.Conn
	role Role
	// NoGID selects the 59-byte key messages without GID, which perftest
	// uses on InfiniBand without -x. RoCE always uses the GID form.
	NoGID bool
	// CM selects the binary key messages (CMKeySize bytes) that perftest
	// sends over its rdma_cm exchange QP (-R): nc then carries one
	// message per SEND.
	CM bool
}

// NewConn returns a Conn for role on nc.
func NewConn(nc net.Conn, role Role) *Conn { return &Conn{nc: nc, role: role} }

// Role returns the side c speaks for.
func (c *Conn) Role() Role { return c.role }

// exchange sends mine and receives len(theirs) bytes in the role's order,
// each message with one Write.
func (c *Conn) exchange(mine, theirs []byte) error {
	if c.role == Client {
		if err := oob.WriteMsg(c.nc, mine); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		if err := oob.ReadMsg(c.nc, theirs); err != nil {
			return fmt.Errorf("read: %w", err)
		}
		return nil
	}
	if err := oob.ReadMsg(c.nc, theirs); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if err := oob.WriteMsg(c.nc, mine); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// atof returns the value of the longest prefix of s that parses as a
// decimal number, as C's atof does for the version strings ("6.06").
func atof(s string) float64 {
	end := 0
	dot := false
	for end < len(s) {
		ch := s[end]
		if ch >= '0' && ch <= '9' || (ch == '.' && !dot) {
			dot = dot || ch == '.'
			end++
			continue
		}
		break
	}
	v, err := strconv.ParseFloat(s[:end], 64)
	if err != nil {
		return 0
	}
	return v
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// Negotiate exchanges versions (16 bytes), page and cache line sizes (4
// bytes each, big-endian) and MTUs (2 bytes, "%d" and NUL), as every tool
// does first. A peer version below 5.70 fails with ErrVersion after the
// version exchange, where perftest exits.
func (c *Conn) Negotiate(ctx context.Context, p Params) (a Agreed, err error) {
	if p.Version == "" {
		p.Version = Version
	}
	if p.CycleBuffer == 0 {
		p.CycleBuffer = 4096
	}
	if p.CacheLineSize == 0 {
		p.CacheLineSize = 64
	}
	if v := atof(p.Version); len(p.Version) >= VersionSize || v < minVersion || v >= maxVersion {
		return a, fmt.Errorf("perftest negotiate: %w: cannot advertise %q", ErrVersion, p.Version)
	}
	if !p.MTU.Valid() {
		return a, fmt.Errorf("perftest negotiate: invalid MTU %d", p.MTU)
	}
	done := oob.Guard(ctx, c.nc)
	defer func() { err = done(err) }()

	var mine, theirs [VersionSize]byte
	copy(mine[:], p.Version)
	if err := c.exchange(mine[:], theirs[:]); err != nil {
		return a, fmt.Errorf("perftest version exchange: %w", err)
	}
	a.RemoteVersion = cString(theirs[:])
	if atof(a.RemoteVersion) < minVersion {
		return a, fmt.Errorf("perftest version exchange: %w: peer has %q, below %.2f", ErrVersion, a.RemoteVersion, minVersion)
	}

	var m4, t4 [4]byte
	binary.BigEndian.PutUint32(m4[:], p.CycleBuffer)
	if err := c.exchange(m4[:], t4[:]); err != nil {
		return a, fmt.Errorf("perftest cycle buffer exchange: %w", err)
	}
	a.CycleBuffer = max(p.CycleBuffer, binary.BigEndian.Uint32(t4[:]))
	binary.BigEndian.PutUint32(m4[:], p.CacheLineSize)
	if err := c.exchange(m4[:], t4[:]); err != nil {
		return a, fmt.Errorf("perftest cache line size exchange: %w", err)
	}
	a.CacheLineSize = max(p.CacheLineSize, binary.BigEndian.Uint32(t4[:]))

	var m2, t2 [2]byte
	m2[0] = byte('0' + p.MTU)
	if err := c.exchange(m2[:], t2[:]); err != nil {
		return a, fmt.Errorf("perftest MTU exchange: %w", err)
	}
	a.RemoteMTU = MTU(atoi(t2[:]))
	a.MTU = p.MTU
	if a.RemoteMTU.Valid() && a.RemoteMTU < a.MTU {
		a.MTU = a.RemoteMTU
	}
	return a, nil
}

// atoi reads the leading decimal digits of b, as strtol(b, NULL, 10) does
// for the MTU text.
func atoi(b []byte) int {
	v := 0
	for _, ch := range b {
		if ch < '0' || ch > '9' || v > 1<<20 {
			break
		}
		v = v*10 + int(ch-'0')
	}
	return v
}

// HandShake is one round of key messages (ctx_hand_shake): perftest's way to
// hand over QP data and, repeated, its barrier. It returns the peer's key.
func (c *Conn) HandShake(ctx context.Context, local Dest) (remote Dest, err error) {
	done := oob.Guard(ctx, c.nc)
	defer func() { err = done(err) }()
	var mine []byte
	theirs := make([]byte, KeySize)
	if c.CM {
		mine = local.AppendCMKey(make([]byte, 0, CMKeySize))
		theirs = theirs[:CMKeySize]
		if err := c.exchange(mine, theirs); err != nil {
			return remote, fmt.Errorf("perftest key exchange: %w", err)
		}
		return ParseCMKey(theirs)
	}
	if c.NoGID {
		mine = local.AppendKeyNoGID(make([]byte, 0, KeySizeNoGID))
		theirs = theirs[:KeySizeNoGID]
	} else {
		mine = local.AppendKey(make([]byte, 0, KeySize))
	}
	if err := c.exchange(mine, theirs); err != nil {
		return remote, fmt.Errorf("perftest key exchange: %w", err)
	}
	remote, err = ParseKey(theirs)
	if err != nil {
		return remote, fmt.Errorf("perftest key exchange: %w", err)
	}
	return remote, nil
}

// ExchangeReports swaps bandwidth reports (xchg_bw_reports): five 8-byte
// big-endian fields, each its own exchange: size, iterations, peak
// bandwidth, average bandwidth, message rate (IEEE doubles).
func (c *Conn) ExchangeReports(ctx context.Context, mine Report) (remote Report, err error) {
	done := oob.Guard(ctx, c.nc)
	defer func() { err = done(err) }()
	fields := [5]uint64{mine.Size, mine.Iters, math.Float64bits(mine.BWPeak), math.Float64bits(mine.BWAvg), math.Float64bits(mine.MsgRate)}
	var got [5]uint64
	for i, f := range fields {
		var m, t [8]byte
		binary.BigEndian.PutUint64(m[:], f)
		if err := c.exchange(m[:], t[:]); err != nil {
			return remote, fmt.Errorf("perftest report exchange (field %d): %w", i, err)
		}
		got[i] = binary.BigEndian.Uint64(t[:])
	}
	return Report{
		Size: got[0], Iters: got[1],
		BWPeak: math.Float64frombits(got[2]), BWAvg: math.Float64frombits(got[3]), MsgRate: math.Float64frombits(got[4]),
	}, nil
}

// DoneMsg is the last message each side sends before closing.
var DoneMsg = []byte("done\x00")

// Done sends "done" and reads the peer's. Both sides send it without
// waiting (ctx_close_connection), so the order on the wire varies, and
// perftest closes its socket straight after writing, without reading ours:
// its kernel may then reset the connection before its "done" reaches us
// (always so when that segment is lost and must be sent again). A peer
// that leaves, by end of stream or by a reset, is done too; only a
// different message is an error.
func (c *Conn) Done(ctx context.Context) (err error) {
	done := oob.Guard(ctx, c.nc)
	defer func() { err = done(err) }()
	if err := oob.WriteMsg(c.nc, DoneMsg); err != nil {
		if peerLeft(err) {
			return nil
		}
		return fmt.Errorf("perftest done: write: %w", err)
	}
	var got [5]byte
	if err := oob.ReadMsg(c.nc, got[:]); err != nil {
		if peerLeft(err) {
			return nil
		}
		return fmt.Errorf("perftest done: read: %w", err)
	}
	if !bytes.Equal(got[:], DoneMsg) {
		return fmt.Errorf("perftest done: peer sent %q", got[:])
	}
	return nil
}

// peerLeft reports whether err says the peer closed or reset the
// connection.
func peerLeft(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
