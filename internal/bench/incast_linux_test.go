package bench

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/incast"
	"github.com/uroce/uroce/internal/netns/netnstest"
)

// TestIncast runs two flows briefly into a bottleneck far below what
// they can send, with DCQCN on and off. The queue marks, the receiver
// answers the marks with CNPs, and only with DCQCN on do the senders cut
// their rates. Goodput, fairness and drops are measurements, not results.
func TestIncast(t *testing.T) {
	netnstest.RequireAFXDP(t)
	r, err := Incast(context.Background(), IncastOptions{Flows: []int{2}, Bottleneck: 200_000_000, Window: 16,
		Marking:  incast.Marking{Kind: incast.Step},
		Duration: 300 * time.Millisecond})
	if errors.Is(err, incast.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Runs) != 2 || !r.Runs[0].DCQCN || r.Runs[1].DCQCN {
		t.Fatalf("runs %+v", r.Runs)
	}
	for _, x := range r.Runs {
		if x.Report.Aggregate() <= 0 || len(x.Report.Flows) != 2 || x.Report.Queue.Marks == 0 || x.Marked == 0 || x.CNPs == 0 {
			t.Errorf("DCQCN %v: goodput %.0f, %d flows, %d marked by the queue, %d counted, %d CNPs", x.DCQCN,
				x.Report.Aggregate(), len(x.Report.Flows), x.Report.Queue.Marks, x.Marked, x.CNPs)
		}
		if x.Probes > x.Retransmitted {
			t.Errorf("DCQCN %v: %d loss probes among %d packets retransmitted", x.DCQCN, x.Probes, x.Retransmitted)
		}
		// The Step marker measures the queue the packets find.
		if _, ok := x.Report.Queue.MeanBacklog(); !ok {
			t.Errorf("DCQCN %v: queue not measured: %+v", x.DCQCN, x.Report.Queue)
		}
		if (x.CNPHandled > 0) != x.DCQCN {
			t.Errorf("DCQCN %v: %d rate cuts", x.DCQCN, x.CNPHandled)
		}
	}
	var out strings.Builder
	r.Write(&out)
	if !strings.Contains(out.String(), "Jain's fairness index") || !strings.Contains(out.String(), "CNPs sent") ||
		!strings.Contains(out.String(), "loss probes") || !strings.Contains(out.String(), "arrivals found") {
		t.Errorf("report:\n%s", out.String())
	}
	t.Log("\n" + out.String())
}

func TestIncastOptions(t *testing.T) {
	for _, o := range []IncastOptions{{Flows: []int{0}}, {Flows: []int{1000}}, {Size: -1}, {Window: -2}, {Duration: time.Microsecond}} {
		if _, err := Incast(context.Background(), o); err == nil || err == ErrNotRoot {
			t.Errorf("%+v: %v", o, err)
		}
	}
}

// TestIncastTailDrop checks that a tail-drop bottleneck asked for is the
// one run: TailDrop is incast's zero Kind, and it marks nothing, so the
// receiver counts no CE and sends no CNP.
func TestIncastTailDrop(t *testing.T) {
	netnstest.RequireAFXDP(t)
	_, x := oneRun(t, IncastOptions{Flows: []int{1}, Bottleneck: 200_000_000, Window: 16,
		Marking: incast.Marking{Kind: incast.TailDrop}, Modes: []bool{false}, Duration: 200 * time.Millisecond})
	if x.Report.Marking != incast.TailDrop || x.Report.Queue.Marks != 0 || x.Marked != 0 || x.CNPs != 0 {
		t.Errorf("bottleneck %v: %d marked by the queue, %d counted, %d CNPs; want taildrop and none",
			x.Report.Marking, x.Report.Queue.Marks, x.Marked, x.CNPs)
	}
	if x.Report.Aggregate() <= 0 {
		t.Errorf("goodput %.0f", x.Report.Aggregate())
	}
}

// TestIncastRead runs two RC READ flows: the receiver's QPs read from
// the senders, whose READ responses fill the bottleneck. The receiver,
// as requester, counts the marks and answers them with CNPs to the
// senders' QPs, which with DCQCN on cut their rates as responders.
func TestIncastRead(t *testing.T) {
	netnstest.RequireAFXDP(t)
	r, x := oneRun(t, IncastOptions{Flows: []int{2}, Bottleneck: 200_000_000, Window: 16, Read: true,
		Marking: incast.Marking{Kind: incast.Step}, Modes: []bool{true}, Join: true, Duration: 300 * time.Millisecond})
	if x.Report.Aggregate() <= 0 || len(x.Report.Flows) != 2 || x.Report.Queue.Marks == 0 || x.Marked == 0 || x.CNPs == 0 || x.CNPHandled == 0 {
		t.Errorf("goodput %.0f, %d flows, %d marked by the queue, %d counted, %d CNPs, %d rate cuts",
			x.Report.Aggregate(), len(x.Report.Flows), x.Report.Queue.Marks, x.Marked, x.CNPs, x.CNPHandled)
	}
	for _, f := range x.Report.Flows {
		if f.Bytes == 0 || f.Packets < f.Bytes/4096 || f.CE == 0 {
			t.Errorf("flow %s: %d bytes read, %d packets sent by its sender, %d CE-marked", f.Name, f.Bytes, f.Packets, f.CE)
		}
	}
	var out strings.Builder
	r.Write(&out)
	if !strings.Contains(out.String(), "RC READs of 65536 bytes") {
		t.Errorf("report:\n%s", out.String())
	}
	t.Log("\n" + out.String())
}

// oneRun runs Incast with o, which asks for one run, and returns the
// report and the run; it skips where the bed cannot be built.
func oneRun(t *testing.T, o IncastOptions) (*IncastReport, IncastRun) {
	t.Helper()
	r, err := Incast(context.Background(), o)
	if errors.Is(err, incast.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Runs) != 1 {
		t.Fatalf("runs %+v", r.Runs)
	}
	return r, r.Runs[0]
}
