package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"

	"github.com/uroce/uroce/internal/netns"
	"github.com/uroce/uroce/stack"
)

// Errors Link and Lat return before they change anything.
var (
	ErrNotRoot = errors.New("needs root: it creates network namespaces, a veth pair, an XDP program and AF_XDP sockets (run it with sudo)")
	ErrNoAFXDP = errors.New("this kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS): uroce needs Linux 5.10 or later built with them")
)

// The addresses of the veth ends.
var (
	addrA = netip.MustParseAddr("192.0.2.1")
	addrB = netip.MustParseAddr("192.0.2.2")
)

// newPair checks that the benchmark can run (root, AF_XDP sockets) and
// builds its network: two namespaces joined by a veth pair of the given
// MTU, A with addrA/24 and B with addrB/24. op prefixes the errors.
func newPair(op string, mtu int) (*netns.Pair, error) {
	if err := canRun(op); err != nil {
		return nil, err
	}
	pair, err := netns.NewPair(netns.PairConfig{Prefix: "uroce-bench", MTU: mtu,
		AddrA: []netip.Prefix{netip.PrefixFrom(addrA, 24)},
		AddrB: []netip.Prefix{netip.PrefixFrom(addrB, 24)}})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return pair, nil
}

// canRun checks that a benchmark can run: root, AF_XDP sockets.
func canRun(op string) error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EAFNOSUPPORT) {
			return ErrNoAFXDP
		}
		return fmt.Errorf("%s: create an AF_XDP socket: %w", op, err)
	}
	unix.Close(fd)
	return nil
}

// openIn opens a device on dev inside ns.
func openIn(ctx context.Context, ns *netns.Namespace, cfg stack.Config) (*stack.Device, error) {
	var d *stack.Device
	err := ns.Do(func() error {
		var err error
		d, err = stack.Open(ctx, cfg)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("in namespace %s: %w", ns.Name(), err)
	}
	return d, nil
}

// connect brings the RC QP q of device d, at address local, to RTS
// towards peer at address remote, both starting at PSN 1 with 16 READs or
// atomics outstanding (as perftest's -o 16), allowing remote writes and
// reads.
func connect(d *stack.Device, q, peer *stack.QP, local, remote netip.Addr) error {
	if err := q.ToInit(stack.InitAttr{AccessFlags: stack.AccessRemoteWrite | stack.AccessRemoteRead}); err != nil {
		return err
	}
	if err := q.ToRTR(stack.RTRAttr{DestQPN: peer.QPN(), AH: stack.AHAttr{DGID: remote, SGIDIndex: d.GIDIndex(local)},
		RQPSN: 1, MaxDestRdAtomic: 16, MinRNRTimer: 12}); err != nil {
		return err
	}
	return q.ToRTS(stack.RTSAttr{SQPSN: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16})
}
