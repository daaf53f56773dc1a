package main

import (
	"context"
	"io"

	"github.com/uroce/uroce/internal/app/perftest"
)

func init() {
	register(&command{name: "perf", summary: "write|read|send|atomic [--lat]: perftest-compatible bandwidth and latency tests", run: runPerf})
}

// runPerf runs perftest's tools on a uroce device (internal/app/perftest):
// server without a host argument, client with one; the exchange is
// perftest 4.5's, so either side may be a stock ib_*_bw or ib_*_lat.
func runPerf(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return perftest.Main(ctx, args, stdout, stderr)
}
