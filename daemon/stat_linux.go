package daemon

import (
	"encoding/json"
	"sort"
	"time"

	"github.com/uroce/uroce/proto"
	"github.com/uroce/uroce/rdmacm"
	"github.com/uroce/uroce/stack"
)

// Stats gathers the daemon's counters; qpn non-zero keeps that QP only.
func (s *Server) Stats(qpn uint32) proto.Stat {
	c := s.cfg.Device.Counters()
	st := proto.Stat{Device: proto.DeviceStat{Name: s.cfg.Name, Netdev: s.cfg.Netdev, Counters: c.Map()}, Sessions: []proto.SessionStat{}, QPs: []proto.QPStat{}}
	st.Device.Uptime = sinceSeconds(s.start)
	if a, err := rdmacm.AgentFor(s.cfg.Device); err == nil {
		st.Device.CM = a.CounterMap()
	}
	for _, ss := range s.snapshot() {
		ss.mu.RLock()
		se := proto.SessionStat{ID: ss.id, PID: ss.pid, UID: ss.uid, Comm: ss.comm, Objects: map[string]int{}, MRBytes: ss.mrBytes}
		for k, n := range ss.count {
			se.Objects[kindNames[k]] = n
		}
		var qps []*qpObj
		for _, o := range ss.objs {
			if q, ok := o.(*qpObj); ok {
				qps = append(qps, q)
			}
		}
		ss.mu.RUnlock()
		st.Sessions = append(st.Sessions, se)
		for _, q := range qps {
			x := q.q.Status()
			if qpn != 0 && x.QPN != qpn {
				continue
			}
			qs := proto.QPStat{QPN: x.QPN, Session: ss.id, PID: ss.pid, Type: x.Type.String(),
				State: x.State.String(), SQPSN: uint32(x.SQPSN), RQPSN: uint32(x.RQPSN), DestQPN: x.DestQPN,
				Counters: qpCounters(&x.Counters)}
			if x.RateLimited {
				qs.Rate = x.Rate
			}
			st.QPs = append(st.QPs, qs)
		}
	}
	sort.Slice(st.Sessions, func(i, j int) bool { return st.Sessions[i].ID < st.Sessions[j].ID })
	sort.Slice(st.QPs, func(i, j int) bool { return st.QPs[i].QPN < st.QPs[j].QPN })
	return st
}

func qpCounters(c *stack.QPCounters) map[string]uint64 {
	m := map[string]uint64{}
	stack.EachQPCounter(c, func(name string, v uint64) { m[name] = v })
	return m
}

func (s *Server) statJSON(qpn uint32) ([]byte, error) {
	b, err := json.Marshal(s.Stats(qpn))
	if err != nil {
		return nil, err
	}
	if len(b) > 60<<10 {
		// One message holds 64 KiB: too many QPs to list them all.
		st := s.Stats(qpn)
		st.QPs = st.QPs[:0]
		b, err = json.Marshal(st)
	}
	return b, err
}

func sinceSeconds(t time.Time) float64 { return time.Since(t).Seconds() }
