// Package app holds what uroce's RDMA tools (pingpong, the perftest
// compatible perf) share: opening a device on a network interface from
// their command-line flags, with optional fault injection.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/uroce/uroce/stack"
)

// DeviceFlags are the flags that select and shape the device.
type DeviceFlags struct {
	Interface string
	XDPMode   string
	// Fault injection on the links (uroce's own; the stock tools have
	// none): probabilities per frame.
	Drop, RxDrop, Dup, Reorder float64
	Seed                       uint64
}

// Register adds the flags to fs: -d/--ib-dev/--dev names the interface
// (where the stock tools name the RDMA device), --xdp-mode, and the
// fault-injection flags.
func (f *DeviceFlags) Register(fs *flag.FlagSet) {
	for _, n := range []string{"d", "ib-dev", "dev"} {
		fs.StringVar(&f.Interface, n, "", "network interface to run on")
	}
	fs.StringVar(&f.XDPMode, "xdp-mode", "", "how the XDP program attaches: auto (default), native or generic")
	fs.Float64Var(&f.Drop, "drop", 0, "drop this fraction of the frames uroce transmits (fault injection)")
	fs.Float64Var(&f.RxDrop, "rx-drop", 0, "drop this fraction of the frames uroce receives (fault injection)")
	fs.Float64Var(&f.Dup, "dup", 0, "duplicate this fraction of the frames uroce transmits (fault injection)")
	fs.Float64Var(&f.Reorder, "reorder", 0, "reorder this fraction of the frames uroce transmits (fault injection)")
	fs.Uint64Var(&f.Seed, "fault-seed", 1, "seed of the fault injection")
}

// ErrNoInterface is returned by Open when no interface was named.
var ErrNoInterface = errors.New("no network interface given: name it with -d IFACE")

// Faulty reports whether any fault injection was asked for.
func (f *DeviceFlags) Faulty() bool {
	return f.Drop > 0 || f.RxDrop > 0 || f.Dup > 0 || f.Reorder > 0
}

// Open opens the device. The links are wrapped with fault injection when
// asked for; faults, when not nil, receives the wrapped links so that
// their counters can be read.
func (f *DeviceFlags) Open(ctx context.Context, faults *[]*stack.FaultLink) (*stack.Device, error) {
	if f.Interface == "" {
		return nil, ErrNoInterface
	}
	for _, p := range []float64{f.Drop, f.RxDrop, f.Dup, f.Reorder} {
		if p < 0 || p > 1 {
			return nil, fmt.Errorf("fault probability %v: want 0 to 1", p)
		}
	}
	cfg := stack.Config{Interface: f.Interface, XDPMode: f.XDPMode}
	if f.Faulty() {
		cfg.WrapLink = func(q int, l stack.Link) stack.Link {
			wrap := func(fc stack.FaultConfig) {
				fl := stack.WithFaults(l, fc)
				if faults != nil {
					*faults = append(*faults, fl)
				}
				l = fl
			}
			if f.RxDrop > 0 {
				wrap(stack.FaultConfig{Seed: f.Seed + uint64(q)<<32 + 1, Drop: f.RxDrop, Dir: stack.FaultReceive})
			}
			if f.Drop > 0 || f.Dup > 0 || f.Reorder > 0 {
				wrap(stack.FaultConfig{Seed: f.Seed + uint64(q)<<32, Drop: f.Drop, Dup: f.Dup, Reorder: f.Reorder})
			}
			return l
		}
	}
	return stack.Open(ctx, cfg)
}
