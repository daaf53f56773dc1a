// Package verbs_test runs libverbs/test/verbs_test.c, a C program written
// against the verbs API as its man pages describe it, on uroce: built
// with the system's gcc against Debian's <infiniband/verbs.h> and linked
// with -libverbs as any application is, it gets uroce's libibverbs.so.1
// through `uroce run`. Its server and client run as user nobody, one on
// each of two uroce daemons at the ends of a veth pair, in network
// namespaces of the test's own, at path MTU 1024 (netdev 1500) and 4096
// (netdev 9000); every case must print ok on both ends. Verbs programs
// killed with SIGKILL in the middle of a transfer must leave the daemons
// clean and serving.
package verbs_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/uroce/uroce/test/daemontest"
)

// What TestMain builds: dir/uroce, dir/lib/uroce (uroce's libraries, where
// `uroce run` finds them beside the binary) and dir/verbs_test.
var uroceBin, verbsTest string

// skipReason, when set, is why the tests cannot run here.
var skipReason string

// The packages the C builds need, as libverbs/build.sh names them.
const buildPkgs = "apt-get install -y --no-install-recommends gcc libc6-dev libibverbs-dev librdmacm-dev"

func TestMain(m *testing.M) {
	code := func() int {
		flag.Parse()
		if os.Geteuid() != 0 {
			return m.Run() // the tests skip with the reason
		}
		if _, err := exec.LookPath("gcc"); err != nil {
			skipReason = "skipping: needs gcc (" + buildPkgs + ")"
			return m.Run()
		}
		hdr := exec.Command("gcc", "-E", "-x", "c", "-")
		hdr.Stdin = strings.NewReader("#include <infiniband/verbs.h>\n")
		if err := hdr.Run(); err != nil {
			skipReason = "skipping: needs <infiniband/verbs.h> (" + buildPkgs + ")"
			return m.Run()
		}
		dir, err := os.MkdirTemp("", "uroce-verbs-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		os.Chmod(dir, 0o755) // the programs run as nobody
		uroceBin = filepath.Join(dir, "uroce")
		verbsTest = filepath.Join(dir, "verbs_test")
		build := [][]string{
			{"go", "build", "-o", uroceBin, "github.com/uroce/uroce/cmd/uroce"},
			{"bash", "../../libverbs/build.sh", filepath.Join(dir, "lib", "uroce")},
			{"gcc", "-O2", "-Wall", "-Werror", "-o", verbsTest, "../../libverbs/test/verbs_test.c", "-libverbs"},
		}
		// UROCE_DAEMON_BIN: a uroce built elsewhere runs the daemons (as
		// in test/daemon); the libraries are still this tree's, built
		// beside the copy of it that `uroce run` finds them next to.
		if bin := os.Getenv("UROCE_DAEMON_BIN"); bin != "" {
			build[0] = []string{"cp", bin, uroceBin}
		}
		for _, c := range build {
			out, err := exec.Command(c[0], c[1:]...).CombinedOutput()
			if err != nil && bytes.Contains(out, []byte("apt-get install")) {
				skipReason = "skipping: " + string(bytes.TrimSpace(out))
				return m.Run()
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n%s", strings.Join(c, " "), err, out)
				return 1
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

// The cases verbs_test prints, in order; cq_event only on the server.
var cases = strings.Fields(`device_list open_device query_device query_port query_gid query_pkey
	alloc_pd reg_mr_malloc reg_mr_mmap reg_mr_iova2 reg_mr_bad_access create_cq create_srq create_qp
	create_qp_ex modify_qp_rules flush resize_cq srq_resize recv_queue_full wc_status_str rc_connect ud_connect cq_event
	rc_send rc_send_imm rc_send_imm_zero rc_send_inline rc_send_sge rc_send_inv rc_mw rc_write
	rc_write_list rc_write_imm rc_write_iova rc_read rc_read_iova odp rc_atomic_cas rc_atomic_fadd srq ud ud_mcast
	cq_ex rc_wr_api ud_wr_api rc_bad_rkey rc_no_remote_write rc_read_out_of_bounds rc_rnr_retry_exc send_queue_full
	destroy_busy destroy`)

const serverOnly = "cq_event"

// net2 is two namespaces joined by a veth pair, each end with a daemon.
type net2 struct{ *daemontest.Net }

func newNet(t *testing.T, mtu int) *net2 {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	n := &net2{daemontest.New(t, daemontest.Config{Bin: uroceBin, MTU: mtu, Names: [2]string{"uvA", "uvB"},
		Addrs: [2]string{"198.51.100.1", "198.51.100.2"}})}
	// `uroce run` finds the libraries beside uroceBin, not through a
	// UROCE_LIBDIR the test may have been given.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "UROCE_LIBDIR=") {
			n.Env = append(n.Env, kv)
		}
	}
	return n
}

// run is a verbs program started on a daemon through `uroce run`. The
// commands exec one another (ip netns exec, setpriv, uroce run), so the
// process is the program itself.
type run struct {
	cmd  *exec.Cmd
	out  daemontest.Buffer
	done chan struct{} // closed when it ended, with err
	err  error
}

// errHang is the error of a program that did not end in time.
var errHang = errors.New("did not end in time (a hang)")

func (n *net2) launch(i int, prog string, args ...string) *run {
	n.T.Helper()
	r := &run{cmd: n.AsNobody(i, append([]string{uroceBin, "run", "--socket", n.Socket[i], "--", prog}, args...)...),
		done: make(chan struct{})}
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	if err := r.cmd.Start(); err != nil {
		n.T.Fatal(err)
	}
	go func() {
		r.err = r.cmd.Wait()
		close(r.done)
	}()
	n.T.Cleanup(func() {
		if !r.ended() {
			r.cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

// wait waits at most limit for the program to end, and kills it after.
func (r *run) wait(limit time.Duration) error {
	select {
	case <-r.done:
		return r.err
	case <-time.After(limit):
		r.cmd.Process.Kill()
		<-r.done
		return errHang
	}
}

func (r *run) ended() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// waitOutput waits until the program printed line.
func (r *run) waitOutput(t *testing.T, line string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !strings.Contains(r.out.String(), line+"\n") {
		if time.Now().After(deadline) || r.ended() {
			t.Fatalf("%s did not print %q:\n%s", r.cmd.Args[len(r.cmd.Args)-1], line, r.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// verbsPair runs verbs_test's server on daemon 0 and its client on
// daemon 1 with args, and checks that every case passed on both ends. It
// returns the two outputs' ok lines by case.
func (n *net2) verbsPair(t *testing.T, port string, args ...string) [2]map[string]string {
	t.Helper()
	args = append([]string{"-d", "uroce0", "-g", "1", "-p", port}, args...)
	srv := n.launch(0, verbsTest, args...)
	cli := n.launch(1, verbsTest, append(args, n.IP[0].String())...)
	var oks [2]map[string]string
	for i, r := range []*run{srv, cli} {
		role := [2]string{"server", "client"}[i]
		if err := r.wait(3 * time.Minute); err != nil {
			t.Errorf("verbs_test %s: %v", role, err)
		}
		oks[i] = checkCases(t, role, r.out.String(), i == 0)
		if t.Failed() || testing.Verbose() {
			t.Logf("verbs_test %s output:\n%s", role, r.out.String())
		}
	}
	return oks
}

// checkCases checks that out has an ok line for every case, in order, and
// no FAIL line; it returns the ok lines' notes by case. verbs_test skips
// (`skip NAME: reason`) only what a device says it does not support, the
// ibv_wr_* API; uroce's device has it, so a skip fails here too.
func checkCases(t *testing.T, role, out string, server bool) map[string]string {
	t.Helper()
	oks := map[string]string{}
	var order []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "FAIL "):
			t.Errorf("%s: %s", role, line)
		case strings.HasPrefix(line, "skip "):
			t.Errorf("%s: %s (uroce supports it: the case must run)", role, line)
		case strings.HasPrefix(line, "ok "):
			name, note, _ := strings.Cut(strings.TrimPrefix(line, "ok "), " # ")
			oks[name] = note
			order = append(order, name)
		}
	}
	var want []string
	for _, c := range cases {
		if server || c != serverOnly {
			want = append(want, c)
		}
	}
	var missing []string
	for _, c := range want {
		if _, ok := oks[c]; !ok {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%s: no ok for %s", role, strings.Join(missing, " "))
	} else if got := strings.Join(order, " "); got != strings.Join(want, " ") {
		t.Errorf("%s: the cases passed in the order\n%s\nwant\n%s", role, got, strings.Join(want, " "))
	}
	return oks
}

// checkClean checks that daemon i comes to hold no session and no QP,
// and that no QP of the processes pids is left.
func (n *net2) checkClean(t *testing.T, i int, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := n.Stat(i)
		if err != nil {
			t.Fatalf("daemon %d: %v", i, err)
		}
		if len(st.Sessions) == 0 && len(st.QPs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, q := range st.QPs {
				for _, p := range pids {
					if int(q.PID) == p {
						t.Errorf("daemon %d keeps QP %#x of process %d, which is gone", i, q.QPN, p)
					}
				}
			}
			b, _ := json.MarshalIndent(st, "", " ")
			t.Fatalf("daemon %d keeps sessions or QPs of programs that ended:\n%s", i, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestVerbs runs every case of verbs_test at both path MTUs.
func TestVerbs(t *testing.T) {
	for _, c := range []struct {
		netdev, path int
	}{{1500, 1024}, {9000, 4096}} {
		t.Run(fmt.Sprintf("mtu%d", c.netdev), func(t *testing.T) {
			n := newNet(t, c.netdev)
			oks := n.verbsPair(t, "18700", "-m", fmt.Sprint(c.path))
			for i, ok := range oks {
				if note := ok["query_port"]; !strings.Contains(note, fmt.Sprintf("path mtu %d", c.path)) {
					t.Errorf("end %d: query_port: %q, want path mtu %d", i, note, c.path)
				}
			}
			// uroce has the memory management extensions and memory
			// windows: SEND_WITH_INV invalidates the server's type 2
			// window, and rc_mw runs whole on both ends.
			for i, ok := range oks {
				for _, c := range []string{"rc_send_inv", "rc_mw"} {
					if note := ok[c]; note != "" {
						t.Errorf("end %d: %s: %q, want it run", i, c, note)
					}
				}
			}
			// The ibv_wr_* API: what uroce refuses at ibv_create_qp_ex
			// (TSO) and how a batch with it fails; an inline list
			// arrives whole.
			for i, ok := range oks {
				if note := ok["create_qp_ex"]; note != "RC refuses send_ops_flags 0x400" {
					t.Errorf("end %d: create_qp_ex: %q", i, note)
				}
			}
			const refused = "a batch with 3 SGEs (max_send_sge 2): EINVAL; refused: send_tso EOPNOTSUPP, " +
				"set_xrc_srqn EOPNOTSUPP"
			if note := oks[1]["rc_wr_api"]; note != refused {
				t.Errorf("client: rc_wr_api: %q, want %q", note, refused)
			}
			if note := oks[0]["rc_wr_api"]; note != "" {
				t.Errorf("server: rc_wr_api: %q", note)
			}
			for i := range 2 {
				n.checkClean(t, i)
				st, err := n.Stat(i)
				if err != nil {
					t.Fatal(err)
				}
				if e := st.Device.Counters["rcv_icrc_err"]; e != 0 {
					t.Errorf("daemon %d: %d ICRC errors", i, e)
				}
			}
		})
	}
}

// TestKilledProgram: a verbs program killed with SIGKILL in the middle
// of a transfer takes its session and QPs with it, on both daemons (its
// peer ends too), and the daemons serve the next programs.
func TestKilledProgram(t *testing.T) {
	n := newNet(t, 1500)
	for _, c := range []struct {
		name, prog string
		args       []string
		ready      string // what the client prints once it transfers
	}{
		{"verbs_test", verbsTest, []string{"-d", "uroce0", "-g", "1", "-p", "18710", "-L"}, "looping"},
		{"ib_write_bw", "ib_write_bw", []string{"-d", "uroce0", "-x", "1", "-F", "-N", "-n", "1000000", "-p", "18711"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := exec.LookPath(c.prog); err != nil {
				t.Skipf("skipping: %s is not installed (apt-get install perftest)", c.prog)
			}
			before, err := n.Stat(1)
			if err != nil {
				t.Fatal(err)
			}
			srv := n.launch(0, c.prog, c.args...)
			time.Sleep(300 * time.Millisecond)
			cli := n.launch(1, c.prog, append(c.args, n.IP[0].String())...)
			if c.ready != "" {
				cli.waitOutput(t, c.ready, time.Minute)
			}
			// Let the transfer run a while.
			deadline := time.Now().Add(time.Minute)
			for {
				st, err := n.Stat(1)
				if err != nil {
					t.Fatal(err)
				}
				if len(st.QPs) > 0 && st.Device.Counters["sent_pkts"] > before.Device.Counters["sent_pkts"]+20000 {
					break
				}
				if time.Now().After(deadline) || cli.ended() {
					t.Fatalf("no transfer under way:\n%s", cli.out.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			if st, err := n.Stat(1); err == nil {
				t.Logf("killing %s (pid %d) after %d packets sent", c.name, cli.cmd.Process.Pid,
					st.Device.Counters["sent_pkts"]-before.Device.Counters["sent_pkts"])
			}
			if err := cli.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if err := cli.wait(30 * time.Second); err == nil || !strings.Contains(err.Error(), "killed") {
				t.Errorf("the client: %v, want killed", err)
			}
			// Its peer loses the TCP connection and ends; it must not hang.
			err = srv.wait(time.Minute)
			if errors.Is(err, errHang) {
				t.Errorf("the server of the killed client: %v\n%s", err, srv.out.String())
			}
			if c.prog == verbsTest && err != nil {
				t.Errorf("verbs_test's server: %v\n%s", err, srv.out.String())
			}
			n.checkClean(t, 1, cli.cmd.Process.Pid)
			n.checkClean(t, 0, srv.cmd.Process.Pid)
		})
	}
	// The daemons serve new programs.
	n.verbsPair(t, "18712", "-m", "1024")
	for i := range 2 {
		n.checkClean(t, i)
	}
}
