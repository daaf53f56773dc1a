// Command mutate checks that the tests catch what they claim to. It
// copies the working tree to a scratch directory, then, one at a time,
// breaks one rule of the code there (a mutation from the list in
// mutations.go), runs the tests of the packages that should notice, and
// reports whether they failed (the mutation is killed) or passed (it
// survived: no test checks that rule).
//
//	go run ./internal/mutate                 # every mutation
//	go run ./internal/mutate -run 'read|dup' # the mutations whose names match
//	go run ./internal/mutate -list           # the list
//
// It exits 0 when every mutation was killed, 1 when one survived or no
// longer applies (its code changed: update the list), 2 on bad usage.
// The tests run as the caller: as root the privileged ones run too.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// edit replaces old, which must occur exactly once in file, with new.
type edit struct {
	file     string
	old, new string
}

// mutation is one broken rule and the tests that must notice.
type mutation struct {
	name  string
	what  string // the rule that is broken
	edits []edit
	pkgs  []string // packages whose tests run
	run   string   // -run pattern; empty runs them all
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mutate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pattern := fs.String("run", "", "only the mutations whose names match this regular expression")
	list := fs.Bool("list", false, "list the mutations and exit")
	timeout := fs.Duration("timeout", 10*time.Minute, "time limit of one test run")
	keep := fs.Bool("keep", false, "keep the scratch copy")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	re, err := regexp.Compile(*pattern)
	if err != nil || fs.NArg() != 0 {
		fmt.Fprintln(stderr, "usage: go run ./internal/mutate [-run regexp] [-list] [-timeout d] [-keep]")
		return 2
	}
	var todo []mutation
	for _, m := range mutations {
		if re.MatchString(m.name) {
			todo = append(todo, m)
		}
	}
	if *list {
		for _, m := range todo {
			fmt.Fprintf(stdout, "%-28s %s (%s)\n", m.name, m.what, strings.Join(m.pkgs, " "))
		}
		return 0
	}
	root, err := repoRoot()
	if err != nil {
		fmt.Fprintln(stderr, "mutate:", err)
		return 2
	}
	base, err := os.MkdirTemp("", "uroce-mutate-")
	if err != nil {
		fmt.Fprintln(stderr, "mutate:", err)
		return 2
	}
	if *keep {
		fmt.Fprintln(stderr, "mutate: scratch copy in", base)
	} else {
		defer os.RemoveAll(base)
	}
	// Tests that read ../shared find it beside the copy as beside the
	// repository.
	if shared := filepath.Join(filepath.Dir(root), "shared"); isDir(shared) {
		if err := os.Symlink(shared, filepath.Join(base, "shared")); err != nil {
			fmt.Fprintln(stderr, "mutate:", err)
			return 2
		}
	}
	scratch := filepath.Join(base, filepath.Base(root))
	if err := copyTree(root, scratch); err != nil {
		fmt.Fprintln(stderr, "mutate: copy:", err)
		return 2
	}

	// The unbroken code must pass the same tests first, or every
	// mutation would look killed.
	pkgs := map[string]bool{}
	for _, m := range todo {
		for _, p := range m.pkgs {
			pkgs[p] = true
		}
	}
	var all []string
	for p := range pkgs {
		all = append(all, p)
	}
	sort.Strings(all)
	fmt.Fprintf(stdout, "baseline: %s\n", strings.Join(all, " "))
	if ok, out := goTest(scratch, all, "", *timeout); !ok {
		fmt.Fprintf(stderr, "mutate: the tests fail without a mutation:\n%s\n", tail(out, 40))
		return 1
	}

	bad := 0
	for _, m := range todo {
		verdict, detail := try(scratch, m, *timeout)
		if verdict != "killed" {
			bad++
		}
		fmt.Fprintf(stdout, "%-9s %-28s %s%s\n", verdict, m.name, m.what, detail)
	}
	fmt.Fprintf(stdout, "%d mutations, %d killed, %d survived or stale\n", len(todo), len(todo)-bad, bad)
	if bad > 0 {
		return 1
	}
	return 0
}

// try applies m in the scratch copy, runs its tests and restores the
// files. It returns "killed", "survived" or "stale" (an edit no longer
// matches the code, or the mutated code does not build).
func try(dir string, m mutation, timeout time.Duration) (string, string) {
	saved := map[string][]byte{}
	defer func() {
		for f, b := range saved {
			os.WriteFile(filepath.Join(dir, f), b, 0o644)
		}
	}()
	for _, e := range m.edits {
		path := filepath.Join(dir, e.file)
		b, ok := saved[e.file]
		if !ok {
			var err error
			if b, err = os.ReadFile(path); err != nil {
				return "stale", ": " + err.Error()
			}
			saved[e.file] = b
		}
		cur, err := os.ReadFile(path)
		if err != nil {
			return "stale", ": " + err.Error()
		}
		if n := bytes.Count(cur, []byte(e.old)); n != 1 {
			return "stale", fmt.Sprintf(": %s holds the text to replace %d times, not once", e.file, n)
		}
		if err := os.WriteFile(path, bytes.Replace(cur, []byte(e.old), []byte(e.new), 1), 0o644); err != nil {
			return "stale", ": " + err.Error()
		}
	}
	if out, err := goCmd(dir, timeout, "vet", m.pkgs...); err != nil {
		return "stale", ": does not build: " + firstLine(out)
	}
	ok, out := goTest(dir, m.pkgs, m.run, timeout)
	if ok {
		return "survived", ""
	}
	return "killed", " [" + strings.Join(failed(out), " ") + "]"
}

func goTest(dir string, pkgs []string, run string, timeout time.Duration) (bool, string) {
	args := []string{"-count=1", "-short", "-timeout", timeout.String()}
	if run != "" {
		args = append(args, "-run", run)
	}
	out, err := goCmd(dir, timeout+time.Minute, "test", append(args, pkgs...)...)
	return err == nil, out
}

func goCmd(dir string, timeout time.Duration, verb string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append([]string{verb}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

var failRE = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

// failed returns the names of the top-level tests that failed, or the
// packages when no test line shows (a panic or a timeout).
func failed(out string) []string {
	seen := map[string]bool{}
	var names []string
	for _, m := range failRE.FindAllStringSubmatch(out, -1) {
		n := strings.SplitN(m[1], "/", 2)[0]
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "FAIL\t") {
				names = append(names, strings.Fields(l)[1])
			}
		}
	}
	if len(names) > 6 {
		names = append(names[:6], fmt.Sprintf("and %d more", len(names)-6))
	}
	return names
}

func repoRoot() (string, error) {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("not in a git checkout: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// copyTree copies the files git knows of (tracked, or new and not
// ignored), as they are in the working tree, from root to dst.
func copyTree(root, dst string) error {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return err
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, f)
		st, err := os.Lstat(src)
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the working tree
			}
			return err
		}
		if !st.Mode().IsRegular() {
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		p := filepath.Join(dst, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, st.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
