package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/uroce/uroce/internal/netns/netnstest"
)

func TestDemoUsage(t *testing.T) {
	for _, args := range [][]string{{"--ops", "teleport"}, {"extra"}, {"--mtu", "x"}} {
		var out, errOut strings.Builder
		if code := run(context.Background(), append([]string{"demo"}, args...), &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errOut.String())
		}
	}
	var out, errOut strings.Builder
	if code := run(context.Background(), []string{"demo", "--drop", "3"}, &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), "fault probability") {
		t.Errorf("bad probability: exit %d, %q", code, errOut.String())
	}
}

func TestDemoRuns(t *testing.T) {
	netnstest.RequireAFXDP(t)
	var out, errOut strings.Builder
	code := run(context.Background(), []string{"demo", "--count", "20", "--size", "3000", "--ops", "write,read,ud_send"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"RC WRITE", "RC READ", "UD SEND", "every byte as sent"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestDemoNotRoot checks the message without root. As root, it runs
// itself again as user nobody.
func TestDemoNotRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		// The test binary's own directory is private to root.
		dir, err := os.MkdirTemp("", "uroce-notroot")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, "uroce.test")
		data, err := os.ReadFile(os.Args[0])
		if err == nil {
			err = os.WriteFile(bin, data, 0o755)
		}
		if err == nil {
			err = os.Chmod(dir, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-test.run=^TestDemoNotRoot$", "-test.v")
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Skipf("cannot run the test as nobody: %v: %s", err, out)
		}
		if !strings.Contains(string(out), "--- PASS: TestDemoNotRoot") {
			t.Errorf("as nobody:\n%s", out)
		}
		return
	}
	var out, errOut strings.Builder
	if code := run(context.Background(), []string{"demo"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "needs root") {
		t.Errorf("exit %d: %s", code, errOut.String())
	}
}
