package stack

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// kernelNeighbors resolves peers' Ethernet addresses through the kernel's
// routing and neighbour tables, for one interface: the route to the peer
// out of the interface gives the next hop (the peer, or a gateway), and
// the neighbour table its MAC. When the table has no valid entry, it asks
// the kernel to resolve the address (ARP or IPv6 neighbour discovery,
// which the XDP program leaves to the kernel) and waits for the answer.
//
// Its netlink socket was opened in the interface's network namespace, so
// Resolve may be called from any goroutine.
type kernelNeighbors struct {
	nl    *rtnl
	index int
	name  string
}

// Resolve implements Neighbors.
func (k *kernelNeighbors) Resolve(ctx context.Context, ip netip.Addr) ([6]byte, error) {
	var none [6]byte
	ip = ip.Unmap().WithZone("")
	if !ip.IsValid() || ip.IsUnspecified() || ip.IsMulticast() || ip.IsLoopback() {
		return none, fmt.Errorf("%v is not a unicast peer address: %w", ip, ErrInvalidArg)
	}
	rt, err := k.nl.route(ip, k.index)
	if err != nil {
		if errors.Is(err, unix.ENETUNREACH) || errors.Is(err, unix.EHOSTUNREACH) {
			return none, fmt.Errorf("no route to %v out of %s (give %s an address in the peer's subnet, or add a route): %w",
				ip, k.name, k.name, ErrNoNeighbor)
		}
		return none, fmt.Errorf("look up route to %v: %w", ip, err)
	}
	switch {
	case rt.typ == unix.RTN_LOCAL:
		return none, fmt.Errorf("%v is an address of this host, not of a peer on %s: %w", ip, k.name, ErrNoNeighbor)
	case rt.typ != unix.RTN_UNICAST:
		return none, fmt.Errorf("the route to %v is not usable (route type %d: unreachable, prohibited or blackhole): %w",
			ip, rt.typ, ErrNoNeighbor)
	case rt.oif != 0 && rt.oif != k.index:
		return none, fmt.Errorf("%v is reached through another interface (index %d), not %s: %w", ip, rt.oif, k.name, ErrNoNeighbor)
	}
	hop, what := ip, fmt.Sprint(ip)
	if rt.gateway.IsValid() {
		hop = rt.gateway.Unmap()
		what = fmt.Sprintf("gateway %v (next hop to %v)", hop, ip)
	}
	return k.resolveHop(ctx, hop, what)
}

// resolveHop waits for the neighbour entry of hop to become valid,
// starting the kernel's resolution when needed.
func (k *kernelNeighbors) resolveHop(ctx context.Context, hop netip.Addr, what string) ([6]byte, error) {
	var none [6]byte
	start := time.Now()
	var probed time.Time
	incomplete := false // the kernel was seen resolving
	var timer *time.Timer
	for pause := 200 * time.Microsecond; ; pause = min(2*pause, 20*time.Millisecond) {
		nb, err := k.nl.neigh(k.index, hop)
		if err != nil {
			return none, fmt.Errorf("look up %s: %w", what, err)
		}
		switch {
		case nb.found && nb.state&neighbourValid != 0 && nb.hasLL:
			return nb.mac, nil
		case nb.found && nb.state&neighbourValid != 0:
			return none, fmt.Errorf("%s on %s has no Ethernet address (a NOARP interface?): %w", what, k.name, ErrNoNeighbor)
		case nb.found && nb.state&unix.NUD_INCOMPLETE != 0:
			incomplete = true
		case nb.found && nb.state&unix.NUD_FAILED != 0 && incomplete:
			return none, k.unanswered(hop, what, time.Since(start))
		}
		// Not there, failed earlier, or no resolution seen yet: (re)start
		// it, at most every 100 ms.
		if !incomplete && time.Since(probed) >= 100*time.Millisecond {
			if err := k.nl.probeNeigh(k.index, hop); err != nil {
				return none, fmt.Errorf("resolve %s on %s: %w", what, k.name, err)
			}
			probed = time.Now()
		}
		if timer == nil {
			timer = time.NewTimer(pause)
			defer timer.Stop()
		} else {
			timer.Reset(pause)
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return none, k.unanswered(hop, what, time.Since(start))
			}
			return none, fmt.Errorf("resolve %s on %s: %w", what, k.name, ctx.Err())
		case <-timer.C:
		}
	}
}

// unanswered is the error for a peer that did not answer.
func (k *kernelNeighbors) unanswered(hop netip.Addr, what string, d time.Duration) error {
	proto := "ARP requests"
	if hop.Is6() {
		proto = "IPv6 neighbour solicitations"
	}
	return fmt.Errorf("%s did not answer %s on %s within %v (check that the peer is up, on this link, and has that address): %w",
		what, proto, k.name, d.Round(time.Millisecond), ErrNoNeighbor)
}
