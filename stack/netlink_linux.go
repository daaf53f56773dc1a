package stack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// rtnl is a small route-netlink (NETLINK_ROUTE) client. Its socket
// belongs to the network namespace of the thread that created it, and
// keeps talking to that namespace from any goroutine afterwards. Its
// methods are safe for concurrent use; requests are serialised.
type rtnl struct {
	mu     sync.Mutex
	fd     int
	seq    uint32
	rbuf   []byte
	closed bool
}

// rtnlTimeout bounds the wait for the kernel's answer to one request.
const rtnlTimeout = 5 * time.Second

var nlOrder = binary.NativeEndian

// newRTNL opens a route-netlink socket in the calling thread's network
// namespace.
func newRTNL() (*rtnl, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind netlink socket: %w", err)
	}
	tv := unix.NsecToTimeval(int64(rtnlTimeout))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("set netlink receive timeout: %w", err)
	}
	// Error messages from the kernel (extended ACKs) make better errors;
	// kernels without them ignore the option.
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_EXT_ACK, 1)
	return &rtnl{fd: fd, seq: uint32(time.Now().UnixNano()), rbuf: make([]byte, 1<<16)}, nil
}

// Close closes the socket.
func (r *rtnl) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	if err := unix.Close(r.fd); err != nil {
		return fmt.Errorf("close netlink socket: %w", err)
	}
	return nil
}

// errNetlinkClosed reports a request on a closed client.
var errNetlinkClosed = errors.New("netlink socket closed")

// request sends one request of type typ with header body (ifinfomsg,
// ndmsg…) and attributes, and calls fn with the type and payload of every
// message of the answer. It returns when the kernel acknowledges the
// request or ends its dump, with the kernel's error if any.
func (r *rtnl) request(typ, flags uint16, body []byte, attrs []nlAttr, fn func(typ uint16, payload []byte) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errNetlinkClosed
	}
	r.seq++
	seq := r.seq
	msg := make([]byte, unix.SizeofNlMsghdr, 128)
	msg = append(msg, body...)
	msg = nlAlign(msg)
	for _, a := range attrs {
		msg = appendAttr(msg, a.typ, a.data)
	}
	nlOrder.PutUint32(msg[0:], uint32(len(msg)))
	nlOrder.PutUint16(msg[4:], typ)
	nlOrder.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK|flags)
	nlOrder.PutUint32(msg[8:], seq)
	nlOrder.PutUint32(msg[12:], 0)
	if err := unix.Sendto(r.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("send netlink request: %w", err)
	}
	var ferr error
	for {
		n, _, err := unix.Recvfrom(r.fd, r.rbuf, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if errors.Is(err, unix.EAGAIN) {
				return fmt.Errorf("receive netlink answer: no answer within %v", rtnlTimeout)
			}
			return fmt.Errorf("receive netlink answer: %w", err)
		}
		b := r.rbuf[:n]
		for len(b) >= unix.SizeofNlMsghdr {
			l := int(nlOrder.Uint32(b[0:]))
			if l < unix.SizeofNlMsghdr || l > len(b) {
				return errors.New("receive netlink answer: malformed message")
			}
			mtyp, mseq := nlOrder.Uint16(b[4:]), nlOrder.Uint32(b[8:])
			payload := b[unix.SizeofNlMsghdr:l]
			b = b[min(nlAlignLen(l), len(b)):]
			if mseq != seq {
				continue // the answer to an earlier, abandoned request
			}
			switch mtyp {
			case unix.NLMSG_DONE:
				if len(payload) >= 4 {
					if e := int32(nlOrder.Uint32(payload)); e < 0 {
						return unix.Errno(-e)
					}
				}
				return ferr
			case unix.NLMSG_ERROR:
				if len(payload) < 4 {
					return errors.New("receive netlink answer: short error message")
				}
				e := int32(nlOrder.Uint32(payload))
				if e == 0 {
					return ferr // the acknowledgement
				}
				return nlError(unix.Errno(-e), payload)
			case unix.NLMSG_NOOP, unix.NLMSG_OVERRUN:
				continue
			}
			if fn != nil && ferr == nil {
				ferr = fn(mtyp, payload)
			}
		}
	}
}

// nlError adds the kernel's extended-ACK message, if there is one, to
// errno.
func nlError(errno unix.Errno, payload []byte) error {
	// struct nlmsgerr: error, then the request's header (and, without
	// NLM_F_CAPPED, its payload), then attributes.
	if len(payload) < 4+unix.SizeofNlMsghdr {
		return errno
	}
	off := 4 + unix.SizeofNlMsghdr
	if nlOrder.Uint16(payload[4+6:])&0x100 == 0 { // NLM_F_CAPPED
		off = 4 + nlAlignLen(int(nlOrder.Uint32(payload[4:])))
	}
	if off > len(payload) {
		return errno
	}
	var msg string
	eachAttr(payload[off:], func(typ uint16, data []byte) {
		if typ == unix.NLMSGERR_ATTR_MSG && len(data) > 1 {
			msg = string(data[:len(data)-1])
		}
	})
	if msg == "" {
		return errno
	}
	return fmt.Errorf("%s: %w", msg, errno)
}

// nlAttr is an attribute to send.
type nlAttr struct {
	typ  uint16
	data []byte
}

func nlAlignLen(n int) int { return (n + 3) &^ 3 }

func nlAlign(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func appendAttr(b []byte, typ uint16, data []byte) []byte {
	var h [4]byte
	nlOrder.PutUint16(h[0:], uint16(4+len(data)))
	nlOrder.PutUint16(h[2:], typ)
	b = append(b, h[:]...)
	b = append(b, data...)
	return nlAlign(b)
}

func u32Attr(typ uint16, v uint32) nlAttr {
	b := make([]byte, 4)
	nlOrder.PutUint32(b, v)
	return nlAttr{typ, b}
}

func ipAttr(typ uint16, ip netip.Addr) nlAttr {
	return nlAttr{typ, ip.AsSlice()}
}

// eachAttr calls fn with the type (flags masked off) and data of each
// attribute in b, stopping at the first malformed one.
func eachAttr(b []byte, fn func(typ uint16, data []byte)) {
	for len(b) >= 4 {
		l := int(nlOrder.Uint16(b[0:]))
		if l < 4 || l > len(b) {
			return
		}
		fn(nlOrder.Uint16(b[2:])&0x3fff, b[4:l])
		b = b[min(nlAlignLen(l), len(b)):]
	}
}

// ipFromAttr converts an address attribute to an address.
func ipFromAttr(data []byte) (netip.Addr, bool) {
	switch len(data) {
	case 4:
		return netip.AddrFrom4([4]byte(data)), true
	case 16:
		return netip.AddrFrom16([16]byte(data)), true
	}
	return netip.Addr{}, false
}

func ipFamily(ip netip.Addr) uint8 {
	if ip.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// linkInfo is what uroce needs to know about a network interface.
type linkInfo struct {
	name     string
	index    int
	flags    uint32 // IFF_*
	arpType  uint16 // ARPHRD_*
	mac      []byte
	mtu      int
	rxQueues int
	xdpProg  uint32 // the ID of the XDP program attached, 0 for none
}

// link looks the interface up by name.
func (r *rtnl) link(name string) (linkInfo, error) {
	body := make([]byte, unix.SizeofIfInfomsg)
	li := linkInfo{name: name}
	err := r.request(unix.RTM_GETLINK, 0, body,
		[]nlAttr{{unix.IFLA_IFNAME, append([]byte(name), 0)}},
		func(typ uint16, p []byte) error {
			if typ != unix.RTM_NEWLINK || len(p) < unix.SizeofIfInfomsg {
				return nil
			}
			li.arpType = nlOrder.Uint16(p[2:])
			li.index = int(int32(nlOrder.Uint32(p[4:])))
			li.flags = nlOrder.Uint32(p[8:])
			eachAttr(p[unix.SizeofIfInfomsg:], func(typ uint16, d []byte) {
				switch typ {
				case unix.IFLA_ADDRESS:
					li.mac = append([]byte(nil), d...)
				case unix.IFLA_MTU:
					if len(d) >= 4 {
						li.mtu = int(nlOrder.Uint32(d))
					}
				case unix.IFLA_NUM_RX_QUEUES:
					if len(d) >= 4 {
						li.rxQueues = int(nlOrder.Uint32(d))
					}
				case unix.IFLA_XDP:
					eachAttr(d, func(typ uint16, d []byte) {
						if typ == unix.IFLA_XDP_PROG_ID && len(d) >= 4 {
							li.xdpProg = nlOrder.Uint32(d)
						}
					})
				}
			})
			return nil
		})
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
	body := make([]byte, unix.SizeofIfAddrmsg)
	var out []netip.Addr
	err := r.request(unix.RTM_GETADDR, unix.NLM_F_DUMP, body, nil, func(typ uint16, p []byte) error {
		if typ != unix.RTM_NEWADDR || len(p) < unix.SizeofIfAddrmsg {
			return nil
		}
		if int(nlOrder.Uint32(p[4:])) != index {
			return nil
		}
		flags := uint32(p[2])
		var local, addr netip.Addr
		eachAttr(p[unix.SizeofIfAddrmsg:], func(typ uint16, d []byte) {
			switch typ {
			case unix.IFA_LOCAL:
				local, _ = ipFromAttr(d)
			case unix.IFA_ADDRESS:
				addr, _ = ipFromAttr(d)
			case unix.IFA_FLAGS:
				if len(d) >= 4 {
					flags = nlOrder.Uint32(d)
				}
			}
		})
		if local.IsValid() {
			addr = local // point-to-point: IFA_ADDRESS is the peer's
		}
		if addr.IsValid() && flags&unix.IFA_F_DADFAILED == 0 {
			out = append(out, addr)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	return out, nil
}

// nlRoute is the kernel's route to a destination.
type nlRoute struct {
	typ     uint8      // RTN_*
	oif     int        // output interface
	gateway netip.Addr // next hop, if not on-link
}

// route looks up the route to dst out of interface oif, as rdma_rxe does
// for its packets.
func (r *rtnl) route(dst netip.Addr, oif int) (nlRoute, error) {
	body := make([]byte, unix.SizeofRtMsg)
	body[0] = ipFamily(dst)
	body[1] = uint8(dst.BitLen())
	var rt nlRoute
	err := r.request(unix.RTM_GETROUTE, 0, body,
		[]nlAttr{ipAttr(unix.RTA_DST, dst), u32Attr(unix.RTA_OIF, uint32(oif))},
		func(typ uint16, p []byte) error {
			if typ != unix.RTM_NEWROUTE || len(p) < unix.SizeofRtMsg {
				return nil
			}
			rt.typ = p[7]
			eachAttr(p[unix.SizeofRtMsg:], func(typ uint16, d []byte) {
				switch typ {
				case unix.RTA_OIF:
					if len(d) >= 4 {
						rt.oif = int(nlOrder.Uint32(d))
					}
				case unix.RTA_GATEWAY:
					rt.gateway, _ = ipFromAttr(d)
				case unix.RTA_VIA:
					if len(d) >= 2 {
						rt.gateway, _ = ipFromAttr(d[2:])
					}
				}
			})
			return nil
		})
	if err != nil {
		return rt, err
	}
	return rt, nil
}

// nlNeigh is an entry of the kernel's neighbour table.
type nlNeigh struct {
	found bool
	state uint16 // NUD_*
	mac   [6]byte
	hasLL bool
}

// neighbourValid are the states whose link-layer address may be used.
const neighbourValid = unix.NUD_REACHABLE | unix.NUD_STALE | unix.NUD_DELAY | unix.NUD_PROBE |
	unix.NUD_PERMANENT | unix.NUD_NOARP

// neigh returns the neighbour entry of ip on interface index.
func (r *rtnl) neigh(index int, ip netip.Addr) (nlNeigh, error) {
	body := make([]byte, unix.SizeofNdMsg)
	body[0] = ipFamily(ip)
	nlOrder.PutUint32(body[4:], uint32(index))
	var nb nlNeigh
	err := r.request(unix.RTM_GETNEIGH, unix.NLM_F_DUMP, body, nil, func(typ uint16, p []byte) error {
		if typ != unix.RTM_NEWNEIGH || len(p) < unix.SizeofNdMsg || nb.found {
			return nil
		}
		if int(int32(nlOrder.Uint32(p[4:]))) != index {
			return nil
		}
		state := nlOrder.Uint16(p[8:])
		var dst netip.Addr
		var ll []byte
		eachAttr(p[unix.SizeofNdMsg:], func(typ uint16, d []byte) {
			switch typ {
			case unix.NDA_DST:
				dst, _ = ipFromAttr(d)
			case unix.NDA_LLADDR:
				ll = d
			}
		})
		if dst != ip {
			return nil
		}
		nb.found, nb.state = true, state
		if len(ll) == 6 {
			nb.mac, nb.hasLL = [6]byte(ll), true
		}
		return nil
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
	body := make([]byte, unix.SizeofNdMsg)
	body[0] = ipFamily(ip)
	nlOrder.PutUint32(body[4:], uint32(index))
	nlOrder.PutUint16(body[8:], unix.NUD_NONE)
	body[10] = unix.NTF_USE
	err := r.request(unix.RTM_NEWNEIGH, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, body,
		[]nlAttr{ipAttr(unix.NDA_DST, ip)}, nil)
	if err != nil {
		return fmt.Errorf("start neighbour resolution: %w", err)
	}
	return nil
}
