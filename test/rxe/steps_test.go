package rxe

import (
	"os/exec"
	"testing"
)

func TestSection(t *testing.T) {
	out := "boot\n== begin a\nx\ny\n== end a 3\n== begin b\nz\n"
	if s, code, ok := Section(out, "a"); s != "x\ny\n" || code != 3 || !ok {
		t.Errorf("a: %q %d %v", s, code, ok)
	}
	if s, _, ok := Section(out, "b"); s != "z\n" || ok {
		t.Errorf("b, never ended: %q %v", s, ok)
	}
	if _, _, ok := Section(out, "c"); ok {
		t.Error("c found")
	}
}

// TryFunc's function runs a client again while it cannot connect, then
// prints its last output and returns its status.
func TestTryFunc(t *testing.T) {
	dir := t.TempDir()
	script := TryFunc(5, "0", `*"t connect to"*`) + `
client() {
	n=$(cat ` + dir + `/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > ` + dir + `/n
	if [ $n -lt 3 ]; then echo "Couldn't connect to 192.0.2.2:18515"; return 1; fi
	echo "run $n"; return 3
}
try client; echo "status $?"
`
	out, err := exec.Command("sh", "-c", script).CombinedOutput()
	if err != nil || string(out) != "run 3\nstatus 3\n" {
		t.Errorf("%v: %q, want the third run's output and status", err, out)
	}
}
