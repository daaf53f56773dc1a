package perftest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/uroce/uroce/internal/app"
	"github.com/uroce/uroce/internal/oob"
	pt "github.com/uroce/uroce/internal/oob/perftest"
)

// Usage is the help text of Main.
var Usage = usage + app.Usage(27)

const usage = `usage:
  uroce perf write|read|send|atomic [--lat] -d IFACE [options]         start a server and wait for a connection
  uroce perf write|read|send|atomic [--lat] -d IFACE [options] HOST    connect to the server at HOST

Wire-compatible with perftest 4.5's ib_write_bw, ib_read_bw, ib_send_bw,
ib_atomic_bw (and with --lat ib_write_lat, ib_read_lat, ib_send_lat, ib_atomic_lat), on
either side; the tool may also be named as the stock command (ib_send_lat).
Run the stock tool on the peer with -x <its IPv4 GID index> (1 on rdma_rxe).

options (as perftest's):
  -p, --port=PORT          TCP port of the exchange (default 18515)
  -d, --ib-dev=IFACE       network interface to run on (perftest names an RDMA device)
  -i, --ib-port=PORT       port of the device (only 1)
  -x, --gid-index=INDEX    local GID index (default: the first IPv4 GID)
  -s, --size=SIZE          message size (default 65536; lat 2; atomic 8); K and M suffixes
  -n, --iters=N            iterations (default 5000 for write bw, else 1000)
  -a, --all                run sizes from 2 to 2^23 bytes
  -m, --mtu=MTU            path MTU (default: the port's active MTU)
  -q, --qp=N               number of QPs (default 1)
  -t, --tx-depth=N         send queue depth (default 128; lat 1)
  -r, --rx-depth=N         receive queue depth (send tests, default 512)
  -Q, --cq-mod=N           signal every N-th completion (default 100)
  -I, --inline_size=N      send messages of at most N bytes inline (write, send; default 0)
  -l, --post_list=N        post requests in lists of N (bw tests)
  -D, --duration=SECONDS   run for SECONDS instead of -n
  -f, --margin=SECONDS     measure within these margins of -D (default a quarter of it)
  -b, --bidirectional      both sides send at once (bw tests)
  -o, --outs=N             outstanding reads/atomics (read, atomic)
  -u, --qp-timeout=N       QP timeout (default 14)
  -A, --atomic_type=TYPE   CMP_AND_SWAP or FETCH_AND_ADD (default)
  -c, --connection=TYPE    RC (default), UC (write and send) or UD (send)
  -F, --CPU-freq           accepted (uroce measures with the monotonic clock)
  -e, --events             accepted (uroce always sleeps on its CQs)
      --report_gbits       report in Gb/s
  -w, --limit_bw=V         fail when the average bandwidth is below V (the report's units)
  -y, --limit_msgrate=V    with -w: fail when the message rate is below V Mpps
  -R, --rdma_cm            connect the QPs with RDMA CM and exchange over it, on -p (not with --daemon)
uroce's own:
  --verify                 check the data where possible (atomic server: every addition exactly once)
  --bad-rkey               use (client) or advertise (server) an R_Key the peer's region lacks
  --rnr-retry=N            rnr_retry N instead of 7
  --read-window=BYTES      READ bytes a read client keeps in flight per QP (default 1 MiB, -1: none)
  --late-recv=D            send server: post the receives D after the run started (RNR NAKs)
  --infinite-retry         retry_cnt 7 retries forever (rdma_rxe's reading)
  --connect-wait=D         how long a client retries a refused connection (default 10s)
`

// ParseTool names a tool: write|read|send|atomic with lat selecting the
// latency test, or a stock command name (ib_write_bw, …).
func ParseTool(name string, lat bool) (pt.Tool, error) {
	for t := pt.WriteBW; t.Valid(); t++ {
		if name == t.String() {
			return t, nil
		}
	}
	tools := map[string][2]pt.Tool{
		"write":  {pt.WriteBW, pt.WriteLat},
		"read":   {pt.ReadBW, pt.ReadLat},
		"send":   {pt.SendBW, pt.SendLat},
		"atomic": {pt.AtomicBW, pt.AtomicLat},
	}
	pair, ok := tools[name]
	if !ok {
		return 0, fmt.Errorf("unknown test %q: want write, read, send or atomic", name)
	}
	t := pair[0]
	if lat {
		t = pair[1]
	}
	if !t.Valid() {
		return 0, fmt.Errorf("no latency test for %s", name)
	}
	return t, nil
}

// parseSize reads -s as perftest does: a number with an optional K or M
// suffix.
func parseSize(s string) (uint64, error) {
	f := uint64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		f, s = 1024, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		f, s = 1<<20, strings.TrimSuffix(s, "M")
	}
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	return v * f, nil
}

type sizeFlag struct{ v *uint64 }

func (f sizeFlag) String() string {
	if f.v == nil {
		return "0"
	}
	return strconv.FormatUint(*f.v, 10)
}

func (f sizeFlag) Set(s string) error {
	v, err := parseSize(s)
	if err == nil {
		*f.v = v
	}
	return err
}

// Main runs "uroce perf" with args (after "perf") and returns the exit
// code: 0, 1 when the test failed, 2 for bad usage.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	usage := func(err error) int {
		fmt.Fprintf(stderr, "uroce perf: %v\n%s", err, Usage)
		return 2
	}
	if len(args) == 0 {
		return usage(errors.New("no test named"))
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, Usage)
		return 0
	}
	testName := args[0]
	fs := flag.NewFlagSet("uroce perf", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var dev app.DeviceFlags
	dev.Register(fs)
	cfg := Config{GIDIndex: AutoGID}
	port, ibPort := oob.Port, 1
	var lat, bw, cpuFreq, events, help, version bool
	var atomicType, conn string
	var rnrRetry = -1
	connectWait := 10 * time.Second
	f := app.Aliases{FlagSet: fs}
	ints, bools, strs := f.Int, f.Bool, f.String
	ints(&port, "p", "port")
	ints(&ibPort, "i", "ib-port")
	ints(&cfg.GIDIndex, "x", "gid-index")
	for _, n := range []string{"s", "size"} {
		fs.Var(sizeFlag{&cfg.Size}, n, "")
	}
	ints(&cfg.Iters, "n", "iters")
	bools(&cfg.All, "a", "all")
	ints(&cfg.MTU, "m", "mtu")
	ints(&cfg.QPs, "q", "qp")
	ints(&cfg.TxDepth, "t", "tx-depth")
	ints(&cfg.RxDepth, "r", "rx-depth")
	ints(&cfg.CQMod, "Q", "cq-mod")
	ints(&cfg.Inline, "I", "inline_size")
	ints(&cfg.PostList, "l", "post_list")
	duration, margin := noDuration, -1
	ints(&duration, "D", "duration")
	ints(&margin, "f", "margin")
	ints(&cfg.OutReads, "o", "outs")
	ints(&cfg.QPTimeout, "u", "qp-timeout")
	bools(&cfg.Duplex, "b", "bidirectional")
	strs(&atomicType, "A", "atomic_type")
	strs(&conn, "c", "connection")
	bools(&cpuFreq, "F", "CPU-freq")
	bools(&events, "e", "events")
	bools(&cfg.Gbits, "report_gbits")
	limit := func(v *float64, on *bool, msg string, names ...string) {
		for _, n := range names {
			fs.Func(n, "", func(s string) error {
				f, err := strconv.ParseFloat(s, 64)
				if err != nil || f < 0 {
					return errors.New(msg)
				}
				*v, *on = f, true
				return nil
			})
		}
	}
	limit(&cfg.LimitBW, &cfg.LimitBWOn, "Invalid Minimum BW Limit", "w", "limit_bw")
	limit(&cfg.LimitMsgRate, &cfg.LimitMsgRateOn, "Invalid Minimum msgRate Limit", "y", "limit_msgrate")
	bools(&lat, "lat")
	bools(&bw, "bw")
	bools(&help, "h", "help")
	bools(&version, "V", "version")
	bools(&cfg.BadRKey, "bad-rkey")
	bools(&cfg.Verify, "verify")
	ints(&rnrRetry, "rnr-retry")
	bools(&cfg.InfiniteRetry, "infinite-retry")
	fs.DurationVar(&connectWait, "connect-wait", connectWait, "")
	fs.DurationVar(&cfg.LateRecv, "late-recv", 0, "")
	ints(&cfg.ReadWindow, "read-window")
	var unsupported []string
	bools(&cfg.RDMACM, "R", "rdma_cm")
	for _, n := range []string{"z", "com_rdma_cm", "run_infinitely"} {
		n := n
		fs.BoolFunc(n, "", func(string) error { unsupported = append(unsupported, n); return nil })
	}

	rest, err := app.ParseArgs(fs, args[1:])
	if err != nil {
		return usage(err)
	}
	if help {
		fmt.Fprint(stdout, Usage)
		return 0
	}
	if version {
		fmt.Fprintf(stdout, "Version: %s\n", pt.Version)
		return 0
	}
	if lat && bw {
		return usage(errors.New("--lat and --bw together"))
	}
	if cfg.Tool, err = ParseTool(testName, lat); err != nil {
		return usage(err)
	}
	switch {
	case len(unsupported) > 0:
		return usage(fmt.Errorf("-%s: %w", unsupported[0], ErrUnsupported))
	case len(rest) > 1:
		return usage(fmt.Errorf("more than one host: %q", rest))
	case port < 0 || port > 65535:
		return usage(fmt.Errorf("port %d", port))
	case ibPort != 1:
		return usage(fmt.Errorf("ib-port %d: a uroce device has port 1 only", ibPort))
	case conn == "XRC" || conn == "DC" || conn == "SRD":
		return usage(fmt.Errorf("connection type %s: %w (RC, UC and UD)", conn, ErrUnsupported))
	case conn != "" && conn != "RC" && conn != "UC" && conn != "UD":
		return usage(errors.New("Invalid Connection type. Please choose from {RC,UC,UD,XRC,DC,SRD}"))
	case cfg.LateRecv > 0 && cfg.Tool != pt.SendBW:
		return usage(errors.New("--late-recv applies to the send bandwidth test only"))
	case rnrRetry > 7:
		return usage(fmt.Errorf("rnr retry %d: want 0 to 7", rnrRetry))
	}
	switch atomicType {
	case "", "FETCH_AND_ADD":
	case "CMP_AND_SWAP":
		cfg.CmpSwap = true
	default:
		return usage(fmt.Errorf("invalid atomic type %q: choose from {CMP_AND_SWAP,FETCH_AND_ADD}", atomicType))
	}
	if atomicType != "" && cfg.Tool.Verb() != pt.Atomic {
		return usage(errors.New("-A applies to the atomic test only"))
	}
	cfg.UC, cfg.UD = conn == "UC", conn == "UD"
	if duration != noDuration {
		// perftest: -D takes a positive count of seconds, and not
		// with events.
		switch {
		case duration <= 0:
			fmt.Fprintln(stderr, "uroce perf: Duration period must be positive")
			return 1
		case events:
			fmt.Fprint(stdout, pt.ResultLine)
			fmt.Fprintln(stderr, "uroce perf: Duration mode doesn't work with events.")
			return 1
		}
		cfg.Duration = time.Duration(duration) * time.Second
	}
	if margin >= 0 {
		cfg.Margin, cfg.marginSet = time.Duration(margin)*time.Second, true
	}
	if rnrRetry >= 0 {
		cfg.SetRNRRetry, cfg.RNRRetry = true, uint8(rnrRetry)
	}
	cfg.Stdout, cfg.Stderr = stdout, stderr
	cfg.Device = dev.Interface
	cfg.BusyPoll = dev.BusyPoll
	host := ""
	if len(rest) == 1 {
		cfg.Client, host = true, rest[0]
	}
	cfg.Connect = app.Connector(host, port, connectWait)
	if cfg.RDMACM {
		if dev.Socket() != "" {
			return usage(fmt.Errorf("-R (rdma_cm): %w with --daemon: RDMA CM runs on the in-process device", ErrUnsupported))
		}
		cfg.ConnectWait = connectWait
		cfg.CMAddr = netip.AddrPortFrom(netip.Addr{}, uint16(port))
		if cfg.Client {
			ip, err := resolveIPv4(ctx, host)
			if err != nil {
				fmt.Fprintf(stderr, "uroce perf: %v\n", err)
				return 1
			}
			cfg.CMAddr = netip.AddrPortFrom(ip, uint16(port))
		}
	}
	if err := cfg.normalize(); err != nil {
		fmt.Fprintf(stderr, "uroce perf: %v\n", err)
		return 1
	}

	d, err := dev.Open(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "uroce perf: %v\n", err)
		return 1
	}
	defer d.Close()
	_, err = Run(ctx, d, cfg)
	dev.Report(stderr, "uroce perf", d)
	if err != nil {
		if !errors.Is(err, ErrBelowLimit) { // Run said it as perftest does
			fmt.Fprintf(stderr, "uroce perf: %v\n", err)
		}
		return 1
	}
	return 0
}

// noDuration is -D's value when not given.
const noDuration = math.MinInt

// resolveIPv4 returns host's IPv4 address, as perftest's rdma_getaddrinfo
// with AF_INET hints finds it.
func resolveIPv4(ctx context.Context, host string) (netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap(), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", host)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("failed to get RDMA CM address info: %w", err)
	}
	return ips[0].Unmap(), nil
}
