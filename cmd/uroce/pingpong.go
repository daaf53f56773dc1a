package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/uroce/uroce/internal/app"
	"github.com/uroce/uroce/internal/app/pingpong"
	"github.com/uroce/uroce/internal/oob"
	pp "github.com/uroce/uroce/internal/oob/pingpong"
)

func init() {
	register(&command{name: "pingpong", summary: "ping-pong with ibv_{rc,uc,ud,srq}_pingpong peers, either role", run: runPingpong})
}

var pingpongUsage = pingpongText + app.Usage(25)

const pingpongText = `usage:
  uroce pingpong [--rc|--uc|--ud|--srq] -d IFACE [options]         start a server and wait for a connection
  uroce pingpong [--rc|--uc|--ud|--srq] -d IFACE [options] HOST    connect to the server at HOST

Wire-compatible with rdma-core's ibv_rc_pingpong (default), ibv_uc_pingpong,
ibv_ud_pingpong and ibv_srq_pingpong, on either side: run the stock tool on
the peer with -g <its IPv4 GID index> (1 on rdma_rxe).

options (as the stock tools'):
  -p, --port=PORT        listen on/connect to TCP port PORT (default 18515)
  -d, --ib-dev=IFACE     network interface to run on (the stock tools name an RDMA device)
  -i, --ib-port=PORT     port of the device (only 1)
  -s, --size=SIZE        size of message to exchange (default 4096; ud 1024)
  -m, --mtu=SIZE         path MTU (default 1024; rc, uc, srq)
  -r, --rx-depth=DEP     number of receives to post at a time (default 500)
  -n, --iters=ITERS      number of exchanges (default 1000)
  -l, --sl=SL            service level (accepted; RoCE carries none)
  -e, --events           sleep on CQ events (uroce always sleeps)
  -g, --gid-idx=INDEX    local GID index (default: the first IPv4 GID)
  -q, --num-qp=N         number of QPs (srq, default 16)
  -c, --chk              validate received buffer
  -N, --new_send         use the new post send WR API (the same packets)
  -o, --odp, -O, --iodp, -P, --prefetch, -t, --ts, -j, --dm
                         on-demand paging, completion timestamps, device
                         memory: refused as the stock tools refuse them on
                         a device without them
uroce's own:
  --verify               check every received message byte for byte
  --infinite-retry       retry_cnt 7 retries forever (rdma_rxe's reading)
  --connect-wait=D       how long a client retries a refused connection (default 10s)
`

func runPingpong(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("uroce pingpong", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var dev app.DeviceFlags
	dev.Register(fs)
	var rc, uc, ud, srq, events, check, verify, infinite bool
	var newSend, odp, iodp, prefetch, ts, dm bool
	fs.BoolVar(&rc, "rc", false, "")
	fs.BoolVar(&uc, "uc", false, "")
	fs.BoolVar(&ud, "ud", false, "")
	fs.BoolVar(&srq, "srq", false, "")
	cfg := pingpong.Config{GIDIndex: pingpong.AutoGID}
	port, ibPort, sl := oob.Port, 1, 0
	f := app.Aliases{FlagSet: fs}
	intFlag, boolFlag := f.Int, f.Bool
	intFlag(&port, "p", "port")
	intFlag(&ibPort, "i", "ib-port")
	intFlag(&cfg.Size, "s", "size")
	intFlag(&cfg.MTU, "m", "mtu")
	intFlag(&cfg.RxDepth, "r", "rx-depth")
	intFlag(&cfg.Iters, "n", "iters")
	intFlag(&sl, "l", "sl")
	intFlag(&cfg.GIDIndex, "g", "gid-idx")
	intFlag(&cfg.NumQP, "q", "num-qp")
	boolFlag(&events, "e", "events")
	boolFlag(&check, "c", "chk")
	boolFlag(&newSend, "N", "new_send")
	boolFlag(&odp, "o", "odp")
	boolFlag(&iodp, "O", "iodp")
	boolFlag(&prefetch, "P", "prefetch")
	boolFlag(&ts, "t", "ts")
	boolFlag(&dm, "j", "dm")
	boolFlag(&verify, "verify")
	boolFlag(&infinite, "infinite-retry")
	connectWait := 10 * time.Second
	fs.DurationVar(&connectWait, "connect-wait", connectWait, "")
	help := fs.Bool("h", false, "")
	fs.BoolVar(help, "help", false, "")

	rest, err := app.ParseArgs(fs, args)
	if err == nil && *help {
		fmt.Fprint(stdout, pingpongUsage)
		return 0
	}
	if err == nil && len(rest) > 1 {
		err = fmt.Errorf("more than one host: %q", rest)
	}
	if err == nil && (port < 0 || port > 65535) {
		err = fmt.Errorf("port %d", port)
	}
	if err == nil && ibPort != 1 {
		err = fmt.Errorf("ib-port %d: a uroce device has port 1 only", ibPort)
	}
	n := 0
	for i, b := range []bool{rc, uc, ud, srq} {
		if b {
			n++
			cfg.Tool = []pp.Tool{pp.RC, pp.UC, pp.UD, pp.SRQ}[i]
		}
	}
	if err == nil && n > 1 {
		err = fmt.Errorf("give one of --rc, --uc, --ud, --srq")
	}
	if err == nil && cfg.NumQP != 0 && cfg.Tool != pp.SRQ {
		err = fmt.Errorf("-q needs --srq")
	}
	if err != nil {
		fmt.Fprintf(stderr, "uroce pingpong: %v\n%s", err, pingpongUsage)
		return 2
	}
	if dm && (odp || iodp) {
		fmt.Fprintln(stderr, "DM memory region can't be on demand")
		return 1
	}
	if prefetch && !odp && !iodp {
		fmt.Fprintln(stderr, "prefetch is valid only with on-demand memory region")
		return 1
	}
	cfg.Check, cfg.Verify, cfg.InfiniteRetry = check, verify, infinite
	cfg.Stdout, cfg.Stderr = stdout, stderr
	host := ""
	if len(rest) == 1 {
		cfg.Client, host = true, rest[0]
	}
	cfg.Connect = app.Connector(host, port, connectWait)

	d, err := dev.Open(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "uroce pingpong: %v\n", err)
		return 1
	}
	defer d.Close()
	// What the stock tools check of the device, with their messages: a
	// uroce device has no on-demand paging, no completion timestamps and
	// no device memory (ibv_query_device_ex says so too).
	switch {
	case odp || iodp:
		fmt.Fprintln(stderr, "The device isn't ODP capable or does not support RC send and receive with ODP")
		return 1
	case ts:
		fmt.Fprintln(stderr, "The device isn't completion timestamp capable")
		return 1
	case dm:
		fmt.Fprintln(stderr, "Device doesn't support dm allocation")
		return 1
	}
	_, err = pingpong.Run(ctx, d, cfg)
	dev.Report(stderr, "uroce pingpong", d)
	if err != nil {
		fmt.Fprintf(stderr, "uroce pingpong: %v\n", err)
		return 1
	}
	return 0
}
