package main

import (
	"context"
	"os"
	"strings"
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
		cmd := netnstest.AsNobody(t, "TestDemoNotRoot")
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
