package main

import (
	"context"
	"fmt"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/conform"
	"github.com/uroce/uroce/internal/oob/pingpong"
	"github.com/uroce/uroce/replay"
)

// udPingpongQKey is the Q_Key of ibv_ud_pingpong's QP.
const udPingpongQKey = 0x11111111

// udPingpongSkips says why s cannot run against a stock ibv_ud_pingpong
// server, if it cannot: the server's QP is a UD QP, and all it does is
// answer each datagram it receives with one of its own.
func udPingpongSkips(s *conform.Scenario) string {
	n := s.Needs()
	switch {
	case !n.UD:
		return "needs another QP than a UD one: run it with --perftest"
	case n.Peer:
		return "the peer must post sends of its own, which ibv_ud_pingpong's server does not (only --self can)"
	}
	return ""
}

// udWatch is a conform run against an ibv_ud_pingpong server. The
// server answers every datagram it receives: its answers to the local
// QP are its receive completions (Env.PeerDelivered), counted here and
// kept from the run, whose steps expect nothing back from a UD peer.
type udWatch struct {
	*conform.Run
	local, peer replay.Endpoint
	answers     int
	pkt         bth.Packet
}

// Input implements replay.Player.
func (w *udWatch) Input(frame []byte, now time.Time) bool {
	p := &w.pkt
	if bth.Parse(frame, p) == nil && p.ICRCOK() && p.SrcIP() == w.peer.IP && p.DstIP() == w.local.IP &&
		p.BTH().DestQP() == w.local.QPN && p.Opcode().Info().Kind == bth.KindSend &&
		p.Opcode().Transport() == bth.TransportUD {
		w.answers++
		return true
	}
	return w.Run.Input(frame, now)
}

// runUDPingpong runs s against the ibv_ud_pingpong server at addr, which
// the user starts again for each scenario (ibv_ud_pingpong -s 64 -n 1
// and the GID index of the address; one answer ends it).
func runUDPingpong(ctx context.Context, rp *rawPeer, addr string, s *conform.Scenario, n int, timeout time.Duration,
	tap func([]byte, bool)) (conform.Result, error) {
	res := conform.Result{Name: s.Name, Rule: s.Rule, IBTA: s.IBTA}
	if why := udPingpongSkips(s); why != "" {
		res.Skipped = why
		return res, nil
	}
	nc, err := dialExchange(ctx, addr, "the ibv_ud_pingpong server")
	if err != nil {
		return res, err
	}
	defer nc.Close()
	const psn = 0x1000
	local := rp.local
	local.QPN = uint32(0x100 + n) // a QPN of its own: late packets of an earlier scenario are not its
	remote, err := pingpong.Client(ctx, nc, []pingpong.Dest{{QPN: local.QPN, PSN: psn, GID: local.IP.As16()}}, 1)
	if err != nil {
		return res, fmt.Errorf("the ibv_ud_pingpong exchange: %w", err)
	}
	peer := rp.peer
	peer.QPN = remote[0].QPN
	w := &udWatch{local: local, peer: peer}
	w.Run = conform.NewRun(s, conform.Env{Local: local, Peer: peer, PSN: psn, QKey: udPingpongQKey, Timeout: timeout,
		PeerDelivered: func() int { return w.answers }})
	err = replay.Drive(ctx, w, rp.raw.Link, tap)
	return w.Result(), err
}
