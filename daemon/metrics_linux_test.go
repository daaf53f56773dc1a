package daemon_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/uroce/uroce/daemon"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
)

// scrapeMetrics fetches the daemon's metrics as Prometheus would and
// returns them by name, and as text.
func scrapeMetrics(t *testing.T, s *daemon.Server) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	s.Metrics().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	text := rec.Body.String()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("scrape: %v\n%s", err, text)
	}
	return mfs, text
}

// metricValue is the value of the one metric of family name whose labels
// include want; ok is false when there is none.
func metricValue(mfs map[string]*dto.MetricFamily, name string, want map[string]string) (v float64, ok bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, x := range want {
			if have[k] != x {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// TestMetrics moves data between two clients on two daemons and checks
// that a scrape of one daemon shows what its Stats shows.
func TestMetrics(t *testing.T) {
	p := newPair(t)
	A, B := newEnd(t, open(t, p.sa), 1<<20), newEnd(t, open(t, p.sb), 1<<20)
	ga, _ := A.dev.GID(1)
	gb, _ := B.dev.GID(1)
	qa, qb := A.qp(t, stack.RC), B.qp(t, stack.RC)
	connect(t, qa, qb, ga, gb)

	fill(A.buf[:100000], 3)
	if err := qb.PostRecv(&stack.RecvWR{ID: 1, SG: []stack.SGE{B.mr.SGE(0, 30000)}}); err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(&verbs.SendWR{ID: 1, Op: stack.OpSend, Flags: stack.SendSignaled, SG: []stack.SGE{A.mr.SGE(0, 20000)}}); err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(&verbs.SendWR{ID: 2, Op: stack.OpWrite, Flags: stack.SendSignaled, SG: []stack.SGE{A.mr.SGE(0, 100000)},
		Remote: stack.RemoteAddr{Addr: B.mr.Addr() + 200000, RKey: B.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	for _, wc := range append(waitN(t, A.cq, 2), waitN(t, B.cq, 1)...) {
		if wc.Status != 0 {
			t.Fatalf("completion %+v", wc)
		}
	}

	// Counters only grow: a scrape between two Stats lies between them
	// (and equals both while nothing moves).
	before := p.sa.Stats(0)
	mfs, text := scrapeMetrics(t, p.sa)
	after := p.sa.Stats(0)

	dev := map[string]string{"device": before.Device.Name, "netdev": "pipe"}
	if before.Device.Counters["sent_pkts"] == 0 {
		t.Fatalf("no packets sent: %v", before.Device.Counters)
	}
	for name, lo := range before.Device.Counters {
		v, ok := metricValue(mfs, "uroce_device_"+name+"_total", dev)
		if hi := after.Device.Counters[name]; !ok || v < float64(lo) || v > float64(hi) {
			t.Errorf("uroce_device_%s_total %v (present %v), Stats %d..%d", name, v, ok, lo, hi)
		}
	}
	if mfs["uroce_device_sent_pkts_total"].GetType() != dto.MetricType_COUNTER {
		t.Errorf("uroce_device_sent_pkts_total is a %v", mfs["uroce_device_sent_pkts_total"].GetType())
	}
	// The CM agent's counters, every one of them.
	if len(before.Device.CM) == 0 {
		t.Error("Stats has no CM counters")
	}
	for name, lo := range before.Device.CM {
		metric := "uroce_" + name + "_total"
		if name == "cm_connections" {
			metric = "uroce_" + name
		}
		if v, ok := metricValue(mfs, metric, dev); !ok || v < float64(lo) || v > float64(after.Device.CM[name]) && name != "cm_connections" {
			t.Errorf("%s %v (present %v), Stats %d", metric, v, ok, lo)
		}
	}

	if len(before.QPs) != 1 || before.QPs[0].QPN != qa.QPN() {
		t.Fatalf("Stats QPs %+v, want QP %d", before.QPs, qa.QPN())
	}
	q := before.QPs[0]
	ql := map[string]string{"device": before.Device.Name, "qpn": strconv.Itoa(int(q.QPN)), "session": strconv.Itoa(int(q.Session)),
		"pid": strconv.Itoa(os.Getpid()), "type": "RC"}
	for name, lo := range q.Counters {
		v, ok := metricValue(mfs, "uroce_qp_"+name+"_total", ql)
		if hi := after.QPs[0].Counters[name]; !ok || v < float64(lo) || v > float64(hi) {
			t.Errorf("uroce_qp_%s_total %v (present %v), Stats %d..%d", name, v, ok, lo, hi)
		}
	}
	if v, _ := metricValue(mfs, "uroce_qp_sent_pkts_total", ql); v == 0 {
		t.Error("uroce_qp_sent_pkts_total is 0")
	}
	ql["state"] = "RTS"
	if v, ok := metricValue(mfs, "uroce_qp_state", ql); !ok || v != 1 || len(mfs["uroce_qp_state"].GetMetric()) != 1 {
		t.Errorf("uroce_qp_state{state=RTS} %v %v\n%s", v, ok, metricLines(text, "uroce_qp_state"))
	}

	if v, _ := metricValue(mfs, "uroce_sessions", nil); v != 1 || len(before.Sessions) != 1 {
		t.Fatalf("uroce_sessions %v, Stats has %d", v, len(before.Sessions))
	}
	se := before.Sessions[0]
	sl := map[string]string{"session": strconv.Itoa(int(se.ID)), "pid": strconv.Itoa(os.Getpid()), "comm": se.Comm}
	for kind, want := range map[string]int{"pd": 1, "mr": 1, "cq": 1, "qp": 1} {
		sl["kind"] = kind
		if v, ok := metricValue(mfs, "uroce_session_objects", sl); !ok || v != float64(want) || se.Objects[kind] != want {
			t.Errorf("uroce_session_objects{kind=%q} %v (present %v), Stats %d, want %d", kind, v, ok, se.Objects[kind], want)
		}
	}
	delete(sl, "kind")
	if v, ok := metricValue(mfs, "uroce_session_mr_bytes", sl); !ok || v != float64(se.MRBytes) || se.MRBytes != 1<<20 {
		t.Errorf("uroce_session_mr_bytes %v (present %v), Stats %d", v, ok, se.MRBytes)
	}
	if v, _ := metricValue(mfs, "uroce_uptime_seconds", nil); v <= 0 || v < before.Device.Uptime || v > after.Device.Uptime {
		t.Errorf("uroce_uptime_seconds %v, Stats %v..%v", v, before.Device.Uptime, after.Device.Uptime)
	}
	for _, name := range []string{"go_goroutines", "process_start_time_seconds", "promhttp_metric_handler_requests_total"} {
		if mfs[name] == nil {
			t.Errorf("no %s", name)
		}
	}

	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range problems {
		if strings.HasPrefix(pr.Metric, "uroce_") {
			t.Errorf("promlint: %s: %s", pr.Metric, pr.Text)
		}
	}

	// The other daemon's scrape is its own: its client's session and QP.
	mfs, _ = scrapeMetrics(t, p.sb)
	if v, ok := metricValue(mfs, "uroce_qp_state", map[string]string{"qpn": strconv.Itoa(int(qb.QPN())), "state": "RTS"}); !ok || v != 1 {
		t.Errorf("daemon b: uroce_qp_state of QP %d: %v %v", qb.QPN(), v, ok)
	}
	if v, _ := metricValue(mfs, "uroce_device_rcvd_pkts_total", nil); v == 0 {
		t.Error("daemon b: uroce_device_rcvd_pkts_total is 0")
	}
}

// TestMetricsIdle scrapes a daemon without clients: the device counters
// are there, at zero, and no session or QP is.
func TestMetricsIdle(t *testing.T) {
	p := newPair(t)
	mfs, _ := scrapeMetrics(t, p.sa)
	var names []string
	(&stack.Counters{}).Each(func(name string, _ uint64) { names = append(names, name) })
	for _, name := range names {
		if v, ok := metricValue(mfs, "uroce_device_"+name+"_total", map[string]string{"device": "uroce0", "netdev": "pipe"}); !ok || v != 0 {
			t.Errorf("uroce_device_%s_total %v (present %v)", name, v, ok)
		}
	}
	if v, ok := metricValue(mfs, "uroce_sessions", nil); !ok || v != 0 {
		t.Errorf("uroce_sessions %v %v", v, ok)
	}
	for _, name := range []string{"uroce_qp_state", "uroce_session_objects", "uroce_qp_sent_pkts_total"} {
		if mfs[name] != nil {
			t.Errorf("%s without clients: %v", name, mfs[name])
		}
	}
	st := p.sa.Stats(0)
	if len(st.QPs) != 0 || len(st.Sessions) != 0 {
		t.Errorf("Stats without clients: %+v", st)
	}
}

func metricLines(text, prefix string) string {
	var b strings.Builder
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
