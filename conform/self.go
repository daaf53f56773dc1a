package conform

import (
	"context"
	"net/netip"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/replay"
	"github.com/uroce/uroce/stack"
)

// The addresses of a scenario against the in-process uroce responder.
var (
	selfLocal = replay.Endpoint{MAC: [6]byte{2, 0, 0x5e, 0, 0, 1}, IP: netip.MustParseAddr("198.51.100.1"), QPN: 0x11}
	selfPeer  = replay.Endpoint{MAC: [6]byte{2, 0, 0x5e, 0, 0, 2}, IP: netip.MustParseAddr("198.51.100.2")}
)

// SelfRegion is the size of the in-process responder's region.
const SelfRegion = 64 << 10

// The region of this end that the self peer's RDMA requests name (this
// end plays at the frame level and has none: the requests only need to
// be recognisable).
const (
	selfRemoteVA  = 0x7f0000001000
	selfRemoteKey = 0x4242
)

// RunSelf runs sc against a fresh uroce responder in this process (an RC
// QP on an in-memory link, a region granting every remote access, FLUSH's
// included, and the
// receives sc asks for). tap sees the frames, as replay.Drive's.
func RunSelf(ctx context.Context, sc *Scenario, timeout time.Duration, tap func([]byte, bool)) (Result, error) {
	const rqpsn, sqpsn = bth.PSN(0xfffffa), bth.PSN(0x10) // the first near the PSN wrap
	recv := sc.Receives
	if recv == 0 {
		recv = 16
	}
	r, err := replay.NewResponder(replay.ResponderConfig{Transport: bth.TransportRC, Local: selfLocal, Peer: selfPeer,
		RQPSN: rqpsn, SQPSN: sqpsn, Region: SelfRegion, Receives: recv,
		Access: stack.AccessRemoteWrite | stack.AccessRemoteRead | stack.AccessRemoteAtomic |
			stack.AccessFlushGlobal | stack.AccessFlushPersistent})
	if err != nil {
		return Result{}, err
	}
	defer r.Close()
	id := uint64(0)
	post := func(p *Pkt) error {
		id++
		wr := stack.SendWR{ID: id, Flags: stack.SendSignaled, SG: []stack.SGE{r.MR.SGE(0, uint32(p.Len))},
			Remote: stack.RemoteAddr{Addr: selfRemoteVA + uint64(p.VA), RKey: selfRemoteKey}}
		switch p.Op.Info().Kind {
		case bth.KindWrite:
			wr.Op = stack.OpWrite
		case bth.KindReadRequest:
			wr.Op = stack.OpRead
		default:
			wr.Op = stack.OpSend
		}
		return r.QP.PostSend(&wr)
	}
	run := NewRun(sc, Env{Local: selfLocal, Peer: r.Live.Peer, PSN: rqpsn, RKey: r.MR.RKey(), VA: r.MR.Addr(), Region: SelfRegion,
		Timeout: timeout, PeerPSN: sqpsn, PeerPost: post})
	if err := replay.Drive(ctx, run, r.Link, tap); err != nil {
		return run.Result(), err
	}
	return run.Result(), nil
}
