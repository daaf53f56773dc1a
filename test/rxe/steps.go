package rxe

import (
	"strconv"
	"strings"
)

// A guest script that runs several steps marks each one on the console:
// BeginMark and the step's name on a line before it, EndMark, the name
// and the step's exit status on a line after it. Section finds one step
// in a guest's output.
const (
	BeginMark = "== begin "
	EndMark   = "== end "
)

// Section returns the output of step name and its exit status; ok is
// false when its end (or its exit status) is not there.
func Section(out, name string) (text string, code int, ok bool) {
	b := strings.Index(out, BeginMark+name+"\n")
	if b < 0 {
		return "", 0, false
	}
	rest := out[b+len(BeginMark+name+"\n"):]
	e := strings.Index(rest, EndMark+name+" ")
	if e < 0 {
		return rest, 0, false
	}
	tail := rest[e+len(EndMark+name+" "):]
	if i := strings.IndexByte(tail, '\n'); i >= 0 {
		tail = tail[:i]
	}
	code, err := strconv.Atoi(strings.TrimSpace(tail))
	return rest[:e], code, err == nil
}
