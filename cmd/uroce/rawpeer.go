package main

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/uroce/uroce/internal/oob"
	"github.com/uroce/uroce/internal/oob/perftest"
	"github.com/uroce/uroce/replay"
	"github.com/uroce/uroce/stack"
)

// rawPeer is a live peer reached from an interface opened raw (uroce
// replay and conform make their own frames): this end's addresses and
// the peer's.
type rawPeer struct {
	raw         *stack.Raw
	local, peer replay.Endpoint // QPNs left to the caller
}

// openRawPeer opens iface and resolves peer's MAC.
func openRawPeer(ctx context.Context, iface, xdpMode string, peer netip.Addr) (*rawPeer, error) {
	raw, err := stack.OpenRaw(ctx, iface, xdpMode)
	if err != nil {
		return nil, err
	}
	rp := &rawPeer{raw: raw}
	for _, a := range raw.Addrs {
		if a.Is4() == peer.Is4() && !a.IsLinkLocalUnicast() {
			rp.local = replay.Endpoint{MAC: raw.MAC, IP: a}
			break
		}
	}
	if !rp.local.IP.IsValid() {
		raw.Close()
		return nil, fmt.Errorf("%s has no address of %v's family", iface, peer)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	mac, err := raw.Neighbors.Resolve(rctx, peer)
	cancel()
	if err != nil {
		raw.Close()
		return nil, fmt.Errorf("%v (is %v on %s's network?)", err, peer, iface)
	}
	rp.peer = replay.Endpoint{MAC: mac, IP: peer}
	return rp, nil
}

func (rp *rawPeer) Close() error { return rp.raw.Close() }

// perftestClient runs perftest's exchange as the client of tool's server
// at addr, advertising local, and calls play with the server's keys in
// the measured run's place. An error of play is returned; one of the
// exchange after it is only reported on warn.
func perftestClient(ctx context.Context, addr string, tool perftest.Tool, mtu perftest.MTU, local perftest.Dest,
	play func(remote perftest.Dest) error, warn func(error)) error {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	nc, err := oob.Dial(dctx, addr, 0)
	cancel()
	if err != nil {
		return fmt.Errorf("%v (is %s running as server there?)", err, tool)
	}
	defer nc.Close()
	if mtu == 0 {
		mtu = perftest.MTU1024
	}
	var remote perftest.Dest
	var playErr error
	played := false
	_, err = perftest.Run(ctx, nc, perftest.Config{Tool: tool, Role: perftest.Client}, perftest.Params{MTU: mtu}, perftest.Hooks{
		Local:   func(perftest.Agreed) ([]perftest.Dest, error) { return []perftest.Dest{local}, nil },
		Connect: func(r []perftest.Dest) error { remote = r[0]; return nil },
		Run: func(int) error {
			played = true
			playErr = play(remote)
			return nil
		},
	})
	if playErr != nil {
		return playErr
	}
	if err != nil {
		if !played {
			return err
		}
		warn(fmt.Errorf("after the run, the perftest exchange: %w", err))
	}
	return nil
}

// parseTool parses a perftest tool's name (ib_write_bw or write_bw).
func parseTool(s string) (perftest.Tool, error) {
	for t := perftest.WriteBW; t.Valid(); t++ {
		if t.String() == s || t.String() == "ib_"+s {
			return t, nil
		}
	}
	return -1, fmt.Errorf("--perftest %q: want ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw, ib_write_lat, ib_read_lat, ib_send_lat or ib_atomic_lat", s)
}
