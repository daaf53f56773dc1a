// Package app holds what uroce's RDMA tools (pingpong, the perftest
// compatible perf) share: opening a device on a network interface from
// their command-line flags, with optional fault injection, and the
// command-line handling itself (flags among the arguments as getopt
// allows, flags under several names, the out-of-band connection).
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/uroce/uroce/link/fault"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
	"github.com/uroce/uroce/xdp"
)

// DeviceFlags are the flags that select and shape the device.
type DeviceFlags struct {
	Interface string
	XDPMode   string
	XDPBind   string
	// Fault injection on the links (uroce's own; the stock tools have
	// none): probabilities per frame.
	Drop, RxDrop, Dup, Reorder float64
	// CE and RxCE mark ECN-capable frames congestion experienced, as a
	// congested switch would, on the way out and in.
	CE, RxCE float64
	Seed     uint64
	// Stats prints the device's counters when the tool ends.
	Stats bool
	// SendWindow bounds the request packets an RC QP keeps
	// unacknowledged (stack.Config.SendWindow: 0 is the stack's
	// default, negative no bound).
	SendWindow int
	// BusyPoll makes the device's engines spin on their links instead of
	// sleeping in poll(2) (stack.Config.BusyPoll): lower latency for a
	// whole CPU per engine.
	BusyPoll bool
	// SocketBusyPoll is the kernel busy polling of the AF_XDP sockets
	// (stack.Config.SocketBusyPoll).
	SocketBusyPoll time.Duration
	// KeepPastGap makes RC responders keep the requests that follow a
	// lost one (stack.Config.KeepPastGap; not the IBTA's rule).
	KeepPastGap bool
	// Batch is the frames per link call of the engines
	// (stack.Config.Batch; 0: the stack's default for an interface).
	Batch int
	// Daemon, when set, runs the tool on the uroce daemon's device
	// instead of opening the interface: -d then names the daemon's
	// device (default uroce0), and Daemon is the socket (or "true" for
	// the device's default socket).
	Daemon daemonFlag
	// Congestion is the device's ECN and DSCP marking.
	Congestion CongestionFlags

	links  []stack.Link  // as opened on the interface
	faults []*fault.Link // the fault-injecting wrappers
}

// Register adds the flags to fs: -d/--ib-dev/--dev names the interface
// (where the stock tools name the RDMA device), --xdp-mode, --busy-poll,
// --send-window, --stats and the fault-injection flags.
func (f *DeviceFlags) Register(fs *flag.FlagSet) {
	for _, n := range []string{"d", "ib-dev", "dev"} {
		fs.StringVar(&f.Interface, n, "", "network interface to run on")
	}
	fs.StringVar(&f.XDPMode, "xdp-mode", "", "how the XDP program attaches: auto (default), native or generic")
	fs.StringVar(&f.XDPBind, "xdp-bind", "", "how the AF_XDP sockets bind: auto (zero-copy where the driver has it; default), copy or zerocopy")
	fs.Float64Var(&f.Drop, "drop", 0, "drop this fraction of the frames uroce transmits (fault injection)")
	fs.Float64Var(&f.RxDrop, "rx-drop", 0, "drop this fraction of the frames uroce receives (fault injection)")
	fs.Float64Var(&f.Dup, "dup", 0, "duplicate this fraction of the frames uroce transmits (fault injection)")
	fs.Float64Var(&f.Reorder, "reorder", 0, "reorder this fraction of the frames uroce transmits (fault injection)")
	fs.Float64Var(&f.CE, "ce", 0, "mark this fraction of the ECN-capable frames uroce transmits CE, as a congested switch does")
	fs.Float64Var(&f.RxCE, "rx-ce", 0, "mark this fraction of the ECN-capable frames uroce receives CE")
	fs.Uint64Var(&f.Seed, "fault-seed", 1, "seed of the fault injection")
	fs.BoolVar(&f.Stats, "stats", false, "print the device's counters at the end")
	fs.IntVar(&f.SendWindow, "send-window", DefaultSendWindow, "request packets an RC QP may have unacknowledged (0: the stack's default, -1: no bound)")
	fs.BoolVar(&f.BusyPoll, "busy-poll", false, "engines spin on the interface's queues instead of sleeping in poll(2)")
	fs.DurationVar(&f.SocketBusyPoll, "socket-busy-poll", 0, "kernel busy polling of the AF_XDP sockets, this long per poll (SO_BUSY_POLL; 0: off)")
	fs.IntVar(&f.Batch, "batch", 0, "frames per link call of the engines (0: the default, 16 on an interface)")
	fs.BoolVar(&f.KeepPastGap, "keep-past-gap", false, "RC responders keep the requests that follow a lost one and execute them once it arrives (not the IBTA's rule)")
	fs.Var(&f.Daemon, "daemon", "run on the uroce daemon's device (--daemon=SOCKET for another socket); -d names the device")
	f.Congestion.Register(fs)
}

// daemonFlag is --daemon or --daemon=SOCKET.
type daemonFlag string

func (d *daemonFlag) String() string     { return string(*d) }
func (d *daemonFlag) Set(s string) error { *d = daemonFlag(s); return nil }
func (d *daemonFlag) IsBoolFlag() bool   { return true }

// Socket returns the daemon's socket for device dev, or "" without
// --daemon.
func (f *DeviceFlags) Socket() string {
	switch f.Daemon {
	case "", "false":
		return ""
	case "true":
		dev := f.Interface
		if dev == "" {
			dev = "uroce0"
		}
		return "/run/uroce/" + dev + ".sock"
	}
	return string(f.Daemon)
}

// deviceHelp are the help lines of the flags Register adds, but the
// interface's, which each tool words as the stock one does.
var deviceHelp = [][2]string{
	{"--xdp-mode=MODE", "auto, native or generic"},
	{"--xdp-bind=MODE", "AF_XDP binding: auto (zero-copy where the driver has it), copy or zerocopy"},
	{"--busy-poll", "the engines spin instead of sleeping in poll(2) (lower latency, a CPU each)"},
	{"--socket-busy-poll=D", "kernel busy polling of the AF_XDP sockets, D per poll (SO_BUSY_POLL; with --busy-poll or the spin before sleeping)"},
	{"--batch=N", "frames per link call of the engines (default 16)"},
	{"--keep-past-gap", "RC responders keep the requests after a lost one and run them once it arrives, where the IBTA drops them (fewer resent under loss between uroce peers)"},
	{"--drop=P, --rx-drop=P, --dup=P, --reorder=P, --fault-seed=N", "fault injection on the frames uroce sends/receives"},
	{"--ce=P, --rx-ce=P", "mark ECN-capable frames sent/received congestion experienced, as a congested switch does"},
	{"--stats", "print the device and AF_XDP counters at the end"},
	{"--daemon[=SOCKET]", "run on the uroce daemon's device, no root needed (-d names the device, default uroce0)"},
	{"--send-window=N", "request packets an RC QP may have unacknowledged (default 128, 0: the stack's, -1: none)"},
}

// Usage returns the help lines of the flags Register adds (but -d), each
// flag indented by two spaces and its description starting at column col
// (on a line of its own when the flag is too long).
func Usage(col int) string {
	var b strings.Builder
	for _, h := range append(deviceHelp[:len(deviceHelp):len(deviceHelp)], congestionHelp...) {
		line := "  " + h[0]
		if h[1] == "" {
			b.WriteString(line + "\n")
			continue
		}
		if len(line)+1 > col {
			line += "\n"
			line += strings.Repeat(" ", col)
		} else {
			line += strings.Repeat(" ", col-len(line))
		}
		b.WriteString(line + h[1] + "\n")
	}
	return b.String()
}

// DefaultSendWindow is the tools' bound on the request packets an RC QP
// keeps unacknowledged, rdma_rxe's own (RXE_MAX_UNACKED_PSNS, 128).
// Go-back-N resends everything in flight after a loss; perftest's 128
// outstanding 4 MiB WRITEs put 128 K packets in flight, which an
// emulated peer drops in bursts faster than any retry recovers.
const DefaultSendWindow = 128

// ErrNoInterface is returned by Open when no interface was named.
var ErrNoInterface = errors.New("no network interface given: name it with -d IFACE")

// Faulty reports whether any fault injection was asked for.
func (f *DeviceFlags) Faulty() bool {
	return f.Drop > 0 || f.RxDrop > 0 || f.Dup > 0 || f.Reorder > 0 || f.CE > 0 || f.RxCE > 0
}

// Open opens the device, an in-process stack on the interface, and
// returns its verbs (verbs.Local). The links are wrapped with fault
// injection when asked for.
func (f *DeviceFlags) Open(ctx context.Context) (verbs.Device, error) {
	if sock := f.Socket(); sock != "" {
		if f.Faulty() || f.BusyPoll || f.SocketBusyPoll != 0 || f.Batch != 0 || f.XDPMode != "" || f.XDPBind != "" || f.KeepPastGap || f.Congestion.Changed() {
			return nil, errors.New("fault injection, --busy-poll, --socket-busy-poll, --batch, --xdp-mode, --xdp-bind, --keep-past-gap and the marking flags are the daemon's: give them to uroce daemon")
		}
		return openDaemon(ctx, sock)
	}
	cfg, err := f.config()
	if err != nil {
		return nil, err
	}
	cfg.WrapLink = func(q int, l stack.Link) stack.Link {
		f.links = append(f.links, l)
		if f.Faulty() {
			wrap := func(fc fault.Config) {
				fl := fault.Wrap(l, fc)
				f.faults = append(f.faults, fl)
				l = fl
			}
			if f.RxDrop > 0 || f.RxCE > 0 {
				wrap(fault.Config{Seed: f.Seed + uint64(q)<<32 + 1, Drop: f.RxDrop, MarkCE: f.RxCE, Dir: fault.Receive})
			}
			if f.Drop > 0 || f.Dup > 0 || f.Reorder > 0 || f.CE > 0 {
				wrap(fault.Config{Seed: f.Seed + uint64(q)<<32, Drop: f.Drop, Dup: f.Dup, Reorder: f.Reorder, MarkCE: f.CE})
			}
		}
		return l
	}
	d, err := stack.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return verbs.Local(d), nil
}

// config is the device's configuration on the interface, but its links'
// wrapping.
func (f *DeviceFlags) config() (stack.Config, error) {
	if f.Interface == "" {
		return stack.Config{}, ErrNoInterface
	}
	for _, p := range []float64{f.Drop, f.RxDrop, f.Dup, f.Reorder, f.CE, f.RxCE} {
		if p < 0 || p > 1 {
			return stack.Config{}, fmt.Errorf("fault probability %v: want 0 to 1", p)
		}
	}
	if f.Batch < 0 {
		return stack.Config{}, fmt.Errorf("--batch %d: want a number of frames, or 0 for the default", f.Batch)
	}
	cfg := stack.Config{Interface: f.Interface, XDPMode: f.XDPMode, XDPBind: f.XDPBind, SendWindow: f.SendWindow, BusyPoll: f.BusyPoll,
		SocketBusyPoll: f.SocketBusyPoll, Batch: f.Batch, KeepPastGap: f.KeepPastGap}
	err := f.Congestion.Apply(&cfg)
	return cfg, err
}

// Report writes, prefixed with prog, what the fault injection did and,
// with Stats, the device's non-zero counters and the AF_XDP sockets'.
// Call it before closing the device.
func (f *DeviceFlags) Report(w io.Writer, prog string, d verbs.Device) {
	for _, fl := range f.faults {
		st := fl.Stats()
		fmt.Fprintf(w, "%s: fault injection: %d frames, %d dropped, %d duplicated, %d reordered, %d marked CE\n",
			prog, st.Frames, st.Dropped, st.Duplicated, st.Reordered, st.MarkedCE)
	}
	if !f.Stats || d == nil {
		return
	}
	c := d.Counters()
	var b strings.Builder
	c.Each(func(name string, v uint64) {
		if v != 0 {
			fmt.Fprintf(&b, " %s=%d", name, v)
		}
	})
	fmt.Fprintf(w, "%s: counters:%s\n", prog, b.String())
	for i, l := range f.links {
		x, ok := l.(interface{ XDPStats() (xdp.Stats, error) })
		if !ok {
			continue
		}
		st, err := x.XDPStats()
		if err != nil {
			continue
		}
		mode := "copy"
		if st.ZeroCopy {
			mode = "zero-copy"
		}
		fmt.Fprintf(w, "%s: queue %d (%s): rx %d frames, tx %d frames, rx_dropped=%d rx_ring_full=%d fill_ring_empty=%d tx_ring_empty=%d tx_busy=%d\n",
			prog, i, mode, st.RxFrames, st.TxFrames, st.RxDropped, st.RxRingFull, st.RxFillRingEmptyDescs, st.TxRingEmptyDescs, st.TxBusy)
	}
}
