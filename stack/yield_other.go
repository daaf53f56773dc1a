//go:build !linux

package stack

import "runtime"

func osYield() { runtime.Gosched() }
