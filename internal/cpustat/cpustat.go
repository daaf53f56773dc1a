// Package cpustat reads the machine's CPU time accounting, so that a
// benchmark can report how much of the run the hypervisor took away
// (steal time): on a shared virtual machine the same code runs at very
// different speeds from one run to the next, and the steal share is one
// of the reasons that shows.
package cpustat

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"strconv"
	"time"
)

// Times are the machine's CPU times since boot, in clock ticks, summed
// over CPUs, from the first line of /proc/stat.
type Times struct {
	Total, Steal uint64
}

// Read returns the machine's CPU times now. It fails where /proc/stat
// is absent (not Linux).
func Read() (Times, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return Times{}, err
	}
	return parse(b)
}

// parse reads the "cpu" line of /proc/stat: user nice system idle iowait
// irq softirq steal guest guest_nice. Guest time is counted in user time
// already and is left out of the total.
func parse(b []byte) (Times, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 9 || string(f[0]) != "cpu" {
			continue
		}
		var t Times
		for i, v := range f[1:min(len(f), 9)] {
			n, err := strconv.ParseUint(string(v), 10, 64)
			if err != nil {
				return Times{}, errors.New("/proc/stat: bad cpu line")
			}
			t.Total += n
			if i == 7 {
				t.Steal = n
			}
		}
		return t, nil
	}
	return Times{}, errors.New("/proc/stat: no cpu line")
}

// StealShare returns the share of CPU time, 0 to 1, stolen between a and
// b (a read before b).
func StealShare(a, b Times) float64 {
	if b.Total <= a.Total {
		return 0
	}
	return float64(b.Steal-a.Steal) / float64(b.Total-a.Total)
}

// ProcessCPU returns the CPU time the process has used so far, user and
// system: time the hypervisor stole is not in it, so work per CPU second
// varies less between runs on a shared machine than work per second.
func ProcessCPU() (time.Duration, error) { return processCPU() }
