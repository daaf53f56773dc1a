package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestPingpongRefusals: the stock tools' options for on-demand paging,
// completion timestamps and device memory are refused with the stock
// tools' messages on a uroce device, which has none of them; -N is
// taken (the new post send API sends the same packets).
func TestPingpongRefusals(t *testing.T) {
	sockA, _ := statDaemons(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"-o"}, "The device isn't ODP capable or does not support RC send and receive with ODP"},
		{[]string{"-O"}, "The device isn't ODP capable or does not support RC send and receive with ODP"},
		{[]string{"-o", "-P"}, "The device isn't ODP capable or does not support RC send and receive with ODP"},
		{[]string{"-P"}, "prefetch is valid only with on-demand memory region"},
		{[]string{"--ts"}, "The device isn't completion timestamp capable"},
		{[]string{"-j"}, "Device doesn't support dm allocation"},
		{[]string{"-j", "-o"}, "DM memory region can't be on demand"},
	} {
		var out, errb bytes.Buffer
		args := append([]string{"--daemon=" + sockA, "-d", "uroce0"}, c.args...)
		if code := runPingpong(ctx, args, &out, &errb); code != 1 || strings.TrimSpace(errb.String()) != c.msg {
			t.Errorf("pingpong %v: exit %d, stderr %q; want 1, %q", c.args, code, errb.String(), c.msg)
		}
	}
}
