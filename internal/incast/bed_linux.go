package incast

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/uroce/uroce/internal/netns"
)

// Interface names. Every host has one interface, HostDev, whose peer is a
// port of the bridge in the switch namespace.
const (
	// HostDev is the interface of every sender and of the receiver.
	HostDev = "veth0"
	// BridgeDev is the bridge in the switch namespace.
	BridgeDev = "br0"
	// ReceiverPort is the bridge port toward the receiver: its egress
	// is the bottleneck.
	ReceiverPort = "sw-r"
)

// SenderPort returns the name of the bridge port toward sender i (1-based).
func SenderPort(i int) string { return "sw-s" + strconv.Itoa(i) }

// ReceiverAddr is the receiver's address.
var ReceiverAddr = netip.MustParsePrefix("192.0.2.2/24")

// SenderAddr returns the address of sender i (1-based): 192.0.2.(10+i)/24.
func SenderAddr(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + i)}), 24)
}

// hostMAC is the MAC address of a host's interface: locally administered,
// ending in the last byte of its address, so captures read easily.
func hostMAC(a netip.Prefix) net.HardwareAddr {
	ip := a.Addr().As4()
	return net.HardwareAddr{0x02, 0x00, ip[0], ip[1], ip[2], ip[3]}
}

// Host is a sender or the receiver: a namespace with one interface into the
// switch.
type Host struct {
	// Name is "r" for the receiver and "s1" to "sN" for the senders.
	Name string
	NS   *netns.Namespace
	// Dev is the host's interface (HostDev), with address Addr and MAC
	// address MAC; Index is its interface index inside NS.
	Dev   string
	Addr  netip.Prefix
	MAC   net.HardwareAddr
	Index int
	// Port is the host's port on the bridge, in the switch namespace.
	Port string
}

// hostSysctls are set in every namespace of a bed: netns.TestSysctls (ARP
// answered only by the interface that owns the address), and no IPv6, so
// that the bottleneck carries the test's traffic only (no router
// solicitations or MLD reports).
var hostSysctls = append(append([][2]string(nil), netns.TestSysctls...),
	[2]string{"net.ipv6.conf.all.disable_ipv6", "1"},
	[2]string{"net.ipv6.conf.default.disable_ipv6", "1"},
)

// switchSysctls are set in the switch namespace, where they exist: bridged
// frames skip the (empty) IP and ARP filter hooks.
var switchSysctls = [][2]string{
	{"net.bridge.bridge-nf-call-iptables", "0"},
	{"net.bridge.bridge-nf-call-ip6tables", "0"},
	{"net.bridge.bridge-nf-call-arptables", "0"},
}

// Bed is the incast test network: senders and a receiver joined by a
// bridge whose port toward the receiver is the bottleneck. Its methods may
// be called from any goroutine; what its accessors return stays valid
// until Close.
type Bed struct {
	// Set by New, then read only.
	cfg      Config
	sw       *netns.Namespace
	recv     *Host
	senders  []*Host
	commands []string

	mu     sync.Mutex
	step   *stepMarker
	closed bool
}

// New builds the bed described by cfg (see the package documentation for
// the topology). On failure everything created so far is removed. The
// caller removes the bed with Close. Errors wrap ErrUnsupported when the
// kernel lacks the marking discipline asked for (or netem, for Delay), and
// netns.ErrNotRoot without the privileges.
func New(cfg Config) (_ *Bed, err error) {
	cfg, err = cfg.resolve()
	if err != nil {
		return nil, err
	}
	for _, tool := range []string{"ip", "tc", "bridge"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("incast bed: the iproute2 %q command is not installed", tool)
		}
	}
	b := &Bed{cfg: cfg}
	defer func() {
		if err != nil {
			b.Close()
			err = fmt.Errorf("incast bed: %w", err)
		}
	}()
	if b.sw, err = netns.New(cfg.Prefix + "-sw"); err != nil {
		return nil, err
	}
	for _, kv := range hostSysctls {
		if err = b.sw.Sysctl(kv[0], kv[1]); err != nil {
			return nil, err
		}
	}
	for _, kv := range switchSysctls {
		// Absent without bridge netfilter; nothing to turn off then.
		_ = b.sw.Sysctl(kv[0], kv[1])
	}
	// No STP: ports forward as soon as they are up. No address: the
	// switch's own stack takes no part in the traffic.
	if err = b.sw.IP("link", "add", BridgeDev, "type", "bridge", "stp_state", "0", "mcast_snooping", "0"); err != nil {
		return nil, err
	}
	if err = b.sw.SetUp(BridgeDev); err != nil {
		return nil, err
	}
	if err = b.addHost("r", ReceiverAddr, ReceiverPort); err != nil {
		return nil, err
	}
	for i := 1; i <= cfg.Senders; i++ {
		if err = b.addHost("s"+strconv.Itoa(i), SenderAddr(i), SenderPort(i)); err != nil {
			return nil, err
		}
	}
	if err = b.staticPaths(); err != nil {
		return nil, err
	}
	if err = b.bottleneck(); err != nil {
		return nil, err
	}
	if cfg.Delay > 0 {
		for _, s := range b.senders {
			if err = b.tc("qdisc", "add", "dev", s.Port, "root", "handle", "1:", "netem",
				"delay", usec(cfg.Delay), "limit", "100000"); err != nil {
				return nil, fmt.Errorf("delay: %w", err)
			}
		}
	}
	return b, nil
}

// addHost creates a host namespace and its veth pair into the bridge. The
// host's end gets the MTU, address and MAC; its peer, the bridge port, the
// same MTU; both are up, as netns.NewPair leaves the ends of a pair. The
// host is the receiver when name is "r", else the next sender; it is
// registered as soon as its namespace exists, so that Close deletes it
// whatever fails next.
func (b *Bed) addHost(name string, addr netip.Prefix, port string) error {
	ns, err := netns.New(b.cfg.Prefix + "-" + name)
	if err != nil {
		return err
	}
	h := &Host{Name: name, NS: ns, Dev: HostDev, Addr: addr, MAC: hostMAC(addr), Port: port}
	if name == "r" {
		b.recv = h
	} else {
		b.senders = append(b.senders, h)
	}
	for _, kv := range hostSysctls {
		if err := ns.Sysctl(kv[0], kv[1]); err != nil {
			return err
		}
	}
	if err := netns.AddVeth(ns, HostDev, b.sw, port, 1); err != nil {
		return err
	}
	mtu := b.cfg.MTU
	steps := []func() error{
		func() error { return ns.IP("link", "set", "dev", HostDev, "address", h.MAC.String()) },
		func() error { return ns.SetMTU(HostDev, mtu) },
		func() error { return ns.AddAddr(HostDev, addr) },
		func() error { return ns.SetUp(HostDev) },
		func() error { return b.sw.SetMTU(port, mtu) },
		func() error { return b.sw.IP("link", "set", "dev", port, "master", BridgeDev) },
		func() error { return b.sw.SetUp(port) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	ifi, err := ns.Interface(HostDev)
	if err != nil {
		return err
	}
	h.Index = ifi.Index
	return nil
}

// staticPaths makes the senders and the receiver find each other without
// ARP, and the bridge forward to each host without learning: a full
// bottleneck queue (or a one-way flow that lets a learned entry age out)
// must not lose the neighbour or flood the frames to every port.
func (b *Bed) staticPaths() error {
	neigh := func(on *Host, to *Host) error {
		return on.NS.IP("neigh", "replace", to.Addr.Addr().String(), "lladdr", to.MAC.String(),
			"dev", on.Dev, "nud", "permanent")
	}
	for _, s := range b.senders {
		if err := neigh(s, b.recv); err != nil {
			return err
		}
		if err := neigh(b.recv, s); err != nil {
			return err
		}
	}
	for _, h := range append([]*Host{b.recv}, b.senders...) {
		if _, err := run("bridge", "-n", b.sw.Name(), "fdb", "replace", h.MAC.String(), "dev", h.Port, "master", "static"); err != nil {
			return fmt.Errorf("in network namespace %s: %w", b.sw.Name(), err)
		}
	}
	return nil
}

// bottleneck sets up the queue on the egress of the receiver's port: tbf at
// the bottleneck rate, with the marking discipline as its child.
func (b *Bed) bottleneck() error {
	c := &b.cfg
	m := &c.Marking
	rate := strconv.FormatUint(c.Bottleneck, 10) + "bit"
	limit := strconv.Itoa(c.Limit)
	if err := b.tc("qdisc", "add", "dev", ReceiverPort, "root", "handle", rootHandle, "tbf",
		"rate", rate, "burst", strconv.Itoa(c.Burst), "limit", limit); err != nil {
		return fmt.Errorf("bottleneck: %w", err)
	}
	child := []string{"qdisc", "replace", "dev", ReceiverPort, "parent", childParent, "handle", childHandle}
	switch m.Kind {
	case TailDrop, Step:
		child = append(child, "bfifo", "limit", limit)
	case RED:
		child = append(child, "red", "limit", limit, "min", strconv.Itoa(m.Min), "max", strconv.Itoa(m.Max),
			"avpkt", strconv.Itoa(c.Frame()), "burst", strconv.Itoa(m.Burst), "probability", "1",
			"bandwidth", rate, "ecn")
	case FQCoDel:
		child = append(child, "fq_codel", "limit", strconv.Itoa(max(c.Limit/c.Frame(), 2)),
			"target", usec(m.Target), "interval", usec(m.Interval), "ce_threshold", usec(m.CEThreshold),
			"quantum", strconv.Itoa(c.Frame()), "ecn")
	}
	if err := b.tc(child...); err != nil {
		return fmt.Errorf("bottleneck %v: %w", m.Kind, err)
	}
	if m.Kind == Step || m.Kind == TailDrop {
		// The Step marker; on a tail-drop bed the same program, marking
		// nothing, measures the backlog arrivals find, where the kernel
		// can run it.
		mark := m.Kind == Step
		s, err := attachStep(b.sw, ReceiverPort, c, mark)
		switch {
		case errors.Is(err, ErrUnsupported) && !mark:
		case err != nil:
			return fmt.Errorf("bottleneck: %w", err)
		default:
			b.step = s
			what := "the bytes each packet finds in the qdisc (no marks)"
			if mark {
				what = fmt.Sprintf("CE on ECN-capable packets that find %d bytes or more in the qdisc", m.Min)
			}
			b.commands = append(b.commands, fmt.Sprintf("tcx egress dev %s: BPF program %s: %s", ReceiverPort, stepProgName, what))
		}
	}
	return nil
}

// usec formats d for tc in whole microseconds (at least 1).
func usec(d time.Duration) string {
	return strconv.FormatInt(max(d.Microseconds(), 1), 10) + "us"
}

// tc runs `tc -n SWITCH args...` and records the command.
func (b *Bed) tc(args ...string) error {
	if _, err := run("tc", append([]string{"-n", b.sw.Name()}, args...)...); err != nil {
		return err
	}
	b.commands = append(b.commands, "tc "+strings.Join(args, " "))
	return nil
}

// run runs an iproute2 command and returns its output; its error carries
// the command's message, and wraps ErrUnsupported when tc does not know a
// qdisc (the kernel lacks it).
func run(name string, args ...string) ([]byte, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("the iproute2 %q command is not installed", name)
	}
	cmd := exec.Command(path, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		line := name + " " + strings.Join(args, " ")
		switch {
		case strings.Contains(msg, "qdisc kind is unknown"), strings.Contains(msg, "Unknown qdisc"):
			return nil, fmt.Errorf("%s: %s: %w", line, msg, ErrUnsupported)
		case strings.Contains(msg, "Operation not permitted"), strings.Contains(msg, "Permission denied"):
			return nil, fmt.Errorf("%s: %s: %w", line, msg, netns.ErrNotRoot)
		case msg == "":
			return nil, fmt.Errorf("%s: %w", line, err)
		}
		return nil, fmt.Errorf("%s: %s", line, msg)
	}
	return stdout.Bytes(), nil
}

// Config returns the bed's configuration with every default filled in: the
// thresholds, limit and burst actually configured.
func (b *Bed) Config() Config { return b.cfg }

// Switch returns the switch namespace, which holds the bridge and its
// ports.
func (b *Bed) Switch() *netns.Namespace { return b.sw }

// Receiver returns the receiver.
func (b *Bed) Receiver() *Host { return b.recv }

// Senders returns the senders, s1 first.
func (b *Bed) Senders() []*Host { return append([]*Host(nil), b.senders...) }

// Sender returns sender i (1-based).
func (b *Bed) Sender(i int) *Host { return b.senders[i-1] }

// Commands returns the tc commands that set up the bottleneck (and the
// delay), as run in the switch namespace, and a line describing the Step
// marker when there is one.
func (b *Bed) Commands() []string { return append([]string(nil), b.commands...) }

// QueueStats returns the bottleneck's counters.
func (b *Bed) QueueStats() (Stats, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return Stats{}, errors.New("queue statistics: bed closed")
	}
	out, err := run("tc", "-n", b.sw.Name(), "-s", "-j", "qdisc", "show", "dev", ReceiverPort)
	if err != nil {
		return Stats{}, fmt.Errorf("queue statistics: %w", err)
	}
	st, err := parseStats(out)
	if err != nil {
		return Stats{}, err
	}
	if b.step != nil {
		c, err := b.step.counters()
		if err != nil {
			return Stats{}, fmt.Errorf("queue statistics: %w", err)
		}
		st.Marks, st.Arrivals, st.BacklogSum = c.Marked, c.Arrivals, c.Backlog
	}
	return st, nil
}

// Close deletes the bed: the Step marker, then every namespace, and with
// them the bridge, the veth pairs and the qdiscs. Calls after the first do
// nothing.
func (b *Bed) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	var errs []error
	if b.step != nil {
		errs = append(errs, b.step.Close())
		b.step = nil
	}
	for _, h := range b.senders {
		errs = append(errs, h.NS.Delete())
	}
	if b.recv != nil {
		errs = append(errs, b.recv.NS.Delete())
	}
	if b.sw != nil {
		errs = append(errs, b.sw.Delete())
	}
	return errors.Join(errs...)
}
