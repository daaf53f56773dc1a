//go:build !linux

package perftest

import "runtime"

func yield() { runtime.Gosched() }
