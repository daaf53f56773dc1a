package app

import (
	"context"
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

// TestDeviceFlagsConfig: the flags reach the device's configuration, and
// those that are the daemon's are refused with --daemon.
func TestDeviceFlagsConfig(t *testing.T) {
	parse := func(args ...string) *DeviceFlags {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		var f DeviceFlags
		f.Register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return &f
	}
	cfg, err := parse("-d", "veth0", "--keep-past-gap", "--batch", "8", "--send-window", "-1").config()
	if err != nil || cfg.Interface != "veth0" || !cfg.KeepPastGap || cfg.Batch != 8 || cfg.SendWindow != -1 {
		t.Errorf("config: %+v, %v", cfg, err)
	}
	if cfg, _ := parse("-d", "veth0").config(); cfg.KeepPastGap || cfg.SendWindow != DefaultSendWindow {
		t.Errorf("defaults: %+v", cfg)
	}
	if _, err := parse("--batch", "-1", "-d", "veth0").config(); err == nil || !strings.Contains(err.Error(), "--batch -1") {
		t.Errorf("--batch -1: %v", err)
	}
	if _, err := parse("--daemon=/nonexistent.sock", "--keep-past-gap").Open(context.Background()); err == nil ||
		!strings.Contains(err.Error(), "--keep-past-gap") || !strings.Contains(err.Error(), "uroce daemon") {
		t.Errorf("--keep-past-gap with --daemon: %v", err)
	}
}
