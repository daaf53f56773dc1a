package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
)

// newFlags returns the flag set of the command name (as "uroce demo"),
// whose usage is the text usage followed by the flags' defaults, on
// stderr.
func newFlags(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args into fs, for a command that takes flags only. It
// returns -1 when the command should run, else the exit code to return
// at once: 0 after -h, 2 for a bad flag or an argument (the usage is
// printed).
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) int {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		fs.Usage()
		return 2
	}
	return -1
}

// runFailed reports err of the namespace-building command name (as
// "uroce bench lat") and returns exit code 1. The commands remove their
// namespaces before they return, also when interrupted.
func runFailed(stderr io.Writer, name string, err error) int {
	if errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "%s: interrupted; namespaces removed\n", name)
	} else {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
	}
	return 1
}
