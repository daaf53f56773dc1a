package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uroce/uroce/daemon"
	"github.com/uroce/uroce/internal/app"
	"github.com/uroce/uroce/stack"
)

func init() {
	register(&command{name: "daemon", summary: "serve a uroce device on an interface to local programs (root)", run: runDaemon})
}

const daemonUsage = `usage: uroce daemon -d IFACE [flags]

Runs a uroce device on the network interface IFACE (the XDP program and one
AF_XDP socket and engine per queue) and serves it, as device uroce0
(--name), to local programs on a Unix socket: Go programs through package
client, verbs programs through uroce's libibverbs, and uroce pingpong and
uroce perf with --daemon. Those need no privilege; the daemon admits root,
its own user and the members of --group. SIGTERM or SIGINT moves every
client QP to ERR, tells the clients the device is gone, detaches the XDP
program and removes the socket.

flags:
`

func runDaemon(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("uroce daemon", daemonUsage, stderr)
	iface := fs.String("d", "", "network interface to run on")
	name := fs.String("name", "uroce0", "device name clients use")
	socket := fs.String("socket", "", "Unix socket to serve on (default /run/uroce/NAME.sock)")
	group := fs.String("group", "", "group whose members may use the device (besides root and the daemon's user)")
	metrics := fs.String("metrics", "", "serve Prometheus metrics on this address, e.g. 127.0.0.1:9464")
	xdpMode := fs.String("xdp-mode", "auto", "how the XDP program attaches: auto, native or generic")
	xdpBind := fs.String("xdp-bind", "auto", "how the AF_XDP sockets bind: auto (zero-copy where the driver has it), copy or zerocopy")
	busy := fs.Bool("busy-poll", false, "engines spin on the queues instead of sleeping in poll(2)")
	sockBusy := fs.Duration("socket-busy-poll", 0, "kernel busy polling of the AF_XDP sockets, this long per poll (SO_BUSY_POLL; 0: off)")
	queues := fs.Int("queues", 0, "serve receive queues 0 to N-1 only (0: all)")
	batch := fs.Int("batch", 0, "frames per link call of the engines (0: the default, 16)")
	keep := fs.Bool("keep-past-gap", false, "RC responders keep the requests that follow a lost one and execute them once it arrives (not the IBTA's rule)")
	readWin := fs.Int("read-window", 0, "bytes of RDMA READ responses an RC QP may have outstanding, one READ always (0: 1 MiB, -1: only max_rd_atomic bounds them)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	spin := fs.Duration("poll-spin", daemon.DefaultSpin, "how long idle rings and queues are polled before the daemon sleeps")
	var cong app.CongestionFlags
	cong.Register(fs)
	var lim daemon.Limits = daemon.DefaultLimits
	fs.IntVar(&lim.QPs, "max-qps", lim.QPs, "QPs per client")
	fs.IntVar(&lim.CQs, "max-cqs", lim.CQs, "CQs per client")
	fs.IntVar(&lim.MRs, "max-mrs", lim.MRs, "memory regions per client")
	fs.Int64Var(&lim.MRBytes, "max-mr-bytes", lim.MRBytes, "registered bytes per client")
	if code := parseFlags(fs, args, stderr); code >= 0 {
		return code
	}
	devCfg := stack.Config{Interface: *iface, XDPMode: *xdpMode, XDPBind: *xdpBind, BusyPoll: *busy, Queues: *queues, Name: *name,
		IdleSpin: *spin, SocketBusyPoll: *sockBusy, Batch: *batch, KeepPastGap: *keep, ReadWindow: *readWin}
	if *batch < 0 {
		fmt.Fprintf(stderr, "uroce daemon: --batch %d: want a number of frames, or 0 for the default\n", *batch)
		return 2
	}
	if err := cong.Apply(&devCfg); err != nil {
		fmt.Fprintf(stderr, "uroce daemon: %v\n", err)
		return 2
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(stderr, "uroce daemon: log level %q: want debug, info, warn or error\n", *level)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lv}))
	if *iface == "" {
		fmt.Fprintln(stderr, "uroce daemon: name the network interface to run on with -d IFACE")
		fs.Usage()
		return 2
	}
	if os.Geteuid() != 0 {
		fmt.Fprintf(stderr, "uroce daemon: needs root: it attaches an XDP program and opens AF_XDP sockets on %s (run it with sudo, or as the uroce systemd service)\n", *iface)
		return 1
	}
	if *socket == "" {
		*socket = filepath.Join("/run/uroce", *name+".sock")
	}
	unlock, err := lockInterface(filepath.Dir(*socket), *iface)
	if err != nil {
		fmt.Fprintf(stderr, "uroce daemon: %v\n", err)
		return 1
	}
	defer unlock()

	dev, err := stack.Open(ctx, devCfg)
	if err != nil {
		fmt.Fprintf(stderr, "uroce daemon: %v\n", err)
		return 1
	}
	defer dev.Close()
	srv, err := daemon.Listen(daemon.Config{Device: dev, Name: *name, Netdev: *iface, Socket: *socket, Group: *group,
		Limits: lim, Log: log})
	if err != nil {
		fmt.Fprintf(stderr, "uroce daemon: %v\n", err)
		return 1
	}
	if *metrics != "" {
		ln, err := net.Listen("tcp", *metrics)
		if err != nil {
			srv.Shutdown()
			fmt.Fprintf(stderr, "uroce daemon: metrics: %v\n", err)
			return 1
		}
		hs := &http.Server{Handler: srv.Metrics(), ReadHeaderTimeout: 5 * time.Second}
		go hs.Serve(ln)
		defer hs.Close()
		log.Info("metrics", "addr", ln.Addr().String())
	}
	a := dev.Query()
	log.Info("serving", "device", *name, "netdev", *iface, "socket", *socket, "queues", a.NumQueues,
		"mtu", a.LinkMTU, "gids", len(dev.GIDs()))
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve() }()
	select {
	case <-ctx.Done():
		log.Info("stopping: clients' QPs to ERR, device gone")
		srv.Shutdown()
		<-errc
		return 0
	case err := <-errc:
		srv.Shutdown()
		fmt.Fprintf(stderr, "uroce daemon: %v\n", err)
		return 1
	}
}

// lockInterface makes sure one daemon runs on an interface: it locks
// dir/IFACE.pid (flock, released when the process ends however it ends)
// and writes the PID there. It returns the unlock.
func lockInterface(dir, iface string) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, iface+".pid")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			pid := strings.TrimSpace(string(b))
			comm, _ := os.ReadFile("/proc/" + pid + "/comm")
			return nil, fmt.Errorf("a uroce daemon already runs on %s: pid %s (%s); stop it first", iface, pid, strings.TrimSpace(string(comm)))
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() {
		os.Remove(path)
		f.Close()
	}, nil
}
