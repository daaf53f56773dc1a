package rxe

import (
	"strconv"
	"strings"
)

// Marker lines the guest's /init prints on the serial console, after the
// tag "UROCE-RXE[NAME]: ".
const (
	markReady = "READY"    // rxe0 is ACTIVE with its IPv4 GID
	markBegin = "BEGIN"    // the script's output follows
	markExit  = "EXIT rc=" // the script ended; its status follows
	markFail  = "FAIL"     // the guest could not get ready; a reason follows
)

// event is what a console line meant.
type event int

const (
	evNone event = iota
	evReady
	evBegin
	evExit
	evFail
)

// phase is how far the guest has come.
type phase int

const (
	phaseBoot phase = iota
	phaseReady
	phaseScript
	phaseExited
	phaseFailed
)

// console follows one guest's serial console line by line. It keeps the
// whole log and cuts out the script's output, between the BEGIN and EXIT
// markers, so that boot messages never mix with it.
type console struct {
	tag      string // "UROCE-RXE[NAME]: "
	phase    phase
	log      strings.Builder
	out      strings.Builder
	ready    string // text after READY
	exitCode int
	fail     string // text after FAIL
}

func newConsole(name string) *console {
	return &console{tag: "UROCE-RXE[" + name + "]: "}
}

// feed takes one console line without its newline; a trailing carriage
// return (the serial line discipline's) is dropped.
func (c *console) feed(line string) event {
	line = strings.TrimSuffix(line, "\r")
	c.log.WriteString(line)
	c.log.WriteByte('\n')
	i := strings.Index(line, c.tag)
	if i < 0 {
		if c.phase == phaseScript {
			c.out.WriteString(line)
			c.out.WriteByte('\n')
		}
		return evNone
	}
	before, rest := line[:i], line[i+len(c.tag):]
	switch {
	case c.phase == phaseBoot && strings.HasPrefix(rest, markReady):
		c.phase = phaseReady
		c.ready = strings.TrimSpace(strings.TrimPrefix(rest, markReady))
		return evReady
	case c.phase == phaseReady && rest == markBegin:
		c.phase = phaseScript
		return evBegin
	case c.phase == phaseScript && strings.HasPrefix(rest, markExit):
		code, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(rest, markExit)))
		if err != nil {
			break
		}
		// Output that did not end in a newline shares the marker's line.
		c.out.WriteString(before)
		c.exitCode = code
		c.phase = phaseExited
		return evExit
	case (c.phase == phaseBoot || c.phase == phaseReady) && strings.HasPrefix(rest, markFail):
		c.fail = strings.TrimSpace(strings.TrimPrefix(rest, markFail))
		c.phase = phaseFailed
		return evFail
	}
	// A tag out of place (say, a script that echoes one) is plain output.
	if c.phase == phaseScript {
		c.out.WriteString(line)
		c.out.WriteByte('\n')
	}
	return evNone
}

// output returns the script's output so far.
func (c *console) output() string { return c.out.String() }

// tail returns the last n lines of the log.
func (c *console) tail(n int) string { return lastLines(c.log.String(), n) }
