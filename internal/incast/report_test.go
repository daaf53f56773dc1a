package incast

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestJain(t *testing.T) {
	for _, tc := range []struct {
		name string
		x    []float64
		want float64
	}{
		{"empty", nil, 0},
		{"all zero", []float64{0, 0, 0}, 0},
		{"one flow", []float64{7}, 1},
		{"equal 2", []float64{250, 250}, 1},
		{"equal 8", []float64{3, 3, 3, 3, 3, 3, 3, 3}, 1},
		{"one hog of 2", []float64{500, 0}, 0.5},
		{"one hog of 4", []float64{0, 0, 9, 0}, 0.25},
		{"one hog of 10", []float64{1, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0.1},
		{"two of four share", []float64{5, 5, 0, 0}, 0.5},
		// (1+2+3)² / (3 · (1+4+9)) = 36/42.
		{"1 2 3", []float64{1, 2, 3}, 36.0 / 42},
		// (1+3)² / (2 · (1+9)) = 16/20.
		{"1 3", []float64{1, 3}, 0.8},
		// (300+200)² / (2 · (300²+200²)) = 250000/260000.
		{"300 200 Mbit/s", []float64{300e6, 200e6}, 25.0 / 26},
		// Scaling does not matter.
		{"1 3 scaled", []float64{1e9, 3e9}, 0.8},
	} {
		if got := Jain(tc.x); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: Jain(%v) = %v, want %v", tc.name, tc.x, got, tc.want)
		}
	}
}

// TestJainBounds checks 1/n ≤ J ≤ 1 over many non-negative allocations.
func TestJainBounds(t *testing.T) {
	x := make([]float64, 0, 16)
	for n := 1; n <= 16; n++ {
		x = append(x, 0)
		for seed := range 50 {
			for i := range x {
				x[i] = float64((i*7919 + seed*104729) % 101)
			}
			j := Jain(x)
			if j == 0 {
				continue // all zero
			}
			if j < 1/float64(n)-1e-12 || j > 1+1e-12 {
				t.Fatalf("Jain(%v) = %v, outside [1/%d, 1]", x, j, n)
			}
		}
	}
}

func testReport() *Report {
	return &Report{
		Title:      "kernel UDP",
		Bottleneck: 500e6,
		Marking:    Step,
		Duration:   2 * time.Second,
		Flows: []Flow{
			{Name: "s1", Bytes: 75_000_000, Packets: 50_000, CE: 5_000},
			{Name: "s2", Bytes: 25_000_000, Packets: 17_000, CE: 0},
		},
		Queue: Stats{Qdisc: "bfifo", Bytes: 104_000_000, Packets: 68_700, Drops: 123, Marks: 5_000, Overlimits: 9, Backlog: 3028, Qlen: 2,
			Arrivals: 68_000, BacklogSum: 68_000 * 62_500},
	}
}

func TestReportFigures(t *testing.T) {
	r := testReport()
	if got := r.Goodput(0); got != 300e6 {
		t.Errorf("Goodput(0) = %v, want 300e6", got)
	}
	if got := r.Aggregate(); got != 400e6 {
		t.Errorf("Aggregate = %v, want 400e6", got)
	}
	if got := r.Utilization(); got != 0.8 {
		t.Errorf("Utilization = %v, want 0.8", got)
	}
	if got := r.Carried(); got != 416e6 {
		t.Errorf("Carried = %v, want 416e6", got)
	}
	// The queue's snapshots 2.08 s apart: its rate over that time; the
	// goodputs keep Duration.
	r.QueueTime = 2080 * time.Millisecond
	if got := r.Carried(); math.Abs(got-400e6) > 1e-6 || r.Aggregate() != 400e6 {
		t.Errorf("with QueueTime: Carried = %v, Aggregate = %v, want 400e6 both", got, r.Aggregate())
	}
	r.QueueTime = 0
	// (300+100)² / (2 · (300²+100²)) = 0.8.
	if got := r.Fairness(); math.Abs(got-0.8) > 1e-12 {
		t.Errorf("Fairness = %v, want 0.8", got)
	}
	empty := &Report{}
	if empty.Aggregate() != 0 || empty.Utilization() != 0 || empty.Fairness() != 0 || empty.Carried() != 0 {
		t.Errorf("empty report: %v %v %v %v", empty.Aggregate(), empty.Utilization(), empty.Fairness(), empty.Carried())
	}
}

func TestReportWriteText(t *testing.T) {
	var b strings.Builder
	if err := testReport().WriteText(&b); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	t.Logf("\n%s", got)
	for _, want := range []string{
		"kernel UDP: 2 flows into 500.00 Mbit/s (step), 2s\n",
		"  flow            goodput   share      packets    CE-marked      CE\n",
		"  s1        300.00 Mbit/s   75.0%        50000         5000   10.0%\n",
		"  s2        100.00 Mbit/s   25.0%        17000            0    0.0%\n",
		"  total     400.00 Mbit/s   80.0%        67000         5000    7.5%\n",
		"Jain's fairness index 0.800",
		"bottleneck bfifo: carried 416.00 Mbit/s (83.2% of its rate), sent 68700 packets, dropped 123, CE-marked 5000, overlimits 9, backlog 3028 bytes at the end\n",
		"  queue: 68000 arrivals found 62500 bytes waiting on average, 1ms at the bottleneck's rate\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// Without the BPF program's measurements, no queue line.
	r := testReport()
	r.Queue.Arrivals, r.Queue.BacklogSum = 0, 0
	b.Reset()
	r.WriteText(&b)
	if strings.Contains(b.String(), "queue:") {
		t.Errorf("report without arrivals measured:\n%s", b.String())
	}
}

func TestFormatRate(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{0, "0 bit/s"},
		{999, "999 bit/s"},
		{1500, "1.50 kbit/s"},
		{500e6, "500.00 Mbit/s"},
		{12.5e9, "12.500 Gbit/s"},
	} {
		if got := formatRate(tc.in); got != tc.want {
			t.Errorf("formatRate(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
