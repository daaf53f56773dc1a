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
	"github.com/uroce/uroce/internal/oob/pingpong"
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
	// peerProgram serves conform_peer (conform.PeerProgram) instead of
	// the stock perftest clients.
	peerProgram bool
}

// exchangeGrace is how long the stock client may take to end its run and
// its exchange once the scenario is over.
const exchangeGrace = 30 * time.Second

func (sv *server) Close() error {
	if sv.rp != nil {
		return sv.rp.Close()
	}
	return nil
}

// accept waits on --port for a client from the peer (the first one's
// address, or --peer's, opens the raw link); others are refused.
func (sv *server) accept(name string) (net.Conn, error) {
	for {
		nc, err := oob.Listen(sv.ctx, fmt.Sprintf(":%d", sv.pf.port))
		if err != nil {
			return nil, err
		}
		ap, err := netip.ParseAddrPort(nc.RemoteAddr().String())
		from := ap.Addr().Unmap()
		if err == nil && (!sv.peerIP.IsValid() || from == sv.peerIP) {
			if sv.rp == nil {
				if sv.rp, err = openRawPeer(sv.ctx, sv.pf.dev, sv.pf.xdpMode, from); err != nil {
					nc.Close()
					return nil, err
				}
			}
			if from == sv.rp.peer.IP {
				return nc, nil
			}
		}
		fmt.Fprintf(sv.stderr, "uroce conform: %s: a client from %v refused\n", name, from)
		nc.Close()
	}
}

// servePSN is the first PSN of the served QP's requests.
const servePSN = 0x10

// client says which command line the user is to run on the peer, waits
// for that client (accept), and returns its connection and the local
// end of the scenario's QP: a QPN of its own for each scenario, so that
// late packets of an earlier one are not its.
func (sv *server) client(name, command string) (net.Conn, replay.Endpoint, error) {
	fmt.Fprintf(sv.stderr, "uroce conform: %s: waiting on port %d for the peer's `%s ADDRESS`\n", name, sv.pf.port, command)
	nc, err := sv.accept(name)
	if err != nil {
		return nil, replay.Endpoint{}, err
	}
	sv.n++
	local := sv.rp.local
	local.QPN = uint32(0x100 + sv.n)
	return nc, local, nil
}

// runPeerProgram serves scenario s to conform_peer: ibv_rc_pingpong's
// exchange (the program is its client), then the scenario, and a plain
// responder until the program closes the connection, when its
// operations have completed.
func (sv *server) runPeerProgram(s *conform.Scenario, tap func([]byte, bool)) (conform.Result, error) {
	res := conform.Result{Name: s.Name, Rule: s.Rule, IBTA: s.IBTA}
	prog, err := s.PeerProgram()
	if err != nil {
		res.Skipped = err.Error()
		return res, nil
	}
	nc, local, err := sv.client(s.Name, prog.Command("DEV", "GID-INDEX", conform.ServeRKey, conform.ServeVA))
	if err != nil {
		return res, err
	}
	defer nc.Close()
	remote, err := pingpong.Server(sv.ctx, nc, []pingpong.Dest{{QPN: local.QPN, PSN: servePSN, GID: local.IP.As16()}}, 1, nil)
	if err != nil {
		return res, fmt.Errorf("%s: the exchange with conform_peer: %w", s.Name, err)
	}
	peer := sv.rp.peer
	peer.QPN = remote[0].QPN
	env := conform.Env{Local: local, Peer: peer, PSN: servePSN, RKey: conform.ServeRKey, VA: conform.ServeVA, Region: conform.ServeRegion,
		Timeout: sv.timeout, PeerPSN: bth.PSN(remote[0].PSN & bth.PSNMask), MTU: 1024, Tail: true,
		QKey: conform.PeerProgramQKey, PostsAhead: true,
		// conform_peer posts every request at once, after the exchange.
		PeerPost: func(*conform.Pkt) error { return nil }}
	run := conform.NewRun(s, env)
	if err := replay.Drive(sv.ctx, run, sv.rp.raw.Link, tap); err != nil {
		return run.Result(), err
	}
	res = run.Result()
	// Answer the program until it has its completions and leaves.
	fctx, cancel := context.WithTimeout(sv.ctx, exchangeGrace)
	defer cancel()
	go func() {
		io.Copy(io.Discard, nc)
		cancel()
	}()
	replay.Drive(fctx, conform.NewFinish(env), sv.rp.raw.Link, tap)
	return res, nil
}

// run serves scenario s to one client.
func (sv *server) run(s *conform.Scenario, tap func([]byte, bool)) (conform.Result, error) {
	if sv.peerProgram {
		return sv.runPeerProgram(s, tap)
	}
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
	nc, local, err := sv.client(s.Name, client.Command("DEV", "GID-INDEX"))
	if err != nil {
		return res, err
	}
	defer nc.Close()
	mtu := perftest.MTU1024
	exchanged := make(chan struct{})
	drove := make(chan error, 1)
	started := false
	_, xerr := perftest.Run(sv.ctx, nc, perftest.Config{Tool: tool, Role: perftest.Server}, perftest.Params{MTU: mtu}, perftest.Hooks{
		Agreed: func(a perftest.Agreed) (int, error) { mtu = a.MTU; return 0, nil },
		Local: func(perftest.Agreed) ([]perftest.Dest, error) {
			return []perftest.Dest{{QPN: local.QPN, PSN: servePSN, GID: local.IP.As16(), RKey: conform.ServeRKey, VAddr: conform.ServeVA, OutReads: 16}}, nil
		},
		Connect: func(r []perftest.Dest) error {
			peer := sv.rp.peer
			peer.QPN = r[0].QPN
			env := conform.Env{Local: local, Peer: peer, PSN: servePSN, RKey: conform.ServeRKey, VA: conform.ServeVA, Region: conform.ServeRegion,
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
