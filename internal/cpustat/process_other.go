//go:build !linux

package cpustat

import (
	"errors"
	"time"
)

func processCPU() (time.Duration, error) {
	return 0, errors.New("process cpu time: not on this system")
}
