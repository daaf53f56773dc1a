package rxe

import (
	"strings"
	"testing"
)

func feedAll(c *console, text string) []event {
	var evs []event
	for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if ev := c.feed(l); ev != evNone {
			evs = append(evs, ev)
		}
	}
	return evs
}

func TestConsoleCutsScriptOutput(t *testing.T) {
	c := newConsole("A")
	boot := "[    1.2] virtio_net virtio0: something\r\n" +
		"rxe0 port 1: state=4: ACTIVE eth0 mtu=1500\r\n" +
		"UROCE-RXE[A]: READY rxe0 kernel=6.1.0-57-amd64 ip=192.0.2.1/24 mtu=1500 uptime=2.88\r\n" +
		"UROCE-RXE[A]: BEGIN\r\n"
	evs := feedAll(c, boot)
	if len(evs) != 2 || evs[0] != evReady || evs[1] != evBegin {
		t.Fatalf("events %v, want [ready begin]", evs)
	}
	if c.ready != "rxe0 kernel=6.1.0-57-amd64 ip=192.0.2.1/24 mtu=1500 uptime=2.88" {
		t.Errorf("ready text %q", c.ready)
	}
	feedAll(c, "  local address:  LID 0x0000\r\n\r\n5 iters in 0.01 seconds\r\n")
	if got := c.output(); got != "  local address:  LID 0x0000\n\n5 iters in 0.01 seconds\n" {
		t.Errorf("output so far %q", got)
	}
	// Output without a final newline shares the EXIT marker's line.
	if ev := c.feed("no newlineUROCE-RXE[A]: EXIT rc=3\r"); ev != evExit {
		t.Fatalf("EXIT line gave event %v", ev)
	}
	want := "  local address:  LID 0x0000\n\n5 iters in 0.01 seconds\nno newline"
	if got := c.output(); got != want {
		t.Errorf("output %q, want %q", got, want)
	}
	if c.exitCode != 3 || c.phase != phaseExited {
		t.Errorf("exit code %d phase %v, want 3 exited", c.exitCode, c.phase)
	}
	// Lines after EXIT (the power-off message) are not output.
	c.feed("[    3.9] reboot: Power down")
	if c.output() != want {
		t.Errorf("output changed after EXIT: %q", c.output())
	}
	if !strings.Contains(c.log.String(), "virtio_net virtio0") || strings.Contains(c.log.String(), "\r") {
		t.Errorf("log should keep every line without carriage returns: %q", c.log.String())
	}
}

func TestConsoleMarkersOfOtherGuestsAndEchoes(t *testing.T) {
	c := newConsole("B")
	// Another guest's tag is not this guest's marker.
	if ev := c.feed("UROCE-RXE[A]: READY x"); ev != evNone {
		t.Fatalf("foreign READY gave %v", ev)
	}
	feedAll(c, "UROCE-RXE[B]: READY y\nUROCE-RXE[B]: BEGIN")
	// A script that prints a marker of its own, or a malformed EXIT, is output.
	c.feed("UROCE-RXE[B]: READY fake")
	c.feed("UROCE-RXE[B]: EXIT rc=zero")
	if c.phase != phaseScript {
		t.Fatalf("phase %v after fake markers, want script", c.phase)
	}
	if got, want := c.output(), "UROCE-RXE[B]: READY fake\nUROCE-RXE[B]: EXIT rc=zero\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
	if ev := c.feed("UROCE-RXE[B]: EXIT rc=0"); ev != evExit || c.exitCode != 0 {
		t.Errorf("EXIT rc=0 gave %v, code %d", ev, c.exitCode)
	}
}

func TestConsoleFail(t *testing.T) {
	c := newConsole("A")
	c.feed("some boot line")
	if ev := c.feed("UROCE-RXE[A]: FAIL rxe0 not ready: state= gid1="); ev != evFail {
		t.Fatalf("FAIL gave %v", ev)
	}
	if c.fail != "rxe0 not ready: state= gid1=" || c.phase != phaseFailed {
		t.Errorf("fail %q phase %v", c.fail, c.phase)
	}
	if c.output() != "" {
		t.Errorf("output %q, want none", c.output())
	}
	if c.tail(1) != "UROCE-RXE[A]: FAIL rxe0 not ready: state= gid1=" {
		t.Errorf("tail %q", c.tail(1))
	}
}

func TestKernelPackage(t *testing.T) {
	for _, tc := range []struct {
		in, pkg, prefix string
		bad             bool
	}{
		{in: "", pkg: "linux-image-amd64", prefix: "6.1."},
		{in: "6.1", pkg: "linux-image-amd64", prefix: "6.1."},
		{in: "6.12", pkg: "linux-image-6.12-amd64", prefix: "6.12."},
		{in: "linux-image-6.1.0-57-amd64", pkg: "linux-image-6.1.0-57-amd64"},
		{in: "6", bad: true},
		{in: "6.x", bad: true},
		{in: "6.12; rm", bad: true},
		{in: "linux-image-$(x)", bad: true},
	} {
		pkg, prefix, err := kernelPackage(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("kernelPackage(%q) = %q, want an error", tc.in, pkg)
			}
			continue
		}
		if err != nil || pkg != tc.pkg || prefix != tc.prefix {
			t.Errorf("kernelPackage(%q) = %q, %q, %v; want %q, %q", tc.in, pkg, prefix, err, tc.pkg, tc.prefix)
		}
	}
}
