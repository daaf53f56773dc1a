package bpf

import (
	"os"
	"testing"
)

func requireBPF(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: loading XDP programs needs root")
	}
}
