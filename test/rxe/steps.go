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

// TryFunc returns a shell function try: it runs its arguments again,
// up to tries times, pause seconds apart, while their output matches
// one of the shell case patterns (a client whose server is not
// listening yet); then it prints the last output and returns its exit
// status.
func TryFunc(tries int, pause string, patterns ...string) string {
	return `try() {
	n=0
	while :; do
		out=$("$@" 2>&1); rc=$?
		case "$out" in
		` + strings.Join(patterns, "|") + `) n=$((n+1)); [ $n -ge ` + strconv.Itoa(tries) + ` ] && break; sleep ` + pause + ` ;;
		*) break ;;
		esac
	done
	printf '%s\n' "$out"
	return $rc
}
`
}

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
