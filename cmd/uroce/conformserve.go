package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/conform"
	"github.com/uroce/uroce/internal/oob"
	"github.com/uroce/uroce/internal/oob/perftest"
	"github.com/uroce/uroce/replay"
)

// server runs the scenarios where a live peer is the requester (uroce
// conform --serve): for each, it serves perftest's exchange to the
// stock client the scenario names, with a QP of its own on the raw
// link, and plays the responder the scenario describes.
type server struct {
	ctx     context.Context
	pf      peerFlags
	peerIP  netip.Addr    // the only client accepted (any when invalid)
	tool    perftest.Tool // the only client's tool run (any when -1)
	timeout time.Duration // of each expected answer
	stderr  io.Writer
	rp      *rawPeer // opened at the first client's connection
	n       int      // scenarios served
}

// exchangeGrace is how long the stock client may take to end its run and
// its exchange once the scenario is over.
const exchangeGrace = 30 * time.Second

// The region this end advertises to the client (it plays at the frame
// level and has none: the client's requests only need to be
// recognisable).
const (
	serveRKey   = 0x4242
	serveVA     = 0x7f0000001000
	serveRegion = 64 << 10
)

func (sv *server) Close() error {
	if sv.rp != nil {
		return sv.rp.Close()
	}
	return nil
}

// run serves scenario s to one client.
func (sv *server) run(s *conform.Scenario, tap func([]byte, bool)) (conform.Result, error) {
	res := conform.Result{Name: s.Name, Rule: s.Rule, IBTA: s.IBTA}
	client, err := s.StockClient()
	if err != nil {
		res.Skipped = err.Error()
		return res, nil
	}
	tool, err := parseTool(client.Tool)
	if err != nil {
		return res, err
	}
	if sv.tool >= 0 && tool != sv.tool {
		res.Skipped = fmt.Sprintf("its peer runs %s, not %s", client.Tool, sv.tool)
		return res, nil
	}
	fmt.Fprintf(sv.stderr, "uroce conform: %s: waiting on port %d for the peer's `%s ADDRESS`\n", s.Name, sv.pf.port,
		client.Command("DEV", "GID-INDEX"))
	var nc net.Conn
	for {
		if nc, err = oob.Listen(sv.ctx, fmt.Sprintf(":%d", sv.pf.port)); err != nil {
			return res, err
		}
		ap, err := netip.ParseAddrPort(nc.RemoteAddr().String())
		from := ap.Addr().Unmap()
		if err == nil && (!sv.peerIP.IsValid() || from == sv.peerIP) {
			if sv.rp == nil {
				if sv.rp, err = openRawPeer(sv.ctx, sv.pf.dev, sv.pf.xdpMode, from); err != nil {
					nc.Close()
					return res, err
				}
			}
			if from == sv.rp.peer.IP {
				break
			}
		}
		fmt.Fprintf(sv.stderr, "uroce conform: %s: a client from %v refused\n", s.Name, from)
		nc.Close()
	}
	defer nc.Close()
	sv.n++
	const psn = 0x10
	local := sv.rp.local
	local.QPN = uint32(0x100 + sv.n) // a QPN of its own: late packets of an earlier scenario are not its
	mtu := perftest.MTU1024
	exchanged := make(chan struct{})
	drove := make(chan error, 1)
	started := false
	_, xerr := perftest.Run(sv.ctx, nc, perftest.Config{Tool: tool, Role: perftest.Server}, perftest.Params{MTU: mtu}, perftest.Hooks{
		Agreed: func(a perftest.Agreed) (int, error) { mtu = a.MTU; return 0, nil },
		Local: func(perftest.Agreed) ([]perftest.Dest, error) {
			return []perftest.Dest{{QPN: local.QPN, PSN: psn, GID: local.IP.As16(), RKey: serveRKey, VAddr: serveVA, OutReads: 16}}, nil
		},
		Connect: func(r []perftest.Dest) error {
			peer := sv.rp.peer
			peer.QPN = r[0].QPN
			env := conform.Env{Local: local, Peer: peer, PSN: psn, RKey: serveRKey, VA: serveVA, Region: serveRegion,
				Timeout: sv.timeout, PeerPSN: bth.PSN(r[0].PSN & bth.PSNMask), MTU: mtu.Bytes(), Tail: true,
				// The stock client posts its requests itself once its run starts.
				PeerPost: func(*conform.Pkt) error { return nil }}
			run := conform.NewRun(s, env)
			started = true
			go func() {
				err := replay.Drive(sv.ctx, run, sv.rp.raw.Link, tap)
				res = run.Result()
				if err == nil {
					// Answer the client until it ends its exchange.
					fctx, cancel := context.WithTimeout(sv.ctx, exchangeGrace)
					stop := context.AfterFunc(fctx, func() { nc.Close() })
					go func() {
						<-exchanged
						cancel()
					}()
					replay.Drive(fctx, conform.NewFinish(env), sv.rp.raw.Link, tap)
					stop()
					cancel()
				}
				drove <- err
			}()
			return nil
		},
	})
	close(exchanged)
	if !started {
		return res, xerr
	}
	if err := <-drove; err != nil {
		return res, err
	}
	if xerr != nil {
		fmt.Fprintf(sv.stderr, "uroce conform: %s: the perftest exchange: %v\n", s.Name, xerr)
	}
	return res, nil
}
