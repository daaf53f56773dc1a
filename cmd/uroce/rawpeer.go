package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/uroce/uroce/internal/oob"
	"github.com/uroce/uroce/internal/oob/perftest"
	"github.com/uroce/uroce/replay"
	"github.com/uroce/uroce/stack"
)

// peerFlags are the flags that name a live peer's interface and
// exchange (uroce replay and conform).
type peerFlags struct {
	dev, xdpMode, perfTool string
	pingpong               string // conform's --pingpong (replay's is a switch of its own)
	port                   int
}

func (p *peerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.dev, "d", "", "")
	fs.StringVar(&p.xdpMode, "xdp-mode", "auto", "")
	fs.StringVar(&p.perfTool, "perftest", "", "")
	fs.IntVar(&p.port, "port", 18515, "")
}

// addr is the exchange's address at peer.
func (p *peerFlags) addr(peer netip.Addr) string {
	return net.JoinHostPort(peer.String(), strconv.Itoa(p.port))
}

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

// dialExchange connects to the TCP exchange of a tool's server at addr,
// retrying for 10 s while it does not listen yet; who names the server
// for the error.
func dialExchange(ctx context.Context, addr, who string) (net.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nc, err := oob.Dial(dctx, addr, 0)
	if err != nil {
		return nil, fmt.Errorf("%v (is %s running at %s?)", err, who, addr)
	}
	return nc, nil
}

// recorder keeps the frames a replay or a scenario passes, with their
// times, for a pcap file.
type recorder struct {
	frames [][]byte
	times  []time.Time
}

// tap records one frame (replay.Drive's tap).
func (r *recorder) tap(b []byte, _ bool) {
	r.frames = append(r.frames, append([]byte(nil), b...))
	r.times = append(r.times, time.Now())
}

// write writes the frames recorded as a pcap file.
func (r *recorder) write(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := pcapgo.NewWriter(f)
	err = w.WriteFileHeader(65536, layers.LinkTypeEthernet)
	for i, b := range r.frames {
		if err != nil {
			break
		}
		err = w.WritePacket(gopacket.CaptureInfo{Timestamp: r.times[i], CaptureLength: len(b), Length: len(b)}, b)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// perftestClient runs perftest's exchange as the client of tool's server
// at addr, advertising local, and calls play with the server's keys in
// the measured run's place. An error of play is returned; one of the
// exchange after it is only reported on warn.
func perftestClient(ctx context.Context, addr string, tool perftest.Tool, mtu perftest.MTU, local perftest.Dest,
	play func(remote perftest.Dest) error, warn func(error)) error {
	nc, err := dialExchange(ctx, addr, "the "+tool.String()+" server")
	if err != nil {
		return err
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
