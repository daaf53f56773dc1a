//go:build !linux

package spin

import "runtime"

func osYield() { runtime.Gosched() }
