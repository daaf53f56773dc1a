// Package daemontest runs uroce daemons as their users do, for the tests
// of whole programs on them: two network namespaces of the test's own
// joined by a veth pair, a `uroce daemon` process on each end, and
// programs run as user nobody (clients need no privilege). Everything is
// removed when the test ends.
package daemontest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/netns"
	"github.com/uroce/uroce/internal/netns/netnstest"
	"github.com/uroce/uroce/proto"
)

// Config says how to build a Net.
type Config struct {
	Bin      string    // the uroce binary the daemons run
	MTU      int       // of both veth ends
	Names    [2]string // the namespaces' name prefixes
	Addrs    [2]string // the ends' addresses, in a /24
	NoStart  bool      // leave the daemons to Start
	LogLevel string    // the daemons' --log-level (default info)
}

// Net is the two ends, each with its daemon.
type Net struct {
	T      testing.TB
	Bin    string
	NS     [2]*netns.Namespace
	Dev    [2]string // va and vb
	IP     [2]netip.Addr
	Socket [2]string // the daemons' sockets, in a directory nobody may enter
	// Env, when set, is the environment of the commands AsNobody makes.
	Env []string

	logLevel string
	d        [2]*exec.Cmd
	logs     [2]*Buffer
}

// New sets the namespaces and the veth pair up and starts both daemons
// (unless cfg.NoStart). It skips the test without root or AF_XDP.
func New(t testing.TB, cfg Config) *Net {
	t.Helper()
	netnstest.RequireAFXDP(t)
	n := &Net{T: t, Bin: cfg.Bin, Dev: [2]string{"va", "vb"}, logLevel: cfg.LogLevel}
	if n.logLevel == "" {
		n.logLevel = "info"
	}
	for i := range n.NS {
		n.IP[i] = netip.MustParseAddr(cfg.Addrs[i])
		n.NS[i] = netnstest.New(t, cfg.Names[i])
	}
	if err := netns.AddVeth(n.NS[0], n.Dev[0], n.NS[1], n.Dev[1], 1); err != nil {
		t.Fatal(err)
	}
	for i := range n.NS {
		if err := n.NS[i].SetMTU(n.Dev[i], cfg.MTU); err != nil {
			t.Fatal(err)
		}
		if err := n.NS[i].AddAddr(n.Dev[i], netip.PrefixFrom(n.IP[i], 24)); err != nil {
			t.Fatal(err)
		}
		if err := n.NS[i].SetUp(n.Dev[i]); err != nil {
			t.Fatal(err)
		}
	}
	// The clients run as nobody: the sockets' directory must be theirs
	// to reach (t.TempDir's parent is not).
	dir, err := os.MkdirTemp("", "uroce-daemons-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	for i := range n.Socket {
		n.Socket[i] = filepath.Join(dir, fmt.Sprintf("uroce%d.sock", i))
	}
	t.Cleanup(func() {
		for i := range n.d {
			if err := n.Stop(i); err != nil {
				t.Error(err)
			}
		}
		if t.Failed() {
			for i := range n.logs {
				if n.logs[i] != nil {
					t.Logf("daemon %d:\n%s", i, n.logs[i])
				}
			}
		}
	})
	if !cfg.NoStart {
		for i := range n.Socket {
			n.Start(i)
		}
	}
	return n
}

// Start runs daemon i (again) and waits until it answers.
func (n *Net) Start(i int) {
	n.T.Helper()
	cmd := exec.Command("ip", "netns", "exec", n.NS[i].Name(), n.Bin, "daemon", "-d", n.Dev[i],
		"--socket", n.Socket[i], "--xdp-mode", "generic", "--log-level", n.logLevel, "--group", "nogroup")
	if n.logs[i] == nil {
		n.logs[i] = &Buffer{}
	}
	cmd.Stdout, cmd.Stderr = n.logs[i], n.logs[i]
	if err := cmd.Start(); err != nil {
		n.T.Fatal(err)
	}
	n.d[i] = cmd
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := n.Stat(i)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			n.T.Fatalf("daemon %d does not answer: %v\n%s", i, err, n.logs[i])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops daemon i with SIGTERM and waits for it; it says so when the
// daemon did not stop.
func (n *Net) Stop(i int) error {
	cmd := n.d[i]
	if cmd == nil {
		return nil
	}
	n.d[i] = nil
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("daemon %d: %w", i, err)
		}
		return nil
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("daemon %d did not stop on SIGTERM", i)
	}
}

// Kill ends daemon i with SIGKILL, as a crash would.
func (n *Net) Kill(i int) {
	if cmd := n.d[i]; cmd != nil {
		n.d[i] = nil
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
	}
}

// Log is what daemon i printed.
func (n *Net) Log(i int) string {
	if n.logs[i] == nil {
		return ""
	}
	return n.logs[i].String()
}

// AsNobody is the command that runs args in end i's namespace (where the
// programs' TCP exchanges go) as user nobody.
func (n *Net) AsNobody(i int, args ...string) *exec.Cmd {
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.NS[i].Name(),
		"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}, args...)...)
	cmd.Env = n.Env
	return cmd
}

// Stat is `uroce stat --json` of daemon i (which leaves its own session
// out).
func (n *Net) Stat(i int) (*proto.Stat, error) {
	out, err := n.AsNobody(i, n.Bin, "stat", "--json", "--socket", n.Socket[i]).Output()
	if err != nil {
		return nil, fmt.Errorf("uroce stat: %w: %s", err, out)
	}
	var st proto.Stat
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("uroce stat: %w: %s", err, out)
	}
	return &st, nil
}

// Buffer is a bytes.Buffer that a process writes while the test reads.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
