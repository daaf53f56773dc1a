package stack

import (
	"context"
	"errors"
	"fmt"
	"io"

	"golang.org/x/sys/unix"

	"github.com/uroce/uroce/bpf"
	"github.com/uroce/uroce/link"
	"github.com/uroce/uroce/xdp"
)

func init() { interfaceOpener = openInterface }

// openInterface opens Config.Interface on Linux: it reads the interface's
// MAC, addresses, MTU and queue count from the kernel over netlink,
// loads the steering XDP program and attaches it, binds one AF_XDP socket
// per receive queue and registers it with the program, and resolves
// peers through the kernel's neighbour table.
//
// Everything is created in the network namespace of the calling thread
// (see internal/netns.Do) and stays bound to it: the engines, running on
// other threads, keep using it.
func openInterface(ctx context.Context, cfg *Config) (_ io.Closer, err error) {
	name := cfg.Interface
	mode, err := bpf.ParseMode(cfg.XDPMode)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, ErrInvalidArg)
	}
	bind, err := xdp.ParseBindMode(cfg.XDPBind)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, ErrInvalidArg)
	}
	if cfg.Queues < 0 {
		return nil, fmt.Errorf("%d queues: %w", cfg.Queues, ErrInvalidArg)
	}
	c := &ifaceCloser{}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()

	if c.nl, err = newRTNL(); err != nil {
		return nil, err
	}
	li, err := c.nl.link(name)
	if err != nil {
		if errors.Is(err, unix.ENODEV) {
			return nil, fmt.Errorf("no network interface %q in this network namespace (list them with 'ip link'): %w",
				name, xdp.ErrNoInterface)
		}
		return nil, fmt.Errorf("look up interface: %w", err)
	}
	if li.encap != "ether" || len(li.mac) != 6 {
		return nil, fmt.Errorf("%s is not an Ethernet interface (link type %s), and RoCEv2 runs over Ethernet: %w",
			name, li.encap, ErrUnsupported)
	}
	if li.flags&unix.IFF_UP == 0 {
		return nil, fmt.Errorf("%s is down (bring it up with 'ip link set %s up'): %w", name, name, ErrInvalidArg)
	}
	switch {
	case cfg.MTU == 0:
		cfg.MTU = li.mtu
	case cfg.MTU > li.mtu:
		return nil, fmt.Errorf("mtu %d is larger than %s's mtu %d: %w", cfg.MTU, name, li.mtu, ErrInvalidArg)
	}
	addrs, err := c.nl.addrs(li.index)
	if err != nil {
		return nil, err
	}
	queues := min(max(li.rxQueues, 1), bpf.MaxQueues)
	if cfg.Queues > 0 {
		if cfg.Queues > queues {
			return nil, fmt.Errorf("%d queues asked for, %s has %d: %w", cfg.Queues, name, queues, ErrInvalidArg)
		}
		queues = cfg.Queues
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	if c.prog, err = bpf.Load(); err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return nil, &advice{"loading the XDP program is not permitted: run uroce as root (or with CAP_BPF, CAP_NET_ADMIN and CAP_NET_RAW)",
				[]error{xdp.ErrPermission, errnoOf(err)}}
		}
		return nil, err
	}
	if err := c.prog.Attach(li.index, mode); err != nil {
		switch {
		case errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST):
			who := "another uroce, or another program"
			if now, lerr := c.nl.link(name); lerr == nil && now.xdpProg != 0 {
				who = xdpHolder(now.xdpProg)
			}
			return nil, &advice{fmt.Sprintf("%s already has an XDP program (%s: see 'ip link show %s'); uroce does not replace it",
				name, who, name), []error{errnoOf(err)}}
		case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
			return nil, &advice{"attaching the XDP program is not permitted: run uroce as root (or with CAP_NET_ADMIN)",
				[]error{xdp.ErrPermission, errnoOf(err)}}
		case mode == bpf.Native && errors.Is(err, unix.EOPNOTSUPP):
			return nil, &advice{fmt.Sprintf("the driver of %s has no native XDP: use XDP mode generic (or auto)", name), []error{errnoOf(err)}}
		}
		return nil, err
	}

	// A frame larger than a chunk less the kernel's XDP headroom
	// arrives in several descriptors.
	multi := link.MaxFrameLen(li.mtu) > xdp.ChunkSize-256
	for q := 0; q < queues; q++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		s, err := xdp.Open(xdp.Config{Interface: name, Ifindex: li.index, Queue: q, NeedWakeup: true, MultiBuffer: multi, Mode: bind,
			BusyPoll: cfg.SocketBusyPoll, RingSize: cfg.XDPRingSize})
		if err != nil {
			if q > 0 && cfg.Queues == 0 && errors.Is(err, xdp.ErrNoQueue) {
				break // the driver uses fewer queues than it has
			}
			return nil, explainSocketError(err, name, q, li.mtu, multi)
		}
		l, err := newXDPLink(s, q, li.mtu)
		if err != nil {
			s.Close()
			return nil, err
		}
		var ql Link = l
		if cfg.WrapLink != nil {
			if w := cfg.WrapLink(q, l); w != nil {
				ql = w
			}
		}
		c.links = append(c.links, ql)
		if err := c.prog.Register(q, s.FD()); err != nil {
			return nil, err
		}
	}

	if cfg.MulticastFilter == nil {
		if c.mc, err = newIfaceMulticast(name); err != nil {
			return nil, err
		}
		cfg.MulticastFilter = c.mc
	}
	cfg.Links = c.links
	cfg.MAC = [6]byte(li.mac)
	cfg.Addrs = addrs
	if cfg.Neighbors == nil {
		cfg.Neighbors = &kernelNeighbors{nl: c.nl, index: li.index, name: name}
	}
	if cfg.Name == "" {
		cfg.Name = "uroce_" + name
	}
	return c, nil
}

// explainSocketError turns a failure to bind an AF_XDP socket into advice.
func explainSocketError(err error, name string, q, mtu int, multi bool) error {
	switch {
	case errors.Is(err, xdp.ErrNoAFXDP):
		return &advice{"this kernel has no AF_XDP sockets: uroce needs Linux 5.10 or later built with CONFIG_XDP_SOCKETS",
			[]error{xdp.ErrNoAFXDP, errnoOf(err)}}
	case errors.Is(err, xdp.ErrPermission):
		return &advice{"AF_XDP sockets are not permitted: run uroce as root (or with CAP_NET_RAW and CAP_NET_ADMIN)",
			[]error{xdp.ErrPermission, errnoOf(err)}}
	case errors.Is(err, xdp.ErrQueueBusy):
		return fmt.Errorf("queue %d of %s already has an AF_XDP socket (is another uroce running on %s?): %w", q, name, name, err)
	case errors.Is(err, xdp.ErrNoZeroCopy):
		return &advice{fmt.Sprintf("queue %d of %s cannot bind AF_XDP zero-copy: its driver offers none (veth does not), or the XDP program is attached generic; bind auto or copy instead", q, name),
			[]error{xdp.ErrNoZeroCopy, errnoOf(err)}}
	case multi && errors.Is(err, unix.EINVAL):
		return fmt.Errorf("the kernel refused a multi-buffer AF_XDP socket, which mtu %d needs (Linux 6.6 or later; or lower the mtu of %s to 3800): %w",
			mtu, name, err)
	}
	return err
}

// advice is an error that says what to do in place of the layers of
// messages below it, which it still matches (errors.Is).
type advice struct {
	msg  string
	errs []error
}

func (a *advice) Error() string {
	for _, e := range a.errs {
		if _, ok := e.(unix.Errno); ok {
			return a.msg + " (" + e.Error() + ")"
		}
	}
	return a.msg
}

func (a *advice) Unwrap() []error { return a.errs }

// errnoOf returns the system error inside err, or err.
func errnoOf(err error) error {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

// ifaceCloser releases what openInterface set up: the links (closing an
// already closed link does nothing), the XDP program (detaching it) and
// the netlink socket.
type ifaceCloser struct {
	links []Link
	prog  *bpf.Program
	nl    *rtnl
	mc    *ifaceMulticast
}

// Close implements io.Closer.
func (c *ifaceCloser) Close() error {
	var errs []error
	for _, l := range c.links {
		if err := l.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.prog != nil {
		if err := c.prog.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.nl != nil {
		if err := c.nl.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.mc != nil {
		if err := c.mc.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
