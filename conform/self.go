package conform

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/rdmacm"
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

// SelfQKey is the Q_Key of the in-process responder's QP in UD
// scenarios (perftest's and the pingpongs' default).
const SelfQKey = 0x11111111

// RunSelf runs sc against a fresh uroce responder in this process (an RC
// QP on an in-memory link, a region granting every remote access, FLUSH's
// included, and the receives sc asks for; a UD QP with Q_Key SelfQKey
// when sc sends UD SENDs to it; its QP1 run by the device's RDMA CM
// agent when sc talks to QP1), set up as opt says. tap sees the frames,
// as replay.Drive's.
func RunSelf(ctx context.Context, sc *Scenario, timeout time.Duration, tap func([]byte, bool), opt SelfOptions) (Result, error) {
	return runSelf(ctx, sc, timeout, tap, nil, opt)
}

// SelfOptions are the settings of RunSelf's responder that differ from
// a uroce device's defaults.
type SelfOptions struct {
	// KeepPastGap keeps the requests past a PSN gap
	// (stack.Config.KeepPastGap, not the IBTA's rule).
	KeepPastGap bool
}

// runSelf is RunSelf with the run's side of the link wrapped by wrap
// (when not nil: a peer that answers wrongly, in tests).
func runSelf(ctx context.Context, sc *Scenario, timeout time.Duration, tap func([]byte, bool), wrap func(stack.Link) stack.Link, opt SelfOptions) (Result, error) {
	const rqpsn, sqpsn = bth.PSN(0xfffffa), bth.PSN(0x10) // the first near the PSN wrap
	recv := sc.Receives
	if recv == 0 {
		recv = 16
	}
	needs := sc.Needs()
	cfg := replay.ResponderConfig{Transport: bth.TransportRC, Local: selfLocal, Peer: selfPeer,
		RQPSN: rqpsn, SQPSN: sqpsn, Region: SelfRegion, Receives: recv,
		Access: stack.AccessRemoteWrite | stack.AccessRemoteRead | stack.AccessRemoteAtomic |
			stack.AccessFlushGlobal | stack.AccessFlushPersistent, KeepPastGap: opt.KeepPastGap}
	if needs.UD {
		cfg.Transport, cfg.QKey = bth.TransportUD, SelfQKey
	}
	if sc.RetryCnt >= 0 || sc.RNRRetry >= 0 {
		cfg.Retries = &replay.Retries{Cnt: 7, RNR: 7}
		if sc.RetryCnt >= 0 {
			cfg.Retries.Cnt = uint8(sc.RetryCnt)
		}
		if sc.RNRRetry >= 0 {
			cfg.Retries.RNR = uint8(sc.RNRRetry)
		}
	}
	r, err := replay.NewResponder(cfg)
	if err != nil {
		return Result{}, err
	}
	defer r.Close()
	if needs.GSI {
		if _, err := rdmacm.AgentFor(r.Dev); err != nil {
			return Result{}, err
		}
	}
	var ah *stack.AH
	if needs.UD {
		if ah, err = r.PD.CreateAH(stack.AHAttr{DGID: selfLocal.IP, SGIDIndex: r.Dev.GIDIndex(selfPeer.IP)}); err != nil {
			return Result{}, err
		}
	}
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
		if ah != nil {
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah, selfLocal.QPN, SelfQKey
			if p.QKey != "" {
				var n uint64
				fmt.Sscan(p.QKey, &n)
				wr.RemoteQKey = uint32(n)
			}
		}
		return r.QP.PostSend(&wr)
	}
	delivered := 0
	wcs := make([]stack.WC, 16)
	recvd := func() int {
		for {
			n := r.CQ.Poll(wcs)
			for _, wc := range wcs[:n] {
				if wc.Status == stack.WCSuccess && wc.Opcode&stack.WCRecv != 0 {
					delivered++
				}
			}
			if n < len(wcs) {
				return delivered
			}
		}
	}
	run := NewRun(sc, Env{Local: selfLocal, Peer: r.Live.Peer, PSN: rqpsn, RKey: r.MR.RKey(), VA: r.MR.Addr(), Region: SelfRegion,
		Timeout: timeout, PeerPSN: sqpsn, PeerPost: post, QKey: cfg.QKey, PeerDelivered: recvd})
	l := r.Link
	if wrap != nil {
		l = wrap(l)
	}
	if err := replay.Drive(ctx, run, l, tap); err != nil {
		return run.Result(), err
	}
	return run.Result(), nil
}
