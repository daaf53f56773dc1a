package demo

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uroce/uroce/internal/netns"
	"github.com/uroce/uroce/link/fault"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/xdp"
)

// xdpStatser is the AF_XDP link of an interface device.
type xdpStatser interface {
	XDPStats() (xdp.Stats, error)
}

// Run builds two network namespaces joined by a veth pair, opens a uroce
// device on each end, runs the workload from A to B and returns the
// report. Everything it created is removed before it returns, whatever
// happens; cancelling ctx (Ctrl-C) stops the run early.
func Run(ctx context.Context, o Options) (rep *Report, err error) {
	for _, p := range []float64{o.Drop, o.Dup, o.Reorder, o.Corrupt} {
		if p < 0 || p > 1 {
			return nil, fmt.Errorf("demo: fault probability %v: want 0 to 1", p)
		}
	}
	if o.MTU == 0 {
		o.MTU = 1500
	}
	if o.MTU < 1280 && o.IPv6 || o.MTU < 576 || o.MTU > 65000 {
		return nil, fmt.Errorf("demo: mtu %d: want 576 (1280 with IPv6) to 65000", o.MTU)
	}
	w := Workload{Ops: o.Ops, Size: o.Size, Count: o.Count, IPv6: o.IPv6, Lossy: o.Faulty(), Seed: o.Seed, Progress: o.Progress}
	if err := w.defaults(); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	if os.Geteuid() != 0 {
		return nil, ErrNotRoot
	}
	if fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0); err != nil {
		if errors.Is(err, unix.EAFNOSUPPORT) {
			return nil, ErrNoAFXDP
		}
		return nil, fmt.Errorf("demo: create an AF_XDP socket: %w", err)
	} else {
		unix.Close(fd)
	}

	start := time.Now()
	rep = &Report{Options: o}
	rep.Size, rep.Count = w.Size, w.Count
	cfg := netns.PairConfig{Prefix: "uroce-demo", MTU: o.MTU,
		AddrA: []netip.Prefix{netip.MustParsePrefix("192.0.2.1/24")},
		AddrB: []netip.Prefix{netip.MustParsePrefix("192.0.2.2/24")}}
	rep.AddrA, rep.AddrB = netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	if o.IPv6 {
		cfg.AddrA = append(cfg.AddrA, netip.MustParsePrefix("2001:db8::1/64"))
		cfg.AddrB = append(cfg.AddrB, netip.MustParsePrefix("2001:db8::2/64"))
		rep.AddrA, rep.AddrB = netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
	}
	pair, err := netns.NewPair(cfg)
	if err != nil {
		if errors.Is(err, netns.ErrNoIP) {
			return nil, fmt.Errorf("demo: %w (install iproute2)", err)
		}
		return nil, fmt.Errorf("demo: %w", err)
	}
	defer func() {
		if cerr := pair.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("demo: remove the namespaces: %w", cerr)
		}
	}()
	rep.NamespaceA, rep.NamespaceB = pair.A.Name(), pair.B.Name()
	rep.DevA, rep.DevB = pair.DevA, pair.DevB
	copy(rep.MACA[:], pair.MACA)
	copy(rep.MACB[:], pair.MACB)

	type end struct {
		dev    *stack.Device
		faults []*fault.Link
		links  []xdpStatser
	}
	open := func(ns *netns.Namespace, ifname string, seed uint64) (*end, error) {
		e := &end{}
		cfg := stack.Config{Interface: ifname, XDPMode: o.XDPMode, BusyPoll: o.BusyPoll,
			WrapLink: func(q int, l stack.Link) stack.Link {
				if x, ok := l.(xdpStatser); ok {
					e.links = append(e.links, x)
				}
				if !o.Faulty() {
					return l
				}
				f := fault.Wrap(l, fault.Config{Seed: seed + uint64(q), Drop: o.Drop, Dup: o.Dup,
					Reorder: o.Reorder, Corrupt: o.Corrupt})
				e.faults = append(e.faults, f)
				return f
			}}
		err := ns.Do(func() error {
			var err error
			e.dev, err = stack.Open(ctx, cfg)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("demo: in namespace %s: %w", ns.Name(), err)
		}
		return e, nil
	}
	a, err := open(pair.A, pair.DevA, o.Seed)
	if err != nil {
		return nil, err
	}
	defer a.dev.Close()
	b, err := open(pair.B, pair.DevB, o.Seed^0x5bd1e995)
	if err != nil {
		return nil, err
	}
	defer b.dev.Close()
	rep.PathMTU = a.dev.Query().ActiveMTU

	rep.Results, err = Exercise(ctx, a.dev, b.dev, w)
	rep.CountersA, rep.CountersB = a.dev.Counters(), b.dev.Counters()
	for _, x := range []struct {
		e  *end
		fs *fault.Stats
		xs *xdp.Stats
	}{{a, &rep.FaultsA, &rep.XDPA}, {b, &rep.FaultsB, &rep.XDPB}} {
		for _, f := range x.e.faults {
			addFaults(x.fs, f.Stats())
		}
		for _, l := range x.e.links {
			if st, serr := l.XDPStats(); serr == nil {
				addXDP(x.xs, st)
			}
		}
	}
	rep.Elapsed = time.Since(start)
	if err != nil {
		return rep, fmt.Errorf("demo: %w", err)
	}
	return rep, nil
}

func addFaults(d *fault.Stats, s fault.Stats) {
	d.Frames += s.Frames
	d.Dropped += s.Dropped
	d.Duplicated += s.Duplicated
	d.Reordered += s.Reordered
	d.Corrupted += s.Corrupted
	d.Delayed += s.Delayed
	d.Unharmed += s.Unharmed
}

func addXDP(d *xdp.Stats, s xdp.Stats) {
	d.RxDropped += s.RxDropped
	d.RxInvalidDescs += s.RxInvalidDescs
	d.TxInvalidDescs += s.TxInvalidDescs
	d.RxRingFull += s.RxRingFull
	d.RxFillRingEmptyDescs += s.RxFillRingEmptyDescs
	d.TxRingEmptyDescs += s.TxRingEmptyDescs
	d.RxFrames += s.RxFrames
	d.RxBytes += s.RxBytes
	d.RxMultiBuffer += s.RxMultiBuffer
	d.RxBad += s.RxBad
	d.TxFrames += s.TxFrames
	d.TxBytes += s.TxBytes
	d.TxMultiBuffer += s.TxMultiBuffer
	d.TxRejected += s.TxRejected
	d.TxBusy += s.TxBusy
	d.Completed += s.Completed
	d.Wakeups += s.Wakeups
	d.WakeupErrors += s.WakeupErrors
}
