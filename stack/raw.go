package stack

import (
	"context"
	"fmt"
	"io"
	"net/netip"
)

// Raw is a network interface opened as Open opens one (the XDP program,
// an AF_XDP socket on its first queue) with no device on it: for tools
// that make and read RoCE frames themselves (uroce replay). Its link
// receives the interface's RoCEv2 frames; the rest go to the kernel.
type Raw struct {
	Link      Link
	MAC       [6]byte
	Addrs     []netip.Addr
	MTU       int
	Neighbors Neighbors
	closer    io.Closer
}

// OpenRaw opens the interface named iface in the calling thread's
// network namespace; xdpMode is as Config.XDPMode.
func OpenRaw(ctx context.Context, iface, xdpMode string) (*Raw, error) {
	if interfaceOpener == nil {
		return nil, fmt.Errorf("open %s: AF_XDP is not supported on this system: %w", iface, ErrUnsupported)
	}
	cfg := Config{Interface: iface, XDPMode: xdpMode, Queues: 1}
	c, err := interfaceOpener(ctx, &cfg)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", iface, err)
	}
	return &Raw{Link: cfg.Links[0], MAC: cfg.MAC, Addrs: cfg.Addrs, MTU: cfg.MTU, Neighbors: cfg.Neighbors, closer: c}, nil
}

// Close detaches the XDP program and closes the socket.
func (r *Raw) Close() error { return r.closer.Close() }
