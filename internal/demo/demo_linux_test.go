package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/netns"
	"github.com/uroce/uroce/internal/netns/netnstest"
)

// leftovers returns the demo namespaces of this process still bound.
func leftovers(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(netns.Dir, fmt.Sprintf("uroce-demo-*-%d-*", os.Getpid())))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRun(t *testing.T) {
	netnstest.RequireAFXDP(t)
	for _, o := range []Options{
		{Count: 50, Size: 20000},
		{Count: 50, Size: 20000, MTU: 9000, IPv6: true, XDPMode: "generic", BusyPoll: true},
		{Count: 50, Size: 20000, Drop: 0.01, Dup: 0.01, Reorder: 0.01, Corrupt: 0.01, Seed: 9},
	} {
		name := fmt.Sprintf("mtu%d-v6=%v-faults=%v", o.MTU, o.IPv6, o.Faulty())
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			rep, err := Run(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Results) != len(AllOps) {
				t.Fatalf("%d results", len(rep.Results))
			}
			for _, r := range rep.Results {
				if r.Messages+r.Lost != 50 || r.Op.reliable() && r.Lost != 0 {
					t.Errorf("%v: %d verified, %d lost", r.Op, r.Messages, r.Lost)
				}
			}
			if o.MTU == 9000 && (rep.PathMTU.Bytes() != 4096 || rep.XDPA.TxMultiBuffer == 0 || rep.XDPB.RxMultiBuffer == 0) {
				t.Errorf("mtu 9000: path mtu %d, multi-buffer frames sent %d, received %d",
					rep.PathMTU.Bytes(), rep.XDPA.TxMultiBuffer, rep.XDPB.RxMultiBuffer)
			}
			if o.Faulty() && (rep.FaultsA.Dropped == 0 || rep.CountersB.RcvICRCErr == 0 || rep.CountersA.QP.RetransmittedPkts == 0) {
				t.Errorf("faults: %+v, icrc errors at B %d, retransmitted by A %d",
					rep.FaultsA, rep.CountersB.RcvICRCErr, rep.CountersA.QP.RetransmittedPkts)
			}
			var out strings.Builder
			rep.Write(&out)
			for _, want := range []string{"RC SEND/RECV", "RC READ", "UD SEND", "every byte as sent", "namespaces removed"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("report lacks %q:\n%s", want, out.String())
				}
			}
			t.Log("\n" + out.String())
			if l := leftovers(t); len(l) != 0 {
				t.Errorf("namespaces left behind: %v", l)
			}
		})
	}
}

// TestRunCancel cancels a run in the middle (as Ctrl-C does) and checks
// that it stops and removes its namespaces.
func TestRunCancel(t *testing.T) {
	netnstest.RequireAFXDP(t)
	ctx, cancel := context.WithCancel(context.Background())
	o := Options{Count: 1 << 20, Size: 4096, Ops: []Op{RCWrite}}
	o.Progress = func(OpResult) {}
	time.AfterFunc(300*time.Millisecond, cancel)
	_, err := Run(ctx, o)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: %v", err)
	}
	if l := leftovers(t); len(l) != 0 {
		t.Errorf("namespaces left behind: %v", l)
	}
}

func TestRunBadOptions(t *testing.T) {
	for _, o := range []Options{{Drop: 2}, {MTU: 100}, {MTU: 1200, IPv6: true}, {Size: -3}} {
		if _, err := Run(context.Background(), o); err == nil || errors.Is(err, ErrNotRoot) {
			t.Errorf("%+v: %v", o, err)
		}
	}
}
