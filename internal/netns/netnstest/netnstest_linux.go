// Package netnstest gives privileged tests their own network: helpers that
// skip a test cleanly when it cannot run (not root, no `ip`, no AF_XDP) and
// namespaces and veth pairs that are removed with t.Cleanup.
package netnstest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/uroce/uroce/internal/netns"
)

// RequireRoot skips the test unless it runs as root with iproute2 installed.
func RequireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("skipping: needs root (network namespaces, XDP, AF_XDP)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		tb.Skip("skipping: needs the iproute2 'ip' command")
	}
}

// RequireAFXDP skips the test unless it runs as root on a kernel with AF_XDP
// sockets.
func RequireAFXDP(tb testing.TB) {
	tb.Helper()
	RequireRoot(tb)
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	switch {
	case err == nil:
		unix.Close(fd)
	case errors.Is(err, unix.EAFNOSUPPORT):
		tb.Skip("skipping: the kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS)")
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		tb.Skip("skipping: creating AF_XDP sockets is not permitted")
	default:
		tb.Skipf("skipping: cannot create an AF_XDP socket: %v", err)
	}
}

// New creates a network namespace removed when the test ends.
func New(tb testing.TB, prefix string) *netns.Namespace {
	tb.Helper()
	RequireRoot(tb)
	n, err := netns.New(prefix)
	if errors.Is(err, netns.ErrNotRoot) {
		tb.Skipf("skipping: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := n.Delete(); err != nil {
			tb.Error(err)
		}
	})
	return n
}

// NewPair creates two namespaces joined by a veth pair (see netns.NewPair),
// removed when the test ends.
func NewPair(tb testing.TB, cfg netns.PairConfig) *netns.Pair {
	tb.Helper()
	RequireRoot(tb)
	p, err := netns.NewPair(cfg)
	if errors.Is(err, netns.ErrNotRoot) {
		tb.Skipf("skipping: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := p.Close(); err != nil {
			tb.Error(err)
		}
	})
	return p
}

// AsNobody returns a command that runs the test binary again as user
// nobody (uid and gid 65534), running the test named test only, verbose,
// so that a test run as root can check what happens without privileges.
// The binary is run from a copy in a directory anyone may read (the test's
// own directory is private to root), removed when the test ends.
func AsNobody(tb testing.TB, test string) *exec.Cmd {
	tb.Helper()
	dir, err := os.MkdirTemp("", "uroce-notroot")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, filepath.Base(os.Args[0]))
	data, err := os.ReadFile(os.Args[0])
	if err == nil {
		err = os.WriteFile(bin, data, 0o755)
	}
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^"+test+"$", "-test.v")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	return cmd
}
