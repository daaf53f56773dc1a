package conform

import (
	"context"
	"net/netip"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/replay"
)

// The addresses of a scenario against the in-process uroce responder.
var (
	selfLocal = replay.Endpoint{MAC: [6]byte{2, 0, 0x5e, 0, 0, 1}, IP: netip.MustParseAddr("198.51.100.1"), QPN: 0x11}
	selfPeer  = replay.Endpoint{MAC: [6]byte{2, 0, 0x5e, 0, 0, 2}, IP: netip.MustParseAddr("198.51.100.2")}
)

// SelfRegion is the size of the in-process responder's region.
const SelfRegion = 64 << 10

// RunSelf runs sc against a fresh uroce responder in this process (an RC
// QP on an in-memory link, a region granting every remote access, and the
// receives sc asks for). tap sees the frames, as replay.Drive's.
func RunSelf(ctx context.Context, sc *Scenario, timeout time.Duration, tap func([]byte, bool)) (Result, error) {
	const rqpsn, sqpsn = bth.PSN(0xfffffa), bth.PSN(0x10) // the first near the PSN wrap
	recv := sc.Receives
	if recv == 0 {
		recv = 16
	}
	r, err := replay.NewResponder(replay.ResponderConfig{Transport: bth.TransportRC, Local: selfLocal, Peer: selfPeer,
		RQPSN: rqpsn, SQPSN: sqpsn, Region: SelfRegion, Receives: recv})
	if err != nil {
		return Result{}, err
	}
	defer r.Close()
	run := NewRun(sc, Env{Local: selfLocal, Peer: r.Live.Peer, PSN: rqpsn, RKey: r.MR.RKey(), VA: r.MR.Addr(), Region: SelfRegion,
		Timeout: timeout})
	if err := replay.Drive(ctx, run, r.Link, tap); err != nil {
		return run.Result(), err
	}
	return run.Result(), nil
}
