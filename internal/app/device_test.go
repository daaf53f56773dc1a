package app

import (
	"flag"
	"strings"
	"testing"
)

// TestUsageNamesEveryFlag: every flag Register adds but the interface's
// is in the help lines, which line up at the column asked for.
func TestUsageNamesEveryFlag(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var f DeviceFlags
	f.Register(fs)
	help := Usage(25)
	fs.VisitAll(func(fl *flag.Flag) {
		switch fl.Name {
		case "d", "ib-dev", "dev":
			return
		}
		if !strings.Contains(help, "--"+fl.Name) {
			t.Errorf("--%s missing from:\n%s", fl.Name, help)
		}
	})
	for _, l := range strings.Split(strings.TrimSuffix(help, "\n"), "\n") {
		if strings.HasPrefix(l, "  --") && !strings.Contains(l[2:], "  ") {
			continue // a long flag, its description on the next line
		}
		if len(l) <= 25 || l[24] != ' ' || l[25] == ' ' {
			t.Errorf("line %q: description not at column 25", l)
		}
	}
}
