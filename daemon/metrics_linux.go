package daemon

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/uroce/uroce/rdmacm"
	"github.com/uroce/uroce/stack"
)

// Metrics returns an HTTP handler that serves the daemon's counters, the
// ones Stats gives, as Prometheus metrics, with the Go runtime's and the
// process's. The counters are read at each scrape:
//
//	uroce_device_<counter>_total{device,netdev}         every device counter (rcv_icrc_err, sent_pkts, …)
//	uroce_qp_<counter>_total{device,qpn,session,pid,type} every QP counter
//	uroce_qp_state{device,qpn,session,pid,type,state}   1
//	uroce_sessions                                      connected clients
//	uroce_session_objects{session,pid,comm,kind}        objects a session holds
//	uroce_session_mr_bytes{session,pid,comm}            bytes it registered
//	uroce_cm_<counter>_total{device,netdev}             the RDMA CM agent's (mads_sent, no_listener, …)
//	uroce_cm_connections{device,netdev}                 connections the agent holds
//	uroce_uptime_seconds                                since Listen
//
// Counters keep the rdma_rxe and mlx5 names, as `rdma statistic` shows
// them.
func (s *Server) Metrics() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		newStatCollector(s),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      errorLog{s.log},
		Registry:      reg,
	})
	return promhttp.InstrumentMetricHandler(reg, h)
}

// statCollector is a prometheus.Collector over Server.Stats. Its
// descriptors are fixed: the counter names come from package stack's
// tables, the same ones Stats takes them from.
type statCollector struct {
	s      *Server
	device map[string]*prometheus.Desc // by counter name
	qp     map[string]*prometheus.Desc
	cm     map[string]*prometheus.Desc
	all    []*prometheus.Desc

	qpState, sessions, objects, mrBytes, uptime *prometheus.Desc
}

var (
	qpLabels      = []string{"device", "qpn", "session", "pid", "type"}
	sessionLabels = []string{"session", "pid", "comm"}
)

func newStatCollector(s *Server) *statCollector {
	c := &statCollector{s: s, device: map[string]*prometheus.Desc{}, qp: map[string]*prometheus.Desc{},
		cm: map[string]*prometheus.Desc{}}
	add := func(d *prometheus.Desc) *prometheus.Desc {
		c.all = append(c.all, d)
		return d
	}
	var dc stack.Counters
	dc.Each(func(name string, _ uint64) {
		c.device[name] = add(prometheus.NewDesc("uroce_device_"+name+"_total",
			"Device counter "+name+" (as rdma statistic shows it).", []string{"device", "netdev"}, nil))
	})
	stack.EachQPCounter(&stack.QPCounters{}, func(name string, _ uint64) {
		c.qp[name] = add(prometheus.NewDesc("uroce_qp_"+name+"_total",
			"QP counter "+name+" (as rdma statistic show qp shows it).", qpLabels, nil))
	})
	for _, name := range rdmacm.CounterNames {
		metric := "uroce_" + name + "_total"
		if name == "cm_connections" {
			metric = "uroce_" + name
		}
		c.cm[name] = add(prometheus.NewDesc(metric, "RDMA CM agent counter "+name+".", []string{"device", "netdev"}, nil))
	}
	c.qpState = add(prometheus.NewDesc("uroce_qp_state", "A QP's state: 1, with the state as a label.",
		append(qpLabels[:len(qpLabels):len(qpLabels)], "state"), nil))
	c.sessions = add(prometheus.NewDesc("uroce_sessions", "Clients connected to the daemon.", nil, nil))
	c.objects = add(prometheus.NewDesc("uroce_session_objects", "Objects a session holds, by kind.",
		append(sessionLabels[:len(sessionLabels):len(sessionLabels)], "kind"), nil))
	c.mrBytes = add(prometheus.NewDesc("uroce_session_mr_bytes", "Bytes a session has registered as memory regions.",
		sessionLabels, nil))
	c.uptime = add(prometheus.NewDesc("uroce_uptime_seconds", "Seconds since the daemon started listening.", nil, nil))
	return c
}

// Describe implements prometheus.Collector.
func (c *statCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.all {
		ch <- d
	}
}

// Collect implements prometheus.Collector: one Stats per scrape.
func (c *statCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats(0)
	dev := st.Device
	for name, v := range dev.Counters {
		if d := c.device[name]; d != nil {
			emit(ch, d, prometheus.CounterValue, float64(v), dev.Name, dev.Netdev)
		}
	}
	for name, v := range dev.CM {
		if d := c.cm[name]; d != nil {
			t := prometheus.CounterValue
			if name == "cm_connections" {
				t = prometheus.GaugeValue
			}
			emit(ch, d, t, float64(v), dev.Name, dev.Netdev)
		}
	}
	for i := range st.QPs {
		q := &st.QPs[i]
		labels := []string{dev.Name, strconv.FormatUint(uint64(q.QPN), 10), strconv.FormatUint(uint64(q.Session), 10),
			strconv.FormatInt(int64(q.PID), 10), q.Type}
		for name, v := range q.Counters {
			if d := c.qp[name]; d != nil {
				emit(ch, d, prometheus.CounterValue, float64(v), labels...)
			}
		}
		emit(ch, c.qpState, prometheus.GaugeValue, 1, append(labels, q.State)...)
	}
	emit(ch, c.sessions, prometheus.GaugeValue, float64(len(st.Sessions)))
	for i := range st.Sessions {
		se := &st.Sessions[i]
		labels := []string{strconv.FormatUint(uint64(se.ID), 10), strconv.FormatInt(int64(se.PID), 10),
			strings.ToValidUTF8(se.Comm, "\uFFFD")}
		for kind, n := range se.Objects {
			emit(ch, c.objects, prometheus.GaugeValue, float64(n), append(labels, kind)...)
		}
		emit(ch, c.mrBytes, prometheus.GaugeValue, float64(se.MRBytes), labels...)
	}
	emit(ch, c.uptime, prometheus.GaugeValue, dev.Uptime)
}

// emit sends one sample, or the reason it cannot be made (the handler
// then logs it and serves the rest).
func emit(ch chan<- prometheus.Metric, d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	m, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	ch <- m
}

// errorLog is promhttp's error log over the daemon's logger.
type errorLog struct{ l *slog.Logger }

func (e errorLog) Println(v ...any) {
	e.l.Warn("metrics: " + strings.TrimSuffix(fmt.Sprintln(v...), "\n"))
}
