package netns

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Dir is where named network namespaces are bound, as with `ip netns`.
const Dir = "/run/netns"

var (
	// ErrNoIP reports that the iproute2 `ip` command is not installed.
	ErrNoIP = errors.New("the iproute2 'ip' command is not installed")
	// ErrNotRoot reports that the caller lacks the privileges to manage
	// network namespaces (root or CAP_SYS_ADMIN and CAP_NET_ADMIN).
	ErrNotRoot = errors.New("managing network namespaces needs root")
)

var seq atomic.Uint32

// Namespace is a named network namespace, bound under Dir.
type Namespace struct {
	name string
}

// New creates a network namespace whose name is prefix followed by the
// process ID and a counter, so concurrent processes and tests never collide.
// Its loopback interface is brought up.
func New(prefix string) (*Namespace, error) {
	if prefix == "" {
		prefix = "uroce"
	}
	name := fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), seq.Add(1))
	if err := ip("netns", "add", name); err != nil {
		return nil, fmt.Errorf("create network namespace %s: %w", name, err)
	}
	n := &Namespace{name: name}
	if err := n.IP("link", "set", "lo", "up"); err != nil {
		n.Delete()
		return nil, err
	}
	return n, nil
}

// Open returns the existing namespace bound as Dir/name.
func Open(name string) (*Namespace, error) {
	if _, err := os.Stat(filepath.Join(Dir, name)); err != nil {
		return nil, fmt.Errorf("open network namespace %s: %w", name, err)
	}
	return &Namespace{name: name}, nil
}

// Name returns the namespace's name.
func (n *Namespace) Name() string { return n.name }

// Path returns the namespace's bind mount, e.g. /run/netns/NAME.
func (n *Namespace) Path() string { return filepath.Join(Dir, n.name) }

// Delete removes the namespace. Interfaces inside it are destroyed with it,
// including its end of a veth pair and therefore the other end too.
func (n *Namespace) Delete() error {
	if err := ip("netns", "delete", n.name); err != nil {
		return fmt.Errorf("delete network namespace %s: %w", n.name, err)
	}
	return nil
}

// IP runs `ip -n NAME args...` and returns its error output as the error.
func (n *Namespace) IP(args ...string) error {
	if err := ip(append([]string{"-n", n.name}, args...)...); err != nil {
		return fmt.Errorf("in network namespace %s: %w", n.name, err)
	}
	return nil
}

// SetMTU sets the MTU of dev.
func (n *Namespace) SetMTU(dev string, mtu int) error {
	return n.IP("link", "set", "dev", dev, "mtu", strconv.Itoa(mtu))
}

// SetUp brings dev up.
func (n *Namespace) SetUp(dev string) error {
	return n.IP("link", "set", "dev", dev, "up")
}

// AddAddr adds address p (e.g. 192.0.2.1/24) to dev. IPv6 addresses are added
// with nodad, so they are usable at once. Only the documentation ranges are
// accepted (see Allowed).
func (n *Namespace) AddAddr(dev string, p netip.Prefix) error {
	if !Allowed(p) {
		return fmt.Errorf("add address %s to %s: %w", p, dev, ErrAddress)
	}
	args := []string{"addr", "add", p.String(), "dev", dev}
	if p.Addr().Is6() {
		args = append(args, "nodad")
	}
	return n.IP(args...)
}

// Sysctl sets a network sysctl inside the namespace. key is in dotted form,
// e.g. "net.ipv4.conf.all.arp_ignore".
func (n *Namespace) Sysctl(key, value string) error {
	if !strings.HasPrefix(key, "net.") || strings.Contains(key, "..") || strings.Contains(key, "/") {
		return fmt.Errorf("set sysctl %s in %s: not a network sysctl", key, n.name)
	}
	path := filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
	err := n.Do(func() error {
		// /proc/sys/net shows the network namespace of the thread that
		// opens it.
		return os.WriteFile(path, []byte(value), 0)
	})
	if err != nil {
		return fmt.Errorf("set sysctl %s=%s in %s: %w", key, value, n.name, err)
	}
	return nil
}

// Interface returns the interface dev as seen inside the namespace.
func (n *Namespace) Interface(dev string) (*net.Interface, error) {
	var ifi *net.Interface
	err := n.Do(func() error {
		var err error
		ifi, err = net.InterfaceByName(dev)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("look up %s in %s: %w", dev, n.name, err)
	}
	return ifi, nil
}

// Do runs fn on the calling goroutine with its OS thread switched into the
// namespace, then switches it back. Sockets opened and XDP programs attached
// by fn belong to the namespace and stay there after Do returns. Goroutines
// started by fn do not run in the namespace.
func (n *Namespace) Do(fn func() error) error { return Do(n.name, fn) }

// Do runs fn inside the network namespace bound as Dir/name; see
// Namespace.Do. If the thread cannot be switched back, it is left locked so
// the Go runtime discards it instead of reusing it in the wrong namespace.
func Do(name string, fn func() error) error {
	target, err := unix.Open(filepath.Join(Dir, name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w", name, err)
	}
	defer unix.Close(target)

	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open current network namespace: %w", err)
	}
	defer unix.Close(orig)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		if errors.Is(err, unix.EPERM) {
			err = fmt.Errorf("%w: %w", ErrNotRoot, err)
		}
		return fmt.Errorf("enter network namespace %s: %w", name, err)
	}
	ferr := fn()
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		// Keep the thread locked: it exits with the goroutine.
		return fmt.Errorf("leave network namespace %s: %w", name, err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// AddVeth creates a veth pair with end aDev in namespace a and end bDev in
// namespace b, each with the given number of RX and TX queues (at least 1).
func AddVeth(a *Namespace, aDev string, b *Namespace, bDev string, queues int) error {
	q := strconv.Itoa(max(queues, 1))
	err := a.IP("link", "add", aDev, "numtxqueues", q, "numrxqueues", q,
		"type", "veth", "peer", "name", bDev, "netns", b.name, "numtxqueues", q, "numrxqueues", q)
	if err != nil {
		return fmt.Errorf("create veth pair %s/%s: %w", aDev, bDev, err)
	}
	return nil
}

// RxQueues returns the number of RX queues of dev.
func (n *Namespace) RxQueues(dev string) (int, error) {
	out, err := ipOutput("-n", n.name, "-j", "-d", "link", "show", "dev", dev)
	if err != nil {
		return 0, fmt.Errorf("in network namespace %s: %w", n.name, err)
	}
	var links []struct {
		NumRxQueues int `json:"num_rx_queues"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		return 0, fmt.Errorf("in network namespace %s: parse ip -j output for %s: %q", n.name, dev, out)
	}
	return links[0].NumRxQueues, nil
}

// ip runs the ip command and turns its failure into an error that carries
// its message.
func ip(args ...string) error {
	_, err := ipOutput(args...)
	return err
}

// ipOutput runs the ip command and returns its standard output.
func ipOutput(args ...string) ([]byte, error) {
	path, err := exec.LookPath("ip")
	if err != nil {
		return nil, ErrNoIP
	}
	cmd := exec.Command(path, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if strings.Contains(msg, "Operation not permitted") || strings.Contains(msg, "Permission denied") {
			return nil, fmt.Errorf("ip %s: %s: %w", strings.Join(args, " "), msg, ErrNotRoot)
		}
		if msg == "" {
			return nil, fmt.Errorf("ip %s: %w", strings.Join(args, " "), err)
		}
		return nil, fmt.Errorf("ip %s: %s", strings.Join(args, " "), msg)
	}
	return stdout.Bytes(), nil
}
