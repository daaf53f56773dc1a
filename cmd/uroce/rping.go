package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/uroce/uroce/internal/app"
	"github.com/uroce/uroce/internal/app/rping"
	"github.com/uroce/uroce/verbs"
)

func init() {
	register(&command{name: "rping", summary: "RDMA CM ping, wire-compatible with librdmacm's rping, either role", run: runRping})
}

var rpingUsage = rpingText + app.Usage(25)

const rpingText = `usage:
  uroce rping -s -d IFACE [-vV] [-S size] [-C count] [-a addr] [-p port]
  uroce rping -c -d IFACE [-vV] [-S size] [-C count] [-I addr] -a addr [-p port]
  uroce rping -c -d IFACE [options] ADDR                 (the server's address as an argument)

Wire-compatible with librdmacm's rping on either side: the client connects
with RDMA CM, the server RDMA READs the client's ping and RDMA WRITEs it back.

options (as rping's):
  -c                     client side
  -s                     server side
  -a ADDR                server address (the server's default: any of the device's)
  -I ADDR                client's source address
  -p PORT                port (default 7174)
  -C COUNT               ping count (default 0: until interrupted)
  -S SIZE                ping data size (26 to 65535, default 64)
  -v                     display ping data to stdout
  -V                     validate ping data
  -q                     self-created QP (accepted: uroce's QP always is)
  -d IFACE               network interface to run on (rping's -d is --debug here)
uroce's own:
  --debug                debug printfs (rping's -d)
  --connect-wait=D       how long a client retries while nobody listens (default 0: once, as rping)
`

func runRping(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("uroce rping", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var dev app.DeviceFlags
	dev.Register(fs)
	var server, client, selfQP bool
	var addr, source string
	cfg := rping.Config{Port: rping.DefaultPort, Size: rping.DefaultSize}
	port := int(cfg.Port)
	f := app.Aliases{FlagSet: fs}
	f.Bool(&server, "s")
	f.Bool(&client, "c")
	f.Bool(&cfg.Verbose, "v")
	f.Bool(&cfg.Validate, "V")
	f.Bool(&cfg.Debug, "debug")
	f.Bool(&selfQP, "q")
	f.String(&addr, "a")
	f.String(&source, "I")
	f.Int(&port, "p")
	f.Int(&cfg.Count, "C")
	f.Int(&cfg.Size, "S")
	fs.DurationVar(&cfg.ConnectWait, "connect-wait", 0, "")
	help := fs.Bool("h", false, "")
	fs.BoolVar(help, "help", false, "")

	rest, err := app.ParseArgs(fs, args)
	if err == nil && *help {
		fmt.Fprint(stdout, rpingUsage)
		return 0
	}
	if err == nil && len(rest) == 1 && addr == "" {
		addr, rest = rest[0], nil
	}
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("unexpected arguments %q", rest)
	}
	switch {
	case err != nil:
	case server == client:
		err = errors.New("give one of -s and -c")
	case port <= 0 || port > 65535:
		err = fmt.Errorf("port %d", port)
	case cfg.Count < 0:
		err = fmt.Errorf("Invalid count %d", cfg.Count)
	case cfg.Size < rping.MinSize || cfg.Size > rping.MaxSize:
		err = fmt.Errorf("Invalid size %d (valid range is %d to %d)", cfg.Size, rping.MinSize, rping.MaxSize+1)
	case client && addr == "":
		err = errors.New("a client needs the server's address: -a ADDR")
	}
	if err == nil && addr != "" {
		cfg.Addr, err = resolveAddr(addr)
	}
	if err == nil && source != "" {
		cfg.Source, err = resolveAddr(source)
	}
	if err != nil {
		fmt.Fprintf(stderr, "uroce rping: %v\n%s", err, rpingUsage)
		return 2
	}
	cfg.Server, cfg.Port = server, uint16(port)
	cfg.Stdout, cfg.Stderr = stdout, stderr

	d, err := dev.Open(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "uroce rping: %v\n", err)
		return 1
	}
	defer d.Close()
	sd, ok := verbs.StackDevice(d)
	if !ok {
		fmt.Fprintln(stderr, "uroce rping: RDMA CM runs on an in-process device only (no --daemon yet)")
		return 1
	}
	err = rping.Run(ctx, sd, cfg)
	dev.Report(stderr, "uroce rping", d)
	if err != nil {
		var ce *rping.ConnectError
		if errors.As(err, &ce) {
			// rping's own line, then what it means.
			fmt.Fprintf(stderr, "cma event %s, error %d\n", ce.Event, ce.Status)
			fmt.Fprintf(stderr, "uroce rping: connect error: %v\n", ce.Err)
			return 1
		}
		fmt.Fprintf(stderr, "uroce rping: %v\n", err)
		return 1
	}
	return 0
}

// resolveAddr parses an IP address or looks a host name up, as rping's
// getaddrinfo does.
func resolveAddr(s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", s)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("getaddrinfo failed (%v) - invalid hostname or IP address", err)
	}
	for _, ip := range ips {
		if ip.Unmap().Is4() {
			return ip.Unmap(), nil
		}
	}
	return ips[0], nil
}
