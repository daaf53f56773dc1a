package main

import (
	"strings"
	"testing"
)

func TestBenchUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"bench"}, 2, "usage: uroce bench link"},
		{[]string{"bench", "link", "extra"}, 2, `uroce bench link: unexpected argument "extra"`},
		{[]string{"bench", "lat", "extra"}, 2, `uroce bench lat: unexpected argument "extra"`},
		{[]string{"bench", "lat", "--mode", "spin"}, 2, `--mode "spin": want poll, busy or both`},
		{[]string{"bench", "lat", "--iters", "x"}, 2, "invalid value"},
		{[]string{"bench", "lat", "-h"}, 0, "-iters"},
	} {
		code, _, errOut := runArgs(c.args...)
		if code != c.code || !strings.Contains(errOut, c.err) {
			t.Errorf("%v: exit %d (want %d), stderr %q, want %q in it", c.args, code, c.code, errOut, c.err)
		}
	}
}
