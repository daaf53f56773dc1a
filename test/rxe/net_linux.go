package rxe

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/netns"
)

// LogDirEnv names the environment variable that keeps the guests' serial
// logs and scripts in a directory of one's choice (by default they go to the
// test's temporary directory and are shown when the test fails).
const LogDirEnv = "UROCE_RXE_LOGDIR"

// Bridge is the name of the bridge inside every Net's namespace.
const Bridge = "br0"

// bridgePortMTU is the MTU of the bridge and of every port on it, so that
// jumbo frames pass wherever the endpoints allow them.
const bridgePortMTU = 9000

// NetOptions configures NewNet. The zero value is ready to use.
type NetOptions struct {
	// Kernel is the default guest kernel of the network's peers (see
	// PeerOptions.Kernel). Its image is built, or found in the cache,
	// before NewNet returns.
	Kernel string
	// IPv6 leaves IPv6 on in the namespace (it is off by default, so no
	// router or neighbour solicitations appear in captures).
	IPv6 bool
	// LogDir receives each guest's serial log (NAME.log) and script
	// (NAME.sh). Default: $UROCE_RXE_LOGDIR, else a temporary directory
	// of the test.
	LogDir string
}

// Net is a private network namespace holding a bridge, the rdma_rxe guests
// plugged into it by tap devices and the veth pairs made for uroce.
type Net struct {
	// NS is the name of the network namespace (as with `ip netns`).
	NS string
	// Bridge is the name of the bridge inside it.
	Bridge string
	// LogDir holds the guests' serial logs and scripts.
	LogDir string

	t      testing.TB
	ns     *netns.Namespace
	kernel string
	ipv6   bool

	mu    sync.Mutex
	peers []*Peer
	taps  int
	used  map[netip.Addr]bool
}

// NewNet creates the namespace and its bridge and builds (or finds in the
// cache) the guest image of opts.Kernel. The test is skipped, with the reason,
// when the host cannot run rxe peers: not root, no iproute2, no QEMU, no
// /dev/net/tun, or an image that cannot be built here (packages not
// installable, no package lists, no download). Everything is removed when the
// test ends.
func NewNet(t testing.TB, opts NetOptions) *Net {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: rdma_rxe peers need root (network namespaces, tap devices)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("skipping: rdma_rxe peers need the iproute2 'ip' command")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := BuildImage(ctx, opts.Kernel); errors.Is(err, ErrUnavailable) {
		t.Skipf("skipping: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath(qemuBinary); err != nil {
		t.Skipf("skipping: rdma_rxe peers need %s", qemuBinary)
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("skipping: rdma_rxe peers need tap devices: %v", err)
	}

	ns, err := netns.New("urxe")
	if errors.Is(err, netns.ErrNotRoot) {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	n := &Net{
		NS:     ns.Name(),
		Bridge: Bridge,
		LogDir: opts.LogDir,
		t:      t,
		ns:     ns,
		kernel: opts.Kernel,
		ipv6:   opts.IPv6,
		used:   map[netip.Addr]bool{},
	}
	t.Cleanup(n.close)
	if n.LogDir == "" {
		n.LogDir = os.Getenv(LogDirEnv)
	}
	if n.LogDir == "" {
		n.LogDir = t.TempDir()
	} else if err := os.MkdirAll(n.LogDir, 0o755); err != nil {
		t.Fatal(err)
	}

	// The sysctls come first so that every interface inherits them.
	sysctls := [][2]string{
		// Answer ARP only for addresses of the receiving interface, and
		// only from them: otherwise the bridge answers for the veth's
		// address with its own MAC and the guests send uroce's frames
		// to the wrong place.
		{"net.ipv4.conf.all.arp_ignore", "1"},
		{"net.ipv4.conf.all.arp_announce", "2"},
		{"net.ipv4.conf.default.arp_ignore", "1"},
		{"net.ipv4.conf.default.arp_announce", "2"},
	}
	if !opts.IPv6 {
		sysctls = append(sysctls,
			[2]string{"net.ipv6.conf.all.disable_ipv6", "1"},
			[2]string{"net.ipv6.conf.default.disable_ipv6", "1"})
	}
	for _, s := range sysctls {
		if err := ns.Sysctl(s[0], s[1]); err != nil {
			t.Fatal(err)
		}
	}
	// No STP: ports forward as soon as they are up. No address: the
	// namespace's own stack takes no part in the guests' traffic.
	if err := ns.IP("link", "add", Bridge, "mtu", strconv.Itoa(bridgePortMTU), "type", "bridge", "stp_state", "0"); err != nil {
		t.Fatal(err)
	}
	if err := ns.SetUp(Bridge); err != nil {
		t.Fatal(err)
	}
	return n
}

// close kills the guests, then deletes the namespace. When the test failed,
// the tail of each guest's serial log goes to the test log.
func (n *Net) close() {
	n.mu.Lock()
	peers := append([]*Peer(nil), n.peers...)
	n.mu.Unlock()
	for _, p := range peers {
		p.kill("network torn down")
	}
	for _, p := range peers {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			n.t.Errorf("rxe peer %s did not exit after SIGKILL", p.Name)
		}
		if n.t.Failed() {
			n.t.Logf("serial log of rxe peer %s (%s), last lines:\n%s", p.Name, p.LogPath, p.logTail(60))
		}
	}
	if err := n.ns.Delete(); err != nil {
		n.t.Error(err)
	}
}

// AddHostVeth creates a veth pair in the namespace: name, with address addr
// (e.g. "192.0.2.3/24", documentation ranges only) and MTU mtu (1500 when 0),
// is the end uroce attaches to (AF_XDP); its peer is a port of the bridge.
// It returns name. Failures end the test.
func (n *Net) AddHostVeth(name, addr string, mtu int) (hostIf string) {
	n.t.Helper()
	pfx, err := netip.ParsePrefix(addr)
	if err != nil {
		n.t.Fatalf("add host veth %s: %v", name, err)
	}
	if mtu == 0 {
		mtu = 1500
	}
	port := "b-" + name
	if len(port) > 15 {
		n.t.Fatalf("add host veth %s: name longer than 13 bytes", name)
	}
	steps := [][]string{
		{"link", "add", name, "mtu", strconv.Itoa(mtu), "type", "veth", "peer", "name", port, "mtu", strconv.Itoa(bridgePortMTU)},
		{"link", "set", port, "master", Bridge, "up"},
	}
	for _, s := range steps {
		if err := n.ns.IP(s...); err != nil {
			n.t.Fatalf("add host veth %s: %v", name, err)
		}
	}
	if err := n.ns.AddAddr(name, pfx); err != nil {
		n.t.Fatalf("add host veth %s: %v", name, err)
	}
	if err := n.ns.SetUp(name); err != nil {
		n.t.Fatalf("add host veth %s: %v", name, err)
	}
	n.mu.Lock()
	n.used[pfx.Addr()] = true
	n.mu.Unlock()
	return name
}

// Interface returns the interface dev of the namespace.
func (n *Net) Interface(dev string) (*net.Interface, error) { return n.ns.Interface(dev) }

// Do runs fn with the calling goroutine's OS thread inside the namespace (see
// netns.Namespace.Do): sockets and AF_XDP bindings made by fn stay there.
func (n *Net) Do(fn func() error) error { return n.ns.Do(fn) }

// Command returns a command that runs name with args inside the namespace.
func (n *Net) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.NS, name}, args...)...)
}

// Capture settings. tcpdump's buffer is sized for bursts of frames while
// the guests' emulation keeps it off the CPU (the default 2 MiB kept 7.5k
// of the 20k frames of one 20 MiB READ). Without --immediate-mode the
// kernel packs frames into blocks (TPACKET_V3) rather than giving each a
// slot as large as the bridge's MTU allows, and hands a block over when it
// is full or when its timer (tcpdump's read timeout) fires.
const (
	captureBufferKiB    = 32768
	captureBlockTimeout = time.Second // tcpdump's read timeout
	captureSettle       = captureBlockTimeout + 300*time.Millisecond
	captureSettleMax    = 15 * time.Second
)

// Capture records every frame crossing the bridge into the pcap file, with
// tcpdump (-s 0, a 32 MiB buffer, -U: each frame written as it is read).
// It returns once tcpdump listens. A capture that cannot start ends the
// test.
//
// stop ends the capture once the file has stopped growing for longer than
// the kernel keeps frames in a partly filled block (so tcpdump has read
// everything that crossed the bridge), logs tcpdump's counts and returns
// them: Complete tells whether the file holds every frame. It may be
// called more than once and also runs when the test ends.
func (n *Net) Capture(t testing.TB, file string) (stop func() CaptureStats) {
	t.Helper()
	if _, err := exec.LookPath("tcpdump"); err != nil {
		t.Skip("skipping: capturing needs tcpdump")
	}
	cmd := exec.Command("ip", "netns", "exec", n.NS, "tcpdump", "-i", n.Bridge, "-n", "-s", "0",
		"-B", strconv.Itoa(captureBufferKiB), "-U", "-w", file)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatalf("capture on %s: %v", n.Bridge, err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("capture on %s: %v", n.Bridge, err)
	}
	listening := make(chan struct{})
	var msgs strings.Builder
	var msgsMu sync.Mutex
	exited := make(chan struct{})
	go func() {
		r := bufio.NewReader(stderr)
		once := sync.Once{}
		for {
			line, err := r.ReadString('\n')
			msgsMu.Lock()
			msgs.WriteString(line)
			msgsMu.Unlock()
			if strings.Contains(line, "listening on") {
				once.Do(func() { close(listening) })
			}
			if err != nil {
				break
			}
		}
		cmd.Wait()
		close(exited)
	}()
	select {
	case <-listening:
	case <-exited:
		msgsMu.Lock()
		defer msgsMu.Unlock()
		t.Fatalf("capture on %s: tcpdump exited: %s", n.Bridge, strings.TrimSpace(msgs.String()))
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("capture on %s: tcpdump did not start listening", n.Bridge)
	}
	var once sync.Once
	var stats CaptureStats
	stop = func() CaptureStats {
		once.Do(func() {
			waitSettled(file, captureSettle, captureSettleMax)
			cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				cmd.Process.Kill()
				<-exited
			}
			msgsMu.Lock()
			stats = parseCaptureStats(msgs.String())
			msgsMu.Unlock()
			t.Logf("capture on %s: %s", n.Bridge, stats)
		})
		return stats
	}
	t.Cleanup(func() { stop() })
	return stop
}

// waitSettled waits until the file's size has not changed for quiet, or
// for max at most.
func waitSettled(file string, quiet, max time.Duration) {
	const tick = 100 * time.Millisecond
	deadline := time.Now().Add(max)
	last, since := int64(-1), time.Now()
	for time.Now().Before(deadline) {
		var size int64
		if fi, err := os.Stat(file); err == nil {
			size = fi.Size()
		}
		if size != last {
			last, since = size, time.Now()
		} else if time.Since(since) >= quiet {
			return
		}
		time.Sleep(tick)
	}
}

// guestHosts are the last octets given to guests without PeerOptions.IP, in
// order: 3 to 9 stay free for uroce's side.
var guestHosts = func() []byte {
	h := []byte{1, 2}
	for i := 10; i < 255; i++ {
		h = append(h, byte(i))
	}
	return h
}()

// pickAddrLocked returns the address for a new guest: want when set (it must
// not be in use), else the first free one of 192.0.2.1, .2, .10, .11, ...
// An address is in use while a guest holding it runs, or when a host veth
// has it. n.mu must be held.
func (n *Net) pickAddrLocked(want string) (netip.Prefix, error) {
	inUse := func(a netip.Addr) string {
		if n.used[a] {
			return "a host veth"
		}
		for _, p := range n.peers {
			if p.Addr.Addr() == a && !p.finished() {
				return "rxe peer " + p.Name
			}
		}
		return ""
	}
	if want != "" {
		pfx, err := netip.ParsePrefix(want)
		if err != nil {
			return netip.Prefix{}, err
		}
		if !pfx.Addr().Is4() || !netns.Allowed(pfx) {
			return netip.Prefix{}, fmt.Errorf("address %s: want IPv4 in 192.0.2.0/24 or 198.51.100.0/24", pfx)
		}
		if who := inUse(pfx.Addr()); who != "" {
			return netip.Prefix{}, fmt.Errorf("address %s is in use by %s", pfx.Addr(), who)
		}
		return pfx, nil
	}
	for _, h := range guestHosts {
		a := netip.AddrFrom4([4]byte{192, 0, 2, h})
		if inUse(a) == "" {
			return netip.PrefixFrom(a, 24), nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("no free address in 192.0.2.0/24")
}

// tapQueueLen is the frames a tap device holds for its guest until QEMU
// reads them (its transmit queue). A guest under emulation reads slowly,
// and the default of 1000 is a burst of 1000 UD datagrams, all of which
// ib_send_bw's server waits for: one over and it waits for good.
const tapQueueLen = 10000

// newTap creates a tap device on the bridge for one guest.
func (n *Net) newTap() (string, error) {
	n.mu.Lock()
	n.taps++
	tap := fmt.Sprintf("tap%d", n.taps)
	n.mu.Unlock()
	steps := [][]string{
		{"tuntap", "add", "dev", tap, "mode", "tap"},
		{"link", "set", tap, "mtu", strconv.Itoa(bridgePortMTU), "txqueuelen", strconv.Itoa(tapQueueLen), "master", Bridge, "up"},
	}
	for _, s := range steps {
		if err := n.ns.IP(s...); err != nil {
			return "", fmt.Errorf("create tap %s: %w", tap, err)
		}
	}
	return tap, nil
}
