package rxe

import (
	"fmt"
	"regexp"
	"strconv"
)

// CaptureStats are tcpdump's own counts at the end of a capture.
type CaptureStats struct {
	// Known is set when tcpdump printed its counts.
	Known bool
	// Captured frames were written to the file. Received frames passed
	// the filter (every frame here), including Dropped ones, which the
	// kernel dropped because tcpdump's buffer was full.
	Captured, Received, Dropped uint64
}

// Complete reports whether the file holds every frame that crossed the
// bridge while tcpdump ran: none dropped, none left unread.
func (s CaptureStats) Complete() bool {
	return s.Known && s.Dropped == 0 && s.Captured == s.Received
}

func (s CaptureStats) String() string {
	if !s.Known {
		return "tcpdump printed no counts"
	}
	c := "complete"
	if !s.Complete() {
		c = fmt.Sprintf("INCOMPLETE: %d frames missing", s.Received-min(s.Captured, s.Received))
	}
	return fmt.Sprintf("%d frames captured, %d received by filter, %d dropped by kernel (%s)", s.Captured, s.Received, s.Dropped, c)
}

var captureCountRE = regexp.MustCompile(`(?m)^(\d+) packets? (captured|received by filter|dropped by kernel)\r?$`)

// parseCaptureStats reads the counts tcpdump prints on stderr when it
// stops ("3 packets captured", "3 packets received by filter", "0
// packets dropped by kernel").
func parseCaptureStats(stderr string) CaptureStats {
	var s CaptureStats
	seen := 0
	for _, m := range captureCountRE.FindAllStringSubmatch(stderr, -1) {
		v, err := strconv.ParseUint(m[1], 10, 64)
		if err != nil {
			continue
		}
		switch m[2] {
		case "captured":
			s.Captured = v
		case "received by filter":
			s.Received = v
		case "dropped by kernel":
			s.Dropped = v
		}
		seen++
	}
	s.Known = seen == 3
	return s
}
