package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/uroce/uroce/internal/demo"
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
		cmd := netnstest.AsNobody(t, "TestDemoNotRoot")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			t.Fatalf("as nobody: %v:\n%s", err, out)
		case err != nil:
			t.Skipf("cannot start the test as nobody: %v", err)
		case !strings.Contains(string(out), "--- PASS: TestDemoNotRoot"):
			t.Fatalf("as nobody, the test did not pass:\n%s", out)
		}
		return
	}
	var out, errOut strings.Builder
	code := run(context.Background(), []string{"demo"}, &out, &errOut)
	if want := "uroce demo: " + demo.ErrNotRoot.Error() + "\n"; code != 1 || errOut.String() != want {
		t.Errorf("exit %d, stderr %q, want exit 1 and %q", code, errOut.String(), want)
	}
}
