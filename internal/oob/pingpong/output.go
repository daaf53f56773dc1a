package pingpong

import (
	"fmt"
	"time"

	"github.com/uroce/uroce/internal/oob/cfmt"
)

// Tool names one of rdma-core's pingpong examples.
type Tool int

// The pingpong tools.
const (
	RC  Tool = iota // ibv_rc_pingpong
	UC              // ibv_uc_pingpong
	UD              // ibv_ud_pingpong
	SRQ             // ibv_srq_pingpong
)

// String returns the tool's command name.
func (t Tool) String() string {
	switch t {
	case RC:
		return "ibv_rc_pingpong"
	case UC:
		return "ibv_uc_pingpong"
	case UD:
		return "ibv_ud_pingpong"
	case SRQ:
		return "ibv_srq_pingpong"
	}
	return fmt.Sprintf("Tool(%d)", int(t))
}

// Messages returns how many address messages the tool sends each way.
func (t Tool) Messages() int {
	if t == SRQ {
		return SRQMessages
	}
	return 1
}

// LocalAddressLine returns the line the tool prints for one of its own QPs,
// newline included:
//
//	"  local address:  LID 0x0000, QPN 0x000011, PSN 0x6d5ff9, GID ::ffff:192.0.2.1\n"
//
// ibv_ud_pingpong puts a colon before "GID" where the others put a comma.
func LocalAddressLine(t Tool, d Dest) string {
	sep := ','
	if t == UD {
		sep = ':'
	}
	return fmt.Sprintf("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%c GID %s\n",
		d.LID, d.QPN, d.PSN, sep, cfmt.IPv6(d.GID))
}

// RemoteAddressLine returns the line every pingpong tool prints for a peer
// QP, newline included:
//
//	"  remote address: LID 0x0000, QPN 0x000012, PSN 0x55a9b8, GID ::ffff:192.0.2.2\n"
func RemoteAddressLine(d Dest) string {
	return fmt.Sprintf("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n",
		d.LID, d.QPN, d.PSN, cfmt.IPv6(d.GID))
}

// ResultLines returns the two summary lines the tools print after size-byte
// messages went iters times each way in elapsed (which they measure with
// microsecond resolution and hold in a float):
//
//	"640 bytes in 0.01 seconds = 0.41 Mbit/sec\n5 iters in 0.01 seconds = 2469.00 usec/iter\n"
func ResultLines(size, iters int, elapsed time.Duration) string {
	usec := float32(elapsed.Microseconds())
	bytes := int64(size) * int64(iters) * 2
	secs := cfmt.Float(float64(usec)/1e6, 2)
	return fmt.Sprintf("%d bytes in %s seconds = %s Mbit/sec\n%d iters in %s seconds = %s usec/iter\n",
		bytes, secs, cfmt.Float(float64(bytes)*8/float64(usec), 2),
		iters, secs, cfmt.Float(float64(usec/float32(iters)), 2))
}
