package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/uroce/uroce/client"
)

func init() {
	register(&command{name: "run", summary: "run an unmodified verbs program (ibv_*, perftest) on a uroce daemon's device", run: runRun})
	register(&command{name: "env", summary: "print the environment for verbs programs on uroce, for a shell's eval", run: runEnv})
}

const runUsage = `usage: uroce run [-d DEVICE] [--socket PATH] [--] PROGRAM [ARGUMENTS...]

Runs PROGRAM, an unmodified verbs program (ibv_devinfo, ibv_rc_pingpong,
ib_write_bw, ...), on the device that a uroce daemon serves, with uroce's
libibverbs.so.1 and its companions libmlx5.so.1, libefa.so.1 and
librdmacm.so.1 instead of rdma-core's: it checks that the daemon answers on
its socket, then replaces itself with PROGRAM, with LD_LIBRARY_PATH
starting with uroce's library directory and UROCE_SOCKET naming the
socket. PROGRAM's exit status and signals are its own; uroce run exits 1
when the libraries or the daemon are missing, 127 when PROGRAM is not
found and 126 when it cannot be executed.

The library directory is the first of $UROCE_LIBDIR,
<uroce's directory>/../lib/uroce and <uroce's directory>/lib/uroce that
holds libibverbs.so.1; ./run build puts them in lib/uroce beside
bin/uroce.

flags:
`

const envUsage = `usage: uroce env [-d DEVICE] [--socket PATH]

Prints, as sh export lines, the environment with which uroce run starts a
program: LD_LIBRARY_PATH with uroce's library directory first (see uroce
run -h) and UROCE_SOCKET naming the daemon's socket. In a shell:

	eval "$(uroce env)"
	ib_write_bw -d uroce0

flags:
`

// executable is os.Executable, replaced by tests.
var executable = os.Executable

// execve is syscall.Exec, replaced by tests that must not lose the test
// process.
var execve = syscall.Exec

// libName is the library whose presence marks uroce's library directory.
const libName = "libibverbs.so.1"

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("uroce run", runUsage, stderr)
	dev := fs.String("d", "uroce0", "device whose daemon the program uses")
	socket := fs.String("socket", "", "the daemon's Unix socket (default /run/uroce/DEVICE.sock)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "uroce run: name the program to run after the flags (uroce run -- PROGRAM ARGUMENTS...)")
		fs.Usage()
		return 2
	}
	env, sock, err := verbsEnv(*dev, *socket, os.Environ())
	if err != nil {
		fmt.Fprintf(stderr, "uroce run: %v\n", err)
		return 1
	}
	d, err := client.Open(ctx, sock)
	if err != nil {
		if errors.Is(err, client.ErrNoDaemon) {
			fmt.Fprintf(stderr, "uroce run: the uroce daemon is not running: nothing answers on %s; start it as root: %s\n",
				sock, daemonCommand(*dev, *socket, sock))
		} else {
			fmt.Fprintf(stderr, "uroce run: %v\n", err)
		}
		return 1
	}
	d.Close()

	prog := fs.Arg(0)
	path, err := exec.LookPath(prog)
	if err != nil {
		fmt.Fprintf(stderr, "uroce run: %v\n", err)
		return 127
	}
	// Give back SIGINT and SIGTERM as uroce found them (main catches
	// them): a program started with them ignored gets them ignored.
	signal.Reset(os.Interrupt, syscall.SIGTERM)
	err = execve(path, fs.Args(), env)
	fmt.Fprintf(stderr, "uroce run: %s: %v\n", prog, err)
	return 126
}

func runEnv(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("uroce env", envUsage, stderr)
	dev := fs.String("d", "uroce0", "device whose daemon programs use")
	socket := fs.String("socket", "", "the daemon's Unix socket (default /run/uroce/DEVICE.sock)")
	if code := parseFlags(fs, args, stderr); code >= 0 {
		return code
	}
	env, _, err := verbsEnv(*dev, *socket, os.Environ())
	if err != nil {
		fmt.Fprintf(stderr, "uroce env: %v\n", err)
		return 1
	}
	for _, kv := range env[len(env)-2:] {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(stdout, "export %s=%s\n", k, shQuote(v))
	}
	return 0
}

// verbsEnv returns environ with LD_LIBRARY_PATH and UROCE_SOCKET set for
// device dev's daemon on socket (its default when empty), those two last,
// and the socket's absolute path.
func verbsEnv(dev, socket string, environ []string) ([]string, string, error) {
	libdir, err := findLibDir()
	if err != nil {
		return nil, "", err
	}
	if socket == "" {
		socket = filepath.Join("/run/uroce", dev+".sock")
	}
	sock, err := filepath.Abs(socket)
	if err != nil {
		return nil, "", err
	}
	var env []string
	var old string
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "LD_LIBRARY_PATH":
			old = v
		case "UROCE_SOCKET":
		default:
			env = append(env, kv)
		}
	}
	return append(env, "LD_LIBRARY_PATH="+prependPath(libdir, old), "UROCE_SOCKET="+sock), sock, nil
}

// prependPath puts dir first in the search path old, once: an earlier
// occurrence and empty elements (which would mean the current directory)
// are left out.
func prependPath(dir, old string) string {
	elems := []string{dir}
	for _, e := range strings.Split(old, ":") {
		if e != "" && e != dir {
			elems = append(elems, e)
		}
	}
	return strings.Join(elems, ":")
}

// findLibDir returns the first of the library directories (libDirs) that
// holds libibverbs.so.1, or an error naming where it looked and how to
// build the libraries.
func findLibDir() (string, error) {
	dirs, err := libDirs()
	if err != nil {
		return "", err
	}
	for _, d := range dirs {
		if fi, err := os.Stat(filepath.Join(d, libName)); err == nil && !fi.IsDir() {
			return d, nil
		}
	}
	where := strings.Join(dirs[:len(dirs)-1], ", ") + " or " + dirs[len(dirs)-1]
	if os.Getenv("UROCE_LIBDIR") == "" {
		where += " (UROCE_LIBDIR is not set)"
	}
	return "", fmt.Errorf("uroce's verbs libraries are not built: no %s in %s; build them with ./run build in uroce's source tree "+
		"(into lib/uroce beside bin/uroce), or with libverbs/build.sh DIR and UROCE_LIBDIR=DIR", libName, where)
}

// libDirs lists, in order, where uroce's libraries may be: $UROCE_LIBDIR,
// then ../lib/uroce and lib/uroce from the directory of the uroce
// executable. The paths are absolute.
func libDirs() ([]string, error) {
	var dirs []string
	if d := os.Getenv("UROCE_LIBDIR"); d != "" {
		abs, err := filepath.Abs(d)
		if err != nil {
			return nil, err
		}
		dirs = append(dirs, abs)
	}
	exe, err := executable()
	if err != nil {
		return nil, fmt.Errorf("where is uroce: %w", err)
	}
	if e, err := filepath.EvalSymlinks(exe); err == nil {
		exe = e
	}
	bin := filepath.Dir(exe)
	return append(dirs, filepath.Join(bin, "..", "lib", "uroce"), filepath.Join(bin, "lib", "uroce")), nil
}

// daemonCommand is the command that starts the daemon uroce run looks
// for: device dev (flag -d) on socket (flag --socket, sock made absolute).
func daemonCommand(dev, socket, sock string) string {
	c := "uroce daemon -d IFACE"
	if dev != "uroce0" {
		c += " --name " + dev
	}
	if socket != "" {
		c += " --socket " + shQuote(sock)
	}
	if c == "uroce daemon -d IFACE" {
		c += " (or systemctl start uroce@IFACE)"
	}
	return c
}

// shQuote quotes s for sh: in single quotes, unless it is made of
// characters that need none.
func shQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:=@%+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
