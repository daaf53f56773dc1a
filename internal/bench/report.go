package bench

import (
	"fmt"
	"io"
	"time"

	"github.com/uroce/uroce/stack"
)

// LinkOptions configure Link.
type LinkOptions struct {
	// MTU of the veth pair (default 9000: RoCE path MTU 4096).
	MTU int
	// Frame is the size of the raw frames in bytes (default: the largest
	// RoCE packet at the path MTU, an RDMA WRITE First: path MTU + 74,
	// 4170 at MTU 9000).
	Frame int
	// Size is the RDMA WRITE message size (default 65536).
	Size int
	// Window is the number of WRITEs in flight (default 16).
	Window int
	// Duration of each phase (default 2 s), after a tenth of it to warm up.
	Duration time.Duration
	// XDPMode is how the XDP program attaches: auto, native or generic.
	XDPMode string
	// BusyPoll makes the RoCE engines spin instead of sleeping in poll(2).
	BusyPoll bool
}

func (o *LinkOptions) defaults() error {
	if o.MTU == 0 {
		o.MTU = 9000
	}
	if o.Size == 0 {
		o.Size = 65536
	}
	if o.Window == 0 {
		o.Window = 16
	}
	if o.Duration == 0 {
		o.Duration = 2 * time.Second
	}
	switch {
	case o.MTU < 576 || o.MTU > 65000:
		return fmt.Errorf("mtu %d: want 576 to 65000", o.MTU)
	case o.Frame != 0 && (o.Frame < 64 || o.Frame > o.MTU+14):
		return fmt.Errorf("frame size %d: want 64 to mtu+14 (%d)", o.Frame, o.MTU+14)
	case o.Size < 1 || o.Size > 1<<30:
		return fmt.Errorf("message size %d: want 1 byte to 1 GiB", o.Size)
	case o.Window < 1 || o.Window > 1024:
		return fmt.Errorf("window %d: want 1 to 1024", o.Window)
	case o.Duration < 10*time.Millisecond:
		return fmt.Errorf("duration %v: want at least 10ms", o.Duration)
	}
	return nil
}

// LinkReport is what Link measured.
type LinkReport struct {
	LinkOptions
	PathMTU      stack.MTU
	FramePayload int // RoCE payload bytes in each raw frame

	RawSentPerSec   float64 // frames the sender's link took
	RawFramesPerSec float64 // frames received
	RawRxDropped    uint64  // frames the receiving socket's kernel side dropped

	RoCEMessages      uint64
	RoCEGoodput       float64 // bits of WRITE payload per second
	RoCEPacketsPerSec float64 // packets A transmitted per second
	RoCERetransmitted uint64
}

// RawPayloadRate is the payload the raw frames would carry, in bits per
// second, had each been a RoCE data packet.
func (r *LinkReport) RawPayloadRate() float64 {
	return r.RawFramesPerSec * float64(r.FramePayload) * 8
}

// Ratio is the RoCE goodput over the raw payload rate.
func (r *LinkReport) Ratio() float64 {
	if p := r.RawPayloadRate(); p > 0 {
		return r.RoCEGoodput / p
	}
	return 0
}

// Write prints the report.
func (r *LinkReport) Write(w io.Writer) {
	mode := r.XDPMode
	if mode == "" {
		mode = "auto"
	}
	poll := "poll(2)"
	if r.BusyPoll {
		poll = "busy-polling"
	}
	fmt.Fprintf(w, "uroce bench link: veth pair between two namespaces, MTU %d (RoCE path MTU %d), XDP %s, %v per phase\n",
		r.MTU, r.PathMTU.Bytes(), mode, r.Duration)
	fmt.Fprintf(w, "  raw AF_XDP   %d-byte frames: %.3f Mframes/s received (%.3f sent), %.2f Gbit/s of frames = %.2f Gbit/s of %d-byte payloads; %d dropped by the kernel\n",
		r.Frame, r.RawFramesPerSec/1e6, r.RawSentPerSec/1e6, r.RawFramesPerSec*float64(r.Frame)*8/1e9,
		r.RawPayloadRate()/1e9, r.FramePayload, r.RawRxDropped)
	fmt.Fprintf(w, "  RC WRITE     %d-byte messages, %d in flight, engines %s: %.2f Gbit/s goodput, %.3f Mpackets/s sent, %d retransmitted\n",
		r.Size, r.Window, poll, r.RoCEGoodput/1e9, r.RoCEPacketsPerSec/1e6, r.RoCERetransmitted)
	fmt.Fprintf(w, "  ratio        RC WRITE goodput / raw payload rate = %.1f %%\n", r.Ratio()*100)
}
