package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/uroce/uroce/conform"
	"github.com/uroce/uroce/internal/app"
)

func init() {
	register(&command{name: "conform", summary: "check a RoCE peer's transport rules with scripted scenarios", run: runConform})
}

const conformUsage = `usage: uroce conform [flags] [SCENARIOS.txt…]

Runs transport scenarios against a peer, each checking one IBTA rule of an
RC responder (duplicates, PSN sequence errors, NAK codes, silent drops,
RNR): uroce plays the requester packet by packet and checks each answer.
The catalogue shipped with uroce runs unless files of scenarios are given
(the format is in the README, "Conformance scenarios").

The peer:
  --self            a uroce responder in this process, a fresh QP for each
                    scenario (default; no privilege, no network)

flags:
  -k REGEX          only the scenarios whose names match
  --list            list the scenarios and exit
  --timeout D       how long each expected answer may take (1s)
  --json            one JSON object per scenario
  -w DIR            write a capture of each failing scenario to DIR/NAME.pcap

Output: one line per scenario, its name, PASS or FAIL, the IBTA section,
the rule and, for a failure, the line of the scenario that failed and what
came. Exit status: 0 when every scenario passed, 1 when one failed, 2 on
bad usage or a scenario file that does not parse.
`

func runConform(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("uroce conform", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Bool("self", true, "")
	match := fs.String("k", "", "")
	list := fs.Bool("list", false, "")
	timeout := fs.Duration("timeout", time.Second, "")
	jsonOut := fs.Bool("json", false, "")
	dir := fs.String("w", "", "")
	files, err := app.ParseArgs(fs, args)
	if err == flag.ErrHelp {
		fmt.Fprint(stdout, conformUsage)
		return 0
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "uroce conform: "+format+"\n", a...)
		return 2
	}
	if err != nil {
		return bad("%v\n%s", err, conformUsage)
	}
	var scs []*conform.Scenario
	if len(files) == 0 {
		if scs, err = conform.Catalogue(); err != nil {
			return bad("%v", err)
		}
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return bad("%v", err)
		}
		s, err := conform.Parse(f, name)
		f.Close()
		if err != nil {
			return bad("%v", err)
		}
		scs = append(scs, s...)
	}
	if *match != "" {
		re, err := regexp.Compile(*match)
		if err != nil {
			return bad("-k %q: %v", *match, err)
		}
		var keep []*conform.Scenario
		for _, s := range scs {
			if re.MatchString(s.Name) {
				keep = append(keep, s)
			}
		}
		scs = keep
	}
	if len(scs) == 0 {
		return bad("no scenario to run")
	}
	if *list {
		for _, s := range scs {
			fmt.Fprintf(stdout, "%-24s %-40s %s\n", s.Name, s.IBTA, s.Rule)
		}
		return 0
	}
	failed := 0
	enc := json.NewEncoder(stdout)
	for _, s := range scs {
		var frames [][]byte
		tap := func(b []byte, _ bool) { frames = append(frames, append([]byte(nil), b...)) }
		r, err := conform.RunSelf(ctx, s, *timeout, tap)
		if err != nil {
			fmt.Fprintf(stderr, "uroce conform: %s: %v\n", s.Name, err)
			return 1
		}
		if !r.Pass {
			failed++
			if *dir != "" {
				if err := writeFrames(filepath.Join(*dir, s.Name+".pcap"), frames); err != nil {
					fmt.Fprintf(stderr, "uroce conform: %v\n", err)
				}
			}
		}
		if *jsonOut {
			enc.Encode(r)
			continue
		}
		res := "PASS"
		if !r.Pass {
			res = "FAIL"
		}
		fmt.Fprintf(stdout, "%-24s %s  %-40s %s\n", r.Name, res, r.IBTA, r.Rule)
		if !r.Pass {
			fmt.Fprintf(stdout, "%24s       %s\n", "", r.Reason)
		}
	}
	if !*jsonOut {
		fmt.Fprintf(stdout, "%d scenarios, %d passed, %d failed\n", len(scs), len(scs)-failed, failed)
	}
	if failed > 0 {
		return 1
	}
	return 0
}

// writeFrames writes frames as a pcap file.
func writeFrames(path string, frames [][]byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
		return err
	}
	now := time.Now()
	for _, b := range frames {
		if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: now, CaptureLength: len(b), Length: len(b)}, b); err != nil {
			return err
		}
	}
	return nil
}
