package incast

import (
	"encoding/json"
	"strings"
	"testing"
)

// Output of `tc -s -j qdisc show dev sw-r` (iproute2 6.1) on beds at the
// default 500 Mbit/s, recorded during and after a kernel UDP flood. The
// tbf/bfifo ones come from this project's test machines (kernel 6.18, which
// has no sch_red or sch_fq_codel); the red and fq_codel ones from the
// Debian 6.1 kernel that test/rxe boots, with the bed's own commands.
const (
	tcFresh = `[{"kind":"tbf","handle":"1:","root":true,"refcnt":2,"options":{"rate":62500000,"burst":15562,"lat":3751},"bytes":0,"packets":0,"drops":0,"overlimits":0,"requeues":0,"backlog":0,"qlen":0},{"kind":"bfifo","handle":"10:","parent":"1:1","options":{"limit":250000},"bytes":0,"packets":0,"drops":0,"overlimits":0,"requeues":0,"backlog":0,"qlen":0}]`

	tcBfifoFull = `[{"kind":"tbf","handle":"1:","root":true,"refcnt":2,"options":{"rate":62500000,"burst":15562,"lat":3751},"bytes":14071116,"packets":9294,"drops":3316,"overlimits":7682,"requeues":0,"backlog":227100,"qlen":150},{"kind":"bfifo","handle":"10:","parent":"1:1","options":{"limit":250000},"bytes":14071116,"packets":9294,"drops":3316,"overlimits":0,"requeues":0,"backlog":227100,"qlen":150}]`

	tcRED = `[{"kind":"tbf","handle":"1:","root":true,"refcnt":2,"options":{"rate":62500000,"burst":15562,"lat":3751},"bytes":4846314,"packets":3201,"drops":517,"overlimits":270,"requeues":0,"backlog":233156,"qlen":154},{"kind":"red","handle":"10:","parent":"1:1","options":{"limit":250000,"min":15625,"max":62500,"ecn":true,"harddrop":false,"adaptive":false,"nodrop":false},"bytes":4846314,"packets":3201,"drops":517,"overlimits":2738,"requeues":0,"backlog":233156,"qlen":154,"marked":2738,"early":0,"pdrop":517,"other":0}]`

	tcFQCoDel = `[{"kind":"tbf","handle":"1:","root":true,"refcnt":2,"options":{"rate":62500000,"burst":15562,"lat":3751},"bytes":5986356,"packets":3954,"drops":1150,"overlimits":336,"requeues":0,"backlog":0,"qlen":0},{"kind":"fq_codel","handle":"10:","parent":"1:1","options":{"limit":165,"flows":1024,"quantum":1514,"target":999,"ce_threshold":249,"interval":19999,"memory_limit":33554432,"ecn":true,"drop_batch":64},"bytes":5986356,"packets":3954,"drops":1150,"overlimits":0,"requeues":0,"backlog":0,"qlen":0,"maxpacket":1514,"drop_overlimit":1150,"new_flow_count":54,"ecn_mark":229,"ce_mark":3308,"new_flows_len":0,"old_flows_len":0}]`
)

func TestParseStats(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Stats
	}{
		{"fresh", tcFresh, Stats{Qdisc: "bfifo"}},
		{"bfifo full", tcBfifoFull, Stats{Qdisc: "bfifo", Bytes: 14071116, Packets: 9294, Drops: 3316, Overlimits: 7682,
			Backlog: 227100, Qlen: 150}},
		// red counts its marks in its own overlimits too; the bed's
		// Overlimits is the rate limiter's.
		{"red", tcRED, Stats{Qdisc: "red", Bytes: 4846314, Packets: 3201, Drops: 517, Overlimits: 270, Marks: 2738,
			Backlog: 233156, Qlen: 154}},
		{"fq_codel", tcFQCoDel, Stats{Qdisc: "fq_codel", Bytes: 5986356, Packets: 3954, Drops: 1150, Overlimits: 336,
			Marks: 3308}},
		// The root and child in the other order, and another device's
		// qdiscs around them, as `tc qdisc show` without dev prints.
		{"reordered", `[{"kind":"noqueue","handle":"0:","root":true,"refcnt":2,"options":{},"bytes":0,"packets":0,"drops":0,"overlimits":0,"requeues":0,"backlog":0,"qlen":0},` +
			`{"kind":"red","handle":"10:","parent":"1:1","bytes":1,"packets":1,"marked":7},` +
			`{"kind":"tbf","handle":"1:","root":true,"bytes":100,"packets":2,"drops":3,"overlimits":4,"requeues":5,"backlog":6,"qlen":1}]`,
			Stats{Qdisc: "red", Bytes: 100, Packets: 2, Drops: 3, Overlimits: 4, Requeues: 5, Marks: 7, Backlog: 6, Qlen: 1}},
	} {
		got, err := parseStats([]byte(tc.in))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

func TestParseStatsErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"empty", ``, "parse tc qdisc statistics"},
		{"not json", `qdisc tbf 1: root refcnt 2 rate 500Mbit`, "parse tc qdisc statistics"},
		{"no qdiscs", `[]`, "no qdisc 1:"},
		{"no child", `[{"kind":"tbf","handle":"1:","root":true}]`, "no qdisc 1:"},
		{"no root", `[{"kind":"bfifo","handle":"10:","parent":"1:1"}]`, "no qdisc 1:"},
		{"default qdisc", `[{"kind":"noqueue","handle":"0:","root":true,"refcnt":2,"options":{}}]`, "no qdisc 1:"},
	} {
		_, err := parseStats([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

func TestStatsDelta(t *testing.T) {
	before := Stats{Qdisc: "red", Bytes: 1000, Packets: 10, Drops: 1, Overlimits: 2, Requeues: 3, Marks: 4, Backlog: 500, Qlen: 5,
		Arrivals: 7, BacklogSum: 7000}
	after := Stats{Qdisc: "red", Bytes: 4000, Packets: 40, Drops: 5, Overlimits: 2, Requeues: 3, Marks: 14, Backlog: 100, Qlen: 1,
		Arrivals: 37, BacklogSum: 127000}
	want := Stats{Qdisc: "red", Bytes: 3000, Packets: 30, Drops: 4, Marks: 10, Backlog: 100, Qlen: 1, Arrivals: 30, BacklogSum: 120000}
	if got := after.Delta(before); got != want {
		t.Errorf("Delta:\n got %+v\nwant %+v", got, want)
	}
	if m, ok := after.Delta(before).MeanBacklog(); !ok || m != 4000 {
		t.Errorf("MeanBacklog = %v, %v; want 4000, true", m, ok)
	}
	if _, ok := (Stats{}).MeanBacklog(); ok {
		t.Error("MeanBacklog of no arrivals: ok")
	}
	// A counter that went backwards (a qdisc replaced) gives 0, not a
	// wrapped-around figure.
	if got := before.Delta(after); got.Bytes != 0 || got.Drops != 0 || got.Backlog != before.Backlog {
		t.Errorf("Delta backwards: %+v", got)
	}
}

// FuzzParseStats checks that parseStats never panics and accepts only
// valid JSON.
func FuzzParseStats(f *testing.F) {
	for _, s := range []string{tcFresh, tcRED, tcFQCoDel, `[]`, `[{"handle":"1:","root":true},{"parent":"1:1"}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := parseStats(data); err == nil && !json.Valid(data) {
			t.Errorf("accepted invalid JSON %q", data)
		}
	})
}
