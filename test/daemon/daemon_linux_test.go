// Package daemon_test runs the uroce daemon as users do: `uroce daemon`
// processes on the two ends of a veth pair, in network namespaces of the
// test's own, and unprivileged client processes (uroce pingpong and uroce
// perf with --daemon) on them, several at once; clients killed with
// SIGKILL mid-transfer, and daemons stopped and started again under
// load.
package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/uroce/uroce/client"
	"github.com/uroce/uroce/proto"
	"github.com/uroce/uroce/test/daemontest"
)

var uroceBin string

// haveLib says whether uroce's verbs libraries were built beside
// uroceBin, and libErr why not.
var (
	haveLib bool
	libErr  = "uroce's verbs libraries were not built"
)

func TestMain(m *testing.M) {
	code := func() int {
		flag.Parse()
		if os.Geteuid() != 0 {
			return m.Run() // the tests skip with the reason
		}
		if bin := os.Getenv("UROCE_DAEMON_BIN"); bin != "" {
			uroceBin = bin
			haveLib = os.Getenv("UROCE_LIBDIR") != ""
			return m.Run()
		}
		dir, err := os.MkdirTemp("", "uroce-daemon-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		os.Chmod(dir, 0o755)
		uroceBin = filepath.Join(dir, "uroce")
		cmd := exec.Command("go", "build", "-o", uroceBin, "github.com/uroce/uroce/cmd/uroce")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building uroce:", err)
			return 1
		}
		// uroce's verbs libraries, in lib/uroce beside the binary where
		// `uroce run` finds them; the tests of stock programs skip
		// without them.
		if out, err := exec.Command("../../libverbs/build.sh", filepath.Join(dir, "lib", "uroce")).CombinedOutput(); err != nil {
			libErr = fmt.Sprintf("building uroce's verbs libraries: %v\n%s", err, out)
		} else {
			haveLib = true
		}
		return m.Run()
	}()
	os.Exit(code)
}

// net2 is two namespaces joined by a veth pair, each end with a daemon.
type net2 struct{ *daemontest.Net }

func newNet(t *testing.T, mtu int) *net2 { return newNetDaemons(t, mtu, true) }

// newNetDaemons is newNet, with the daemons started or not.
func newNetDaemons(t testing.TB, mtu int, daemons bool) *net2 {
	t.Helper()
	return &net2{daemontest.New(t, daemontest.Config{Bin: uroceBin, MTU: mtu, Names: [2]string{"udA", "udB"},
		Addrs: [2]string{"192.0.2.1", "192.0.2.2"}, NoStart: !daemons, LogLevel: "debug"})}
}

// tool runs a uroce tool on daemon i, in its namespace (for the TCP
// exchange), as user nobody: clients need no privilege.
func (n *net2) tool(i int, args ...string) *exec.Cmd {
	return n.AsNobody(i, append([]string{uroceBin}, args...)...)
}

// run runs a server and a client tool and returns their outputs.
type run struct {
	cmd *exec.Cmd
	out bytes.Buffer
}

func (n *net2) launch(i int, args ...string) *run {
	r := &run{cmd: n.tool(i, args...)}
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	if err := r.cmd.Start(); err != nil {
		n.T.Fatal(err)
	}
	return r
}

func (r *run) wait(t testing.TB, limit time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		r.cmd.Process.Kill()
		<-done
		t.Fatalf("%v did not end within %v (a hang):\n%s", r.cmd.Args, limit, r.out.String())
		return nil
	}
}

func (n *net2) stat(i int) proto.Stat {
	n.T.Helper()
	c, err := client.Open(context.Background(), n.Socket[i])
	if err != nil {
		n.T.Fatal(err)
	}
	defer c.Close()
	st, err := c.Stat(0)
	if err != nil {
		n.T.Fatal(err)
	}
	return *st
}

func daemonFlag(n *net2, i int) string { return "--daemon=" + n.Socket[i] }

// TestClientsAtOnce: two pairs of unprivileged clients at once, on the
// two daemons, each pair over its own QPs: pingpong and perftest.
func TestClientsAtOnce(t *testing.T) {
	n := newNet(t, 9000)
	s1 := n.launch(0, "pingpong", daemonFlag(n, 0), "-p", "18601", "-n", "500", "-s", "4096", "--verify")
	s2 := n.launch(0, "perf", "write", daemonFlag(n, 0), "-p", "18602", "-s", "65536", "-n", "2000")
	time.Sleep(300 * time.Millisecond)
	c1 := n.launch(1, "pingpong", daemonFlag(n, 1), "-p", "18601", "-n", "500", "-s", "4096", "--verify", n.IP[0].String())
	c2 := n.launch(1, "perf", "write", daemonFlag(n, 1), "-p", "18602", "-s", "65536", "-n", "2000", n.IP[0].String())
	for _, r := range []*run{c1, c2, s1, s2} {
		if err := r.wait(t, 2*time.Minute); err != nil {
			t.Errorf("%v: %v\n%s", r.cmd.Args[5:], err, r.out.String())
		}
	}
	if !strings.Contains(c1.out.String(), "500 iters") || !strings.Contains(s2.out.String(), "65536") {
		t.Errorf("outputs:\n%s\n%s", c1.out.String(), s2.out.String())
	}
	for i := range 2 {
		if st := n.stat(i); st.Device.Counters["rcv_icrc_err"] != 0 {
			t.Errorf("daemon %d: icrc errors %d", i, st.Device.Counters["rcv_icrc_err"])
		}
	}
}

// TestKilledClient: a client killed with SIGKILL in the middle of a
// transfer takes its objects with it; the other clients go on.
func TestKilledClient(t *testing.T) {
	n := newNet(t, 9000)
	victimS := n.launch(0, "perf", "write", daemonFlag(n, 0), "-p", "18611", "-s", "65536", "-n", "100000000")
	otherS := n.launch(0, "pingpong", daemonFlag(n, 0), "-p", "18612", "-n", "3000", "--verify")
	time.Sleep(300 * time.Millisecond)
	victimC := n.launch(1, "perf", "write", daemonFlag(n, 1), "-p", "18611", "-s", "65536", "-n", "100000000", n.IP[0].String())
	otherC := n.launch(1, "pingpong", daemonFlag(n, 1), "-p", "18612", "-n", "3000", "--verify", n.IP[0].String())
	// Let the transfer run, then kill its writer.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if st := n.stat(1); len(st.QPs) >= 2 && st.Device.Counters["sent_pkts"] > 2000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no transfer under way:\n%s\n%s", victimC.out.String(), victimS.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	before := len(n.stat(1).Sessions)
	victimC.cmd.Process.Signal(syscall.SIGKILL)
	victimC.wait(t, 30*time.Second)
	victimS.cmd.Process.Signal(syscall.SIGKILL)
	victimS.wait(t, 30*time.Second)
	for _, r := range []*run{otherC, otherS} {
		if err := r.wait(t, 2*time.Minute); err != nil {
			t.Errorf("the other client failed: %v\n%s", err, r.out.String())
		}
	}
	// The killed clients' sessions and QPs are gone.
	for i := range 2 {
		deadline := time.Now().Add(10 * time.Second)
		for {
			st := n.stat(i)
			if len(st.Sessions) == 1 && len(st.QPs) == 0 { // the stat client itself
				break
			}
			if time.Now().After(deadline) {
				b, _ := json.MarshalIndent(st, "", " ")
				t.Fatalf("daemon %d keeps objects of clients that are gone (had %d sessions):\n%s", i, before, b)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestDaemonRestart: a daemon stopped under load gives its clients
// errors, not hangs; after a restart new clients work.
func TestDaemonRestart(t *testing.T) {
	n := newNet(t, 1500)
	s := n.launch(0, "perf", "write", daemonFlag(n, 0), "-p", "18621", "-s", "65536", "-n", "100000000")
	time.Sleep(300 * time.Millisecond)
	c := n.launch(1, "perf", "write", daemonFlag(n, 1), "-p", "18621", "-s", "65536", "-n", "100000000", n.IP[0].String())
	deadline := time.Now().Add(30 * time.Second)
	for n.stat(1).Device.Counters["sent_pkts"] < 1000 {
		if time.Now().After(deadline) {
			t.Fatalf("no transfer:\n%s", c.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := n.Stop(1); err != nil {
		t.Fatalf("stopping daemon 1: %v\n%s", err, n.Log(1))
	}
	if _, err := os.Stat(n.Socket[1]); !os.IsNotExist(err) {
		t.Errorf("socket left after the daemon stopped: %v", err)
	}
	if err := c.wait(t, time.Minute); err == nil {
		t.Errorf("the client of the stopped daemon succeeded:\n%s", c.out.String())
	}
	s.wait(t, 2*time.Minute) // its peer vanished: it fails too, or ends, but must not hang
	// Started again, the daemon serves new clients (the XDP program and
	// the queues were released).
	n.Start(1)
	s2 := n.launch(0, "pingpong", daemonFlag(n, 0), "-p", "18622", "-n", "200")
	time.Sleep(300 * time.Millisecond)
	c2 := n.launch(1, "pingpong", daemonFlag(n, 1), "-p", "18622", "-n", "200", n.IP[0].String())
	for _, r := range []*run{c2, s2} {
		if err := r.wait(t, time.Minute); err != nil {
			t.Errorf("after the restart: %v\n%s", err, r.out.String())
		}
	}
	// kill -9 of a daemon: the next one comes up cleanly too.
	n.Kill(1)
	n.Start(1)
}

// TestSecondDaemonRefused: one daemon per interface, and the message
// names the one that runs.
func TestSecondDaemonRefused(t *testing.T) {
	n := newNet(t, 1500)
	out, err := exec.Command("ip", "netns", "exec", n.NS[0].Name(), uroceBin, "daemon", "-d", n.Dev[0],
		"--socket", n.Socket[0]+".2").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "already runs on "+n.Dev[0]) || !strings.Contains(string(out), "pid") {
		t.Fatalf("second daemon: %v: %s", err, out)
	}
}

// TestClientRefused: a client outside the daemon's users and group is
// refused by its credentials, with the reason on both sides, even where
// the socket's permissions would let it connect.
func TestClientRefused(t *testing.T) {
	n := newNet(t, 1500)
	if err := os.Chmod(n.Socket[0], 0o666); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("setpriv", "--reuid=1", "--regid=1", "--clear-groups", uroceBin, "stat", "--socket", n.Socket[0]).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "uid 1 may not use uroce0") || !strings.Contains(string(out), "group nogroup") {
		t.Fatalf("client of uid 1: %v: %s", err, out)
	}
	// As nobody, in the daemon's group, it is let in.
	if out, err := n.tool(0, "stat", "--socket", n.Socket[0]).CombinedOutput(); err != nil {
		t.Fatalf("client in the group: %v: %s", err, out)
	}
	if err := n.Stop(0); err != nil {
		t.Fatal(err)
	}
	if log := n.Log(0); !strings.Contains(log, "client refused") || !strings.Contains(log, "uid 1 may not use") {
		t.Fatalf("the daemon's log does not tell:\n%s", log)
	}
}
