package main

import (
	"bytes"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// fakeLibDir returns a directory that passes for uroce's library
// directory: it holds a libibverbs.so.1 that is no library, enough for
// programs that do not link libibverbs.
func fakeLibDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, libName), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// fakeExecutable makes the uroce executable seem to be dir/bin/uroce.
func fakeExecutable(t *testing.T, dir string) {
	t.Helper()
	old := executable
	executable = func() (string, error) { return filepath.Join(dir, "bin", "uroce"), nil }
	t.Cleanup(func() { executable = old })
}

// noExec replaces execve for the test: it records what would run and
// returns err.
func noExec(t *testing.T, err error) *[]string {
	t.Helper()
	var got []string
	old := execve
	execve = func(path string, argv, env []string) error {
		got = append(append([]string{path}, argv...), env...)
		return err
	}
	t.Cleanup(func() { execve = old })
	return &got
}

func TestRunNoLibraries(t *testing.T) {
	empty, exeDir := t.TempDir(), t.TempDir()
	fakeExecutable(t, exeDir)
	exe := noExec(t, nil)
	for _, c := range []struct {
		libdir string
		looked string
	}{
		{empty, empty + ", " + filepath.Join(exeDir, "lib", "uroce") + " or " + filepath.Join(exeDir, "bin", "lib", "uroce") + ";"},
		{"", filepath.Join(exeDir, "lib", "uroce") + " or " + filepath.Join(exeDir, "bin", "lib", "uroce") + " (UROCE_LIBDIR is not set);"},
	} {
		t.Setenv("UROCE_LIBDIR", c.libdir)
		for _, args := range [][]string{{"run", "--", "true"}, {"env"}} {
			code, out, errOut := runArgs(args...)
			want := "uroce " + args[0] + ": uroce's verbs libraries are not built: no libibverbs.so.1 in " + c.looked
			if code != 1 || out != "" || !strings.HasPrefix(errOut, want) || !strings.Contains(errOut, "./run build") ||
				!strings.Contains(errOut, "libverbs/build.sh DIR and UROCE_LIBDIR=DIR") {
				t.Errorf("%v, UROCE_LIBDIR=%q: exit %d, stdout %q, stderr %q, want exit 1 and %q...", args, c.libdir, code, out, errOut, want)
			}
		}
	}
	if len(*exe) != 0 {
		t.Errorf("ran %v", *exe)
	}
}

func TestRunFindsLibraries(t *testing.T) {
	exeDir := t.TempDir()
	fakeExecutable(t, exeDir)
	t.Setenv("UROCE_LIBDIR", "")
	beside := filepath.Join(exeDir, "lib", "uroce")        // bin/uroce and lib/uroce, as ./run build makes them
	inside := filepath.Join(exeDir, "bin", "lib", "uroce") // lib/uroce beside the executable
	for _, d := range []string{inside, beside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, libName), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := findLibDir(); err != nil || filepath.Clean(got) != d {
			t.Errorf("findLibDir with %s: %q, %v", d, got, err)
		}
	}
	env := fakeLibDir(t)
	t.Setenv("UROCE_LIBDIR", env)
	if got, err := findLibDir(); err != nil || got != env {
		t.Errorf("findLibDir with UROCE_LIBDIR=%s: %q, %v", env, got, err)
	}
}

func TestRunNoDaemon(t *testing.T) {
	t.Setenv("UROCE_LIBDIR", fakeLibDir(t))
	exe := noExec(t, nil)
	missing := filepath.Join(t.TempDir(), "none.sock")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--socket", missing}, "nothing answers on " + missing + "; start it as root: uroce daemon -d IFACE --socket " + missing + "\n"},
		{[]string{"-d", "uroce-run-test"}, "nothing answers on /run/uroce/uroce-run-test.sock; start it as root: uroce daemon -d IFACE --name uroce-run-test\n"},
	} {
		code, out, errOut := runArgs(append(append([]string{"run"}, c.args...), "--", "true")...)
		want := "uroce run: the uroce daemon is not running: " + c.want
		if code != 1 || out != "" || errOut != want {
			t.Errorf("run %v: exit %d, stdout %q, stderr %q, want exit 1 and %q", c.args, code, out, errOut, want)
		}
	}
	if len(*exe) != 0 {
		t.Errorf("ran %v", *exe)
	}
}

func TestRunUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		has  string
	}{
		{[]string{"run"}, 2, "name the program to run"},
		{[]string{"run", "--"}, 2, "usage: uroce run"},
		{[]string{"run", "--bogus", "true"}, 2, "usage: uroce run"},
		{[]string{"run", "-h"}, 0, "usage: uroce run"},
		{[]string{"env", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"env", "-h"}, 0, "usage: uroce env"},
	} {
		code, out, errOut := runArgs(c.args...)
		if code != c.code || out != "" || !strings.Contains(errOut, c.has) {
			t.Errorf("%v: exit %d (want %d), stdout %q, stderr %q (want %q)", c.args, code, c.code, out, errOut, c.has)
		}
	}
}

// TestRunExec checks what uroce run hands to execve, in the test's
// process: the program found on PATH, its arguments, the environment.
func TestRunExec(t *testing.T) {
	sock, _ := statDaemons(t)
	lib := fakeLibDir(t)
	t.Setenv("UROCE_LIBDIR", lib)
	t.Setenv("LD_LIBRARY_PATH", "/opt/a::"+lib+":/opt/b")
	t.Setenv("UROCE_SOCKET", "/elsewhere.sock")
	exe := noExec(t, errors.New("exec format error"))
	code, out, errOut := runArgs("run", "--socket", sock, "--", "sh", "-c", "exit 7")
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	got := *exe
	if code != 126 || out != "" || errOut != "uroce run: sh: exec format error\n" || len(got) < 4 ||
		got[0] != sh || strings.Join(got[1:4], " ") != "sh -c exit 7" {
		t.Fatalf("exit %d, stdout %q, stderr %q, exec %q", code, out, errOut, got)
	}
	var lp, us []string
	for _, kv := range got[4:] {
		switch k, v, _ := strings.Cut(kv, "="); k {
		case "LD_LIBRARY_PATH":
			lp = append(lp, v)
		case "UROCE_SOCKET":
			us = append(us, v)
		}
	}
	if len(lp) != 1 || lp[0] != lib+":/opt/a:/opt/b" || len(us) != 1 || us[0] != sock {
		t.Errorf("environment: LD_LIBRARY_PATH %q, UROCE_SOCKET %q; want %q and %q", lp, us, lib+":/opt/a:/opt/b", sock)
	}

	*exe = nil
	code, _, errOut = runArgs("run", "--socket", sock, "--", "uroce-no-such-program")
	if code != 127 || !strings.Contains(errOut, `uroce run: exec: "uroce-no-such-program": executable file not found`) || len(*exe) != 0 {
		t.Errorf("missing program: exit %d, stderr %q, exec %q", code, errOut, *exe)
	}
}

func TestEnv(t *testing.T) {
	lib := filepath.Join(t.TempDir(), "uroce's libs")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lib, libName), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("UROCE_LIBDIR", lib)
	t.Setenv("LD_LIBRARY_PATH", "/usr/local/lib")
	q := "'" + strings.ReplaceAll(lib, "'", `'\''`) + "'"
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "export LD_LIBRARY_PATH=" + q[:len(q)-1] + ":/usr/local/lib'\nexport UROCE_SOCKET=/run/uroce/uroce0.sock\n"},
		{[]string{"-d", "uroce1"}, "export LD_LIBRARY_PATH=" + q[:len(q)-1] + ":/usr/local/lib'\nexport UROCE_SOCKET=/run/uroce/uroce1.sock\n"},
		{[]string{"--socket", "/tmp/a b.sock"}, "export LD_LIBRARY_PATH=" + q[:len(q)-1] + ":/usr/local/lib'\nexport UROCE_SOCKET='/tmp/a b.sock'\n"},
	} {
		code, out, errOut := runArgs(append([]string{"env"}, c.args...)...)
		if code != 0 || out != c.want || errOut != "" {
			t.Errorf("env %v: exit %d, stdout %q, stderr %q, want\n%s", c.args, code, out, errOut, c.want)
			continue
		}
		// What a shell makes of it.
		sh := exec.Command("sh", "-c", `eval "$(cat)"; printf '%s\n%s\n' "$LD_LIBRARY_PATH" "$UROCE_SOCKET"`)
		sh.Stdin = strings.NewReader(out)
		got, err := sh.Output()
		sock := "/run/uroce/uroce0.sock"
		if len(c.args) == 2 && c.args[0] == "-d" {
			sock = "/run/uroce/uroce1.sock"
		} else if len(c.args) == 2 {
			sock = c.args[1]
		}
		if want := lib + ":/usr/local/lib\n" + sock + "\n"; err != nil || string(got) != want {
			t.Errorf("env %v through sh: %q, %v; want %q", c.args, got, err, want)
		}
	}
}

func TestShQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/run/uroce/uroce0.sock": "/run/uroce/uroce0.sock",
		"":                       "''",
		"a b":                    "'a b'",
		"it's":                   `'it'\''s'`,
		"$HOME;rm":               "'$HOME;rm'",
	} {
		if got := shQuote(in); got != want {
			t.Errorf("shQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// buildVerbsLibs runs libverbs/build.sh into dir. It skips the test when
// gcc or the rdma-core headers are missing, and reports whether uroce's
// libibverbs.so.1 was built (libverbs/ibverbs may not exist yet).
func buildVerbsLibs(t *testing.T, dir string) (ibverbs bool) {
	t.Helper()
	cmd := exec.Command("bash", "../../libverbs/build.sh", dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if bytes.Contains(out, []byte("apt-get install")) {
			t.Skipf("skipping: cannot build the verbs libraries: %s", bytes.TrimSpace(out))
		}
		t.Fatalf("libverbs/build.sh: %v\n%s", err, out)
	}
	_, err = os.Stat(filepath.Join(dir, libName))
	return err == nil
}

// TestRunProgram builds uroce and the libraries as ./run build lays them
// out (bin/uroce, lib/uroce), serves a device from the test's process and
// runs programs with uroce run.
func TestRunProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short: builds uroce and the verbs libraries")
	}
	top := t.TempDir()
	lib := filepath.Join(top, "lib", "uroce")
	ibverbs := buildVerbsLibs(t, lib)
	if !ibverbs {
		// /usr/bin/env and sh do not load it.
		if err := os.WriteFile(filepath.Join(lib, libName), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	uroce := filepath.Join(top, "bin", "uroce")
	gocmd, err := exec.LookPath("go")
	if err != nil {
		gocmd = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	build := exec.Command(gocmd, "build", "-o", uroce, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	sock, _ := statDaemons(t)
	environ := []string{"PATH=" + os.Getenv("PATH"), "LD_LIBRARY_PATH=/opt/x"}

	cmd := exec.Command(uroce, "run", "--socket", sock, "--", "/usr/bin/env")
	cmd.Env = environ
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "\nLD_LIBRARY_PATH="+lib+":/opt/x\n") ||
		!strings.Contains(string(out), "\nUROCE_SOCKET="+sock+"\n") {
		t.Errorf("uroce run -- /usr/bin/env: %v, want LD_LIBRARY_PATH=%s:/opt/x and UROCE_SOCKET=%s in\n%s", err, lib, sock, out)
	}

	cmd = exec.Command(uroce, "run", "--socket", sock, "--", "sh", "-c", "exit 7")
	cmd.Env = environ
	var exit *exec.ExitError
	if err := cmd.Run(); !errors.As(err, &exit) || exit.ExitCode() != 7 {
		t.Errorf("uroce run -- sh -c 'exit 7': %v, want exit status 7", err)
	}

	if !ibverbs {
		t.Skip("skipping ibv_devices: libverbs/ibverbs (uroce's libibverbs.so.1) is not there yet")
	}
	if _, err := exec.LookPath("ibv_devices"); err != nil {
		t.Skip("skipping ibv_devices: not installed (Debian package ibverbs-utils)")
	}
	cmd = exec.Command(uroce, "run", "--socket", sock, "--", "ibv_devices")
	cmd.Env = environ
	out, err = cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "uroce0") {
		t.Errorf("uroce run -- ibv_devices: %v, want uroce0 listed:\n%s", err, out)
	}
}

// stockVerbsTools are the programs of ibverbs-utils, perftest and
// rdmacm-utils that link libibverbs, libmlx5, libefa or librdmacm.
var stockVerbsTools = []string{
	"ibv_asyncwatch", "ibv_devices", "ibv_devinfo", "ibv_rc_pingpong", "ibv_srq_pingpong", "ibv_uc_pingpong",
	"ibv_ud_pingpong", "ibv_xsrq_pingpong",
	"ib_atomic_bw", "ib_atomic_lat", "ib_read_bw", "ib_read_lat", "ib_send_bw", "ib_send_lat", "ib_write_bw",
	"ib_write_lat", "raw_ethernet_burst_lat", "raw_ethernet_bw", "raw_ethernet_fs_rate", "raw_ethernet_lat",
	"cmtime", "mckey", "rcopy", "rdma_client", "rdma_server", "rdma_xclient", "rdma_xserver", "riostream",
	"rping", "rstream", "ucmatose", "udaddy", "udpong",
}

// TestVerbsLibraries checks the built libraries against the stock tools
// installed here: every symbol (and version) a tool imports from them
// resolves at start-up, as BIND_NOW needs, and the companions need
// nothing but libc.
func TestVerbsLibraries(t *testing.T) {
	dir := t.TempDir()
	ibverbs := buildVerbsLibs(t, dir)
	ours := []string{"libmlx5.so.1", "libefa.so.1"}
	if ibverbs {
		// librdmacm speaks to the daemon through libibverbs' sessions.
		ours = append(ours, "librdmacm.so.1")
	}
	for _, name := range ours {
		f, err := elf.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		libs, err := f.ImportedLibraries()
		f.Close()
		want := []string{"libc.so.6"}
		if name == "librdmacm.so.1" {
			want = []string{libName, "libc.so.6"}
		}
		if err != nil || strings.Join(libs, " ") != strings.Join(want, " ") {
			t.Errorf("%s needs %v (%v), want %v", name, libs, err, want)
		}
	}
	if ibverbs {
		ours = append(ours, libName)
		// It finds libibverbs beside itself, without LD_LIBRARY_PATH.
		ldd := exec.Command("ldd", "-r", filepath.Join(dir, "librdmacm.so.1"))
		ldd.Env = append(os.Environ(), "LD_BIND_NOW=1", "LD_LIBRARY_PATH=")
		out, err := ldd.CombinedOutput()
		if err != nil || bytes.Contains(out, []byte("undefined symbol")) ||
			!bytes.Contains(out, []byte(libName+" => "+filepath.Join(dir, libName))) {
			t.Errorf("ldd -r librdmacm.so.1: %v, want %s from %s:\n%s", err, libName, dir, out)
		}
	} else {
		t.Log("libverbs/ibverbs is not there yet: the tools load the system's libibverbs.so.1 and librdmacm.so.1")
	}
	ran := 0
	for _, tool := range stockVerbsTools {
		path := filepath.Join("/usr/bin", tool)
		if _, err := os.Stat(path); err != nil {
			continue
		}
		ran++
		ldd := exec.Command("ldd", "-r", path)
		ldd.Env = append(os.Environ(), "LD_BIND_NOW=1", "LD_LIBRARY_PATH="+dir)
		out, err := ldd.CombinedOutput()
		if err != nil || bytes.Contains(out, []byte("undefined symbol")) || bytes.Contains(out, []byte("not found")) {
			t.Errorf("ldd -r %s: %v\n%s", path, err, out)
			continue
		}
		for _, l := range strings.Split(string(out), "\n") {
			f := strings.Fields(l)
			for _, name := range ours {
				if len(f) >= 3 && f[0] == name && f[2] != filepath.Join(dir, name) {
					t.Errorf("%s loads %s from %s, not %s", tool, name, f[2], dir)
				}
			}
		}
	}
	if ran == 0 {
		t.Skip("skipping: none of the stock tools is installed (Debian packages ibverbs-utils, perftest, rdmacm-utils)")
	}

	// Without a daemon, the RDMA CM tools find no device and say so.
	if _, err := os.Stat("/usr/bin/rping"); err == nil && ibverbs {
		rping := exec.Command("/usr/bin/rping", "-s")
		rping.Env = append(os.Environ(), "LD_LIBRARY_PATH="+dir, "UROCE_SOCKET="+filepath.Join(dir, "none.sock"))
		out, err := rping.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "No RDMA devices were detected") {
			t.Errorf("rping -s: %v, want no device reported:\n%s", err, out)
		}
	}
	if _, err := os.Stat("/usr/bin/ib_write_bw"); err == nil {
		bw := exec.Command("/usr/bin/ib_write_bw", "--help")
		bw.Env = append(os.Environ(), "LD_LIBRARY_PATH="+dir)
		// It exits 1 after its usage; the loader's failure would be 127.
		out, err := bw.CombinedOutput()
		var exit *exec.ExitError
		if (err != nil && (!errors.As(err, &exit) || exit.ExitCode() != 1)) || !strings.Contains(string(out), "Usage:") {
			t.Errorf("ib_write_bw --help: %v\n%s", err, out)
		}
	}
}
