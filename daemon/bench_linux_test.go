package daemon_test

import (
	"context"
	"net/netip"
	"os"
	"runtime"
	"sort"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/uroce/uroce/link/pipe"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
)

// The same work through the in-process stack (verbs.Local) and through
// the daemon (client), side by side on the same pair of pipe-joined
// devices: run them together, e.g.
//
//	go test -run '^$' -bench 'Path' -count 4 ./daemon

type benchSide struct {
	A, B   *end
	qa, qb verbs.QP
}

func benchSides(b testing.TB, daemonPath bool, size int) *benchSide {
	b.Helper()
	la, lb := pipe.New(pipe.Config{MTU: 9000})
	nb := stack.StaticNeighbors{ipA: macA, ipB: macB}
	busy := os.Getenv("UROCE_BUSY_POLL") != ""
	da, err := stack.Open(context.Background(), stack.Config{Link: la, MAC: macA, Addrs: []netip.Addr{ipA}, Neighbors: nb, BusyPoll: busy})
	if err != nil {
		b.Fatal(err)
	}
	db, err := stack.Open(context.Background(), stack.Config{Link: lb, MAC: macB, Addrs: []netip.Addr{ipB}, Neighbors: nb, BusyPoll: busy})
	if err != nil {
		b.Fatal(err)
	}
	var va, vb verbs.Device = verbs.Local(da), verbs.Local(db)
	if daemonPath {
		dir := b.TempDir()
		sa, sb := serve(b, da, dir+"/a.sock"), serve(b, db, dir+"/b.sock")
		b.Cleanup(func() { sa.Shutdown(); sb.Shutdown() })
		va, vb = open(b, sa), open(b, sb)
	}
	b.Cleanup(func() { va.Close(); vb.Close(); da.Close(); db.Close() })
	s := &benchSide{A: newEnd(b, va, size), B: newEnd(b, vb, size)}
	s.qa, s.qb = s.A.qp(b, stack.RC), s.B.qp(b, stack.RC)
	ga, _ := va.GID(1)
	gb, _ := vb.GID(1)
	connect(b, s.qa, s.qb, ga, gb)
	return s
}

// writes posts b.N WRITEs of size bytes, depth in flight, every batch
// of batch signaled once.
func (s *benchSide) writes(b *testing.B, size, depth, batch int) {
	wrs := make([]verbs.SendWR, batch)
	for i := range wrs {
		wrs[i] = verbs.SendWR{ID: uint64(i), Op: stack.OpWrite, SG: []stack.SGE{s.A.mr.SGE(0, uint32(size))},
			Remote: stack.RemoteAddr{Addr: s.B.mr.Addr(), RKey: s.B.mr.RKey()}}
	}
	wrs[batch-1].Flags = stack.SendSignaled
	wcs := make([]stack.WC, 16)
	b.ResetTimer()
	start := time.Now()
	posted, done, inflight := 0, 0, 0
	for done < b.N {
		for posted < b.N && inflight < depth {
			if _, err := s.qa.PostSendBatch(wrs); err != nil {
				b.Fatal(err)
			}
			posted += batch
			inflight++
		}
		n := s.A.cq.Poll(wcs)
		if n == 0 {
			runtime.Gosched()
			continue
		}
		for _, wc := range wcs[:n] {
			if wc.Status != 0 {
				b.Fatalf("completion %+v", wc)
			}
			done += batch
			inflight--
		}
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(done)*float64(size)*8/el.Seconds()/1e9, "Gbit/s")
	b.ReportMetric(float64(done)/el.Seconds()/1e6, "Mmsg/s")
}

// pingpong measures the round trip of size-byte WRITEs as ib_write_lat
// does: each side writes, waits for its completion, then polls its
// buffer for the peer's WRITE; half the round trip is the latency.
func (s *benchSide) pingpong(b *testing.B, size int) {
	b.ResetTimer()
	lat := s.latencies(b, size, b.N)
	b.StopTimer()
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/2e3, "µs-median")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/2e3, "µs-p99")
}

// latencies returns n round trips.
func (s *benchSide) latencies(b testing.TB, size, n int) []time.Duration {
	// Messages go out of the first half of a buffer and land in the
	// second.
	const half = 2048
	word := func(e *end) *uint32 { return (*uint32)(unsafe.Pointer(&e.buf[half+size-4])) }
	write := func(q verbs.QP, from, to *end, v byte) {
		from.buf[size-1] = v
		if err := q.PostSend(&verbs.SendWR{Op: stack.OpWrite, Flags: stack.SendSignaled, SG: []stack.SGE{from.mr.SGE(0, uint32(size))},
			Remote: stack.RemoteAddr{Addr: to.mr.Addr() + half, RKey: to.mr.RKey()}}); err != nil {
			b.Error(err)
			return
		}
		var wc [1]stack.WC
		for from.cq.Poll(wc[:]) == 0 {
			runtime.Gosched()
		}
		if wc[0].Status != 0 {
			b.Errorf("completion %+v", wc[0])
		}
	}
	await := func(e *end, v byte) {
		for byte(atomic.LoadUint32(word(e))>>24) != v {
			runtime.Gosched()
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i <= n && !b.Failed(); i++ {
			await(s.B, byte(i))
			write(s.qb, s.B, s.A, byte(i))
		}
	}()
	lat := make([]time.Duration, 0, n)
	for i := 1; i <= n && !b.Failed(); i++ {
		t0 := time.Now()
		write(s.qa, s.A, s.B, byte(i))
		await(s.A, byte(i))
		lat = append(lat, time.Since(t0))
	}
	<-done
	return lat
}

func BenchmarkPathWrite64K(b *testing.B) {
	for _, d := range []bool{false, true} {
		b.Run(pathName(d), func(b *testing.B) { benchSides(b, d, 64<<10).writes(b, 64<<10, 16, 1) })
	}
}

func BenchmarkPathWrite64B(b *testing.B) {
	for _, d := range []bool{false, true} {
		b.Run(pathName(d), func(b *testing.B) { benchSides(b, d, 4096).writes(b, 64, 4, 16) })
	}
}

func BenchmarkPathLat64B(b *testing.B) {
	for _, d := range []bool{false, true} {
		b.Run(pathName(d), func(b *testing.B) { benchSides(b, d, 4096).pingpong(b, 64) })
	}
}

func pathName(d bool) string {
	if d {
		return "daemon"
	}
	return "inprocess"
}
