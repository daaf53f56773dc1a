package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func runArgs(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestDispatch(t *testing.T) {
	if code, _, errOut := runArgs(); code != 2 || !strings.Contains(errOut, "usage: uroce <command>") || !strings.Contains(errOut, "pcap") {
		t.Errorf("no arguments: exit %d, %q", code, errOut)
	}
	if code, out, _ := runArgs("help"); code != 0 || !strings.Contains(out, "decode or verify RoCE captures") {
		t.Errorf("help: exit %d, %q", code, out)
	}
	if code, _, errOut := runArgs("frobnicate"); code != 2 || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d, %q", code, errOut)
	}
}
