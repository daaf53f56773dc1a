package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/uroce/uroce/internal/app"
	"github.com/uroce/uroce/internal/app/cmatose"
	"github.com/uroce/uroce/verbs"
)

func init() {
	register(&command{name: "cmatose", summary: "RDMA CM connection test, wire-compatible with librdmacm's ucmatose, either role",
		run: func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
			return runCmatose(ctx, args, stdout, stderr, false)
		}})
	register(&command{name: "udaddy", summary: "RDMA CM UD test (SIDR), wire-compatible with librdmacm's udaddy, either role",
		run: func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
			return runCmatose(ctx, args, stdout, stderr, true)
		}})
}

const cmatoseText = `usage:
  uroce cmatose -d IFACE [-b bind_address] [-c connections] [-C message_count] [-S message_size] [-p port]
  uroce cmatose -d IFACE -s server_address [-b bind_address] [options]

Wire-compatible with librdmacm's ucmatose on either side: the client makes
-c RC connections with RDMA CM, the server SENDs -C messages of -S bytes on
each and receives as many back, then disconnects.

options (as ucmatose's):
  -s ADDR                the server's address: run as the client
  -b ADDR                address to bind (server) or to connect from (client)
  -c N                   connections (default 1)
  -C N                   messages each way per connection (default 10)
  -S N                   message size (default 100)
  -p PORT                port (default 7471)
  -f ip|name             address format (accepted)
  -P tcp                 port space (only tcp)
  -t TOS, -a TIMEOUT, -m accepted; they change nothing here
  -d IFACE               network interface to run on
uroce's own:
  --connect-wait=D       how long a client retries while nobody listens (default 0: once, as ucmatose)
  ADDR                   the server's address may also come as the last argument
`

const udaddyText = `usage:
  uroce udaddy -d IFACE [-b bind_address] [-c connections] [-C message_count] [-S message_size]
  uroce udaddy -d IFACE -s server_address [-b bind_address] [options]

Wire-compatible with librdmacm's udaddy on either side: the client resolves
the server's UD service (RDMA CM's UDP port space, SIDR) for -c UD QPs and
SENDs -C messages of -S bytes with immediate data; the server answers each
client with as many.

options (as udaddy's):
  -s ADDR                the server's address: run as the client
  -b ADDR                address to bind (server) or to send from (client)
  -c N                   QPs (default 1)
  -C N                   messages each way per QP (default 10)
  -S N                   message size (default 100, at most the path MTU)
  -f ip|name             address format (accepted)
  -t TOS, -p, -P         accepted; they change nothing here
  -d IFACE               network interface to run on
uroce's own:
  --port PORT            port (default 7174, udaddy's)
  --connect-wait=D       how long a client retries while nobody listens (default 0: once, as udaddy)
  ADDR                   the server's address may also come as the last argument
`

func runCmatose(ctx context.Context, args []string, stdout, stderr io.Writer, ud bool) int {
	name, text := "cmatose", cmatoseText
	if ud {
		name, text = "udaddy", udaddyText
	}
	usage := text + app.Usage(25)
	fs := flag.NewFlagSet("uroce "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var dev app.DeviceFlags
	dev.Register(fs)
	cfg := cmatose.Config{Connections: 1, Count: cmatose.DefaultCount, Size: cmatose.DefaultSize}
	var server, bind, format, space, tos, timeout string
	var migrate bool
	port := cmatose.DefaultPort
	if ud {
		port = cmatose.DefaultUDPort
	}
	f := app.Aliases{FlagSet: fs}
	f.String(&server, "s")
	f.String(&bind, "b")
	f.Int(&cfg.Connections, "c")
	f.Int(&cfg.Count, "C")
	f.Int(&cfg.Size, "S")
	f.String(&format, "f")
	f.String(&tos, "t")
	if ud {
		f.String(&space, "p", "P")
		f.Int(&port, "port")
	} else {
		f.Int(&port, "p")
		f.String(&space, "P")
		f.String(&timeout, "a")
		f.Bool(&migrate, "m")
	}
	fs.DurationVar(&cfg.ConnectWait, "connect-wait", 0, "")
	help := fs.Bool("h", false, "")
	fs.BoolVar(help, "help", false, "")
	rest, err := app.ParseArgs(fs, args)
	if err == nil && len(rest) == 1 && server == "" {
		server, rest = rest[0], nil
	}
	if err == nil && *help {
		fmt.Fprint(stdout, usage)
		return 0
	}
	switch {
	case err != nil:
	case len(rest) > 0:
		err = fmt.Errorf("unexpected arguments %q", rest)
	case port <= 0 || port > 65535:
		err = fmt.Errorf("port %d", port)
	case cfg.Connections <= 0:
		err = fmt.Errorf("connections %d", cfg.Connections)
	case !ud && space != "" && !strings.HasPrefix(strings.ToLower(space), "tcp"):
		err = fmt.Errorf("port space %q: only tcp", space)
	case format != "" && !strings.HasPrefix(strings.ToLower(format), "ip") && !strings.HasPrefix(strings.ToLower(format), "name"):
		err = fmt.Errorf("address format %q: ip or name", format)
	}
	if err == nil && server != "" {
		cfg.Addr, err = resolveAddr(server)
	}
	if err == nil && bind != "" {
		if server != "" {
			cfg.Source, err = resolveAddr(bind)
		} else {
			cfg.Addr, err = resolveAddr(bind)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "uroce %s: %v\n%s", name, err, usage)
		return 2
	}
	cfg.Server, cfg.Port = server == "", uint16(port)
	cfg.Stdout, cfg.Stderr = stdout, stderr

	d, err := dev.Open(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "uroce %s: %v\n", name, err)
		return 1
	}
	defer d.Close()
	sd, ok := verbs.StackDevice(d)
	if !ok {
		fmt.Fprintf(stderr, "uroce %s: RDMA CM runs on an in-process device only (no --daemon here)\n", name)
		return 1
	}
	run := cmatose.Run
	if ud {
		run = cmatose.RunUD
	}
	err = run(ctx, sd, cfg)
	status := 0
	if err != nil {
		var ee *cmatose.EventError
		if errors.As(err, &ee) {
			fmt.Fprintf(stdout, "%s: %v\n", name, ee)
			fmt.Fprintf(stderr, "uroce %s: %v\n", name, ee.Err)
			status = ee.Status
		} else {
			fmt.Fprintf(stdout, "%s: %v\n", name, err)
			status = -1
		}
	}
	fmt.Fprintln(stdout, "test complete")
	fmt.Fprintf(stdout, "return status %d\n", status)
	dev.Report(stderr, "uroce "+name, d)
	if status != 0 && status&0xff == 0 {
		return 1
	}
	return status & 0xff
}
