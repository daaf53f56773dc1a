package stack

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// rtnl is the route-netlink (NETLINK_ROUTE) client of one interface: a
// github.com/vishvananda/netlink handle whose socket belongs to the
// network namespace of the thread that created it, and keeps talking to
// that namespace from any goroutine afterwards. Its methods are safe for
// concurrent use; the handle serialises requests on its socket.
type rtnl struct {
	mu     sync.RWMutex // write-held by Close; read-held by requests
	h      *netlink.Handle
	closed bool
}

// rtnlTimeout bounds the wait for the kernel's answer to one request.
const rtnlTimeout = 5 * time.Second

// newRTNL opens a route-netlink socket in the calling thread's network
// namespace.
func newRTNL() (*rtnl, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open netlink socket: %w", err)
	}
	if err := h.SetSocketTimeout(rtnlTimeout); err != nil {
		h.Close()
		return nil, fmt.Errorf("set netlink timeout: %w", err)
	}
	return &rtnl{h: h}, nil
}

// Close closes the socket.
func (r *rtnl) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		r.h.Close()
	}
	return nil
}

// errNetlinkClosed reports a request on a closed client. (A closed
// handle would open a new socket per request, in the namespace of
// whichever thread asks: never the one meant.)
var errNetlinkClosed = errors.New("netlink socket closed")

// do runs one request fn on the handle, unless the client is closed.
func (r *rtnl) do(fn func(h *netlink.Handle) error) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return errNetlinkClosed
	}
	return answerErr(fn(r.h))
}

// answerErr turns the library's errors into the client's: a dump the
// kernel interrupted (the table changed meanwhile) is used as it is, as
// the next look-up repeats it; a receive timeout says so.
func answerErr(err error) error {
	switch {
	case err == nil, errors.Is(err, netlink.ErrDumpInterrupted):
		return nil
	case errors.Is(err, unix.EAGAIN):
		return fmt.Errorf("receive netlink answer: no answer within %v", rtnlTimeout)
	}
	return err
}

// linkInfo is what uroce needs to know about a network interface.
type linkInfo struct {
	name     string
	index    int
	flags    uint32 // IFF_*
	encap    string // the link type, as ip-link names it: "ether", "loopback"…
	mac      []byte
	mtu      int
	rxQueues int
	xdpProg  uint32 // the ID of the XDP program attached, 0 for none
}

// link looks the interface up by name. A missing interface is
// unix.ENODEV.
func (r *rtnl) link(name string) (linkInfo, error) {
	li := linkInfo{name: name}
	err := r.do(func(h *netlink.Handle) error {
		l, err := h.LinkByName(name)
		if err != nil {
			return err
		}
		a := l.Attrs()
		li.index, li.flags, li.encap = a.Index, a.RawFlags, a.EncapType
		li.mac = append([]byte(nil), a.HardwareAddr...)
		li.mtu, li.rxQueues = a.MTU, a.NumRxQueues
		if a.Xdp != nil {
			li.xdpProg = a.Xdp.ProgId
		}
		return nil
	})
	var missing netlink.LinkNotFoundError
	if errors.As(err, &missing) {
		return li, unix.ENODEV
	}
	if err != nil {
		return li, err
	}
	if li.index == 0 {
		return li, unix.ENODEV
	}
	return li, nil
}

// addrs returns the addresses of interface index, in the kernel's
// order, leaving out those whose duplicate-address detection failed.
func (r *rtnl) addrs(index int) ([]netip.Addr, error) {
	var out []netip.Addr
	err := r.do(func(h *netlink.Handle) error {
		as, err := h.AddrList(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: index}}, netlink.FAMILY_ALL)
		for _, a := range as {
			if a.IPNet == nil || a.Flags&unix.IFA_F_DADFAILED != 0 {
				continue
			}
			// The library gives a point-to-point address's local end
			// as IPNet and its peer as Peer.
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				out = append(out, ip)
			}
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	return out, nil
}

// nlRoute is the kernel's route to a destination.
type nlRoute struct {
	typ     int        // RTN_*
	oif     int        // output interface
	gateway netip.Addr // next hop, if not on-link
}

// route looks up the route to dst out of interface oif, as rdma_rxe does
// for its packets.
func (r *rtnl) route(dst netip.Addr, oif int) (nlRoute, error) {
	var rt nlRoute
	err := r.do(func(h *netlink.Handle) error {
		rs, err := h.RouteGetWithOptions(dst.AsSlice(), &netlink.RouteGetOptions{OifIndex: oif})
		if err != nil || len(rs) == 0 {
			return err
		}
		rt.typ, rt.oif = rs[0].Type, rs[0].LinkIndex
		if gw, ok := netip.AddrFromSlice(rs[0].Gw); ok {
			rt.gateway = gw
		} else if via, ok := rs[0].Via.(*netlink.Via); ok {
			rt.gateway, _ = netip.AddrFromSlice(via.Addr)
		}
		return nil
	})
	return rt, err
}

// nlNeigh is an entry of the kernel's neighbour table.
type nlNeigh struct {
	found bool
	state int // NUD_*
	mac   [6]byte
	hasLL bool
}

// neighbourValid are the states whose link-layer address may be used.
const neighbourValid = unix.NUD_REACHABLE | unix.NUD_STALE | unix.NUD_DELAY | unix.NUD_PROBE |
	unix.NUD_PERMANENT | unix.NUD_NOARP

// neighFamily is the neighbour-table family of ip.
func neighFamily(ip netip.Addr) int {
	if ip.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

// neigh returns the neighbour entry of ip on interface index.
func (r *rtnl) neigh(index int, ip netip.Addr) (nlNeigh, error) {
	var nb nlNeigh
	err := r.do(func(h *netlink.Handle) error {
		ns, err := h.NeighList(index, neighFamily(ip))
		for _, n := range ns {
			if dst, ok := netip.AddrFromSlice(n.IP); !ok || dst != ip || n.LinkIndex != index {
				continue
			}
			nb.found, nb.state = true, n.State
			if len(n.HardwareAddr) == 6 {
				nb.mac, nb.hasLL = [6]byte(n.HardwareAddr), true
			}
			break
		}
		return err
	})
	if err != nil {
		return nb, fmt.Errorf("read neighbour table: %w", err)
	}
	return nb, nil
}

// probeNeigh asks the kernel to resolve ip on interface index, as a
// packet waiting for the address would (NTF_USE): an ARP request or an
// IPv6 neighbour solicitation goes out unless the entry is valid.
func (r *rtnl) probeNeigh(index int, ip netip.Addr) error {
	err := r.do(func(h *netlink.Handle) error {
		return h.NeighSet(&netlink.Neigh{
			LinkIndex: index,
			Family:    neighFamily(ip),
			State:     unix.NUD_NONE,
			Flags:     unix.NTF_USE,
			IP:        ip.AsSlice(),
		})
	})
	if err != nil {
		return fmt.Errorf("start neighbour resolution: %w", err)
	}
	return nil
}
