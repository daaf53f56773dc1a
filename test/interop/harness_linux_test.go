package interop

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/pcaptool"
	"github.com/uroce/uroce/test/rxe"
)

// Addresses on the test bridge.
const (
	uroceAddr = "192.0.2.3"
	guestAddr = "192.0.2.1"
	uroceIf   = "uroce0"
)

// uroceBin is the uroce binary built by TestMain; libDir, when set,
// holds uroce's libibverbs.so.1 and its companions, built beside it
// (lib/uroce next to the binary, where `uroce run` finds them).
var uroceBin, libDir string

// libErr says why libDir is not set.
var libErr = "uroce's verbs libraries were not built"

func TestMain(m *testing.M) {
	code := func() int {
		flag.Parse()
		if os.Geteuid() != 0 || testing.Short() {
			// The tests skip themselves with the reason.
			return m.Run()
		}
		if bin := os.Getenv("UROCE_INTEROP_BIN"); bin != "" {
			// A uroce binary built elsewhere (another revision).
			uroceBin = bin
			if d := os.Getenv("UROCE_LIBDIR"); d != "" {
				libDir = d
			}
			return m.Run()
		}
		dir, err := os.MkdirTemp("", "uroce-interop-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		os.Chmod(dir, 0o755) // the daemon groups' clients run as nobody
		uroceBin = filepath.Join(dir, "uroce")
		cmd := exec.Command("go", "build", "-o", uroceBin, "github.com/uroce/uroce/cmd/uroce")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "interop: building uroce:", err)
			return 1
		}
		lib := filepath.Join(dir, "lib", "uroce")
		if out, err := exec.Command("../../libverbs/build.sh", lib).CombinedOutput(); err != nil {
			// The groups of stock programs on uroce skip with this.
			libErr = fmt.Sprintf("building uroce's verbs libraries: %v\n%s", err, out)
		} else {
			libDir = lib
		}
		return m.Run()
	}()
	os.Exit(code)
}

// step is one tool invocation on each side.
type step struct {
	name string
	// guest is the stock command line, without the server address; the
	// guest is the client when guestClient is set (uroce is the server).
	guest       string
	guestClient bool
	// uroce are the arguments of the uroce command (the interface and,
	// for a client, the guest's address are added).
	uroce []string
	// uroceAlso, when set, is a second uroce command run at the same
	// time as the first, as another process (its output follows the
	// first's).
	uroceAlso []string
	// Exit statuses expected (0 by default).
	guestExit, uroceExit int
	// guestTimeout, when set, bounds the guest's command (it then exits
	// 124) instead of the group's step timeout.
	guestTimeout time.Duration
	// peerMayLeave accepts that uroce fails its last send with a retry
	// error, saying the peer left (see pingpong.PeerLeftHint), when the
	// stock tool finished: under loss of the guest's frames the ACK of
	// uroce's last message can be lost, and the stock tools exit without
	// waiting for it (a stock peer in uroce's place would fail, or with
	// rdma_rxe retry forever).
	peerMayLeave bool
	// check, when set, checks both sides' output.
	check func(t *testing.T, guestOut, uroceOut string)
	// badFrames says the step sends malformed frames on purpose (a bad
	// ICRC): the capture's errors are its.
	badFrames bool
	// capture, when set, checks what the step's packets showed (the
	// frames captured while it ran); otherwise the step must show no NAK
	// but PSN sequence errors (a loss), no RNR NAK, and, when the
	// capture is complete, no PSN gap.
	capture func(t *testing.T, f *findings)
}

// group is the steps run against one guest.
type group struct {
	mtu int // netdev MTU of both ends (1500 or 9000)
	// netem is applied to the guest's eth0.
	netem string
	steps []step
	// pcap, when set, keeps the capture under this name in the test's
	// log directory ($UROCE_INTEROP_PCAPS, when set, receives a copy).
	pcap string
	// stepTimeout bounds each step (default 90 s).
	stepTimeout time.Duration
	// daemon runs a uroce daemon on the host's interface and every uroce
	// step as an unprivileged client of it (--daemon), as user nobody.
	daemon bool
	// kernel is the guest's kernel (rxe.PeerOptions.Kernel; default 6.1).
	kernel string
	// stock (with daemon) runs the steps' uroce commands, stock verbs
	// programs, on uroce's libibverbs through `uroce run`.
	stock bool
	// prelude, when set, runs in the guest before the steps (it writes
	// the programs they need: guestFile).
	prelude string
}

// result is what one step printed and how it ended.
type result struct {
	guestOut, uroceOut string
	guestExit          int
	uroceExit          int
	from, to           time.Time // when it ran
}

const (
	beginMark = rxe.BeginMark
	endMark   = rxe.EndMark
)

// script returns the guest's script: every step between markers, clients
// retried while the connection is refused (uroce's server may not be
// listening yet): a TCP connection refused, or an RDMA CM connection
// rejected for want of a listener (see refused: rping's "REJECTED, error 8",
// ucmatose's "REJECTED, error: 8", udaddy's SIDR "UNREACHABLE, error: 1").
func (g *group) script() string {
	var b strings.Builder
	b.WriteString(rxe.TryFunc(300, "0.1", `*"t connect to"*`, `*"RDMA_CM_EVENT_REJECTED, error 8"*`,
		`*"RDMA_CM_EVENT_REJECTED, error: 8"*`, `*"RDMA_CM_EVENT_UNREACHABLE, error: 1"*`, `*"Unexpected CM event bl blka 8"*`))
	b.WriteString(g.prelude)
	for _, s := range g.steps {
		to := int(g.timeout().Seconds())
		if s.guestTimeout > 0 {
			to = int(s.guestTimeout.Seconds())
		}
		fmt.Fprintf(&b, "echo '%s%s'\n", beginMark, s.name)
		if s.guestClient {
			fmt.Fprintf(&b, "try timeout %d %s %s\n", to, s.guest, uroceAddr)
		} else {
			fmt.Fprintf(&b, "timeout %d %s 2>&1\n", to, s.guest)
		}
		fmt.Fprintf(&b, "echo \"%s%s $?\"\n", endMark, s.name)
	}
	return b.String()
}

// quitOnCancel makes a uroce command that outlives its step end with
// SIGQUIT instead of SIGKILL: the Go runtime then prints every
// goroutine's stack into the step's output, which shows where a hang
// was (ip netns exec execs uroce, so the signal reaches it), and it is
// killed 10 seconds later if it is still there.
func quitOnCancel(cmd *exec.Cmd) {
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	cmd.WaitDelay = 10 * time.Second
}

func (g *group) timeout() time.Duration {
	if g.stepTimeout > 0 {
		return g.stepTimeout
	}
	return 90 * time.Second
}

// run runs the group against one fresh guest and checks every step and
// the capture.
func (g *group) run(t *testing.T) {
	t.Helper()
	g.runKeep(t)
}

// runKeep is run; it returns the capture's path (in the test's temporary
// directory) and the time each step ran.
func (g *group) runKeep(t *testing.T) (string, []window) {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping: boots an rdma_rxe guest")
	}
	if re := os.Getenv("UROCE_INTEROP_STEPS"); re != "" {
		// Debugging: only the steps whose names match.
		var keep []step
		for _, s := range g.steps {
			if ok, _ := regexp.MatchString(re, s.name); ok {
				keep = append(keep, s)
			}
		}
		if len(keep) == 0 {
			t.Skipf("no step matches UROCE_INTEROP_STEPS=%s", re)
		}
		g.steps = keep
	}
	if g.stock && libDir == "" {
		t.Skip("skipping: " + libErr)
	}
	t0 := time.Now()
	n := rxe.NewNet(t, rxe.NetOptions{Kernel: g.kernel})
	t.Logf("network ready after %v", time.Since(t0).Round(time.Millisecond))
	n.AddHostVeth(uroceIf, uroceAddr+"/24", g.mtu)
	pcapName := g.pcap
	if pcapName == "" {
		pcapName = "capture.pcap"
	}
	pcapPath := filepath.Join(t.TempDir(), pcapName)
	stop := n.Capture(t, pcapPath)

	total := time.Duration(len(g.steps)+2) * g.timeout()
	ctx, cancel := context.WithTimeout(context.Background(), total)
	defer cancel()
	var sock string
	if g.daemon {
		sock = startDaemon(t, ctx, n)
	}
	peer, err := n.StartPeer(ctx, rxe.PeerOptions{Name: "rxe", IP: guestAddr + "/24", MTU: g.mtu,
		Script: g.script(), Netem: g.netem, Timeout: total})
	if err != nil {
		t.Fatal(err)
	}
	if err := peer.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("guest ready after %v (kernel %s)", time.Since(t0).Round(time.Millisecond), peer.Image.KVer)
	if g.kernel != "" && !strings.HasPrefix(peer.Image.KVer, g.kernel+".") {
		t.Fatalf("the guest runs kernel %s, want %s", peer.Image.KVer, g.kernel)
	}
	results := make([]result, len(g.steps))
	// A guest step ends within its timeout, and the next one begins right
	// after it: a mark later than that is a guest gone wrong (a kernel
	// that hangs or panics), not one that is slow.
	markWait := g.timeout() + 30*time.Second
	ran := len(g.steps)
	for i, s := range g.steps {
		if err := waitFor(ctx, peer, beginMark+s.name+"\n", markWait); err != nil {
			t.Fatalf("step %s: guest never began it: %v\nguest output:\n%s\nend of its console:\n%s", s.name, err, peer.Output(), lastLines(peer.Log(), 40))
		}
		argsOf := func(a []string) []string {
			args := append([]string(nil), a...)
			switch {
			case g.stock:
				args = append([]string{"run", "--socket", sock, "--"}, args...)
			case g.daemon:
				args = append(args, "--daemon="+sock)
			default:
				args = append(args, "-d", uroceIf)
			}
			if !s.guestClient {
				args = append(args, guestAddr)
			}
			return args
		}
		args := argsOf(s.uroce)
		results[i].from = time.Now()
		sctx, scancel := context.WithTimeout(ctx, g.timeout())
		cmd := n.Command(sctx, uroceBin, args...)
		if g.daemon {
			cmd = n.Command(sctx, "setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", uroceBin}, args...)...)
		}
		quitOnCancel(cmd)
		var out, out2 bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		var also *exec.Cmd
		if s.uroceAlso != nil {
			a := argsOf(s.uroceAlso)
			also = n.Command(sctx, uroceBin, a...)
			if g.daemon {
				also = n.Command(sctx, "setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", uroceBin}, a...)...)
			}
			quitOnCancel(also)
			also.Stdout, also.Stderr = &out2, &out2
			if err := also.Start(); err != nil {
				t.Fatalf("step %s: uroce %s: %v", s.name, strings.Join(a, " "), err)
			}
		}
		err := cmd.Run()
		if also != nil {
			if e := also.Wait(); err == nil {
				err = e
			}
		}
		// A stock client gives up at once when the guest's server does
		// not listen yet (uroce's own tools retry): run it again.
		for tries := 0; g.stock && !s.guestClient && s.uroceExit == 0 && err != nil && tries < 50 && refused(out.String()); tries++ {
			select {
			case <-sctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			out.Reset()
			cmd = exec.CommandContext(sctx, cmd.Path, cmd.Args[1:]...)
			quitOnCancel(cmd)
			cmd.Stdout, cmd.Stderr = &out, &out
			err = cmd.Run()
		}
		scancel()
		code := 0
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			code = ee.ExitCode()
		case err != nil:
			t.Fatalf("step %s: uroce %s: %v", s.name, strings.Join(args, " "), err)
		}
		if also != nil {
			out.WriteString("== the second uroce command:\n")
			out.Write(out2.Bytes())
		}
		results[i].uroceOut, results[i].uroceExit = out.String(), code
		t.Logf("step %s: uroce %s: exit %d after %v", s.name, strings.Join(args, " "), code, time.Since(start).Round(time.Millisecond))
		if err := waitFor(ctx, peer, endMark+s.name+" ", markWait); err != nil {
			t.Fatalf("step %s: guest never ended it: %v\nuroce:\n%s\nguest output:\n%s\nend of its console:\n%s", s.name, err, out.String(), peer.Output(), lastLines(peer.Log(), 40))
		}
		results[i].to = time.Now()
		if code != s.uroceExit {
			// The steps after a failed one would run against a peer in
			// an unknown state and fail in its wake, each after its
			// timeout: the group ends here, and the steps run so far
			// are checked as usual.
			ran = i + 1
			t.Logf("step %s: uroce exited %d, want %d: the group's %d later steps are not run", s.name, code, s.uroceExit, len(g.steps)-ran)
			break
		}
		if os.Getenv("UROCE_INTEROP_DEBUG") != "" {
			for _, dev := range []string{uroceIf, "b-" + uroceIf} {
				out, _ := n.Command(ctx, "ip", "-s", "-s", "link", "show", "dev", dev).CombinedOutput()
				t.Logf("step %s: %s", s.name, out)
			}
		}
	}
	var res rxe.Result
	if ran < len(g.steps) {
		peer.Kill()
		res.Output = peer.Output()
		g.steps, results = g.steps[:ran], results[:ran]
	} else if res, err = peer.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	capStats := stop()
	t.Logf("guest done after %v", time.Since(t0).Round(time.Millisecond))
	for i, s := range g.steps {
		r := &results[i]
		var ok bool
		r.guestOut, r.guestExit, ok = rxe.Section(res.Output, s.name)
		if !ok {
			t.Errorf("step %s: no guest section in:\n%s", s.name, res.Output)
			continue
		}
		failed := false
		timedOut := s.guestExit == 124 && r.guestExit == 143 // busybox timeout(1) kills with SIGTERM
		if r.guestExit != s.guestExit && !timedOut {
			t.Errorf("step %s: guest `%s` exited %d, want %d", s.name, s.guest, r.guestExit, s.guestExit)
			failed = true
		}
		if r.uroceExit != s.uroceExit {
			t.Errorf("step %s: uroce %s exited %d, want %d", s.name, strings.Join(s.uroce, " "), r.uroceExit, s.uroceExit)
			failed = true
		}
		if s.check != nil && !failed {
			before := t.Failed()
			s.check(t, r.guestOut, r.uroceOut)
			failed = t.Failed() && !before // show what the check did not like
		}
		if failed || testing.Verbose() {
			t.Logf("step %s:\n--- guest (%s):\n%s--- uroce:\n%s", s.name, s.guest, r.guestOut, r.uroceOut)
		}
	}
	bad := false
	for _, st := range g.steps {
		bad = bad || st.badFrames
	}
	verifyCapture(t, pcapPath, bad)
	windows := make([]window, len(g.steps))
	for i, st := range g.steps {
		windows[i] = window{name: st.name, from: results[i].from, to: results[i].to}
	}
	perStep := verifySteps(t, pcapPath, windows)
	for i, st := range g.steps {
		f := perStep[i]
		t.Logf("step %s: capture: %s", st.name, f)
		if f.counts.RoCE == 0 {
			t.Errorf("step %s: no RoCE packet captured while it ran", st.name)
		}
		if f.counts.Errors > 0 && !st.badFrames {
			t.Errorf("step %s: capture errors: %v", st.name, f.msgs)
		}
		if st.capture != nil {
			st.capture(t, f)
			continue
		}
		for code, n := range f.naks {
			if !strings.HasPrefix(code, "psn_sequence_error ") {
				t.Errorf("step %s: %d NAKs %q: %v", st.name, n, code, f.msgs)
			}
		}
		if n := len(f.by["rnr_nak"]); n > 0 {
			t.Errorf("step %s: RNR NAKs: %v", st.name, f.by["rnr_nak"])
		}
		// Nothing is lost on the way to the bridge: in a capture that
		// holds every frame, a PSN gap is a packet never sent.
		if gaps := f.by["psn_gap"]; len(gaps) > 0 && capStats.Complete() {
			t.Errorf("step %s: PSN gaps %v in a complete capture: %v", st.name, gaps, f.msgs)
		}
	}
	if !capStats.Complete() {
		t.Logf("capture %s: %s: PSN gaps not checked", pcapName, capStats)
	}
	if dir := os.Getenv("UROCE_INTEROP_PCAPS"); dir != "" {
		if b, err := os.ReadFile(pcapPath); err == nil {
			os.WriteFile(filepath.Join(dir, pcapName), b, 0o644)
		}
	}
	return pcapPath, windows
}

// startDaemon runs `uroce daemon` on the host's interface of n, serving
// members of group nogroup, and returns its socket; it stops with the
// test.
func startDaemon(t *testing.T, ctx context.Context, n *rxe.Net) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "uroce-interop-daemon-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	sock := filepath.Join(dir, "uroce0.sock")
	var log bytes.Buffer
	cmd := n.Command(context.Background(), uroceBin, "daemon", "-d", uroceIf, "--socket", sock, "--group", "nogroup")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Error("the daemon did not stop on SIGTERM")
		}
		if t.Failed() {
			t.Logf("daemon:\n%s", log.String())
		}
		os.RemoveAll(dir)
	})
	for {
		if c, err := net.Dial("unixpacket", sock); err == nil {
			c.Close()
			return sock
		}
		select {
		case err := <-done:
			t.Fatalf("the daemon ended: %v\n%s", err, log.String())
		case <-ctx.Done():
			t.Fatalf("the daemon does not answer:\n%s", log.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}

// waitFor waits until the peer's script output holds s, at most within; it
// fails at once when the guest ends first.
func waitFor(ctx context.Context, p *rxe.Peer, s string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	return p.WaitOutput(ctx, s)
}

// verifyCapture runs the capture through "uroce pcap verify": no ICRC or
// format error.
func verifyCapture(t *testing.T, path string, badFrames bool) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := pcaptool.RunVerify(&out, &errOut, []string{path}, pcaptool.VerifyOptions{})
	summary := strings.TrimSpace(out.String())
	if i := strings.LastIndexByte(summary, '\n'); i >= 0 {
		summary = summary[i+1:]
	}
	t.Logf("capture %s: %s", filepath.Base(path), summary)
	if code != pcaptool.ExitOK && !badFrames { // a step's bad frames are checked with the step
		t.Errorf("uroce pcap verify %s: exit %d\n%s%s", path, code, out.String(), errOut.String())
	}
	if strings.Contains(summary, " 0 roce,") {
		t.Errorf("capture %s holds no RoCE packet", path)
	}
}

// splitArgs splits a command line at spaces.
func splitArgs(s string) []string { return strings.Fields(s) }

// window is the time a step ran.
type window struct {
	name     string
	from, to time.Time
}

// findings are what the verifier found in one step's frames. The steps
// check errors, NAK codes, RNR NAKs and, without injected loss and when
// tcpdump reports the capture complete (rxe.CaptureStats), PSN gaps; they
// report the rest: an emulated guest starved of CPU may time out and
// resend before it sees an ACK that arrived.
type findings struct {
	counts pcaptool.Counts
	// naks counts NAKs by code name ("psn sequence error", "remote
	// access error", ...) and sender.
	naks map[string]int
	// bySrc counts findings by check and sending address ("nak from
	// 192.0.2.3" is by["nak"]["192.0.2.3"]).
	by   map[string]map[string]int
	msgs []string
}

func (f *findings) count(check, src string) int { return f.by[check][src] }

func (f *findings) String() string {
	var b strings.Builder
	b.WriteString(f.counts.Summary())
	for code, n := range f.naks {
		fmt.Fprintf(&b, ", %d NAK %s", n, code)
	}
	for _, c := range []string{"retransmission", "psn_gap", "duplicate", "sequence", "rnr_nak"} {
		for src, n := range f.by[c] {
			fmt.Fprintf(&b, ", %d %s from %s", n, c, src)
		}
	}
	return b.String()
}

var nakCodeRE = regexp.MustCompile(`^nak (.*) \(code \d+\)`)

// verifySteps verifies the frames captured during each window on their
// own, so that one step's QPs are not confused with another's (uroce's
// first QP is 0x11 in every run).
func verifySteps(t *testing.T, path string, windows []window) []*findings {
	t.Helper()
	out := make([]*findings, len(windows))
	vs := make([]*pcaptool.Verifier, len(windows))
	for i := range windows {
		f := &findings{by: map[string]map[string]int{}, naks: map[string]int{}}
		out[i] = f
		vs[i] = pcaptool.NewVerifier(func(fd *pcaptool.Finding) {
			if fd.Severity == pcaptool.SevNote {
				return
			}
			src := "?"
			if fd.Flow != nil {
				src = fd.Flow.Src.String()
				// A response flow carries the responder's NAKs.
			}
			if fd.Check == "nak" {
				if m := nakCodeRE.FindStringSubmatch(fd.Message); m != nil {
					f.naks[m[1]+" from "+src]++
				}
			}
			if f.by[fd.Check] == nil {
				f.by[fd.Check] = map[string]int{}
			}
			f.by[fd.Check][src]++
			if len(f.msgs) < 20 {
				f.msgs = append(f.msgs, fmt.Sprintf("frame %d %s %s: %s", fd.Frame, fd.Severity, fd.Check, fd.Message))
			}
		})
	}
	err := eachFrame(path, func(n int, fr *pcaptool.Frame) {
		for i, w := range windows {
			if !fr.Time.Before(w.from) && !fr.Time.After(w.to) {
				vs[i].Frame(n, fr)
				return
			}
		}
	})
	if err != nil {
		t.Error(err)
	}
	for i := range windows {
		vs[i].Finish()
		out[i].counts = vs[i].Counts
	}
	return out
}

// refused reports whether a stock client's output says the guest's
// server was not there yet: perftest's and the pingpongs' TCP connect,
// rping's, ucmatose's and perftest -R's CM rejection ("invalid service
// ID", 8), udaddy's SIDR answer ("service ID not supported", 1).
func refused(out string) bool {
	for _, s := range []string{"Couldn't connect to " + guestAddr + ":", "RDMA_CM_EVENT_REJECTED, error 8",
		"RDMA_CM_EVENT_REJECTED, error: 8", "RDMA_CM_EVENT_UNREACHABLE, error: 1", "Unexpected CM event bl blka 8"} {
		if strings.Contains(out, s) {
			return true
		}
	}
	return false
}
